//! The engine's handle: what the rest of the orchestrator nudges runs
//! through, and the watches and timers that nudge them by themselves (a
//! step's task ended, a run's deadline came).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::envelope::TaskId;
use crate::run::{RunId, RunRecord};
use crate::service::{Orchestrator, lock};

/// How long a step whose task could not be submitted for a passing reason
/// (the store or broker) waits before the run is advanced again.
pub(super) const RETRY_AFTER: Duration = Duration::from_secs(1);

/// The handle the rest of the orchestrator nudges runs through.
#[derive(Clone)]
pub(crate) struct Engine {
    nudges: mpsc::UnboundedSender<RunId>,
    /// Tasks whose end is being watched (one watch per task).
    watched: Arc<Mutex<HashSet<TaskId>>>,
    /// Runs with a deadline timer.
    timed: Arc<Mutex<HashSet<RunId>>>,
    /// Fired when the engine stops: the watches end with it (they hold the
    /// store, which a restart in the same process opens again).
    pub(super) stopped: CancellationToken,
}

/// The receiving end of the nudges.
pub(crate) type EngineQueue = mpsc::UnboundedReceiver<RunId>;

pub(crate) fn channel() -> (Engine, EngineQueue) {
    let (nudges, queue) = mpsc::unbounded_channel();
    (
        Engine {
            nudges,
            watched: Arc::default(),
            timed: Arc::default(),
            stopped: CancellationToken::new(),
        },
        queue,
    )
}

impl Engine {
    /// Asks for run `id` to be advanced.
    pub(crate) fn nudge(&self, id: RunId) {
        let _ = self.nudges.send(id);
    }

    /// Nudges `run` when `task` ends (once per task).
    pub(crate) fn watch(&self, o: &Orchestrator, task: TaskId, run: RunId) {
        if !lock(&self.watched).insert(task) {
            return;
        }
        let store = o.store().clone();
        let engine = self.clone();
        let mut watch = store.watch(task);
        let stopped = self.stopped.clone();
        tokio::spawn(async move {
            let live = matches!(store.state(task), Ok(Some(s)) if !s.is_terminal());
            drop(store);
            if live {
                tokio::select! {
                    () = watch.ended() => {}
                    () = stopped.cancelled() => return,
                }
            }
            lock(&engine.watched).remove(&task);
            engine.nudge(run);
        });
    }

    /// Nudges `run` at its deadline (once per run).
    pub(super) fn time(&self, run: &RunRecord) {
        let Some(deadline) = run.deadline else { return };
        if !lock(&self.timed).insert(run.run_id) {
            return;
        }
        let engine = self.clone();
        let id = run.run_id;
        tokio::spawn(async move {
            tokio::time::sleep(deadline.remaining()).await;
            lock(&engine.timed).remove(&id);
            engine.nudge(id);
        });
    }

    /// Nudges `run` after `delay`.
    pub(super) fn later(&self, run: RunId, delay: Duration) {
        let engine = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            engine.nudge(run);
        });
    }
}
