//! The HTTP API (DESIGN section 13), one router merged from one per
//! resource. JSON in and out; errors as `{"error":{"code","message","field"}}`.

mod agents;
mod audit;
mod dlq;
mod error;
mod health;
mod tasks;
mod triggers;

pub use error::ApiError;
pub use tasks::{TaskPage, TaskView};

use axum::Router;

use crate::service::Orchestrator;

/// Who is asking. Authentication is not built yet: every caller is the
/// anonymous principal, recorded as such in the audit trail.
pub const ANONYMOUS: &str = "anonymous";

/// The whole API.
pub fn router(orchestrator: Orchestrator) -> Router {
    Router::new()
        .merge(tasks::router())
        .merge(triggers::router())
        .merge(audit::router())
        .merge(agents::router())
        .merge(dlq::router())
        .merge(health::router())
        .with_state(orchestrator)
}
