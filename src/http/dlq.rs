//! `/v1/dlq`: list dead letters and replay one.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

use super::tasks::TaskView;
use super::{ApiError, Requester};
use crate::service::Orchestrator;

pub(super) fn router() -> Router<crate::http::Api> {
    Router::new()
        .route("/v1/dlq", get(list))
        .route("/v1/dlq/{task_id}/replay", post(replay))
}

#[derive(Debug, Deserialize)]
struct DlqQuery {
    limit: Option<usize>,
    cursor: Option<u64>,
}

async fn list(
    State(o): State<Orchestrator>,
    Requester(caller): Requester,
    Query(q): Query<DlqQuery>,
) -> Result<Json<Value>, ApiError> {
    let limit = super::page_size(q.limit, 100);
    let fetched = o
        .dead_letters(q.cursor.unwrap_or(0), limit + 1, &caller)
        .await?;
    let (letters, next_cursor) = super::page(fetched, limit, |d| d.seq);
    Ok(Json(
        json!({"dead_letters": letters, "next_cursor": next_cursor}),
    ))
}

async fn replay(
    State(o): State<Orchestrator>,
    Requester(caller): Requester,
    Path(task_id): Path<String>,
) -> Result<(StatusCode, Json<TaskView>), ApiError> {
    let id = task_id
        .parse()
        .map_err(|e: crate::envelope::ParseError| ApiError::bad_param("task_id", e))?;
    let submitted = o.replay(id, &caller).await?;
    Ok((
        StatusCode::CREATED,
        Json(TaskView::new(submitted.record(), &o)),
    ))
}
