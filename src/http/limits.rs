//! Bounds on the API: requests served at once (one more is shed with 503,
//! not queued), requests of one principal at once (one more is 429), time
//! per request (408) and per body (408), all answered in the API's error
//! shape.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::error_handling::HandleErrorLayer;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use tower::{BoxError, ServiceBuilder};

use super::ApiError;

/// `router` with at most `max_in_flight` requests served at once, each
/// within `timeout`. The bounds wrap the router as one service, built once:
/// `Router::layer` would build them per route, and for handler routes per
/// request, so nothing would be shared.
pub fn limit(router: Router, max_in_flight: usize, timeout: Duration) -> Router {
    let bounded = ServiceBuilder::new()
        .layer(HandleErrorLayer::new(move |e: BoxError| async move {
            refused(e, timeout)
        }))
        .load_shed()
        .concurrency_limit(max_in_flight)
        .timeout(timeout)
        .service(router);
    Router::new().fallback_service(bounded)
}

fn refused(e: BoxError, timeout: Duration) -> Response {
    if e.is::<tower::load_shed::error::Overloaded>() {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "overloaded",
            "too many requests in progress; try again shortly",
        )
        .retry_after(1)
        .into_response();
    }
    if e.is::<tower::timeout::error::Elapsed>() {
        let message = format!(
            "not answered within {}",
            humantime::format_duration(timeout)
        );
        return ApiError::new(StatusCode::REQUEST_TIMEOUT, "timeout", message).into_response();
    }
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal_error",
        e.to_string(),
    )
    .into_response()
}

/// How many of something each holder (a principal, an address) has in
/// use, at most `max` each.
pub(super) struct Shares<K: Eq + Hash + Clone> {
    /// The most one holder may have.
    max: usize,
    /// In use, by holder; a holder with none has no entry.
    held: Mutex<HashMap<K, usize>>,
}

/// One of a holder's share in use; given back when dropped.
pub(super) struct Share<K: Eq + Hash + Clone> {
    shares: Arc<Shares<K>>,
    holder: K,
}

impl<K: Eq + Hash + Clone> Shares<K> {
    /// At most `max` for each holder.
    pub(super) fn new(max: usize) -> Arc<Self> {
        Arc::new(Shares {
            max,
            held: Mutex::default(),
        })
    }

    /// One more for `holder`, unless it holds `max` already.
    pub(super) fn enter(self: &Arc<Self>, holder: &K) -> Option<Share<K>> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let n = held.entry(holder.clone()).or_default();
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(Share {
            shares: Arc::clone(self),
            holder: holder.clone(),
        })
    }
}

impl<K: Eq + Hash + Clone> Drop for Share<K> {
    fn drop(&mut self) {
        let mut held = self
            .shares
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = held.get_mut(&self.holder) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.holder);
            }
        }
    }
}

/// How many of something (requests in progress, streams open) each
/// principal holds, at most `max`, and how a refusal says so.
pub(super) struct PerPrincipal {
    shares: Arc<Shares<String>>,
    /// What is counted, for the refusal ("requests in progress").
    what: &'static str,
    /// The setting that bounds it, for the refusal.
    setting: &'static str,
}

/// One of a principal's share in use; given back when dropped.
pub(super) type Entered = Share<String>;

impl PerPrincipal {
    /// At most `max` of `what` per principal, as `setting` says.
    pub(super) fn new(max: usize, what: &'static str, setting: &'static str) -> Arc<Self> {
        Arc::new(PerPrincipal {
            shares: Shares::new(max),
            what,
            setting,
        })
    }

    /// One more for `principal`, unless it holds its share already.
    pub(super) fn enter(&self, principal: &str) -> Option<Entered> {
        self.shares.enter(&principal.to_string())
    }

    /// Why `principal` is refused one more.
    pub(super) fn refusal(&self, principal: &str) -> String {
        format!(
            "`{principal}` has {} {}, the most one principal may ({}); try again shortly",
            self.shares.max, self.what, self.setting
        )
    }

    /// The answer to a principal over its limit: 429 with `Retry-After`.
    pub(super) fn refused(&self, principal: &str) -> Response {
        let message = self.refusal(principal);
        ApiError::new(StatusCode::TOO_MANY_REQUESTS, "too_many_requests", message)
            .retry_after(1)
            .into_response()
    }
}

/// Reads a request's body: at most `max_bytes` (413 past it, told before
/// reading when its length is declared) within `timeout` (408 after).
pub(super) async fn read_body(
    body: axum::body::Body,
    declared: Option<usize>,
    max_bytes: usize,
    timeout: Duration,
) -> Result<bytes::Bytes, ApiError> {
    if let Some(size) = declared.filter(|size| *size > max_bytes) {
        return Err(crate::codec::DecodeError::TooLarge {
            size,
            limit: max_bytes,
        }
        .into());
    }
    match tokio::time::timeout(timeout, axum::body::to_bytes(body, max_bytes)).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(e)) if is_length_limit(&e) => Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("the body is over the limit of {max_bytes} bytes"),
        )),
        Ok(Err(e)) => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "unreadable_body",
            format!("the body could not be read: {e}"),
        )),
        Err(_) => Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "body_timeout",
            format!(
                "the body did not arrive within {}",
                humantime::format_duration(timeout)
            ),
        )),
    }
}

fn is_length_limit(e: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if err.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = err.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;

    /// A real server over `limit` with one route that takes `hold`.
    async fn serve(max_in_flight: usize, timeout: Duration, hold: Duration) -> String {
        let slow = get(move || async move {
            tokio::time::sleep(hold).await;
            "done"
        });
        let app = limit(Router::new().route("/slow", slow), max_in_flight, timeout);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/slow", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        url
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_request_over_the_limit_is_shed_with_503() {
        let url = serve(1, Duration::from_secs(30), Duration::from_millis(800)).await;
        let first = tokio::spawn(reqwest::get(url.clone()));
        tokio::time::sleep(Duration::from_millis(200)).await;
        let shed = reqwest::get(&url).await.unwrap();
        assert_eq!(shed.status(), 503);
        assert_eq!(shed.headers()["retry-after"], "1");
        let body: serde_json::Value = shed.json().await.unwrap();
        assert_eq!(body["error"]["code"], "overloaded");
        assert_eq!(first.await.unwrap().unwrap().status(), 200);
        // The slot is free again.
        assert_eq!(reqwest::get(&url).await.unwrap().status(), 200);
    }

    #[tokio::test]
    async fn a_request_past_the_timeout_gets_408() {
        let url = serve(4, Duration::from_millis(200), Duration::from_secs(5)).await;
        let late = reqwest::get(&url).await.unwrap();
        assert_eq!(late.status(), 408);
        let body: serde_json::Value = late.json().await.unwrap();
        assert_eq!(body["error"]["code"], "timeout");
        assert_eq!(body["error"]["message"], "not answered within 200ms");
    }
}
