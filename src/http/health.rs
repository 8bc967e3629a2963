//! `/healthz` (the process answers), `/readyz` (store and broker usable,
//! every stream led, the queue moving)
//! and `/metrics` (Prometheus text; the gauges read from JetStream are
//! refreshed first). None needs credentials.

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use serde_json::{Value, json};

use crate::service::Orchestrator;

pub(super) fn router() -> Router<crate::http::Api> {
    Router::new()
        .route("/healthz", get(|| async { Json(json!({"ok": true})) }))
        .route("/readyz", get(ready))
        .route("/metrics", get(metrics))
}

async fn metrics(State(o): State<Orchestrator>) -> impl axum::response::IntoResponse {
    o.refresh_gauges().await;
    crate::telemetry::metrics::metrics_response().await
}

async fn ready(State(o): State<Orchestrator>) -> (StatusCode, Json<Value>) {
    let (ok, detail) = o.readiness().await;
    let status = if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(detail))
}
