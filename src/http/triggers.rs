//! `/v1/triggers`: list triggers and start runs.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::tasks::TaskView;
use super::{ApiError, Requester};
use crate::codec::{self, DecodeError, Strictness, Validate};
use crate::envelope::{IdempotencyKey, TaskId};
use crate::service::Orchestrator;
use crate::store::Submitted;

pub(super) fn router() -> Router<Orchestrator> {
    Router::new()
        .route("/v1/triggers", get(list))
        .route("/v1/triggers/{id}/runs", post(start_run))
}

async fn list(State(o): State<Orchestrator>) -> Json<Value> {
    let triggers: Vec<&crate::trigger::Trigger> = o.triggers().values().collect();
    Json(serde_json::json!({ "triggers": triggers }))
}

/// `POST /v1/triggers/{id}/runs` body.
#[derive(Debug, Deserialize)]
struct RunRequest {
    #[serde(default)]
    input: Value,
    #[serde(default)]
    idempotency_key: Option<IdempotencyKey>,
}

impl Validate for RunRequest {
    fn validate(&self) -> Result<(), DecodeError> {
        Ok(())
    }
}

/// A started run. Runs of single-step triggers are one task; the run id is
/// the task id.
#[derive(Debug, Serialize, Deserialize)]
pub struct RunView {
    /// The run's id.
    pub run_id: TaskId,
    /// The trigger it runs.
    pub trigger_id: String,
    /// Its task.
    pub task: TaskView,
}

async fn start_run(
    State(o): State<Orchestrator>,
    Requester(caller): Requester,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<(StatusCode, Json<RunView>), ApiError> {
    let request: RunRequest =
        codec::decode(&body, Strictness::Strict, o.config().max_envelope_bytes)?;
    let submitted = o
        .run_trigger(&id, request.input, request.idempotency_key, &caller)
        .await?;
    let status = match submitted {
        Submitted::Created(_) => StatusCode::CREATED,
        Submitted::Existing(_) => StatusCode::OK,
    };
    let task = TaskView::new(submitted.record(), &o);
    Ok((
        status,
        Json(RunView {
            run_id: task.task_id,
            trigger_id: id,
            task,
        }),
    ))
}
