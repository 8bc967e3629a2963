//! The A2A face (A2A 1.0.1, with 0.3 for clients that send no
//! `A2A-Version`): the agent card, JSON-RPC 2.0 at `POST /a2a`, and the
//! HTTP+JSON binding under `/a2a/rest`. A second face on the service,
//! beside the REST API: an A2A task *is* one of our tasks (the same
//! record, audit and trace), its `contextId` our correlation id; it
//! authenticates as the REST API does. `docs/a2a.md` is the contract.

mod card;
mod error;
mod ops;
mod rest;
mod rpc;
mod runs;
mod send;
mod stream;
mod subject;
mod v03;
mod wire;

use crate::http::streams::Streams;
pub(in crate::http) use subject::pushed_after;

use std::sync::Arc;

use axum::Router;
use axum::http::HeaderMap;
use axum::routing::{get, post};

use crate::service::Orchestrator;
use error::A2aError;

/// The protocol version a request speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    /// 0.3: no `A2A-Version` (or `0.3`).
    V03,
    /// 1.0 (any 1.0.x).
    V10,
}

/// The version a request asks for: its `A2A-Version` header (or query
/// parameter); none or empty is 0.3; a patch number is ignored; anything
/// else is -32009.
fn version(headers: &HeaderMap, query: Option<&str>) -> Result<Version, A2aError> {
    let asked = match headers.get("a2a-version") {
        Some(v) => v.to_str().unwrap_or("?").trim().to_string(),
        None => query
            .and_then(|q| {
                q.split('&')
                    .find_map(|kv| kv.strip_prefix("A2A-Version="))
                    .map(str::to_string)
            })
            .unwrap_or_default(),
    };
    let major_minor: String = asked.splitn(3, '.').take(2).collect::<Vec<_>>().join(".");
    match major_minor.as_str() {
        "" | "0.3" => Ok(Version::V03),
        "1.0" => Ok(Version::V10),
        _ => Err(A2aError::version(&asked)),
    }
}

/// What the handlers share beyond the orchestrator.
pub(crate) struct Face {
    /// Open streams and their bound (shared with the console's).
    streams: Arc<Streams>,
    /// Whether callers authenticate (the card says how).
    auth: bool,
    /// When the face started: the card's `Last-Modified`, unless the
    /// triggers were read since.
    started: std::time::SystemTime,
    /// The face's settings (`a2a`, and the longest wait of a request).
    http: Arc<crate::http::HttpSettings>,
}

impl Face {
    /// The face's state: streams bounded as configured, ended when
    /// `closing` fires.
    pub(crate) fn new(
        auth: bool,
        streams: Arc<Streams>,
        http: Arc<crate::http::HttpSettings>,
    ) -> Arc<Face> {
        Arc::new(Face {
            streams,
            auth,
            http,
            started: std::time::SystemTime::now(),
        })
    }
}

/// An HTTP date (`Tue, 24 Nov 2026 10:00:00 GMT`).
pub(super) fn httpdate(t: std::time::SystemTime) -> String {
    let t = time::OffsetDateTime::from(t);
    let format = time::macros::format_description!(
        "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
    );
    t.format(&format).unwrap_or_default()
}

/// A 1.0 value as JSON (the `a2a` types always serialize).
fn to_json(v: impl serde::Serialize) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or_default()
}

/// The routes that need a caller: JSON-RPC and HTTP+JSON.
pub(super) fn router() -> Router<crate::http::Api> {
    // With and without the trailing slash: a client that joins "/" to the
    // card's URL (the TCK does) reaches the same endpoint.
    Router::new()
        .route(card::RPC_PATH, post(rpc::handle))
        .route(&format!("{}/", card::RPC_PATH), post(rpc::handle))
        .merge(rest::router())
}

/// The public route: the agent card.
pub(super) fn card_router() -> Router<crate::http::Api> {
    Router::new().route(
        "/.well-known/agent-card.json",
        get(
            |axum::extract::State(o): axum::extract::State<Orchestrator>,
             axum::Extension(face): axum::Extension<Arc<Face>>,
             headers: HeaderMap| async move { card::serve(&o, &face, &headers) },
        ),
    )
}
