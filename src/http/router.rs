//! The routes, merged from one router per resource, with the bounds and
//! the authentication around them.

use std::sync::Arc;

use axum::Router;

use super::{
    Api, ApiError, HttpSettings, a2a, agents, audit, console, deliveries, dlq, error, health,
    limits, openapi, principal, runs, span, streams, tasks, triggers, ui,
};
use crate::access::Authenticator;
use crate::service::Orchestrator;

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
