//! `/healthz` (the process answers), `/readyz` (store and broker usable)
//! and `/metrics` (Prometheus text; the gauges read from JetStream are
//! refreshed first). None needs credentials.

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use serde_json::{Value, json};

use crate::service::Orchestrator;

pub(super) fn router() -> Router<Orchestrator> {
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
    let (nats, store) = o.readiness().await;
    let status = if nats && store {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        Json(json!({"ok": nats && store, "nats": nats, "store": store})),
    )
}
