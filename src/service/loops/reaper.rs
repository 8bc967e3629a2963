//! Nothing is left stuck: deadlines are enforced, and attempts that nobody
//! runs any more are resolved.
//!
//! - **Deadlines**: a task still live at its `control.deadline` ends
//!   `failed` (`deadline_exceeded`), and its handler is canceled (a cancel
//!   mark in its claim, then the broadcast).
//! - **Stalls**, every `reap_interval`, for live tasks unchanged for
//!   `stall_after`: an attempt never acknowledged by the broker is handed
//!   to the publisher again; an attempt whose message is gone from the
//!   queue, with no live claim and no final report, is lost (its worker and
//!   message vanished): it counts as a retryable failure, so the next
//!   attempt runs, or the task fails when its attempts are spent.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use crate::telemetry::quiet::warn_quietly;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::bus::Bus;
use crate::claim::{ClaimValue, Claims};
use crate::envelope::{Envelope, TaskId, Timestamp};
use crate::event::ErrorInfo;
use crate::service::loops::publisher::Publisher;
use crate::store::{Applied, Change, Store};
use crate::task::{TaskState, TaskStatus, Transition};

/// How the reaper behaves.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReapSettings {
    /// How often live tasks are checked for stalls.
    pub(crate) interval: Duration,
    /// How long a live task may stay unchanged before it is checked.
    pub(crate) stall_after: Duration,
}

/// Hands deadlines to the reaper.
#[derive(Clone)]
pub(crate) struct Deadlines {
    tx: mpsc::Sender<(Timestamp, TaskId)>,
}

impl Deadlines {
    /// Watches `record`'s deadline, if it has one.
    pub(crate) async fn watch(&self, envelope: &Envelope) {
        if let Some(deadline) = envelope.control.deadline {
            let _ = self.tx.send((deadline, envelope.header.task_id)).await;
        }
    }
}

/// What the reaper works with.
pub(crate) struct Reaper {
    pub(crate) store: Store,
    pub(crate) bus: Bus,
    pub(crate) claims: Claims,
    pub(crate) publisher: Publisher,
    pub(crate) settings: ReapSettings,
}

/// The reaper's receiving end of watched deadlines.
pub(crate) struct DeadlineQueue(mpsc::Receiver<(Timestamp, TaskId)>);

/// A deadline watcher and the queue the reaper will read.
pub(crate) fn channel() -> (Deadlines, DeadlineQueue) {
    let (tx, rx) = mpsc::channel(8192);
    (Deadlines { tx }, DeadlineQueue(rx))
}

impl Reaper {
    /// Runs until `stop` fires.
    pub(crate) async fn run(self, queue: DeadlineQueue, stop: CancellationToken) {
        let mut rx = queue.0;
        let mut deadlines: BinaryHeap<Reverse<(Timestamp, TaskId)>> = BinaryHeap::new();
        let mut scan = tokio::time::interval(self.settings.interval);
        scan.tick().await;
        loop {
            let next = deadlines.peek().map(|d| d.0.0);
            tokio::select! {
                biased;
                () = stop.cancelled() => return,
                watched = rx.recv() => match watched {
                    Some(item) => deadlines.push(Reverse(item)),
                    None => return,
                },
                () = tokio::time::sleep(next.map(|t| t.remaining()).unwrap_or_default()), if next.is_some() => {
                    let now = Timestamp::now();
                    while deadlines.peek().is_some_and(|d| d.0.0 <= now) {
                        if let Some(Reverse((_, task_id))) = deadlines.pop() {
                            self.deadline_passed(task_id).await;
                        }
                    }
                }
                _ = scan.tick() => self.scan().await,
            }
        }
    }

    /// Fails a task whose deadline passed, if it is still live, and stops
    /// its handler. Most watched tasks finished long before their deadline:
    /// those are only read, not sent through an (audited) change.
    async fn deadline_passed(&self, task_id: TaskId) {
        match self.store.status(task_id) {
            Ok(Some(status)) if !status.state.is_terminal() => {}
            Ok(_) => return,
            Err(e) => {
                return warn_quietly!("orchestrator.reaper_read_failed", task_id = %task_id, error = %e, "cannot read a task past its deadline");
            }
        }
        let mut change = Change::new(Transition::Fail, "orchestrator", "the deadline passed");
        change.error = Some(ErrorInfo::new(
            "deadline_exceeded",
            "the task's deadline passed before it finished",
            false,
        ));
        match self.store.apply(task_id, change).await {
            Ok(Applied::Moved(record)) => {
                info!(task_id = %task_id, "deadline passed: task failed");
                crate::service::stop::stop_attempt(&self.bus, &self.claims, &record).await;
            }
            Ok(_) => {}
            Err(e) => {
                warn_quietly!("orchestrator.reaper_fail_failed", task_id = %task_id, error = %e, "cannot fail a task past its deadline")
            }
        }
    }

    /// Checks every live task unchanged for `stall_after`; then sets
    /// aside what readers (this scan, listings) found unreadable.
    async fn scan(&self) {
        self.scan_live().await;
        crate::service::quarantine::set_aside_noted(&self.store).await;
    }

    async fn scan_live(&self) {
        let cutoff = Timestamp::now().before(self.settings.stall_after);
        for state in [TaskState::Submitted, TaskState::Working] {
            let mut after = None;
            loop {
                let page = match self.store.statuses_by_state(state, after, 256) {
                    Ok(page) => page,
                    Err(e) => {
                        warn_quietly!("orchestrator.reaper_list_failed", error = %e, "reaper cannot list tasks");
                        return;
                    }
                };
                let Some(last) = page.last() else { break };
                after = Some(last.task_id);
                for record in page {
                    if record.updated_at <= cutoff {
                        self.check(&record).await;
                    }
                }
            }
        }
    }

    /// Resolves one quiet live task if nothing is running its attempt.
    async fn check(&self, record: &TaskStatus) {
        let task_id = record.task_id;
        let attempt = record.attempt;
        // The orchestrator holds it: its turns and calls are checked.
        if record.conversation {
            return;
        }
        if record.state == TaskState::Submitted && record.published_seq.is_none() {
            // Never acknowledged by the broker (or its scheduling was lost).
            self.publisher
                .at(task_id, attempt, record.retry_at, true)
                .await;
            return;
        }
        match self.attempt_alive(record).await {
            Ok(true) => return,
            Ok(false) => {}
            Err(e) => {
                warn_quietly!("orchestrator.reaper_claim_unreadable", task_id = %task_id, error = %e, "reaper cannot tell whether the attempt runs");
                return;
            }
        }
        let mut change = Change::new(
            Transition::Retry,
            "orchestrator",
            "lost attempt: its message is gone, nobody holds its claim, and it never reported a result",
        );
        change.attempt = Some(attempt);
        change.error = Some(ErrorInfo::new(
            "attempt_lost",
            "the attempt stopped without reporting",
            true,
        ));
        match self.store.apply(task_id, change).await {
            Ok(Applied::Moved(next)) => {
                info!(task_id = %task_id, attempt, state = %next.state, "lost attempt resolved");
                if next.state == TaskState::Submitted {
                    self.publisher
                        .at(task_id, next.attempt, next.retry_at, false)
                        .await;
                }
            }
            Ok(_) => {}
            Err(e) => {
                warn_quietly!("orchestrator.reaper_resolve_failed", task_id = %task_id, error = %e, "cannot resolve a lost attempt")
            }
        }
    }

    /// Whether anything still carries the task's current attempt: a live
    /// claim, its message in the queue, or a final report not yet applied.
    async fn attempt_alive(&self, record: &TaskStatus) -> Result<bool, String> {
        let task_id = record.task_id;
        let attempt = record.attempt;
        let (claim, _) = self
            .claims
            .peek(&record.agent, task_id)
            .await
            .map_err(|e| e.to_string())?;
        if matches!(claim, Some(ClaimValue::Running { attempt: a, .. }) if a >= attempt) {
            return Ok(true);
        }
        if let Some(seq) = record.published_seq
            && self
                .bus
                .task_message_exists(seq)
                .await
                .map_err(|e| e.to_string())?
        {
            return Ok(true);
        }
        let last = self
            .bus
            .last_event(&record.agent, task_id)
            .await
            .map_err(|e| e.to_string())?;
        Ok(last.is_some_and(|e| e.ends_attempt(attempt)))
    }
}
