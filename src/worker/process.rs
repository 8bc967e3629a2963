//! The worker process: started once the bus is provisioned, then pulling
//! until told to stop, within a grace period.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::Message;
use async_nats::jetstream::consumer::PullConsumer;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use super::beside::{check_readiness, heartbeat, listen_for_cancels};
use super::intake::Intake;
use super::{Handler, Shared, Stops, WorkerError, WorkerSettings, delivery, notes};
use crate::agent::AgentCard;
use crate::bus::{Bus, DeliverySettings, Settlement, settle};
use crate::envelope::Priority;

/// A worker for one agent, ready to run.
pub struct Worker {
    /// Shared with every task the worker runs.
    pub(super) shared: Arc<Shared>,
    /// The agent's consumers, highest priority first.
    pub(super) consumers: Vec<PullConsumer>,
}

impl Worker {
    /// Waits until the orchestrator has provisioned the bus, then prepares
    /// `card`'s agent's consumers.
    pub async fn start(
        bus: Bus,
        card: AgentCard,
        dir: PathBuf,
        handler: Arc<dyn Handler>,
        mut config: WorkerSettings,
    ) -> Result<Worker, WorkerError> {
        if let Some(v) = &config.verifier
            && v.audience() != card.name.as_str()
        {
            return Err(WorkerError::VerifierAudience {
                verifier: v.audience().to_string(),
                agent: card.name.to_string(),
            });
        }
        bus.wait_provisioned(&card.name).await?;
        let mut settings = DeliverySettings::from(bus.settings());
        if let Some(d) = &card.delivery {
            settings.ack_wait = d.ack_wait.unwrap_or(settings.ack_wait);
            settings.max_deliver = d.max_deliver.unwrap_or(settings.max_deliver);
            if let Some(backoff) = &d.backoff {
                settings.backoff = backoff.iter().map(|d| **d).collect();
            }
            config.concurrency = d.concurrency.unwrap_or(config.concurrency);
        }
        let mut consumers = Vec::new();
        for priority in Priority::ALL {
            let consumer = bus
                .patiently(|| bus.agent_consumer(&card.name, priority, &settings))
                .await?;
            consumers.push(consumer);
        }
        let instance = format!(
            "{}-{}",
            std::process::id(),
            &uuid::Uuid::now_v7().simple().to_string()[20..]
        );
        let claims = bus.patiently(|| bus.claims(settings.ack_wait)).await?;
        let card_name = card.name.clone();
        // What the handler holds is scrubbed like what the settings name.
        config.secrets = config.secrets.and(&handler.credentials());
        Ok(Worker {
            shared: Arc::new(Shared {
                bus,
                card,
                dir,
                handler,
                config,
                instance,
                notes: notes::Shelf::new(claims.clone(), card_name),
                claims,
                running: Mutex::new(HashMap::new()),
            }),
            consumers,
        })
    }

    /// This worker's instance id.
    pub fn instance(&self) -> &str {
        &self.shared.instance
    }

    /// Serves until `shutdown` fires, then stops gracefully.
    pub async fn run(self, shutdown: CancellationToken) {
        let shared = self.shared;
        let agent = shared.card.name.clone();
        info!(agent = %agent, instance = %shared.instance, "worker started");
        crate::telemetry::quiet::spawn_reporter();
        let background = CancellationToken::new();
        let heartbeat = tokio::spawn(heartbeat(Arc::clone(&shared), background.clone()));
        let cancels = tokio::spawn(listen_for_cancels(Arc::clone(&shared), background.clone()));
        let checks = tokio::spawn(check_readiness(Arc::clone(&shared), background.clone()));
        let tracker = TaskTracker::new();
        let hard_stop = CancellationToken::new();
        let slots = Arc::new(Semaphore::new(shared.config.concurrency.max(1)));
        let mut intake = Intake::new(
            self.consumers,
            shared.config.idle_poll,
            shared.bus.settings().backoff(),
        );
        // Messages taken on a long poll while every slot was busy: kept
        // alive with in-progress acks until a slot frees (at most three).
        let mut held: VecDeque<Message> = VecDeque::new();
        let mut keep_alive = tokio::time::interval(shared.beat());
        let start = |msg: Message, permit: OwnedSemaphorePermit| {
            let stops = Stops {
                shutdown: shutdown.clone(),
                hard_stop: hard_stop.clone(),
            };
            tracker.spawn(delivery::handle(Arc::clone(&shared), msg, permit, stops));
        };
        while !shutdown.is_cancelled() {
            while !held.is_empty() {
                let Ok(permit) = Arc::clone(&slots).try_acquire_owned() else {
                    break;
                };
                if let Some(msg) = held.pop_front() {
                    start(msg, permit);
                }
            }
            let free = slots.available_permits();
            if free > 0 {
                let ready = intake.ready(free).await;
                if !ready.is_empty() {
                    for msg in ready {
                        match Arc::clone(&slots).try_acquire_owned() {
                            Ok(permit) => start(msg, permit),
                            Err(_) => held.push_back(msg),
                        }
                    }
                    continue;
                }
                intake.arm().await;
            }
            tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                msg = intake.next_waiting() => held.extend(msg),
                permit = Arc::clone(&slots).acquire_owned(), if free == 0 => drop(permit),
                _ = keep_alive.tick(), if !held.is_empty() => {
                    for msg in &held {
                        settle(msg, Settlement::Progress).await;
                    }
                }
            }
        }
        // Hand back what was taken but not started, so other replicas can
        // take it now rather than after the ack wait.
        intake.close();
        for msg in held.drain(..) {
            settle(&msg, Settlement::Nak(Duration::ZERO)).await;
        }
        info!(agent = %agent, running = tracker.len(), "worker stopping: no new work taken");
        tracker.close();
        if tokio::time::timeout(shared.config.shutdown_grace, tracker.wait())
            .await
            .is_err()
        {
            warn!(agent = %agent, running = tracker.len(), "grace period over: releasing running tasks");
            hard_stop.cancel();
            let _ = tokio::time::timeout(Duration::from_secs(10), tracker.wait()).await;
        }
        background.cancel();
        let _ = heartbeat.await;
        let _ = cancels.await;
        let _ = checks.await;
        info!(agent = %agent, "worker stopped");
    }
}
