//! The worker service: pulls one agent's envelopes, runs them through its
//! handler, and reports back. Its protocol on the bus is specified for any
//! language in `docs/worker-protocol.md`; this is the Rust implementation.
//!
//! - Takes only as many messages as it has free slots, high before normal
//!   before low ([`intake`]).
//! - Claims each delivery in the shared claim bucket ([`crate::claim`]):
//!   duplicates, superseded attempts and canceled tasks are settled without
//!   running; a lease lost while running cancels the handler.
//! - Reports `working` only when the handler outlives `working_after`, then
//!   one final event per attempt; the final event is the attempt's record,
//!   so the message is then acked with a plain ack.
//! - A retryable failure is reported as such; the orchestrator decides
//!   whether and when the next attempt runs.
//! - Malformed envelopes are copied to the dead-letter stream; unknown
//!   actions are rejected; the worker keeps serving.
//! - Stops a task on a cancel broadcast or a cancel mark; on shutdown,
//!   stops taking work, lets running tasks finish within a grace period,
//!   then releases the rest.
//!
//! The pipeline is this folder: `intake`, `acquire`, `delivery`, `attempt`,
//! `progress`, `outcome`, `notes`; what runs a task is a [`Handler`], and
//! the kinds a card names (command, A2A, HTTP, LLM, echo) are in
//! `handlers`.

mod acquire;
mod attempt;
mod delivery;
mod handler;
mod handlers;
mod intake;
mod notes;
mod outcome;
mod progress;

pub use handler::{Handler, Task};
pub use handlers::{
    CommandHandler, EXIT_RETRY, EchoHandler, HandlerError, PROGRESS_FD, RemoteHandler, handler_for,
};
pub use notes::{NoteError, Notes};
pub use outcome::{Outcome, event_for, report};
pub use progress::{Reporter, Update};

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_nats::jetstream::Message;
use async_nats::jetstream::consumer::PullConsumer;
use futures::StreamExt;
use serde_json::json;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::agent::AgentCard;
use crate::bus::{Bus, BusError, DeliverySettings, Settlement, settle};
use crate::claim::Claims;
use crate::codec::DEFAULT_MAX_BYTES;
use crate::envelope::{Priority, TaskId, Timestamp};
use crate::telemetry::quiet::warn_quietly;
use crate::telemetry::readiness::{CHECK_EVERY, Readiness, StallWatch};
use intake::Intake;

/// How a worker runs.
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    /// Tasks run at once (default 16; the card's `delivery.concurrency` wins).
    pub concurrency: usize,
    /// How often the live registry entry is refreshed (default 5 s).
    pub heartbeat: Duration,
    /// Largest envelope accepted (default 1 MiB).
    pub max_envelope_bytes: usize,
    /// How long running tasks may take to finish on shutdown (default 30 s).
    pub shutdown_grace: Duration,
    /// How long one long poll waits for work before it is renewed
    /// (default 5 s).
    pub idle_poll: Duration,
    /// A handler still running after this long is reported `working`
    /// (default 100 ms); quicker ones report only their result.
    pub working_after: Duration,
    /// Checks each task's token before anything runs; `None` runs tasks
    /// unchecked (development only; the `worker` command needs
    /// `tokens.verify: false` for that). Its audience must be the agent.
    pub verifier: Option<Arc<crate::task_token::Verifier>>,
    /// Params whose values never appear in a reported error message.
    pub sensitive: crate::redact::SensitiveFields,
    /// Credentials of this worker (the values of `secret_env`'s
    /// variables): scrubbed from every error and status message it
    /// reports.
    pub secrets: crate::redact::Secrets,
    /// Readiness turns false when this agent's messages wait for delivery
    /// while the worker has free slots and nothing has moved for this long
    /// (default 5 min; zero: never).
    pub stall_after: Duration,
    /// Where the readiness checks' verdict goes (a metrics port serves
    /// it); not ready until the worker has started and checked.
    pub readiness: Readiness,
}

impl Default for WorkerSettings {
    fn default() -> Self {
        WorkerSettings {
            concurrency: 16,
            heartbeat: Duration::from_secs(5),
            max_envelope_bytes: DEFAULT_MAX_BYTES,
            shutdown_grace: Duration::from_secs(30),
            idle_poll: Duration::from_secs(5),
            working_after: Duration::from_millis(100),
            verifier: None,
            sensitive: crate::redact::SensitiveFields::default(),
            secrets: crate::redact::Secrets::default(),
            stall_after: Duration::from_secs(300),
            readiness: Readiness::default(),
        }
    }
}

/// Why a worker could not start.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The bus could not be set up.
    #[error(transparent)]
    Bus(#[from] BusError),
    /// The token verifier is for another agent.
    #[error("the token verifier is for agent `{verifier}`, this worker serves `{agent}`")]
    VerifierAudience {
        /// The verifier's audience.
        verifier: String,
        /// The card's agent.
        agent: String,
    },
}

/// When the deliveries in hand must stop: what waits for a claim (or to
/// report a refusal) is handed back as soon as the worker stops taking
/// work; what runs, only past the grace period.
#[derive(Clone)]
struct Stops {
    /// The worker stops taking work.
    shutdown: CancellationToken,
    /// The grace period is over.
    hard_stop: CancellationToken,
}

/// A worker for one agent, ready to run.
pub struct Worker {
    /// Shared with every task the worker runs.
    shared: Arc<Shared>,
    /// The agent's consumers, highest priority first.
    consumers: Vec<PullConsumer>,
}

struct Shared {
    /// The bus: events, dead letters, the registry.
    bus: Bus,
    /// The agent this worker serves.
    card: AgentCard,
    /// The agent's directory (handlers run there).
    dir: PathBuf,
    /// What runs each task.
    handler: Arc<dyn Handler>,
    /// The settings in force.
    config: WorkerSettings,
    /// This process's id in the registry and in claims.
    instance: String,
    /// The shared delivery claims (their lease is the consumer's ack wait).
    claims: Claims,
    /// Where handlers keep their tasks' notes (beside the claims).
    notes: Arc<notes::Shelf>,
    /// Cancel tokens of the tasks running here.
    running: Mutex<HashMap<TaskId, CancellationToken>>,
}

impl Shared {
    /// How long a claim's lease lasts: the consumer's ack wait.
    fn lease(&self) -> Duration {
        self.claims.lease()
    }

    /// How often a message in hand gets an in-progress ack, and a running
    /// task's claim a renewal: three times a lease.
    fn beat(&self) -> Duration {
        (self.lease() / 3).max(Duration::from_millis(100))
    }

    /// Marks `event` as this instance's, told `resumed` or not.
    fn stamp(&self, event: &mut crate::event::WorkerEvent, resumed: bool) {
        event.instance = Some(self.instance.clone());
        event.resumed = resumed;
    }

    /// The `working` report of `envelope`'s attempt, as this instance's.
    fn working_event(
        &self,
        envelope: &crate::envelope::Envelope,
        resumed: bool,
    ) -> crate::event::WorkerEvent {
        let mut event = report(
            envelope,
            envelope.control.attempt.get(),
            crate::event::ReportedState::Working,
        );
        self.stamp(&mut event, resumed);
        event
    }

    /// The delay before a message is tried again after the bus failed.
    fn retry_delay(&self) -> Duration {
        self.bus.settings().retry_delay
    }

    /// How soon a renewal that could not reach the bucket is tried again:
    /// the retry delay, at most a sixth of a lease (so several tries fit
    /// in what is left of it).
    fn renew_retry(&self) -> Duration {
        self.retry_delay()
            .min(self.lease() / 6)
            .max(Duration::from_millis(50))
    }
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

/// Keeps this instance's card in the live registry until `stop` fires.
async fn heartbeat(shared: Arc<Shared>, stop: CancellationToken) {
    let (agent, instance) = (&shared.card.name, shared.instance.as_str());
    let started_at = Timestamp::now();
    let mut tick = tokio::time::interval(shared.config.heartbeat);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let value = json!({
                    "agent": shared.card.name,
                    "instance": shared.instance,
                    "card": shared.card,
                    "started_at": started_at,
                    "heartbeat_at": Timestamp::now(),
                    "in_flight": lock(&shared.running).len(),
                });
                if let Err(e) = shared.bus.register(agent, instance, value.to_string().into()).await {
                    warn_quietly!("worker.heartbeat_failed", error = %e, "registry heartbeat failed");
                }
            }
            () = stop.cancelled() => break,
        }
    }
    let _ = shared.bus.unregister(agent, instance).await;
}

/// Checks until `stop` fires what the worker needs: the broker connected,
/// its consumers, the claims bucket and the events stream led, and its
/// queue not stalled while it has free slots.
async fn check_readiness(shared: Arc<Shared>, stop: CancellationToken) {
    let mut stall = StallWatch::new(shared.config.stall_after);
    let mut tick = tokio::time::interval(CHECK_EVERY);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.cancelled() => return,
        }
        let nats = shared.bus.is_connected();
        let (unserved, flow) = shared.bus.worker_health(&shared.card.name).await;
        let busy = lock(&shared.running).len() >= shared.config.concurrency.max(1);
        let stalled = flow.and_then(|f| {
            let waiting = if busy { 0 } else { f.undelivered };
            let what = "messages wait for this agent while this worker has free slots";
            stall.report(waiting, f.mark, what)
        });
        let ok = nats && unserved.is_empty() && stalled.is_none();
        shared.config.readiness.set(
            ok,
            json!({"nats": nats, "unserved": unserved, "stalled": stalled}),
        );
    }
}

/// Cancels running tasks when their cancel is broadcast.
async fn listen_for_cancels(shared: Arc<Shared>, stop: CancellationToken) {
    let subject = shared.bus.names().all_cancels();
    let mut sub = match shared.bus.client().subscribe(subject).await {
        Ok(sub) => sub,
        Err(e) => {
            warn!(error = %e, "cannot listen for cancels");
            return;
        }
    };
    loop {
        tokio::select! {
            msg = sub.next() => {
                let Some(msg) = msg else { return };
                let id = msg.subject.rsplit('.').next().and_then(|s| s.parse::<TaskId>().ok());
                if let Some(token) = id.and_then(|id| lock(&shared.running).get(&id).cloned()) {
                    info!(task_id = ?id, "cancel requested");
                    token.cancel();
                }
            }
            () = stop.cancelled() => return,
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
