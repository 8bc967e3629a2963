//! The feed of every change the store makes to a task or a run, once
//! written: what a live view (the console) needs to know that something it
//! shows moved. Nothing is kept: a subscriber sees the changes made while
//! it listens, and one that falls behind is told so (it reads again).
//!
//! With no subscriber, a change costs one atomic load.

use tokio::sync::broadcast;

use super::Store;
use crate::envelope::TaskId;
use crate::run::{RunId, RunRecord, RunState};
use crate::task::{TaskState, TaskStatus};

/// How many changes a subscriber may fall behind before it is told it
/// lagged.
const BACKLOG: usize = 4096;

/// One change.
#[derive(Debug, Clone, PartialEq)]
pub enum Changed {
    /// A task was created or moved.
    Task {
        /// The task.
        id: TaskId,
        /// Its state now.
        state: TaskState,
        /// Whose it is (who asked for it).
        owner: Option<String>,
    },
    /// A run was created or moved.
    Run {
        /// The run.
        id: RunId,
        /// Its state now.
        state: RunState,
        /// Who started it.
        owner: String,
    },
}

/// The sending side, one per store.
#[derive(Clone)]
pub(crate) struct Changes {
    sender: broadcast::Sender<Changed>,
}

impl Default for Changes {
    fn default() -> Self {
        Changes {
            sender: broadcast::channel(BACKLOG).0,
        }
    }
}

impl Changes {
    /// A task changed.
    pub(crate) fn task(&self, status: &TaskStatus) {
        if self.sender.receiver_count() > 0 {
            let _ = self.sender.send(Changed::Task {
                id: status.task_id,
                state: status.state,
                owner: status.requested_by.clone(),
            });
        }
    }

    /// A run changed.
    pub(crate) fn run(&self, record: &RunRecord) {
        if self.sender.receiver_count() > 0 {
            let _ = self.sender.send(Changed::Run {
                id: record.run_id,
                state: record.state,
                owner: record.started_by.clone(),
            });
        }
    }

    fn subscribe(&self) -> broadcast::Receiver<Changed> {
        self.sender.subscribe()
    }
}

impl Store {
    /// Every change to a task or a run from now on.
    pub fn changes(&self) -> broadcast::Receiver<Changed> {
        self.inner.changes.subscribe()
    }
}
