//! What a face says a push delivery's body holds.

use serde_json::Value;

use crate::service::{Orchestrator, Subject};
use crate::task::TaskRecord;

/// What a face puts in the bodies it is owed: the service keeps the
/// outbox and sends, the face that took the push config knows its words.
pub trait PushBodies: Send + Sync + 'static {
    /// For a push config: the first of `subject`'s events after event
    /// `after`, numbered, as a push sends it (in A2A 0.3's words when
    /// `v03`).
    fn event_after(&self, subject: &Subject, after: u64, v03: bool) -> Option<(u64, Value)>;

    /// For a callback: `task` as its caller reads it.
    fn task_view(&self, o: &Orchestrator, task: &TaskRecord) -> Value;

    /// Where a receiver finds the key that checks a delivery's signature
    /// (its JWKS), named in each signature (`jku`); `None` when the face
    /// does not know the URL it is reached at.
    fn jwks_url(&self) -> Option<String>;
}
