//! Running the orchestrator's background work: recovery at start, then the
//! publisher, the event consumer, the dead-letter handler, the orphan sweep
//! and the reaper, until told to stop.

use tokio_util::sync::CancellationToken;
use tracing::info;

use super::events::{self, Applier};
use super::publisher::{self, PublishQueue, PublishSettings};
use super::reaper::{DeadlineQueue, ReapSettings, Reaper};
use super::{Orchestrator, ServiceError, dlq, lock, orphans};
use crate::task::TaskState;

/// The receiving ends of the loops' queues, made at open so submissions
/// can be taken before the loops run.
pub(crate) struct Queues {
    pub(crate) publish: PublishQueue,
    pub(crate) deadlines: DeadlineQueue,
    pub(crate) runs: super::workflows::EngineQueue,
}

/// The orchestrator's running background work.
pub struct Background {
    /// The loops, each ending when the stop token fires.
    loops: Vec<tokio::task::JoinHandle<()>>,
    /// Flushed once they have stopped.
    store: crate::store::Store,
}

impl Background {
    /// Waits for every loop to stop (after the stop token fired), then
    /// flushes the store.
    pub async fn join(self) -> Result<(), ServiceError> {
        for handle in self.loops {
            let _ = handle.await;
        }
        self.store.flush().await?;
        info!("orchestrator stopped");
        Ok(())
    }
}

impl Orchestrator {
    /// Recovers, then starts the background work, which runs until `stop`
    /// fires. Returns once recovery is done, so requests served after it
    /// cannot race it. Starts once per orchestrator: a second call starts
    /// nothing.
    pub async fn start(&self, stop: CancellationToken) -> Result<Background, ServiceError> {
        let inner = &self.inner;
        let Some(queues) = lock(&inner.pending).take() else {
            return Ok(Background {
                loops: Vec::new(),
                store: inner.store.clone(),
            });
        };
        crate::telemetry::quiet::spawn_reporter();
        let events = events::consumer(&inner.bus).await?;
        let advisories = dlq::consumer(&inner.bus).await?;
        let publishing = tokio::spawn(publisher::run(
            queues.publish,
            inner.store.clone(),
            inner.bus.clone(),
            PublishSettings {
                in_flight: inner.config.publish_in_flight,
                retry: inner.bus.config().backoff(),
            },
            inner.publisher.clone(),
            inner.minter.clone(),
            stop.clone(),
        ));
        self.recover().await?;
        let applier = tokio::spawn(events::apply_events(
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
        let dead_letters = tokio::spawn(dlq::handle_advisories(
            inner.bus.clone(),
            inner.store.clone(),
            inner.claims.clone(),
            advisories,
            stop.clone(),
        ));
        let sweeper = tokio::spawn(orphans::sweep(
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
        let reaping = tokio::spawn(reaper.run(queues.deadlines, stop.clone()));
        let workflows = tokio::spawn(super::workflows::drive(
            self.clone(),
            queues.runs,
            stop.clone(),
        ));
        let mut loops = vec![
            publishing,
            applier,
            dead_letters,
            sweeper,
            reaping,
            workflows,
            tokio::spawn(super::schedules::drive(self.clone(), stop.clone())),
            tokio::spawn(super::event_triggers::drive(self.clone(), stop.clone())),
            tokio::spawn(super::readiness::watch(
                inner.bus.clone(),
                inner.config.ready_stall_after,
                inner.ready.clone(),
                stop.clone(),
            )),
        ];
        if let Some(dir) = self.triggers().dir.clone() {
            loops.push(tokio::spawn(super::reload::watch(
                self.clone(),
                super::reload::Watched::Triggers,
                vec![dir],
                stop.clone(),
            )));
        }
        let agent_paths = self.catalog().paths.clone();
        if !agent_paths.is_empty() {
            loops.push(tokio::spawn(super::reload::watch(
                self.clone(),
                super::reload::Watched::Agents,
                agent_paths,
                stop.clone(),
            )));
        }
        Ok(Background {
            loops,
            store: inner.store.clone(),
        })
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
                            .nudge(crate::workflow::RunId::of_conversation(status.task_id));
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
        super::quarantine::set_aside_noted(store).await;
        Ok(())
    }
}
