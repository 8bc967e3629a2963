//! `/v1/deliveries`: how push notifications and callbacks are doing, and
//! the events the outbox gave up on; and the delivery key's JWKS at
//! `/.well-known/jwks.json`, which needs no credentials.

use axum::extract::{Query, State};
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use super::{ApiError, Requester};
use crate::envelope::{TaskId, Timestamp};
use crate::service::{DeliveryTarget, GaveUp, Orchestrator, PushDelivery};

pub(super) fn router() -> Router<crate::http::Api> {
    Router::new().route("/v1/deliveries", get(list))
}

/// The public route: the key deliveries are signed with.
pub(super) fn jwks_router() -> Router<crate::http::Api> {
    Router::new().route(
        super::push::JWKS_PATH,
        get(|State(o): State<Orchestrator>| async move {
            (
                [(header::CACHE_CONTROL, "max-age=300")],
                Json(o.push_key().jwks()),
            )
                .into_response()
        }),
    )
}

/// A delivery as the API shows it: its target without credentials.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeliveryView {
    /// The task or run.
    pub task_id: TaskId,
    /// Its id: the push config's, or `callback`.
    pub id: String,
    /// `a2a` (a push config) or `callback`.
    pub kind: String,
    /// Where it goes (a callback's is its task's or run's `callback_url`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Who set it up.
    pub owner: String,
    /// The last event done with.
    pub cursor: u64,
    /// Events delivered.
    pub delivered: u64,
    /// Failed attempts at the next event.
    pub attempts: u32,
    /// When the next attempt is due, after a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<Timestamp>,
    /// Why the last attempt failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// The events given up on.
    pub gave_up: Vec<GaveUp>,
    /// Nothing more is owed.
    pub done: bool,
    /// When it was set up.
    pub created_at: Timestamp,
}

impl From<PushDelivery> for DeliveryView {
    fn from(d: PushDelivery) -> Self {
        let (kind, url) = match &d.target {
            DeliveryTarget::A2a(t) => ("a2a", Some(t.url.clone())),
            DeliveryTarget::Callback => ("callback", None),
        };
        DeliveryView {
            task_id: d.subject,
            id: d.id,
            kind: kind.into(),
            url,
            owner: d.owner,
            cursor: d.cursor,
            delivered: d.delivered,
            attempts: d.attempts,
            retry_at: d.retry_at,
            last_error: d.last_error,
            gave_up: d.gave_up,
            done: d.done,
            created_at: d.created_at,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    /// One task's or run's deliveries, whatever their state.
    task_id: Option<String>,
}

/// `GET /v1/deliveries`: the deliveries that gave up on an event (the
/// caller's; every one with `orch:tasks:read_all`), newest give-up first;
/// with `?task_id=`, every delivery of that task or run.
async fn list(
    State(o): State<Orchestrator>,
    Requester(caller): Requester,
    Query(q): Query<ListQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let deliveries = match q.task_id {
        Some(id) => {
            let id: TaskId = id
                .parse()
                .map_err(|_| ApiError::bad_param("task_id", "not a task or run id"))?;
            o.deliveries_of(id, &caller)
                .await?
                .ok_or_else(|| ApiError::not_found(format!("task {id} not found")))?
        }
        None => o.failed_deliveries(&caller).await?,
    };
    let views: Vec<DeliveryView> = deliveries.into_iter().map(Into::into).collect();
    Ok(Json(serde_json::json!({ "deliveries": views })))
}
