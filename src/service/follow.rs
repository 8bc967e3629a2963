//! Following a task as it changes: for long polls (answer once it has
//! ended, or once it waits for someone) and for streams (every change, in
//! order). Each read is of the flushed store, like every reader.

use std::time::Duration;

use crate::envelope::TaskId;
use crate::store::Watch;
use crate::task::{TaskRecord, TaskState};

use super::{Caller, Orchestrator, ServiceError};

/// A task followed by one caller: [`Follow::changed`] answers at each of
/// its changes. Dropping it stops following.
pub struct Follow {
    orchestrator: Orchestrator,
    id: TaskId,
    caller: Caller,
    watch: Watch,
}

impl Orchestrator {
    /// The task as it is now, if the caller may see it, and a way to wait
    /// for its next changes; a change between the read and the first wait
    /// is not missed.
    pub async fn follow(
        &self,
        id: TaskId,
        caller: &Caller,
    ) -> Result<Option<(TaskRecord, Follow)>, ServiceError> {
        let watch = self.inner.store.watch(id);
        let Some(record) = self.task(id, caller).await? else {
            return Ok(None);
        };
        let follow = Follow {
            orchestrator: self.clone(),
            id,
            caller: caller.clone(),
            watch,
        };
        Ok(Some((record, follow)))
    }

    /// The task once it has ended, or as it is when `within` has passed
    /// (whichever comes first), if the caller may see it.
    pub async fn task_when_ended(
        &self,
        id: TaskId,
        within: Duration,
        caller: &Caller,
    ) -> Result<Option<TaskRecord>, ServiceError> {
        self.task_when(id, within, caller, TaskState::is_terminal)
            .await
    }

    /// The task once its state is one `done` accepts, or as it is when
    /// `within` has passed (whichever comes first), if the caller may see
    /// it.
    pub async fn task_when(
        &self,
        id: TaskId,
        within: Duration,
        caller: &Caller,
        done: impl Fn(TaskState) -> bool,
    ) -> Result<Option<TaskRecord>, ServiceError> {
        let mut watch = self.inner.store.watch(id);
        match self.inner.store.status(id)? {
            Some(status) if caller.may_see(&status) => {
                if !done(status.state) {
                    let wait = async {
                        loop {
                            watch.changed().await;
                            match self.inner.store.status(id) {
                                Ok(Some(s)) if !done(s.state) => {}
                                _ => return,
                            }
                        }
                    };
                    let _ = tokio::time::timeout(within, wait).await;
                }
            }
            _ => return Ok(None),
        }
        self.task(id, caller).await
    }
}

impl Follow {
    /// The task after its next change (or the one that came since the
    /// last call); `None` if it is no longer there for the caller.
    pub async fn changed(&mut self) -> Result<Option<TaskRecord>, ServiceError> {
        self.watch.changed().await;
        self.orchestrator.task(self.id, &self.caller).await
    }
}
