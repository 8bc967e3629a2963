//! Bounds on the API as a whole: requests served at once (one more is shed
//! with 503, not queued) and time per request (408), both answered in the
//! API's error shape.

use std::time::Duration;

use axum::Router;
use axum::error_handling::HandleErrorLayer;
use axum::http::{HeaderValue, StatusCode, header};
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
        let mut response = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "overloaded",
            "too many requests in progress; try again shortly",
        )
        .into_response();
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return response;
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
