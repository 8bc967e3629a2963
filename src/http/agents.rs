//! `/v1/agents`: the static cards and the live instances.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};

use crate::service::{Agents, Orchestrator};

pub(super) fn router() -> Router<Orchestrator> {
    Router::new().route("/v1/agents", get(list))
}

async fn list(State(o): State<Orchestrator>) -> Json<Agents> {
    Json(o.agents().await)
}
