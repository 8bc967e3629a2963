//! What the push outbox sends, in this face's words
//! ([`crate::service::PushBodies`]): to a push config, the A2A event a
//! stream would carry; to a callback, the task as `GET /v1/tasks/{id}`
//! shows it. The service keeps the outbox and sends it.

use serde_json::Value;

use crate::http::HttpSettings;
use crate::service::{Orchestrator, PushBodies, Subject};
use crate::task::TaskRecord;

/// The path the push key's JWKS is served at.
pub(crate) const JWKS_PATH: &str = "/.well-known/jwks.json";

/// The bodies, for a face reached at `a2a.public_url`.
struct Bodies {
    jwks_url: Option<String>,
}

/// What the push outbox sends for a face with `settings`.
pub fn push_bodies(settings: &HttpSettings) -> std::sync::Arc<dyn PushBodies> {
    let jwks_url = settings
        .a2a
        .public_url
        .as_deref()
        .map(|base| format!("{}{JWKS_PATH}", base.trim_end_matches('/')));
    std::sync::Arc::new(Bodies { jwks_url })
}

impl PushBodies for Bodies {
    fn event_after(&self, subject: &Subject, after: u64, v03: bool) -> Option<(u64, Value)> {
        super::a2a::pushed_after(subject, after, v03)
    }

    fn task_view(&self, o: &Orchestrator, task: &TaskRecord) -> Value {
        serde_json::to_value(super::tasks::TaskView::new(task, o)).unwrap_or_default()
    }

    fn jwks_url(&self) -> Option<String> {
        self.jwks_url.clone()
    }
}
