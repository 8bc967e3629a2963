//! `/v1/runs`: read runs, answer their approval gates, cancel them.

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{ApiError, Requester};
use crate::codec::{self, DecodeError, Strictness, Validate};
use crate::run::{RunId, RunState};
use crate::service::{Answer, Orchestrator, RunAct, RunView};

pub(super) fn router() -> Router<crate::http::Api> {
    Router::new()
        .route("/v1/runs", get(list))
        .route("/v1/runs/{id}", get(get_run))
        .route("/v1/runs/{id}/approve", post(approve))
        .route("/v1/runs/{id}/reject", post(reject))
        .route("/v1/runs/{id}/input", post(input))
        .route("/v1/runs/{id}/cancel", post(cancel))
}

fn parse_id(id: &str) -> Result<RunId, ApiError> {
    id.parse()
        .map_err(|e: crate::envelope::ParseError| ApiError::bad_param("id", e))
}

/// `GET /v1/runs/{id}?wait=30s`: with `wait`, answers once the run has
/// ended or waits at a gate, or when `wait` has passed (a long poll, at
/// most the request timeout less a second).
async fn get_run(
    State(o): State<Orchestrator>,
    State(http): State<std::sync::Arc<crate::http::HttpSettings>>,
    Requester(caller): Requester,
    Path(id): Path<String>,
    Query(q): Query<super::WaitQuery>,
) -> Result<Json<RunView>, ApiError> {
    let id = parse_id(&id)?;
    let wait = q.within(&http)?.unwrap_or_default();
    let view = o
        .run_when_settled(id, wait, &caller)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("run {id} not found")))?;
    Ok(Json(view))
}

#[derive(Debug, Deserialize)]
struct ListQuery {
    trigger_id: Option<String>,
    state: Option<String>,
    limit: Option<usize>,
    cursor: Option<String>,
}

/// A page of runs, newest first; `next_cursor` continues it.
#[derive(Debug, Serialize, Deserialize)]
pub struct RunPage {
    /// The runs.
    pub runs: Vec<RunView>,
    /// Pass as `cursor` for the next page; absent on the last.
    pub next_cursor: Option<RunId>,
}

async fn list(
    State(o): State<Orchestrator>,
    Requester(caller): Requester,
    Query(q): Query<ListQuery>,
) -> Result<Json<RunPage>, ApiError> {
    let limit = super::page_size(q.limit, 50);
    let cursor = q.cursor.as_deref().map(parse_id).transpose()?;
    let state = q
        .state
        .as_deref()
        .map(|s| {
            s.parse::<RunState>()
                .map_err(|e| ApiError::bad_param("state", e))
        })
        .transpose()?;
    let fetched = o
        .runs(q.trigger_id.as_deref(), state, cursor, limit + 1, &caller)
        .await?;
    let (runs, next_cursor) = super::page(fetched, limit, |r: &RunView| r.run_id);
    Ok(Json(RunPage { runs, next_cursor }))
}

/// The body of approve, reject, input and cancel (all optional but
/// `input` for `/input`).
#[derive(Debug, Default, Deserialize)]
struct AnswerBody {
    #[serde(default)]
    reason: String,
    #[serde(default)]
    input: Option<Value>,
}

impl Validate for AnswerBody {
    fn validate(&self) -> Result<(), DecodeError> {
        Ok(())
    }
}

/// The body of an act on run `id`, read once the caller is known to be
/// allowed it (an empty body is all defaults).
async fn act_body(
    o: &Orchestrator,
    http: &crate::http::HttpSettings,
    caller: &crate::service::Caller,
    id: RunId,
    act: RunAct,
    headers: &HeaderMap,
    body: Body,
) -> Result<AnswerBody, ApiError> {
    o.may_act_on_run(id, act, caller)?;
    let bytes = super::body(o, http, headers, body).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(AnswerBody::default());
    }
    Ok(codec::decode(
        &bytes,
        Strictness::Strict,
        o.settings().max_envelope_bytes,
    )?)
}

async fn answer(
    o: Orchestrator,
    http: &crate::http::HttpSettings,
    caller: crate::service::Caller,
    id: String,
    (headers, body): (HeaderMap, Body),
    answer: Answer,
) -> Result<Json<RunView>, ApiError> {
    let id = parse_id(&id)?;
    let b = act_body(&o, http, &caller, id, RunAct::Answer, &headers, body).await?;
    let view = o
        .answer(id, answer, b.reason, b.input, None, &caller)
        .await?;
    Ok(Json(view))
}

async fn approve(
    State(o): State<Orchestrator>,
    State(http): State<std::sync::Arc<crate::http::HttpSettings>>,
    Requester(caller): Requester,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<RunView>, ApiError> {
    answer(o, &http, caller, id, (headers, body), Answer::Approve).await
}

async fn reject(
    State(o): State<Orchestrator>,
    State(http): State<std::sync::Arc<crate::http::HttpSettings>>,
    Requester(caller): Requester,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<RunView>, ApiError> {
    answer(o, &http, caller, id, (headers, body), Answer::Reject).await
}

async fn input(
    State(o): State<Orchestrator>,
    State(http): State<std::sync::Arc<crate::http::HttpSettings>>,
    Requester(caller): Requester,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<RunView>, ApiError> {
    answer(o, &http, caller, id, (headers, body), Answer::Input).await
}

async fn cancel(
    State(o): State<Orchestrator>,
    State(http): State<std::sync::Arc<crate::http::HttpSettings>>,
    Requester(caller): Requester,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<RunView>, ApiError> {
    let id = parse_id(&id)?;
    let b = act_body(&o, &http, &caller, id, RunAct::Cancel, &headers, body).await?;
    Ok(Json(o.cancel_run(id, b.reason, &caller).await?))
}
