//! A standby's face (`replication.enabled`, while another node leads):
//! it answers its own `/healthz`, `/readyz` and `/metrics`, the reads that
//! ask for its own copy of the store (`local_reads`), and forwards every
//! other request to the leader's API as it came (method, path,
//! query, headers but the hop-by-hop ones, body), streaming the answer
//! back (server-sent events too) with `orch-forwarded-to: <leader>`. So a
//! load balancer may send any request to any node.

use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;
use tokio::sync::watch;

use std::sync::Arc;

use super::ApiError;
use super::LocalReads;
use crate::service::Leader;

/// The largest request body forwarded (larger ones are answered 413).
const MAX_BODY: usize = 64 * 1024 * 1024;

/// Headers of one hop, never forwarded (RFC 9110 section 7.6.1), and
/// `host`, which names this node.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
];

#[derive(Clone)]
struct Forward {
    leader: watch::Receiver<Option<Leader>>,
    client: reqwest::Client,
    reads: Arc<LocalReads>,
}

/// The router of a standby forwarding to the leader `leader` names, but
/// for the reads that ask for its own copy (`reads`).
pub fn standby_router(leader: watch::Receiver<Option<Leader>>, reads: Arc<LocalReads>) -> Router {
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(2))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap_or_default();
    Router::new()
        .route("/healthz", get(|| async { Json(json!({"ok": true})) }))
        .route("/readyz", get(ready))
        .route(
            "/metrics",
            get(|| async { crate::telemetry::metrics::metrics_response().await }),
        )
        .fallback(forward)
        .with_state(Forward {
            leader,
            client,
            reads,
        })
}

/// The leader forwarded to, when one is known with an address.
fn leader(f: &Forward) -> Option<(String, String)> {
    let leader = f.leader.borrow().clone()?;
    Some((leader.name, leader.url?))
}

/// Ready while a leader to forward to is known.
async fn ready(State(f): State<Forward>) -> Response {
    let known = f.leader.borrow().clone();
    let ok = known.as_ref().is_some_and(|l| l.url.is_some());
    let status = match ok {
        true => StatusCode::OK,
        false => StatusCode::SERVICE_UNAVAILABLE,
    };
    let body = json!({"ok": ok, "role": "standby", "leader": known});
    (status, Json(body)).into_response()
}

async fn forward(State(f): State<Forward>, request: Request) -> Response {
    let request = match f.reads.answer(request).await {
        Ok(answered) => return answered,
        Err(request) => request,
    };
    let Some((name, base)) = leader(&f) else {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "no_leader",
            "this node stands by and no leader is known yet; try again shortly",
        )
        .retry_after(1)
        .into_response();
    };
    let (parts, body) = request.into_parts();
    let body = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(bytes) => bytes,
        Err(_) => {
            return ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                format!("a forwarded request's body is at most {MAX_BODY} bytes"),
            )
            .into_response();
        }
    };
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let url = format!("{}{path}", base.trim_end_matches('/'));
    let mut headers = end_to_end(&parts.headers);
    if let Some(host) = parts.headers.get("host") {
        headers.insert("x-forwarded-host", host.clone());
    }
    let sent = f
        .client
        .request(parts.method, url)
        .headers(headers)
        .body(body)
        .send()
        .await;
    let answer = match sent {
        Ok(answer) => answer,
        Err(e) => {
            // Debug only: during a takeover every request fails this way,
            // and each caller is told so (502).
            tracing::debug!(leader = %name, error = %e, "forwarding a request to the leader failed");
            return ApiError::new(
                StatusCode::BAD_GATEWAY,
                "leader_unreachable",
                format!("this node stands by and could not reach the leader {name}: {e}"),
            )
            .retry_after(1)
            .into_response();
        }
    };
    let status = StatusCode::from_u16(answer.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut headers = end_to_end(answer.headers());
    if let Ok(value) = HeaderValue::from_str(&name) {
        headers.insert("orch-forwarded-to", value);
    }
    let mut response = Response::new(Body::from_stream(chunks(answer)));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}

/// `headers` without the hop-by-hop ones (also those `connection` names).
fn end_to_end(headers: &HeaderMap) -> HeaderMap {
    let named: Vec<String> = headers
        .get_all("connection")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|n| n.trim().to_ascii_lowercase())
        .collect();
    headers
        .iter()
        .filter(|(n, _)| {
            let n = n.as_str();
            !HOP_BY_HOP.contains(&n) && !named.iter().any(|c| c == n)
        })
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect()
}

/// The leader's answer's body, chunk by chunk as it comes.
fn chunks(
    answer: reqwest::Response,
) -> impl futures::Stream<Item = Result<bytes::Bytes, reqwest::Error>> {
    futures::stream::unfold(Some(answer), |answer| async move {
        let mut answer = answer?;
        match answer.chunk().await {
            Ok(Some(chunk)) => Some((Ok(chunk), Some(answer))),
            Ok(None) => None,
            Err(e) => Some((Err(e), None)),
        }
    })
}
