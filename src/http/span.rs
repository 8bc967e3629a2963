//! The server span of every request (a child of the caller's
//! `traceparent`, if it sent one) and the request counter. Probes
//! (`/healthz`, `/readyz`, `/metrics`) are counted but not traced: they
//! would bury the traces people look for.

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

use crate::telemetry::{context, metrics, spans};

/// Runs the request inside its span; records the answer's status.
pub(super) async fn layer(req: Request, next: Next) -> Response {
    let method = req.method().as_str().to_string();
    // The route pattern, never the path: ids stay out of span names and
    // metric labels.
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("(unmatched)", |p| p.as_str())
        .to_string();
    if matches!(route.as_str(), "/healthz" | "/readyz" | "/metrics") {
        let response = next.run(req).await;
        metrics::http_answered(&method, &route, response.status().as_u16());
        return response;
    }
    let span = spans::http_request(&method, &route);
    context::follow_request(&span, req.headers());
    let response = next.run(req).instrument(span.clone()).await;
    let status = response.status().as_u16();
    spans::http_status(&span, status);
    metrics::http_answered(&method, &route, status);
    response
}
