//! What a route's handler takes: the state (the service and the face's
//! settings), the caller, a long poll's wait, a page, the body.

use std::sync::Arc;

use super::{ApiError, HttpSettings, limits, principal};
use crate::service::{Caller, Orchestrator};

/// What a route's handler may take (`State<Orchestrator>`,
/// `State<Arc<HttpSettings>>`): the service, and the face's settings.
#[derive(Clone)]
pub struct Api {
    pub(super) o: Orchestrator,
    pub(super) http: Arc<HttpSettings>,
}

impl axum::extract::FromRef<Api> for Orchestrator {
    fn from_ref(api: &Api) -> Self {
        api.o.clone()
    }
}

impl axum::extract::FromRef<Api> for Arc<HttpSettings> {
    fn from_ref(api: &Api) -> Self {
        Arc::clone(&api.http)
    }
}

/// The caller of a request: the principal the authentication layer found.
pub struct Requester(pub Caller);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Requester {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        let principal = principal::principal(parts).cloned().ok_or_else(|| {
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
pub(super) struct WaitQuery {
    wait: Option<String>,
}

impl WaitQuery {
    pub(super) fn within(
        &self,
        http: &HttpSettings,
    ) -> Result<Option<std::time::Duration>, ApiError> {
        let Some(wait) = &self.wait else {
            return Ok(None);
        };
        let wait = humantime::parse_duration(wait).map_err(|e| {
            ApiError::bad_param("wait", format!("not a duration such as \"10s\": {e}"))
        })?;
        Ok(Some(wait.min(http.longest_wait())))
    }
}

/// The page size asked for: `default` when absent, at most 1,000.
pub(super) fn page_size(asked: Option<usize>, default: usize) -> usize {
    asked.unwrap_or(default).clamp(1, 1000)
}

/// Cuts a list fetched with one item more than `limit` to a page: the
/// page, and the cursor of its last item when more follow.
pub(super) fn page<T, C>(
    mut items: Vec<T>,
    limit: usize,
    cursor: impl Fn(&T) -> C,
) -> (Vec<T>, Option<C>) {
    let more = items.len() > limit;
    items.truncate(limit);
    let next = if more { items.last().map(cursor) } else { None };
    (items, next)
}

/// A request's body, read within the configured time and size
/// ([`limits::read_body`]): extract it last, as `Body`, so the handler can
/// check what the path asks before anything is read.
pub(super) async fn body(
    o: &Orchestrator,
    http: &HttpSettings,
    headers: &axum::http::HeaderMap,
    body: axum::body::Body,
) -> Result<axum::body::Bytes, ApiError> {
    let declared = headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse().ok());
    let max = o.settings().max_envelope_bytes;
    limits::read_body(body, declared, max, http.body_timeout).await
}
