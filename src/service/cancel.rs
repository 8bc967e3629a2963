//! Canceling a task: the store first, then the claim's mark, then the
//! broadcast to its holder.

use super::stop::stop_attempt;
use super::{Caller, Orchestrator, ServiceError};
use crate::bus::BusError;
use crate::envelope::TaskId;
use crate::store::{Applied, Change, StoreError};
use crate::task::{TaskRecord, TaskState, Transition};

impl Orchestrator {
    /// Cancels a task: idempotent for a canceled task, refused for one that
    /// ended otherwise. The store records it first; then the task's claim
    /// is marked canceled (a worker that claims it later never starts it,
    /// a running holder's next renewal fails), then the cancel is broadcast
    /// to the holder. If the mark cannot be written the call fails and can
    /// be repeated. Only the task's principal, or a caller with
    /// `orch:tasks:cancel_all`, may cancel it; a task the caller may not see
    /// is not found.
    pub async fn cancel(
        &self,
        task_id: TaskId,
        caller: &Caller,
    ) -> Result<TaskRecord, ServiceError> {
        match self.inner.store.status(task_id)? {
            Some(status) if caller.may_cancel(&status) => {}
            Some(status) if caller.may_see(&status) => {
                return Err(ServiceError::Forbidden {
                    what: "canceling another principal's task".into(),
                    missing: vec![crate::access::grants::CANCEL_ALL.into()],
                });
            }
            _ => return Err(ServiceError::Store(StoreError::NotFound(task_id))),
        }
        let change = Change::new(
            Transition::Cancel,
            caller.principal.as_str(),
            "cancel requested",
        );
        let record = match self.inner.store.apply(task_id, change).await? {
            Applied::Moved(r) | Applied::Unchanged(r) => r,
            Applied::Ignored { record, .. } if record.state == TaskState::Canceled => record,
            Applied::Ignored { record, .. } => {
                return Err(ServiceError::NotCancelable {
                    task_id,
                    state: record.state,
                });
            }
        };
        if !stop_attempt(&self.inner.bus, &self.inner.claims, &record).await {
            return Err(ServiceError::Bus(BusError::Publish {
                subject: self.inner.bus.names().deliveries_bucket(),
                source:
                    "the task is canceled, but its cancel mark could not be written: cancel again"
                        .into(),
            }));
        }
        self.inner
            .store
            .get(task_id)?
            .ok_or(ServiceError::Store(StoreError::NotFound(task_id)))
    }
}
