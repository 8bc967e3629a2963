//! The HTTP API (DESIGN section 13), one router merged from one per
//! resource. JSON in and out; errors as `{"error":{"code","message","field"}}`.

mod agents;
mod audit;
mod auth;
mod dlq;
mod error;
mod health;
mod limits;
mod runs;
mod tasks;
mod trace;
mod triggers;

pub use auth::AUTH_HEADER;
pub use error::ApiError;
pub use runs::RunPage;
pub use tasks::{TaskPage, TaskView};

use std::sync::Arc;

use axum::Router;

use crate::access::Authenticator;
use crate::service::{Caller, Orchestrator};

/// The caller of a request: the principal the authentication layer found.
pub struct Requester(pub Caller);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Requester {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        let principal = auth::principal(parts).cloned().ok_or_else(|| {
            ApiError::new(
                axum::http::StatusCode::UNAUTHORIZED,
                "unauthenticated",
                "this call needs credentials",
            )
        })?;
        Ok(Requester(Caller::new(principal.name, principal.grants)))
    }
}

/// A long poll's `?wait=`: absent, none; else the duration, at most the
/// request timeout less a second.
#[derive(serde::Deserialize)]
struct WaitQuery {
    wait: Option<String>,
}

impl WaitQuery {
    fn within(&self, o: &Orchestrator) -> Result<Option<std::time::Duration>, ApiError> {
        let Some(wait) = &self.wait else {
            return Ok(None);
        };
        let wait = humantime::parse_duration(wait).map_err(|e| {
            ApiError::bad_param("wait", format!("not a duration such as \"10s\": {e}"))
        })?;
        Ok(Some(wait.min(Self::longest(o))))
    }

    /// The longest wait: the request timeout less a second, to answer
    /// before the timeout does.
    fn longest(o: &Orchestrator) -> std::time::Duration {
        o.config()
            .http_request_timeout
            .saturating_sub(std::time::Duration::from_secs(1))
    }
}

/// The page size asked for: `default` when absent, at most 1,000.
fn page_size(asked: Option<usize>, default: usize) -> usize {
    asked.unwrap_or(default).clamp(1, 1000)
}

/// Cuts a list fetched with one item more than `limit` to a page: the
/// page, and the cursor of its last item when more follow.
fn page<T, C>(mut items: Vec<T>, limit: usize, cursor: impl Fn(&T) -> C) -> (Vec<T>, Option<C>) {
    let more = items.len() > limit;
    items.truncate(limit);
    let next = if more { items.last().map(cursor) } else { None };
    (items, next)
}

/// The whole API, bounded by the configured concurrency and timeout; every
/// route but the health checks needs the credentials `access` accepts.
pub fn router(orchestrator: Orchestrator, access: Arc<Authenticator>) -> Router {
    let config = orchestrator.config();
    let (max_in_flight, timeout) = (config.http_max_in_flight, config.http_request_timeout);
    let open = access.is_off();
    let guarded = Router::new()
        .merge(tasks::router())
        .merge(triggers::router())
        .merge(runs::router())
        .merge(audit::router())
        .merge(agents::router())
        .merge(dlq::router())
        .layer(axum::middleware::from_fn_with_state(
            access,
            auth::authenticate,
        ));
    let api = Router::new()
        .merge(guarded)
        .merge(health::router())
        .layer(axum::middleware::from_fn(trace::layer))
        .with_state(orchestrator);
    let bounded = limits::limit(api, max_in_flight, timeout);
    if open {
        bounded.layer(axum::middleware::map_response(auth::mark_unauthenticated))
    } else {
        bounded
    }
}
