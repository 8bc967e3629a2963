//! What changed, for a live view (the console, `docs/console.md`): the
//! store's changes to tasks and runs that one caller may see, gathered
//! into batches so that a busy orchestrator sends a view a few batches a
//! second, not one message per transition.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::sync::broadcast::{self, error::RecvError};

use super::{Caller, Orchestrator};
use crate::access::grants;
use crate::envelope::TaskId;
use crate::run::{RunId, RunState};
use crate::store::Changed;
use crate::task::TaskState;

/// At most this many tasks (and runs) are named in one batch; past it the
/// batch says `more`, and the view reads what it shows again.
const MOST: usize = 200;

/// One caller's feed of changes.
pub struct Live {
    changes: broadcast::Receiver<Changed>,
    caller: Caller,
}

/// The changes a caller may see, gathered over a short window: each task
/// and run with its latest state.
#[derive(Debug, Default, serde::Serialize)]
pub struct LiveBatch {
    /// Tasks created or moved, with their state now.
    pub tasks: BTreeMap<TaskId, TaskState>,
    /// Runs started or moved, with their state now.
    pub runs: BTreeMap<RunId, RunState>,
    /// More changed than are named, or some were missed (the view fell
    /// behind): read again whatever is shown.
    pub more: bool,
}

impl Orchestrator {
    /// The changes `caller` may see from now on: its own tasks and runs,
    /// or every one with `orch:tasks:read_all`.
    pub fn live(&self, caller: &Caller) -> Live {
        Live {
            changes: self.inner.store.changes(),
            caller: caller.clone(),
        }
    }
}

impl Live {
    /// Waits for a change the caller may see, then gathers those that
    /// follow within `window`; `None` once the store is gone.
    pub async fn next(&mut self, window: Duration) -> Option<LiveBatch> {
        let mut batch = LiveBatch::default();
        // The first change opens the window.
        loop {
            match self.changes.recv().await {
                Ok(c) => {
                    if self.add(&mut batch, c) {
                        break;
                    }
                }
                Err(RecvError::Lagged(_)) => {
                    batch.more = true;
                    break;
                }
                Err(RecvError::Closed) => return None,
            }
        }
        let until = tokio::time::Instant::now() + window;
        loop {
            match tokio::time::timeout_at(until, self.changes.recv()).await {
                Err(_) => break,
                Ok(Ok(c)) => {
                    self.add(&mut batch, c);
                }
                Ok(Err(RecvError::Lagged(_))) => batch.more = true,
                Ok(Err(RecvError::Closed)) => break,
            }
        }
        Some(batch)
    }

    /// Adds `c` to `batch` if the caller may see it; whether it did.
    fn add(&self, batch: &mut LiveBatch, c: Changed) -> bool {
        let everyone = self.caller.grants.covers(grants::READ_ALL);
        let mine = |owner: Option<&str>| everyone || owner == Some(self.caller.principal.as_str());
        match c {
            Changed::Task { id, state, owner } if mine(owner.as_deref()) => {
                if batch.tasks.len() < MOST || batch.tasks.contains_key(&id) {
                    batch.tasks.insert(id, state);
                } else {
                    batch.more = true;
                }
                true
            }
            Changed::Run { id, state, owner } if mine(Some(&owner)) => {
                if batch.runs.len() < MOST || batch.runs.contains_key(&id) {
                    batch.runs.insert(id, state);
                } else {
                    batch.more = true;
                }
                true
            }
            _ => false,
        }
    }
}
