//! The A2A face (A2A 1.0.1, with 0.3 for clients that send no
//! `A2A-Version`): the agent card, JSON-RPC 2.0 at `POST /a2a`, and the
//! HTTP+JSON binding under `/a2a/rest`. A second face on the service,
//! beside the REST API: an A2A task *is* one of our tasks (the same
//! record, audit and trace), its `contextId` our correlation id; it
//! authenticates as the REST API does. `docs/a2a.md` is the contract.
//!
//! The rooms: the card (`card`), the two bindings (`rpc`, `rest`) over
//! the operations (`ops`: `send`, `stream`, `runs`), our tasks in A2A's
//! words (`wire`, `subject`, and `v03` for 0.3), the errors (`error`), the
//! version a request speaks (`version`) and what the handlers share
//! (`face`).

mod card;
mod error;
mod face;
mod ops;
mod rest;
mod rpc;
mod runs;
mod send;
mod stream;
mod subject;
mod v03;
mod version;
mod wire;

pub(crate) use face::Face;
pub(in crate::http) use subject::pushed_after;
use version::{Version, version};
use wire::to_json;

use std::sync::Arc;

use axum::Router;
use axum::http::HeaderMap;
use axum::routing::{get, post};

use crate::service::Orchestrator;

/// The routes that need a caller: JSON-RPC and HTTP+JSON.
pub(super) fn router() -> Router<crate::http::Api> {
    // With and without the trailing slash: a client that joins "/" to the
    // card's URL (the TCK does) reaches the same endpoint.
    Router::new()
        .route(card::RPC_PATH, post(rpc::handle))
        .route(&format!("{}/", card::RPC_PATH), post(rpc::handle))
        .merge(rest::router())
}

/// The public route: the agent card, at A2A's path and at the older one
/// (`/.well-known/agent.json`, A2A before 0.3, which the seeds name).
pub(super) fn card_router() -> Router<crate::http::Api> {
    let serve = get(
        |axum::extract::State(o): axum::extract::State<Orchestrator>,
         axum::Extension(face): axum::Extension<Arc<Face>>,
         headers: HeaderMap| async move { card::serve(&o, &face, &headers) },
    );
    Router::new()
        .route("/.well-known/agent-card.json", serve.clone())
        .route("/.well-known/agent.json", serve)
}
