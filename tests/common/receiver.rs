//! A webhook receiver for push notifications and callbacks: an HTTP
//! server on a loopback port that records every request, answers 500 to
//! the first few, and can be stopped and started again on its port.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use serde_json::Value;

/// One request the receiver got.
#[derive(Debug, Clone)]
pub struct Got {
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
    /// Whether it was answered with a 2xx.
    pub taken: bool,
}

impl Got {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }

    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .map(String::as_str)
            .unwrap_or_default()
    }

    /// The delivery's id.
    pub fn id(&self) -> &str {
        self.header("orchestrator-delivery")
    }

    /// The event's number: the last part of the delivery's id.
    pub fn event(&self) -> u64 {
        self.id().rsplit(':').next().unwrap().parse().unwrap()
    }
}

#[derive(Clone, Default)]
struct State {
    got: Arc<Mutex<Vec<Got>>>,
    fail: Arc<AtomicUsize>,
}

pub struct Receiver {
    pub port: u16,
    state: State,
    server: Option<tokio::task::JoinHandle<()>>,
}

impl Receiver {
    /// A receiver on a free port that fails its first `fail_first` requests.
    pub async fn start(fail_first: usize) -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut r = Receiver {
            port,
            state: State::default(),
            server: None,
        };
        r.state.fail.store(fail_first, Ordering::SeqCst);
        r.serve(listener);
        r
    }

    /// A receiver that is down: its port is reserved, nothing listens.
    pub fn down() -> Receiver {
        Receiver {
            port: super::process::free_port(),
            state: State::default(),
            server: None,
        }
    }

    fn serve(&mut self, listener: tokio::net::TcpListener) {
        let state = self.state.clone();
        let app = axum::Router::new()
            .route("/hook", axum::routing::post(take))
            .route("/redirect", axum::routing::post(redirect))
            .route("/slow", axum::routing::post(slow))
            .route("/endless", axum::routing::post(endless))
            .with_state(state);
        self.server = Some(tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        }));
    }

    /// Starts it again (or for the first time) on its port.
    pub async fn up(&mut self) {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", self.port))
            .await
            .unwrap();
        self.serve(listener);
    }

    /// Stops it: its port refuses connections.
    pub fn stop(&mut self) {
        if let Some(s) = self.server.take() {
            s.abort();
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook", self.port)
    }

    /// Every request so far.
    pub fn all(&self) -> Vec<Got> {
        self.state.got.lock().unwrap().clone()
    }

    /// The requests it took (answered 2xx), each delivery once (the first
    /// time), in the order they came.
    pub fn taken_once(&self) -> Vec<Got> {
        let mut seen = std::collections::HashSet::new();
        self.all()
            .into_iter()
            .filter(|g| g.taken && seen.insert(g.id().to_string()))
            .collect()
    }

    /// Waits for the first delivery it took whose id starts with `prefix`
    /// (a task's or run's id).
    pub async fn first_for(&self, prefix: &str) -> Got {
        let got = self
            .wait_for(prefix, |g| g.iter().any(|g| g.id().starts_with(prefix)))
            .await;
        got.into_iter()
            .find(|g| g.id().starts_with(prefix))
            .unwrap()
    }

    /// Waits until `done` holds of what it took (each once).
    pub async fn wait_for(&self, what: &str, done: impl Fn(&[Got]) -> bool) -> Vec<Got> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let got = self.taken_once();
            if done(&got) {
                return got;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: not within 30 s; got {:#?}",
                self.all()
                    .iter()
                    .map(|g| (g.id().to_string(), g.taken))
                    .collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn take(
    axum::extract::State(state): axum::extract::State<State>,
    headers: HeaderMap,
    body: Bytes,
) -> impl IntoResponse {
    let failing = state
        .fail
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok();
    let headers = headers
        .iter()
        .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    state.got.lock().unwrap().push(Got {
        headers,
        body: body.to_vec(),
        taken: !failing,
    });
    if failing {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::NO_CONTENT
    }
}

/// Answers after a minute: a receiver that holds its caller.
async fn slow() -> impl IntoResponse {
    tokio::time::sleep(Duration::from_secs(60)).await;
    StatusCode::NO_CONTENT
}

/// Takes the delivery (recorded like `/hook`), then answers 200 with a
/// body that never ends.
async fn endless(
    state: axum::extract::State<State>,
    headers: HeaderMap,
    body: Bytes,
) -> impl IntoResponse {
    take(state, headers, body).await;
    let chunks = futures::stream::repeat_with(|| {
        Ok::<_, std::convert::Infallible>(Bytes::from(vec![b'x'; 64 * 1024]))
    });
    (StatusCode::OK, axum::body::Body::from_stream(chunks))
}

/// Redirects to the URL its query names: `?to=URL`.
async fn redirect(
    axum::extract::Query(q): axum::extract::Query<BTreeMap<String, String>>,
) -> impl IntoResponse {
    (
        StatusCode::TEMPORARY_REDIRECT,
        [(
            axum::http::header::LOCATION,
            q.get("to").cloned().unwrap_or_default(),
        )],
    )
}
