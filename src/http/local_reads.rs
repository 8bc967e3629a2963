//! Reads a standby answers from its own copy of the store: a `GET` of the
//! REST API (`/v1/…`) sent with `orch-read: local` that neither waits
//! (`wait=`) nor streams. The answer is the same API's, over a read-only
//! orchestrator, with how current the copy is:
//!
//! - `orch-read-from`: this node's name;
//! - `orch-log-position`: the last log position its copy applied;
//! - `orch-current-at`: every commit the log held at this time (RFC 3339)
//!   is in the copy;
//! - `orch-behind-ms`: milliseconds since then.
//!
//! Any other request, and every read while the copy is not offered (being
//! loaded, or this node taking over), is forwarded to the leader.

use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderValue, Method};
use axum::response::Response;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use super::HttpSettings;
use crate::access::Authenticator;
use crate::envelope::Timestamp;
use crate::service::Replica;

/// The header that asks for a standby's own copy, and its one value.
const ASK: (&str, &str) = ("orch-read", "local");

/// What a standby reads from.
pub struct LocalReads {
    replica: watch::Receiver<Option<Replica>>,
    access: Arc<Authenticator>,
    http: HttpSettings,
    closing: CancellationToken,
    /// This node's name (`orch-read-from`).
    name: String,
    /// The API over the copy offered now, with the copy's generation:
    /// built at its first read, dropped as soon as the copy is withdrawn
    /// (it holds the copy open).
    built: Mutex<Option<(u64, Router)>>,
}

impl LocalReads {
    /// Reads from the copies `replica` offers, as `name`; the API built
    /// over one is dropped as soon as it is withdrawn.
    pub fn new(
        replica: watch::Receiver<Option<Replica>>,
        access: Arc<Authenticator>,
        http: HttpSettings,
        closing: CancellationToken,
        name: String,
    ) -> Arc<LocalReads> {
        let reads = Arc::new(LocalReads {
            replica: replica.clone(),
            access,
            http,
            closing,
            name,
            built: Mutex::new(None),
        });
        // Weak: the face's end ends this task too.
        let weak = Arc::downgrade(&reads);
        let mut changes = replica;
        tokio::spawn(async move {
            while changes.changed().await.is_ok() {
                let Some(reads) = weak.upgrade() else { return };
                let now = changes.borrow().as_ref().map(|r| r.generation);
                let mut built = reads.built.lock().unwrap_or_else(PoisonError::into_inner);
                if built.as_ref().map(|(g, _)| *g) != now {
                    *built = None;
                }
            }
        });
        reads
    }

    /// Answers `request` from this node's copy when it asks for that and
    /// a copy is offered; gives it back otherwise (to be forwarded).
    pub(super) async fn answer(&self, request: Request) -> Result<Response, Request> {
        if !asks_here(&request) {
            return Err(request);
        }
        let Some(replica) = self.replica.borrow().clone() else {
            return Err(request);
        };
        let router = self.router(&replica);
        let Ok(mut response) = router.oneshot(request).await;
        let position = replica.orchestrator.store_position().ok();
        let behind = (Timestamp::now().as_offset_date_time()
            - replica.current_at.as_offset_date_time())
        .whole_milliseconds()
        .max(0);
        let headers = response.headers_mut();
        let mut set = |name: &'static str, value: String| {
            if let Ok(value) = HeaderValue::from_str(&value) {
                headers.insert(name, value);
            }
        };
        set("orch-read-from", self.name.clone());
        if let Some(position) = position {
            set("orch-log-position", position.to_string());
        }
        set("orch-current-at", replica.current_at.to_string());
        set("orch-behind-ms", behind.to_string());
        Ok(response)
    }

    /// The API over `replica`'s copy, built once per copy.
    fn router(&self, replica: &Replica) -> Router {
        let mut built = self.built.lock().unwrap_or_else(PoisonError::into_inner);
        match built.as_ref() {
            Some((generation, router)) if *generation == replica.generation => router.clone(),
            _ => {
                let router = super::router(
                    replica.orchestrator.clone(),
                    self.http.clone(),
                    Arc::clone(&self.access),
                    self.closing.clone(),
                );
                *built = Some((replica.generation, router.clone()));
                router
            }
        }
    }
}

/// Whether `request` asks for this node's copy and may have it: a `GET`
/// of the REST API with `orch-read: local`, not waiting, not a stream.
fn asks_here(request: &Request) -> bool {
    let asked = request
        .headers()
        .get(ASK.0)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case(ASK.1));
    let streams = request
        .headers()
        .get("accept")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"));
    let waits = request
        .uri()
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "wait" || p.starts_with("wait=")));
    asked
        && request.method() == Method::GET
        && request.uri().path().starts_with("/v1/")
        && !streams
        && !waits
}
