//! The orchestrator's background work, one room: recovery at start, then
//! every loop (the publisher, the applier of workers' events, the
//! dead-letter handler, the orphan sweep, the reaper, the workflow engine's
//! driver, schedules, event triggers, readiness, the push outbox's sender,
//! and the watches of trigger and agent files), until told to stop.

pub(in crate::service) mod applier;
pub(in crate::service) mod dead_letters;
mod event_triggers;
mod orphans;
pub(in crate::service) mod publisher;
mod push;
mod readiness;
pub(in crate::service) mod reaper;
mod reload;
mod schedules;

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::service::{Orchestrator, ServiceError, lock};
use crate::task::TaskState;
use applier::Applier;
use publisher::{PublishQueue, PublishSettings};
use reaper::{DeadlineQueue, ReapSettings, Reaper};

pub use push::PushBodies;

/// The receiving ends of the loops' queues, made at open so submissions
/// can be taken before the loops run.
pub(crate) struct Queues {
    pub(crate) publish: PublishQueue,
    pub(crate) deadlines: DeadlineQueue,
    pub(crate) runs: crate::service::engine::EngineQueue,
}

/// How long stopping waits for the loops once the stop token fired; what
/// still runs then is left to end with the process (as after a crash,
/// which recovery handles), so a stuck loop cannot hold a shutdown.
pub const STOP_WITHIN: Duration = Duration::from_secs(10);

/// The orchestrator's running background work: every loop on one tracker.
pub struct Background {
    /// The loops, each ending when the stop token fires.
    loops: TaskTracker,
    /// How long [`Background::join`] waits for them.
    within: Duration,
    /// Flushed once they have stopped.
    store: crate::store::Store,
}

impl Background {
    fn new(store: crate::store::Store) -> Background {
        Background {
            loops: TaskTracker::new(),
            within: STOP_WITHIN,
            store,
        }
    }

    /// Runs `work` as one of the loops: stopped with them, waited for by
    /// [`Background::join`].
    fn spawn<F>(&self, work: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.loops.spawn(work);
    }

    /// Waits for every loop to stop (after the stop token fired), at most
    /// [`STOP_WITHIN`], then flushes the store.
    pub async fn join(self) -> Result<(), ServiceError> {
        self.loops.close();
        if tokio::time::timeout(self.within, self.loops.wait())
            .await
            .is_err()
        {
            warn!(
                running = self.loops.len(),
                within = ?self.within,
                "background loops still running past the stop bound: left to end with the process"
            );
        }
        self.store.flush().await?;
        info!("orchestrator stopped");
        Ok(())
    }
}

impl Orchestrator {
    /// Recovers, then starts the background work, which runs until `stop`
    /// fires; the push outbox's bodies are `bodies`'s words. Returns once
    /// recovery is done, so requests served after it cannot race it.
    /// Starts once per orchestrator: a second call starts nothing.
    pub async fn start(
        &self,
        stop: CancellationToken,
        bodies: std::sync::Arc<dyn PushBodies>,
    ) -> Result<Background, ServiceError> {
        let inner = &self.inner;
        let background = Background::new(inner.store.clone());
        let Some(queues) = lock(&inner.pending).take() else {
            return Ok(background);
        };
        crate::telemetry::quiet::spawn_reporter();
        let events = applier::consumer(&inner.bus).await?;
        let advisories = dead_letters::consumer(&inner.bus).await?;
        background.spawn(publisher::run(
            queues.publish,
            inner.store.clone(),
            inner.bus.clone(),
            PublishSettings {
                in_flight: inner.config.publish_in_flight,
                retry: inner.bus.settings().backoff(),
            },
            inner.publisher.clone(),
            inner.minter.clone(),
            stop.clone(),
        ));
        self.recover().await?;
        background.spawn(applier::apply_events(
            Applier {
                store: inner.store.clone(),
                bus: inner.bus.clone(),
                publisher: inner.publisher.clone(),
                sensitive: inner.config.sensitive_fields.clone(),
                agents: inner.agents.subscribe(),
            },
            events,
            stop.clone(),
        ));
        background.spawn(dead_letters::handle_advisories(
            inner.bus.clone(),
            inner.store.clone(),
            inner.claims.clone(),
            advisories,
            stop.clone(),
        ));
        background.spawn(orphans::sweep(
            inner.bus.clone(),
            inner.store.clone(),
            inner.agents.subscribe(),
            inner.config.orphan_sweep,
            stop.clone(),
        ));
        let reaper = Reaper {
            store: inner.store.clone(),
            bus: inner.bus.clone(),
            claims: inner.claims.clone(),
            publisher: inner.publisher.clone(),
            settings: ReapSettings {
                interval: inner.config.reap_interval,
                stall_after: inner.config.stall_after,
            },
        };
        background.spawn(reaper.run(queues.deadlines, stop.clone()));
        background.spawn(crate::service::engine::drive(
            self.clone(),
            queues.runs,
            stop.clone(),
        ));
        background.spawn(schedules::drive(self.clone(), stop.clone()));
        background.spawn(event_triggers::drive(self.clone(), stop.clone()));
        background.spawn(readiness::watch(
            inner.bus.clone(),
            inner.config.ready_stall_after,
            inner.ready.clone(),
            stop.clone(),
        ));
        background.spawn(push::sender(self.clone(), bodies, stop.clone()));
        if let Some(dir) = self.triggers().dir.clone() {
            background.spawn(reload::watch(
                self.clone(),
                reload::Watched::Triggers,
                vec![dir],
                stop.clone(),
            ));
        }
        let agent_paths = self.catalog().paths.clone();
        if !agent_paths.is_empty() {
            background.spawn(reload::watch(
                self.clone(),
                reload::Watched::Agents,
                agent_paths,
                stop.clone(),
            ));
        }
        Ok(background)
    }

    /// Hands the publisher every attempt the broker never acknowledged
    /// (stored but not published before a crash, or a retry that was due
    /// or became due while the orchestrator was down), and the reaper every
    /// live task's deadline. Attempts the broker has are left alone: a
    /// restart makes no duplicates.
    async fn recover(&self) -> Result<(), ServiceError> {
        let store = &self.inner.store;
        let mut republished = 0;
        for state in [
            TaskState::Submitted,
            TaskState::Working,
            TaskState::InputRequired,
            TaskState::AuthRequired,
        ] {
            let mut after = None;
            loop {
                let page = store.statuses_by_state(state, after, 500)?;
                let Some(last) = page.last() else { break };
                after = Some(last.task_id);
                for status in &page {
                    let envelope = store.envelope(status.task_id);
                    if let Some(envelope) = store.readable(status.task_id, envelope)? {
                        self.inner.deadlines.watch(&envelope).await;
                    }
                    if status.conversation {
                        self.inner
                            .engine
                            .nudge(crate::run::RunId::of_conversation(status.task_id));
                    } else if status.state == TaskState::Submitted && status.published_seq.is_none()
                    {
                        self.inner
                            .publisher
                            .at(status.task_id, status.attempt, status.retry_at, true)
                            .await;
                        republished += 1;
                    }
                }
            }
        }
        if republished > 0 {
            info!(
                tasks = republished,
                "publishing attempts the broker never acknowledged"
            );
        }
        // What could not be read is set aside now, not met again at
        // every look.
        crate::service::quarantine::set_aside_noted(store).await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;
    use crate::store::{Store, StoreSettings};

    fn background(dir: &std::path::Path) -> Background {
        let store = Store::open(&StoreSettings::new(dir)).unwrap();
        Background::new(store)
    }

    /// A loop that ends is waited for; one that does not end holds the
    /// stop no longer than the bound.
    #[tokio::test]
    async fn stopping_waits_for_the_loops_within_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let bg = background(dir.path());
        let ended = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&ended);
        bg.spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            flag.store(true, Ordering::SeqCst);
        });
        bg.join().await.unwrap();
        assert!(
            ended.load(Ordering::SeqCst),
            "join returned before the loop ended"
        );

        let dir = tempfile::tempdir().unwrap();
        let mut bg = background(dir.path());
        bg.within = Duration::from_millis(200);
        let (_held, never) = tokio::sync::oneshot::channel::<()>();
        bg.spawn(async move {
            let _ = never.await;
        });
        let joined = tokio::time::timeout(Duration::from_secs(10), bg.join()).await;
        assert!(
            matches!(joined, Ok(Ok(()))),
            "a loop that never stops held the stop: {joined:?}"
        );
    }
}
