//! `/v1/agents`: the declared agents (any format) with their live
//! instances, the cards' workflows, the topology and the agent files'
//! problems; `/v1/agents/{name}`: one agent.

use axum::extract::{Path, Query, State};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;

use super::ApiError;
use crate::agent::Context;
use crate::service::{AgentFilter, AgentInstances, Agents, Orchestrator};

pub(super) fn router() -> Router<crate::http::Api> {
    Router::new()
        .route("/v1/agents", get(list))
        .route("/v1/agents/{name}", get(one))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentsQuery {
    /// `work`, or several comma-separated (`work,shared`).
    context: Option<String>,
    /// Agents usable only as tools are listed too.
    #[serde(default)]
    tool_only: bool,
}

async fn list(
    State(o): State<Orchestrator>,
    Query(q): Query<AgentsQuery>,
) -> Result<Json<Agents>, ApiError> {
    let contexts = q
        .context
        .iter()
        .flat_map(|c| c.split(','))
        .filter(|c| !c.trim().is_empty())
        .map(|c| c.trim().parse::<Context>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ApiError::bad_param("context", e))?;
    let filter = AgentFilter {
        contexts,
        tool_only: q.tool_only,
    };
    Ok(Json(o.agents(&filter).await))
}

async fn one(
    State(o): State<Orchestrator>,
    Path(name): Path<String>,
) -> Result<Json<AgentInstances>, ApiError> {
    let name = name
        .parse()
        .map_err(|e: crate::envelope::ParseError| ApiError::bad_param("name", e))?;
    o.agent(&name)
        .await
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("no agent `{name}` is declared")))
}
