//! Who is asking: a principal with its scopes; and the rules
//! for what a caller may see and do (docs/security.md states them).

use crate::access::{Grants, grants};
use crate::run::RunRecord;
use crate::task::TaskStatus;

use super::ServiceError;

/// Who is asking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The principal: recorded as the actor in history and audit, the `sub`
    /// of its tasks' tokens, and the scope of its idempotency keys.
    pub principal: String,
    /// The scopes it holds.
    pub grants: Grants,
}

impl Caller {
    /// A caller named `principal` holding `grants`.
    pub fn new(principal: impl Into<String>, grants: Grants) -> Self {
        Caller {
            principal: principal.into(),
            grants,
        }
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

    /// Whether the caller may see the run: its own, or any with
    /// `orch:tasks:read_all`. A run it may not see is, to it, not there.
    pub fn may_see_run(&self, run: &RunRecord) -> bool {
        run.started_by == self.principal || self.grants.covers(grants::READ_ALL)
    }

    /// Refuses `what` on another principal's run unless `grant` is held
    /// (a caller acts on its own runs freely).
    pub fn require_on_run(
        &self,
        run: &RunRecord,
        what: &str,
        grant: &str,
    ) -> Result<(), ServiceError> {
        if run.started_by == self.principal {
            Ok(())
        } else {
            self.require(what, [grant])
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
