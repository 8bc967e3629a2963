//! Who is asking: a principal with its scopes, in a trace; and the rules
//! for what a caller may see and do (docs/security.md states them).

use crate::access::{Grants, grants};
use crate::bus::TraceContext;
use crate::task::TaskStatus;

use super::ServiceError;

/// Who is asking, and the trace the request belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The principal: recorded as the actor in history and audit, the `sub`
    /// of its tasks' tokens, and the scope of its idempotency keys.
    pub principal: String,
    /// The scopes it holds.
    pub grants: Grants,
    /// The caller's trace (a `traceparent` it sent); `None` starts one.
    trace: Option<TraceContext>,
    /// The trace used when the caller sent none, fixed at creation.
    root: TraceContext,
}

impl Caller {
    /// A caller named `principal` holding `grants`, in a new trace.
    pub fn new(principal: impl Into<String>, grants: Grants) -> Self {
        Caller {
            principal: principal.into(),
            grants,
            trace: None,
            root: TraceContext::root(),
        }
    }

    /// The same caller inside the trace it sent.
    pub fn with_trace(mut self, trace: Option<TraceContext>) -> Self {
        self.trace = trace;
        self
    }

    /// The trace its tasks join.
    pub fn trace(&self) -> TraceContext {
        self.trace.unwrap_or(self.root)
    }

    /// Refuses `what` unless every scope of `needed` is held; `what` is
    /// formatted only for a refusal, so the check allocates nothing.
    pub fn require<'a>(
        &self,
        what: impl std::fmt::Display,
        needed: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), ServiceError> {
        let missing = self.grants.missing(needed);
        if missing.is_empty() {
            Ok(())
        } else {
            Err(ServiceError::Forbidden {
                what: what.to_string(),
                missing,
            })
        }
    }

    /// Whether the task is this caller's own.
    fn owns(&self, status: &TaskStatus) -> bool {
        status.requested_by.as_deref() == Some(self.principal.as_str())
    }

    /// Whether the caller may see the task: its own, or any with
    /// `orch:tasks:read_all`. A task it may not see is, to it, not there.
    pub fn may_see(&self, status: &TaskStatus) -> bool {
        self.owns(status) || self.grants.covers(grants::READ_ALL)
    }

    /// Whether the caller may cancel the task (one it may see): its own,
    /// or any with `orch:tasks:cancel_all`.
    pub fn may_cancel(&self, status: &TaskStatus) -> bool {
        self.owns(status) || self.grants.covers(grants::CANCEL_ALL)
    }
}
