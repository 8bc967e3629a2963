//! `/v1/agents`: the static cards and the live instances.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use futures::StreamExt;
use serde_json::{Value, json};

use super::ApiError;
use crate::service::Orchestrator;

pub(super) fn router() -> Router<Orchestrator> {
    Router::new().route("/v1/agents", get(list))
}

async fn list(State(o): State<Orchestrator>) -> Result<Json<Value>, ApiError> {
    let mut live: Vec<Value> = Vec::new();
    if let Ok(registry) = o.bus().agents().await
        && let Ok(mut keys) = registry.keys().await
    {
        while let Some(Ok(key)) = keys.next().await {
            if let Ok(Some(value)) = registry.get(&key).await
                && let Ok(entry) = serde_json::from_slice::<Value>(&value)
            {
                live.push(entry);
            }
        }
    }
    let agents: Vec<Value> = o
        .cards()
        .values()
        .map(|card| {
            let instances: Vec<&Value> = live
                .iter()
                .filter(|l| l["agent"] == card.name.as_str())
                .collect();
            json!({"card": card, "instances": instances})
        })
        .collect();
    let unknown: Vec<&Value> = live
        .iter()
        .filter(|l| {
            l["agent"]
                .as_str()
                .is_none_or(|a| !o.cards().keys().any(|k| k.as_str() == a))
        })
        .collect();
    Ok(Json(
        json!({"agents": agents, "unlisted_instances": unknown}),
    ))
}
