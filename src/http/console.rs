//! What the console reads beyond the resources' own routes
//! (`docs/console.md`):
//! - `GET /v1/me`: who the credential names;
//! - `GET /v1/overview`: the overview page's figures;
//! - `GET /v1/changes`: the caller's tasks and runs as they change, as
//!   server-sent events. The stream starts with a `ready` event, so a
//!   client knows from when it hears changes; each `changes` event names
//!   what changed in the last moments (`{"tasks": {id: state}, "runs":
//!   {id: state}, "more": bool}`), and a view reads again what it shows;
//!   idle, it carries keep-alive comments.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Router};
use futures::StreamExt;

use super::streams::Streams;
use super::{ApiError, Requester};
use crate::service::Orchestrator;

/// How long changes are gathered into one event.
const WINDOW: Duration = Duration::from_millis(300);

pub(super) fn router() -> Router<crate::http::Api> {
    Router::new()
        .route("/v1/changes", get(changes))
        .route("/v1/me", get(me))
        .route("/v1/overview", get(overview))
}

/// `GET /v1/overview`: what the console's overview shows
/// ([`crate::service::Overview`]), its recent failures as task views.
async fn overview(
    State(o): State<Orchestrator>,
    Requester(caller): Requester,
) -> Result<axum::Json<serde_json::Value>, ApiError> {
    let view = o.overview(&caller).await?;
    let failures: Vec<super::TaskView> = view
        .recent_failures
        .iter()
        .map(|r| super::TaskView::new(r, &o))
        .collect();
    let mut body = serde_json::to_value(&view).unwrap_or_default();
    body["recent_failures"] = serde_json::to_value(failures).unwrap_or_default();
    Ok(axum::Json(body))
}

/// `GET /v1/me`: who the credential names and what it may do, so that a
/// view offers only what the caller may (`{"principal", "scopes"}`).
async fn me(Requester(caller): Requester) -> axum::Json<serde_json::Value> {
    axum::Json(serde_json::json!({
        "principal": caller.principal,
        "scopes": caller.grants.as_slice(),
    }))
}

async fn changes(
    State(o): State<Orchestrator>,
    Requester(caller): Requester,
    Extension(streams): Extension<Arc<Streams>>,
) -> Result<Response, ApiError> {
    let permit = streams.enter(&caller.principal).map_err(ApiError::from)?;
    let live = o.live(&caller);
    let closing = streams.closing();
    let ready = futures::stream::once(async { Ok(Event::default().event("ready").data("{}")) });
    let batches = futures::stream::unfold(
        (live, closing, permit),
        |(mut live, closing, permit)| async move {
            let batch = tokio::select! {
                b = live.next(WINDOW) => b?,
                () = closing.cancelled() => return None,
            };
            let data = serde_json::to_string(&batch).unwrap_or_default();
            let event = Event::default().event("changes").data(data);
            Some((Ok::<_, Infallible>(event), (live, closing, permit)))
        },
    );
    Ok(Sse::new(ready.chain(batches))
        .keep_alive(KeepAlive::new().interval(streams.keepalive()))
        .into_response())
}
