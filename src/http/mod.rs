//! The HTTP API (DESIGN section 13), one router merged from one per
//! resource. JSON in and out; errors as `{"error":{"code","message","field"}}`.

mod a2a;
mod agents;
mod audit;
mod console;
mod deliveries;
mod dlq;
mod error;
mod health;
mod limits;
pub mod listen;
pub mod openapi;
mod principal;
mod push;
mod runs;
mod settings;
mod span;
mod streams;
mod tasks;
mod triggers;
mod ui;

pub use deliveries::DeliveryView;
pub use error::ApiError;
pub use principal::AUTH_HEADER;
pub use push::push_bodies;
pub use runs::RunPage;
pub use settings::{A2aSettings, HttpSettings, MessageIds};
pub use tasks::{TaskPage, TaskView};

use std::sync::Arc;

use axum::Router;

use crate::access::Authenticator;
use crate::service::{Caller, Orchestrator};

/// What a route's handler may take (`State<Orchestrator>`,
/// `State<Arc<HttpSettings>>`): the service, and the face's settings.
#[derive(Clone)]
pub struct Api {
    o: Orchestrator,
    http: Arc<HttpSettings>,
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
struct WaitQuery {
    wait: Option<String>,
}

impl WaitQuery {
    fn within(&self, http: &HttpSettings) -> Result<Option<std::time::Duration>, ApiError> {
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

/// The whole API: every route but the probes and the console's files
/// needs the credentials `access` accepts, and is bounded by the
/// configured concurrency (in all and per principal) and timeout; the
/// probes (`/healthz`, `/readyz`, `/metrics`) are outside those bounds, so
/// they answer while the API is full. The console (`/ui`) is files only:
/// its pages call the API with the credentials signed in with.
///
/// Streams (the A2A face's, the console's) end when `closing` fires (the
/// server stops).
pub fn router(
    orchestrator: Orchestrator,
    http: HttpSettings,
    access: Arc<Authenticator>,
    closing: tokio_util::sync::CancellationToken,
) -> Router {
    let (max_in_flight, timeout) = (http.max_in_flight, http.request_timeout);
    let http = Arc::new(http);
    let open = access.is_off();
    let streams = Arc::new(streams::Streams::new(
        http.a2a.max_streams,
        http.max_streams_per_principal,
        http.a2a.keepalive,
        closing,
    ));
    let face = a2a::Face::new(!open, Arc::clone(&streams), Arc::clone(&http));
    let gate = Arc::new(principal::Gate {
        access,
        per_principal: limits::PerPrincipal::new(
            http.max_in_flight_per_principal,
            "requests in progress",
            "http_max_in_flight_per_principal",
        ),
    });
    let api = Router::new()
        .merge(tasks::router())
        .merge(triggers::router())
        .merge(runs::router())
        .merge(audit::router())
        .merge(agents::router())
        .merge(dlq::router())
        .merge(deliveries::router())
        .merge(a2a::router())
        .merge(console::router())
        .layer(axum::Extension(Arc::clone(&face)))
        .layer(axum::Extension(streams))
        .layer(axum::middleware::from_fn_with_state(
            gate,
            principal::authenticate,
        ))
        .layer(axum::middleware::from_fn(span::layer))
        .with_state(Api {
            o: orchestrator.clone(),
            http: Arc::clone(&http),
        });
    let probes = health::router()
        .merge(ui::router())
        .merge(a2a::card_router())
        .merge(deliveries::jwks_router())
        .merge(openapi::router())
        .layer(axum::Extension(face))
        .layer(axum::middleware::from_fn(span::layer))
        .with_state(Api {
            o: orchestrator,
            http,
        });
    let app = probes
        .merge(limits::limit(api, max_in_flight, timeout))
        .layer(axum::middleware::map_response(error::every_answer));
    if open {
        app.layer(axum::middleware::map_response(
            principal::mark_unauthenticated,
        ))
    } else {
        app
    }
}

/// What a connection from the probes' reserve is served (the API's
/// connections all taken): `/healthz`, `/readyz` and `/metrics`, and 503
/// for anything else.
pub fn probes_router(orchestrator: Orchestrator, http: HttpSettings) -> Router {
    health::router()
        .fallback(|| async {
            ApiError::new(
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                "too_many_connections",
                "every connection of the API is taken; try again shortly",
            )
            .retry_after(1)
        })
        .layer(axum::middleware::from_fn(span::layer))
        .layer(axum::middleware::map_response(error::every_answer))
        .with_state(Api {
            o: orchestrator,
            http: Arc::new(http),
        })
}

/// A request's body, read within the configured time and size
/// ([`limits::read_body`]): extract it last, as `Body`, so the handler can
/// check what the path asks before anything is read.
async fn body(
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
