//! Starting the background work: recovery, then every loop.

use tokio_util::sync::CancellationToken;
use tracing::info;

use super::applier::{self, Applier};
use super::publisher::{self, PublishSettings};
use super::reaper::{ReapSettings, Reaper};
use super::{
    Background, PushBodies, dead_letters, event_triggers, orphans, push, readiness, reload,
    schedules, snapshots,
};
use crate::service::{Orchestrator, ServiceError, lock};
use crate::task::TaskState;

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
        if inner.config.replication.enabled {
            background.spawn(snapshots::take(self.clone(), stop.clone()));
        }
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
