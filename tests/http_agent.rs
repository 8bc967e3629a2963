//! `invocation.type: http`: an agent that is an HTTP service of its own,
//! here one the test serves (it counts and keeps what it gets). The worker
//! POSTs the envelope with the task's token as the bearer credential,
//! follows a job it accepted (202) until it ends, even across a worker
//! SIGKILL (no second POST), deletes it when the task is canceled, waits
//! the Retry-After of a 429, and fails with the service's words on a 4xx
//! or a body that is not JSON.

use crate::common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine;
use common::system::{System, fast_bus};
use orchestrator::agent::AgentCard;
use serde_json::{Value, json};

/// What the service got and how it answers.
#[derive(Default)]
struct Seen {
    /// Requests by `METHOD path`.
    count: BTreeMap<String, usize>,
    /// The last POST's headers and body, by path.
    posted: BTreeMap<String, (HeaderMap, Value)>,
    /// Jobs that may end now.
    go: bool,
}

type Shared = Arc<Mutex<Seen>>;

fn seen(s: &Shared) -> std::sync::MutexGuard<'_, Seen> {
    s.lock().unwrap()
}

fn note(s: &Shared, key: String, headers: &HeaderMap, body: Option<Value>) {
    let mut s = seen(s);
    *s.count.entry(key.clone()).or_default() += 1;
    if let Some(body) = body {
        s.posted.insert(key, (headers.clone(), body));
    }
}

async fn serve() -> (String, Shared) {
    let shared = Shared::default();
    let app = Router::new()
        .route(
            "/do",
            post(
                |State(s): State<Shared>, h: HeaderMap, Json(body): Json<Value>| async move {
                    note(&s, "POST /do".into(), &h, Some(body.clone()));
                    Json(json!({"did": body["payload"]["params"]}))
                },
            ),
        )
        .route(
            "/job",
            post(
                |State(s): State<Shared>, h: HeaderMap, Json(body): Json<Value>| async move {
                    note(&s, "POST /job".into(), &h, Some(body));
                    (
                        StatusCode::ACCEPTED,
                        [("location", "/jobs/7"), ("retry-after", "0")],
                    )
                },
            ),
        )
        .route(
            "/jobs/{n}",
            get(
                |State(s): State<Shared>, h: HeaderMap, Path(n): Path<u32>| async move {
                    note(&s, format!("GET /jobs/{n}"), &h, None);
                    if seen(&s).go {
                        Json(json!({"job": n, "done": true})).into_response()
                    } else {
                        StatusCode::ACCEPTED.into_response()
                    }
                },
            )
            .delete(
                |State(s): State<Shared>, h: HeaderMap, Path(n): Path<u32>| async move {
                    note(&s, format!("DELETE /jobs/{n}"), &h, None);
                    StatusCode::NO_CONTENT
                },
            ),
        )
        .route(
            "/busy",
            post(
                |State(s): State<Shared>, h: HeaderMap, Json(body): Json<Value>| async move {
                    note(&s, "POST /busy".into(), &h, Some(body));
                    if seen(&s).count["POST /busy"] == 1 {
                        (
                            StatusCode::TOO_MANY_REQUESTS,
                            [("retry-after", "1")],
                            "slow down",
                        )
                            .into_response()
                    } else {
                        Json(json!({"ok": true})).into_response()
                    }
                },
            ),
        )
        .route(
            "/refuse",
            post(|| async {
                (
                    StatusCode::UNPROCESSABLE_ENTITY,
                    Json(json!({"error": {"message": "no such order"}})),
                )
                    .into_response()
            }),
        )
        .route(
            "/garbled",
            post(|| async { (StatusCode::OK, "not json").into_response() }),
        )
        .with_state(shared.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, shared)
}

fn card_json(name: &str, url: &str) -> Value {
    json!({
        "name": name, "version": "1.0.0", "description": format!("{name}, over HTTP"),
        "skills": [{"id": "go", "description": "goes"}],
        "invocation": {"type": "http", "url": url, "poll": "100ms", "timeout": "5s"},
        "delivery": {"ackWait": "2s"}
    })
}

fn card(name: &str, url: &str) -> AgentCard {
    serde_json::from_value(card_json(name, url)).unwrap()
}

async fn ended(sys: &System, id: &str) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, t) = sys.get(&format!("/v1/tasks/{id}?wait=1s")).await;
        if ["completed", "failed", "canceled", "rejected"]
            .contains(&t["state"].as_str().unwrap_or_default())
        {
            return t;
        }
        assert!(tokio::time::Instant::now() < deadline, "never ended: {t:#}");
    }
}

/// A JWT's claims, unchecked (the test only reads them).
fn claims(jwt: &str) -> Value {
    let payload = jwt.split('.').nth(1).unwrap();
    serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .unwrap(),
    )
    .unwrap()
}

/// The service answers at once: its JSON is the result. It got the
/// envelope without the token in it, the task's token (for this agent) as
/// its bearer credential, and the task's idempotency key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_gets_the_envelope_and_the_token_and_answers() {
    let (url, service) = serve().await;
    let doer = card("doer", &format!("{url}/do"));
    let mut sys = System::start(vec![doer.clone()], fast_bus()).await;
    sys.worker(
        doer.clone(),
        orchestrator::worker::handler_for(&doer, &Default::default(), &Default::default()).unwrap(),
    )
    .await;
    let id = sys.submit("doer", "go", json!({"order": 42})).await;
    let t = ended(&sys, &id).await;
    assert_eq!(t["state"], "completed", "{t:#}");
    assert_eq!(t["result"], json!({"did": {"order": 42}}));
    let (headers, body) = seen(&service).posted["POST /do"].clone();
    assert!(
        body["header"].get("token").is_none(),
        "the token is not in the body: {body:#}"
    );
    assert_eq!(body["header"]["task_id"], id.as_str());
    let bearer = headers["authorization"]
        .to_str()
        .unwrap()
        .strip_prefix("Bearer ")
        .unwrap()
        .to_string();
    assert_eq!(claims(&bearer)["aud"], "doer");
    assert_eq!(
        headers["idempotency-key"].to_str().unwrap(),
        body["control"]["idempotency_key"].as_str().unwrap()
    );
    assert_eq!(headers["orch-task-id"].to_str().unwrap(), id);
}

/// 429 with a Retry-After: a retryable failure, tried again (and done);
/// a 4xx fails with the service's own words, not retried; a 2xx body that
/// is not JSON is a clear failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_is_retried_and_refusals_fail_with_the_services_words() {
    let (url, service) = serve().await;
    let cards = [
        ("busy", "/busy"),
        ("refuser", "/refuse"),
        ("garbler", "/garbled"),
    ]
    .map(|(name, path)| card(name, &format!("{url}{path}")));
    let mut sys = System::start(cards.to_vec(), fast_bus()).await;
    for c in &cards {
        sys.worker(
            c.clone(),
            orchestrator::worker::handler_for(c, &Default::default(), &Default::default()).unwrap(),
        )
        .await;
    }
    let busy = sys.submit("busy", "go", json!({})).await;
    let refused = sys.submit("refuser", "go", json!({})).await;
    let garbled = sys.submit("garbler", "go", json!({})).await;
    let t = ended(&sys, &busy).await;
    assert_eq!(
        (t["state"].clone(), t["attempt"].clone()),
        (json!("completed"), json!(2)),
        "{t:#}"
    );
    assert_eq!(seen(&service).count["POST /busy"], 2);
    let history = t["history"].as_array().unwrap();
    let retry = history
        .iter()
        .find(|h| h["event"] == "retry")
        .expect("a retry");
    assert!(
        retry["reason"]
            .as_str()
            .unwrap()
            .starts_with("agent_busy: "),
        "{t:#}"
    );
    // The next attempt waited the service's Retry-After (1 s), not the
    // retry policy's 100 ms.
    let at = |h: &Value| {
        time::OffsetDateTime::parse(
            h["at"].as_str().unwrap(),
            &time::format_description::well_known::Rfc3339,
        )
        .unwrap()
    };
    let done = history.iter().find(|h| h["event"] == "complete").unwrap();
    assert!(
        at(done) - at(retry) >= time::Duration::milliseconds(900),
        "{t:#}"
    );
    let t = ended(&sys, &refused).await;
    assert_eq!(t["state"], "failed", "{t:#}");
    assert_eq!(t["error"]["code"], "agent_refused");
    assert!(
        t["error"]["message"]
            .as_str()
            .unwrap()
            .contains("422 Unprocessable Entity: no such order"),
        "{t:#}"
    );
    assert_eq!(t["attempt"], 1);
    let t = ended(&sys, &garbled).await;
    assert_eq!(
        (t["state"].clone(), t["error"]["code"].clone()),
        (json!("failed"), json!("bad_response")),
        "{t:#}"
    );
}

/// A job the service accepted (202, Location) is followed; the worker is
/// SIGKILLed while it runs, and the next one reads the job's location
/// from the task's note: one POST in all. A task canceled while its job
/// runs deletes the job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_followed_across_a_worker_kill_and_deleted_on_cancel() {
    let (url, service) = serve().await;
    let card_value = card_json("jobber", &format!("{url}/job"));
    let jobber: AgentCard = serde_json::from_value(card_value.clone()).unwrap();
    let sys = System::start(vec![jobber], fast_bus()).await;
    let agents = tempfile::tempdir().unwrap();
    let worker = |log: &str| sys.worker_process(agents.path(), &card_value, log);
    let mut first = worker("first.log");
    let id = sys.submit("jobber", "go", json!({})).await;
    common::eventually("the job is read", Duration::from_secs(30), || async {
        seen(&service).count.contains_key("GET /jobs/7")
    })
    .await;
    first.kill();
    let second = worker("second.log");
    let polled = seen(&service).count["GET /jobs/7"];
    common::eventually(
        "the next worker reads the job",
        Duration::from_secs(30),
        || async { seen(&service).count["GET /jobs/7"] > polled + 1 },
    )
    .await;
    seen(&service).go = true;
    let t = ended(&sys, &id).await;
    assert_eq!(t["state"], "completed", "{t:#}");
    assert_eq!(t["result"], json!({"job": 7, "done": true}));
    assert_eq!(seen(&service).count["POST /job"], 1, "one POST in all");

    seen(&service).go = false;
    let id = sys.submit("jobber", "go", json!({"again": true})).await;
    common::eventually("the job is read", Duration::from_secs(30), || async {
        seen(&service).count["POST /job"] == 2
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, _) = sys.post(&format!("/v1/tasks/{id}/cancel"), json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(ended(&sys, &id).await["state"], "canceled");
    common::eventually("the job is deleted", Duration::from_secs(20), || async {
        seen(&service).count.get("DELETE /jobs/7") == Some(&1)
    })
    .await;
    drop(second);
}
