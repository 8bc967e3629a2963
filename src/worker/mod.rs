//! The worker service: pulls one agent's envelopes, runs them through its
//! handler, and reports back (DESIGN section 6).
//!
//! - Fetches high before normal before low, as many as it has free slots.
//! - Dedupes deliveries across every replica through shared claims
//!   ([`claims`]), renewing the claim's lease with each in-progress ack.
//! - Publishes `working`, then the final event; records the final event in
//!   the claim before acking, so a redelivery republishes it instead of
//!   running the task again.
//! - Outcomes become acks in one place ([`settle`]): retryable failures are
//!   `Nak(delay)` (the broker delivers the next attempt), everything final
//!   is `Ack` or `Term`.
//! - Malformed envelopes are copied to the dead-letter stream and terminated;
//!   unknown actions are rejected; the worker keeps serving.
//! - Stops a task on a cancel broadcast; on shutdown, stops fetching, lets
//!   running tasks finish within a grace period, then releases the rest.

pub mod claims;
mod command;
mod handler;
mod outcome;

pub use command::{CommandHandler, EXIT_RETRY};
pub use handler::{EchoHandler, Handler, Task, handler_for};
pub use outcome::{Disposition, Outcome, RetryPolicy, event_for, report, settle};

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_nats::jetstream::{AckKind, Message, consumer::PullConsumer};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::agent::AgentCard;
use crate::bus::{Bus, BusError, DeadLetterCopy, DeliverySettings};
use crate::codec::DEFAULT_MAX_BYTES;
use crate::envelope::{Envelope, Priority, TaskId, Timestamp};
use crate::event::{ErrorInfo, ReportedState, WorkerEvent};
use claims::{Claims, Decision};

/// How a worker runs.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerConfig {
    /// Tasks run at once (default 16; the card's `delivery.concurrency` wins).
    pub concurrency: usize,
    /// How often the live registry entry is refreshed (default 5 s).
    pub heartbeat: Duration,
    /// Delays between attempts after retryable failures.
    pub retry: RetryPolicy,
    /// Largest envelope accepted (default 1 MiB).
    pub max_envelope_bytes: usize,
    /// How long running tasks may take to finish on shutdown (default 30 s).
    pub shutdown_grace: Duration,
    /// How long one pull request waits for work before it is renewed
    /// (default 5 s).
    pub idle_poll: Duration,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            concurrency: 16,
            heartbeat: Duration::from_secs(5),
            retry: RetryPolicy::default(),
            max_envelope_bytes: DEFAULT_MAX_BYTES,
            shutdown_grace: Duration::from_secs(30),
            idle_poll: Duration::from_secs(5),
        }
    }
}

/// Why a worker could not start.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The bus could not be set up.
    #[error(transparent)]
    Bus(#[from] BusError),
}

/// A worker for one agent, ready to run.
pub struct Worker {
    /// Shared with every task the worker runs.
    shared: Arc<Shared>,
    /// The agent's consumers, highest priority first.
    consumers: Vec<PullConsumer>,
}

struct Shared {
    bus: Bus,
    card: AgentCard,
    dir: PathBuf,
    handler: Arc<dyn Handler>,
    config: WorkerConfig,
    /// This process's id in the registry and in claims.
    instance: String,
    claims: Claims,
    /// How long a claim's lease lasts (the consumer's ack wait).
    lease: Duration,
    /// Cancel tokens of the tasks running here.
    running: Mutex<HashMap<TaskId, CancellationToken>>,
}

impl Worker {
    /// Provisions the bus for `card`'s agent and prepares its consumers.
    pub async fn start(
        bus: Bus,
        card: AgentCard,
        dir: PathBuf,
        handler: Arc<dyn Handler>,
        mut config: WorkerConfig,
    ) -> Result<Worker, WorkerError> {
        bus.provision().await?;
        let mut settings = DeliverySettings::from(bus.config());
        if let Some(d) = &card.delivery {
            settings.ack_wait = d.ack_wait.unwrap_or(settings.ack_wait);
            settings.max_deliver = d.max_deliver.unwrap_or(settings.max_deliver);
            config.concurrency = d.concurrency.unwrap_or(config.concurrency);
        }
        let mut consumers = Vec::new();
        for priority in Priority::ALL {
            consumers.push(bus.agent_consumer(&card.name, priority, &settings).await?);
        }
        let instance = format!(
            "{}-{}",
            std::process::id(),
            &uuid::Uuid::now_v7().simple().to_string()[20..]
        );
        let claims = Claims::new(
            bus.deliveries().await?,
            card.name.clone(),
            instance.clone(),
            settings.ack_wait,
        );
        Ok(Worker {
            shared: Arc::new(Shared {
                bus,
                card,
                dir,
                handler,
                config,
                instance,
                claims,
                lease: settings.ack_wait,
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
        let background = CancellationToken::new();
        let heartbeat = tokio::spawn(heartbeat(Arc::clone(&shared), background.clone()));
        let cancels = tokio::spawn(listen_for_cancels(Arc::clone(&shared), background.clone()));
        let tracker = TaskTracker::new();
        let hard_stop = CancellationToken::new();
        let slots = Arc::new(Semaphore::new(shared.config.concurrency.max(1)));
        // One continuous pull per priority, each keeping a few messages
        // ready; a biased select takes high before normal before low.
        let prefetch = (shared.config.concurrency / 2).max(1);
        let mut pulls: [Option<Pull>; 3] = [None, None, None];
        'serve: while !shutdown.is_cancelled() {
            let permit = tokio::select! {
                p = Arc::clone(&slots).acquire_owned() => match p { Ok(p) => p, Err(_) => break },
                () = shutdown.cancelled() => break,
            };
            for (pull, consumer) in pulls.iter_mut().zip(&self.consumers) {
                if pull.is_none() {
                    *pull = open_pull(consumer, prefetch, shared.config.idle_poll).await;
                }
            }
            let missing = pulls.iter().any(Option::is_none);
            let [high, normal, low] = &mut pulls;
            let (which, next) = tokio::select! {
                biased;
                () = shutdown.cancelled() => break 'serve,
                m = next_from(high) => (0, m),
                m = next_from(normal) => (1, m),
                m = next_from(low) => (2, m),
                // A pull that could not be opened is tried again soon.
                () = retry_after(missing) => continue 'serve,
            };
            match next {
                Some(Ok(msg)) => {
                    tracker.spawn(handle(Arc::clone(&shared), msg, permit, hard_stop.clone()));
                }
                Some(Err(e)) => {
                    warn!(error = %e, "pulling work failed; retrying");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                None => pulls[which] = None,
            }
        }
        // Hand back what was pulled but not started, so other replicas can
        // take it now rather than after the ack wait.
        for pull in pulls.iter_mut().flatten() {
            while let Ok(Some(Ok(msg))) =
                tokio::time::timeout(Duration::from_millis(20), pull.next()).await
            {
                let _ = msg.ack_with(AckKind::Nak(None)).await;
            }
        }
        drop(pulls);
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
        info!(agent = %agent, "worker stopped");
    }
}

/// A continuous pull from one consumer.
type Pull = async_nats::jetstream::consumer::pull::Stream;

async fn open_pull(consumer: &PullConsumer, prefetch: usize, expires: Duration) -> Option<Pull> {
    match consumer
        .stream()
        .max_messages_per_batch(prefetch)
        .expires(expires.max(Duration::from_secs(1)))
        .messages()
        .await
    {
        Ok(pull) => Some(pull),
        Err(e) => {
            warn!(error = %e, "cannot pull from {}", consumer.cached_info().name);
            None
        }
    }
}

/// Sleeps a second when `missing`, else never ends.
async fn retry_after(missing: bool) {
    if missing {
        tokio::time::sleep(Duration::from_secs(1)).await;
    } else {
        std::future::pending::<()>().await;
    }
}

/// The next message of a pull; pends forever when there is no pull (it is
/// reopened on the next round).
async fn next_from(
    pull: &mut Option<Pull>,
) -> Option<Result<Message, async_nats::jetstream::consumer::pull::MessagesError>> {
    match pull {
        Some(p) => p.next().await,
        None => std::future::pending().await,
    }
}

async fn handle(
    shared: Arc<Shared>,
    msg: Message,
    permit: OwnedSemaphorePermit,
    hard_stop: CancellationToken,
) {
    let _permit = permit;
    let envelope = match Envelope::from_wire(&msg.payload, shared.config.max_envelope_bytes) {
        Ok(env) => env,
        Err(e) => return dead_letter(&shared, msg, e.code(), &e.to_string()).await,
    };
    if envelope.header.to != shared.card.name {
        let why = format!("addressed to `{}`, not to this agent", envelope.header.to);
        return reject(&shared, msg, &envelope, "wrong_agent", &why).await;
    }
    let action = envelope.payload.action.as_str();
    if shared.card.skill(action).is_none() {
        let why = format!("`{}` has no skill `{action}`", shared.card.name);
        return reject(&shared, msg, &envelope, "unknown_action", &why).await;
    }
    let decision = match shared
        .claims
        .acquire(
            &envelope.control.idempotency_key,
            envelope.control.attempt.get(),
        )
        .await
    {
        Ok(d) => d,
        Err(e) => {
            warn!(task_id = %envelope.header.task_id, error = %e, "claim failed; redelivering");
            let _ = msg
                .ack_with(AckKind::Nak(Some(Duration::from_secs(1))))
                .await;
            return;
        }
    };
    match decision {
        Decision::Busy(wait) => {
            let _ = msg.ack_with(AckKind::Nak(Some(wait))).await;
        }
        Decision::Republish(event) => {
            info!(task_id = %envelope.header.task_id, "already done: republishing its result");
            finish(&shared, &msg, &event, AckKind::Ack).await;
        }
        Decision::Run {
            attempt,
            resumed,
            held,
        } => {
            run_task(&shared, msg, envelope, attempt, resumed, held, hard_stop).await;
        }
    }
}

async fn run_task(
    shared: &Arc<Shared>,
    msg: Message,
    envelope: Envelope,
    attempt: u32,
    resumed: bool,
    mut held: claims::Held,
    hard_stop: CancellationToken,
) {
    let task_id = envelope.header.task_id;
    let cancel = CancellationToken::new();
    lock(&shared.running).insert(task_id, cancel.clone());
    // Reported while the handler runs; awaited before the final report, so
    // the orchestrator sees them in order.
    let working = {
        let bus = shared.bus.clone();
        let event = report(&envelope, attempt, ReportedState::Working);
        tokio::spawn(async move {
            if let Err(e) = bus.publish_event(&event).await {
                warn!(task_id = %event.task_id, error = %e, "could not report working");
            }
        })
    };
    let task = Task {
        envelope: envelope.without_token(),
        attempt,
        resumed,
        agent_dir: shared.dir.clone(),
        cancel: cancel.clone(),
    };
    let mut run = shared.handler.handle(task);
    let mut progress = tokio::time::interval((shared.lease / 3).max(Duration::from_millis(100)));
    progress.tick().await;
    let outcome = loop {
        tokio::select! {
            outcome = &mut run => break Some(outcome),
            _ = progress.tick() => {
                let _ = msg.ack_with(AckKind::Progress).await;
                if let Err(e) = shared.claims.renew(&mut held).await {
                    warn!(task_id = %task_id, error = %e, "lease renewal failed");
                }
            }
            () = hard_stop.cancelled() => break None,
        }
    };
    lock(&shared.running).remove(&task_id);
    let _ = working.await;
    let Some(outcome) = outcome else {
        cancel.cancel();
        drop(run);
        if let Err(e) = shared.claims.abandon(held).await {
            warn!(task_id = %task_id, error = %e, "could not release the claim");
        }
        let _ = msg.ack_with(AckKind::Nak(None)).await;
        return;
    };
    let max_attempts = envelope.control.max_attempts.get();
    let (state, disposition) = settle(&outcome, attempt, max_attempts, &shared.config.retry);
    let event = event_for(&envelope, attempt, state, &outcome);
    info!(task_id = %task_id, attempt, state = ?state, "task ran");
    match disposition {
        Disposition::Ack | Disposition::Term => {
            if let Err(e) = shared.claims.finish(held, &event).await {
                warn!(task_id = %task_id, error = %e, "could not record the result in the claim");
            }
            let kind = if disposition == Disposition::Ack {
                AckKind::Ack
            } else {
                AckKind::Term
            };
            finish(shared, &msg, &event, kind).await;
        }
        Disposition::Nak(delay) => {
            if let Err(e) = shared.claims.release_for_retry(held, attempt + 1).await {
                warn!(task_id = %task_id, error = %e, "could not release the claim for retry");
            }
            if let Err(e) = shared.bus.publish_event(&event).await {
                warn!(task_id = %task_id, error = %e, "could not report the failure");
            }
            let _ = msg.ack_with(AckKind::Nak(Some(delay))).await;
        }
    }
}

/// Publishes the final event, then acks; if the publish fails the delivery
/// is left to be redelivered (and the claim republishes the event then).
async fn finish(shared: &Shared, msg: &Message, event: &WorkerEvent, kind: AckKind) {
    if let Err(e) = shared.bus.publish_event(event).await {
        warn!(task_id = %event.task_id, error = %e, "could not publish the result; it will be redelivered");
        let _ = msg
            .ack_with(AckKind::Nak(Some(Duration::from_secs(1))))
            .await;
        return;
    }
    if let Err(e) = msg.double_ack_with(kind).await {
        warn!(task_id = %event.task_id, error = %e, "ack not confirmed; a redelivery will republish");
    }
}

/// Refuses a well-formed envelope this agent will not run.
async fn reject(shared: &Shared, msg: Message, envelope: &Envelope, code: &'static str, why: &str) {
    warn!(task_id = %envelope.header.task_id, code, "rejected: {why}");
    let outcome = Outcome::Rejected(ErrorInfo::new(code, why, false));
    let mut event = event_for(
        envelope,
        envelope.control.attempt.get(),
        ReportedState::Rejected,
        &outcome,
    );
    event.agent = shared.card.name.clone();
    finish(shared, &msg, &event, AckKind::Term).await;
}

/// Moves an envelope that cannot be read to the dead-letter stream, tells
/// the orchestrator when the task can be identified, and terminates it.
async fn dead_letter(shared: &Shared, msg: Message, code: &'static str, why: &str) {
    let seq = msg.info().map(|i| i.stream_sequence).unwrap_or_default();
    warn!(
        stream_seq = seq,
        code, "dead-lettering an unreadable envelope: {why}"
    );
    let fragments = rejected_from_fragments(&shared.card, &msg.payload, code, why);
    let letter = DeadLetterCopy {
        agent: shared.card.name.as_str(),
        payload: &msg.payload,
        code,
        reason: why,
        original_subject: msg.subject.as_str(),
        stream_seq: seq,
        task_id: fragments.as_ref().map(|e| e.task_id),
    };
    if shared.bus.dead_letter(letter).await.is_err() {
        // Not copied: leave it to be redelivered rather than lose it.
        let _ = msg
            .ack_with(AckKind::Nak(Some(Duration::from_secs(1))))
            .await;
        return;
    }
    if let Some(event) = fragments {
        let _ = shared.bus.publish_event(&event).await;
    }
    let _ = msg.double_ack_with(AckKind::Term).await;
}

/// A `rejected` event for a message that did not parse, when its task id
/// and correlation id can still be read from it.
fn rejected_from_fragments(
    card: &AgentCard,
    payload: &[u8],
    code: &'static str,
    why: &str,
) -> Option<WorkerEvent> {
    let value: Value = serde_json::from_slice(payload).ok()?;
    let header = value.get("header")?;
    let task_id = header.get("task_id")?.as_str()?.parse().ok()?;
    let correlation_id = header.get("correlation_id")?.as_str()?.parse().ok()?;
    Some(WorkerEvent {
        v: crate::envelope::Version,
        task_id,
        correlation_id,
        agent: card.name.clone(),
        attempt: std::num::NonZeroU32::MIN,
        state: ReportedState::Rejected,
        result: None,
        artifacts: Vec::new(),
        error: Some(ErrorInfo::new(
            code,
            format!("malformed envelope: {why}"),
            false,
        )),
        retry_after_seconds: None,
        at: Timestamp::now(),
    })
}

/// Keeps this instance's card in the live registry until `stop` fires.
async fn heartbeat(shared: Arc<Shared>, stop: CancellationToken) {
    let key = format!("{}.{}", shared.card.name, shared.instance);
    let started_at = Timestamp::now();
    let registry = match shared.bus.agents().await {
        Ok(kv) => kv,
        Err(e) => {
            warn!(error = %e, "no live registry: this worker will not be listed");
            return;
        }
    };
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
                if let Err(e) = registry.put(&key, value.to_string().into()).await {
                    warn!(error = %e, "registry heartbeat failed");
                }
            }
            () = stop.cancelled() => break,
        }
    }
    let _ = registry.delete(&key).await;
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
