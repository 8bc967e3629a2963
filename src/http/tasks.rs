//! `/v1/tasks`: submit, get, list, cancel.

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{ApiError, Requester};
use crate::codec::{self, Strictness};
use crate::envelope::{CorrelationId, ResponseMode, TaskId, Timestamp};
use crate::event::ErrorInfo;
use crate::service::{Orchestrator, TaskRequest};
use crate::task::{HistoryEntry, Submitted, TaskRecord, TaskState};

pub(super) fn router() -> Router<crate::http::Api> {
    Router::new()
        .route("/v1/tasks", post(submit).get(list))
        .route("/v1/tasks/{id}", get(get_task))
        .route("/v1/tasks/{id}/cancel", post(cancel))
}

/// A task as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskView {
    /// The task's id.
    pub task_id: TaskId,
    /// Its request.
    pub correlation_id: CorrelationId,
    /// The agent it is for.
    pub agent: String,
    /// The action asked.
    pub action: String,
    /// Where it stands.
    pub state: TaskState,
    /// The current attempt.
    pub attempt: u32,
    /// Its attempt budget.
    pub max_attempts: u32,
    /// The task that caused it (a tool call's: the conversation's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub causation_id: Option<String>,
    /// The orchestrator holds its conversation with a model
    /// (`docs/llm.md`): its model calls and tool calls are tasks.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub conversation: bool,
    /// For a model call: the conversation it is a turn of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<crate::envelope::TurnOf>,
    /// For a conversation: what its model calls cost so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_use: Option<crate::llm::Totals>,
    /// For a task the orchestrator holds: its steps (model calls, tool
    /// calls, a pattern's steps), oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<crate::service::HeldStep>,
    /// The result, once completed.
    pub result: Option<Value>,
    /// The last error.
    pub error: Option<ErrorInfo>,
    /// Every transition.
    pub history: Vec<HistoryEntry>,
    /// Its trace.
    pub trace_id: Option<String>,
    /// The trace's page in the Jaeger UI (`telemetry.jaeger_url`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_url: Option<String>,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
    /// Its envelope as stored (no token; the values of sensitive params
    /// `[redacted]`): in a single task's view, not in lists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envelope: Option<Value>,
}

impl TaskView {
    /// The view of `r`, its trace link pointing at `o`'s Jaeger UI.
    pub fn new(r: &TaskRecord, o: &Orchestrator) -> Self {
        // A held task's steps and cost, read together.
        let held = r
            .status
            .conversation
            .then(|| o.held_view(r.task_id()).ok())
            .flatten();
        TaskView {
            task_id: r.task_id(),
            correlation_id: r.correlation_id().clone(),
            agent: r.agent().to_string(),
            action: r.action().to_string(),
            state: r.status.state,
            attempt: r.status.attempt,
            max_attempts: r.status.max_attempts,
            causation_id: r
                .envelope
                .header
                .causation_id
                .as_ref()
                .map(|c| c.to_string()),
            conversation: r.status.conversation,
            turn: r.envelope.payload.meta.turn.clone(),
            model_use: held.as_ref().map(|(_, totals)| *totals),
            steps: held.map(|(steps, _)| steps).unwrap_or_default(),
            result: r.status.result.clone(),
            error: r.status.error.clone(),
            history: r.history.clone(),
            trace_id: r.status.trace_id.clone(),
            trace_url: r.status.trace_id.as_deref().map(|t| o.trace_url(t)),
            created_at: r.status.created_at,
            updated_at: r.status.updated_at,
            envelope: None,
        }
    }

    /// [`TaskView::new`] with the task's envelope.
    pub fn whole(r: &TaskRecord, o: &Orchestrator) -> Self {
        // The store keeps no token: its envelope is shown as kept.
        let envelope = serde_json::to_value(&r.envelope)
            .ok()
            .map(|e| o.settings().sensitive_fields.redacted(&e));
        TaskView {
            envelope,
            ..TaskView::new(r, o)
        }
    }
}

/// `POST /v1/tasks`: answers once the task is stored; with
/// `response_mode: sync` or `?wait=10s`, once it has ended or the wait
/// (at most the request timeout less a second) has passed.
async fn submit(
    State(o): State<Orchestrator>,
    State(http): State<std::sync::Arc<crate::http::HttpSettings>>,
    Requester(caller): Requester,
    Query(q): Query<super::WaitQuery>,
    headers: HeaderMap,
    body: Body,
) -> Result<(StatusCode, Json<TaskView>), ApiError> {
    let body = super::body(&o, &http, &headers, body).await?;
    let request: TaskRequest =
        codec::decode(&body, Strictness::Strict, o.settings().max_envelope_bytes)?;
    let wait = match (q.within(&http)?, request.response_mode) {
        (Some(wait), _) => Some(wait),
        (None, Some(ResponseMode::Sync)) => Some(http.longest_wait()),
        (None, _) => None,
    };
    let submitted = o.submit(request, &caller).await?;
    let status = match submitted {
        Submitted::Created(_) => StatusCode::CREATED,
        Submitted::Existing(_) => StatusCode::OK,
    };
    let record = submitted.record();
    if let Some(wait) = wait
        && !record.status.state.is_terminal()
        && let Some(ended) = o.task_when_ended(record.task_id(), wait, &caller).await?
    {
        return Ok((status, Json(TaskView::new(&ended, &o))));
    }
    Ok((status, Json(TaskView::new(record, &o))))
}

fn parse_id(id: &str) -> Result<TaskId, ApiError> {
    id.parse()
        .map_err(|e: crate::envelope::ParseError| ApiError::bad_param("id", e))
}

/// `GET /v1/tasks/{id}?wait=10s`: with `wait`, answers when the task has
/// ended or `wait` has passed, whichever comes first (a long poll, at most
/// the request timeout less a second).
async fn get_task(
    State(o): State<Orchestrator>,
    State(http): State<std::sync::Arc<crate::http::HttpSettings>>,
    Requester(caller): Requester,
    Path(id): Path<String>,
    Query(q): Query<super::WaitQuery>,
) -> Result<Json<TaskView>, ApiError> {
    let id = parse_id(&id)?;
    let record = match q.within(&http)? {
        None => o.task(id, &caller).await?,
        Some(wait) => o.task_when_ended(id, wait, &caller).await?,
    };
    let record = record.ok_or_else(|| ApiError::not_found(format!("task {id} not found")))?;
    Ok(Json(TaskView::whole(&record, &o)))
}

async fn cancel(
    State(o): State<Orchestrator>,
    Requester(caller): Requester,
    Path(id): Path<String>,
) -> Result<Json<TaskView>, ApiError> {
    let record = o.cancel(parse_id(&id)?, &caller).await?;
    Ok(Json(TaskView::new(&record, &o)))
}

#[derive(Debug, Deserialize)]
struct ListQuery {
    correlation_id: Option<String>,
    state: Option<String>,
    limit: Option<usize>,
    cursor: Option<String>,
    /// `oldest` (the default) or `newest` first.
    order: Option<String>,
    /// With `order=newest`: only this agent's tasks.
    agent: Option<String>,
    /// With `order=newest`: only tasks this trigger started.
    trigger_id: Option<String>,
    /// With `order=newest`: only tasks created since, a duration back
    /// (`15m`) or a time (RFC 3339).
    since: Option<String>,
    /// With `order=newest`: only tasks of this skill.
    action: Option<String>,
    /// With `order=newest`: only the tasks of this workflow run's steps.
    run_id: Option<String>,
}

/// `since`: a duration back from now (`15m`, `2h`) or an RFC 3339 time.
fn since(text: &str) -> Result<Timestamp, ApiError> {
    if let Ok(back) = humantime::parse_duration(text) {
        return Ok(Timestamp::now().before(back));
    }
    text.parse::<Timestamp>().map_err(|_| {
        ApiError::bad_param(
            "since",
            format!("`{text}` is neither a duration such as `15m` nor an RFC 3339 time"),
        )
    })
}

/// A page of tasks; `next_cursor` continues it.
#[derive(Debug, Serialize, Deserialize)]
pub struct TaskPage {
    /// The tasks, oldest first (newest first with `order=newest`).
    pub tasks: Vec<TaskView>,
    /// Pass as `cursor` for the next page; absent on the last.
    pub next_cursor: Option<TaskId>,
}

async fn list(
    State(o): State<Orchestrator>,
    Requester(caller): Requester,
    Query(q): Query<ListQuery>,
) -> Result<Json<TaskPage>, ApiError> {
    let limit = super::page_size(q.limit, 50);
    let cursor = q
        .cursor
        .as_deref()
        .map(|c| {
            c.parse()
                .map_err(|e: crate::envelope::ParseError| ApiError::bad_param("cursor", e))
        })
        .transpose()?;
    let state = q
        .state
        .as_deref()
        .map(|s| {
            s.parse::<TaskState>()
                .map_err(|e| ApiError::bad_param("state", e))
        })
        .transpose()?;
    let correlation = q
        .correlation_id
        .as_deref()
        .map(|c| {
            c.parse::<CorrelationId>()
                .map_err(|e| ApiError::bad_param("correlation_id", e))
        })
        .transpose()?;
    let newest = match q.order.as_deref() {
        None | Some("oldest") => false,
        Some("newest") => true,
        Some(other) => {
            return Err(ApiError::bad_param(
                "order",
                format!("`{other}` is not an order: `oldest` or `newest`"),
            ));
        }
    };
    let newest_only = [&q.agent, &q.trigger_id, &q.since, &q.action, &q.run_id];
    if !newest && newest_only.iter().any(|f| f.is_some()) {
        return Err(ApiError::bad_param(
            "order",
            "agent, trigger_id, since, action and run_id filter a listing newest first: add order=newest",
        ));
    }
    // One item more than asked tells whether there is a next page.
    let fetched = if newest {
        let since = q.since.as_deref().map(since).transpose()?;
        let filter = crate::service::TaskFilter {
            state,
            agent: q.agent,
            correlation,
            since,
            trigger: q.trigger_id,
            action: q.action,
            run: q
                .run_id
                .as_deref()
                .map(|r| {
                    r.parse()
                        .map_err(|e: crate::envelope::ParseError| ApiError::bad_param("run_id", e))
                })
                .transpose()?,
            owner: None,
        };
        o.tasks_newest(filter, cursor, limit + 1, &caller).await?
    } else {
        o.tasks(correlation.as_ref(), state, cursor, limit + 1, &caller)
            .await?
    };
    let (records, next_cursor) = super::page(fetched, limit, TaskRecord::task_id);
    Ok(Json(TaskPage {
        tasks: records.iter().map(|r| TaskView::new(r, &o)).collect(),
        next_cursor,
    }))
}
