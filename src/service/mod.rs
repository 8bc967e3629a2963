//! The orchestrator service: owns the store, publishes envelopes, applies
//! worker events, schedules retries, enforces deadlines, and resolves what
//! would otherwise be stuck. The HTTP API sits above it (`crate::server`
//! wires the two together).
//!
//! A submission is stored (flushed) before it is answered; its envelope is
//! published off the request path, and the broker's sequence is recorded
//! when the broker acknowledges it, so a restart republishes only what the
//! broker never took. Worker events come through a durable consumer, so
//! results published while the orchestrator is down are applied when it is
//! back. The store alone owns the attempt number and decides retries.

mod answer;
mod backlog;
mod caller;
mod config;
mod conversations;
mod declared;
mod deliveries;
mod error;
mod follow;
mod held_view;
mod live;
mod loops;
mod messages;
mod overview;
mod patterns;
mod quarantine;
mod reads;
mod registry;
mod request;
mod run_follow;
mod run_view;
mod runs;
mod workflows;

pub use caller::Caller;
pub use config::{
    A2aSettings, AgentSettings, DEFAULT_NATS_URL, DeliverySettings, MessageIds, ServiceConfig,
};
pub use declared::Declared;
pub use deliveries::{
    CALLBACK, Delivery, DeliveryName, GaveUp, PushAuth, PushTarget, Target as DeliveryTarget,
};
pub use error::{ErrorKind, ServiceError};
pub use follow::Follow;
pub use held_view::HeldStep;
pub use live::{Live, LiveBatch};
pub use loops::Background;
pub use loops::dead_letters::DeadLetter;
pub use overview::{AgentLine, Overview};
pub use reads::TaskFilter;
pub use registry::{AgentFilter, AgentInstances, Agents};
pub use request::TaskRequest;
pub use run_follow::RunFollow;
pub use run_view::{RunView, StepView, Waiting};
pub use runs::{Answer, RunAct, RunOptions};

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::agent::Catalog;
use crate::bus::{Bus, BusError};
use crate::claim::Claims;
use crate::envelope::{Meta, Sender, TaskId};
use crate::store::{Applied, Change, NewTask, StepLink, Store, StoreConfig, StoreError};
use crate::task::{Submitted, TaskEvent, TaskRecord, TaskState};
use crate::telemetry::context::StoredTrace;
use crate::trigger::Triggers;
use loops::{dead_letters, publisher, reaper};
use publisher::Publisher;
use reaper::Deadlines;

/// Room left in a message for its headers: the largest envelope accepted
/// is the broker's `max_payload` less this.
pub const HEADER_ROOM: usize = 1024;

/// A cheap, cloneable handle to the running orchestrator.
#[derive(Clone)]
pub struct Orchestrator {
    /// Shared by every clone (HTTP handlers, background loops).
    inner: Arc<Inner>,
}

struct Inner {
    /// Tasks, idempotency, audit: the owner of every task fact.
    store: Store,
    /// The broker.
    bus: Bus,
    /// Delivery claims, for cancel marks and liveness checks.
    claims: Claims,
    /// The agents declared, with their compiled schemas; no agents =
    /// accept any agent. Replaced whole when the agent files change.
    agents: tokio::sync::watch::Sender<Arc<Declared>>,
    /// The triggers, by id, with the files that did not load; replaced
    /// whole when the directory changes, and the schedules and event
    /// listeners follow.
    triggers: tokio::sync::watch::Sender<Arc<Triggers>>,
    /// Advances workflow runs (the loop starts with `start`).
    engine: workflows::Engine,
    /// The settings in force.
    config: ServiceConfig,
    /// The largest envelope the broker carries (from its max_payload).
    max_envelope: usize,
    /// Publishes envelopes (the loop starts with `start`).
    publisher: Publisher,
    /// Watches deadlines (the loop starts with `start`).
    deadlines: Deadlines,
    /// Signs each published attempt's token.
    minter: crate::auth::Minter,
    /// The key files generated at open, when there were none.
    generated_keys: Option<crate::auth::KeyFiles>,
    /// The loops' receiving ends, until `start` takes them.
    pending: Mutex<Option<loops::Queues>>,
    /// The Jaeger UI that trace links point at.
    jaeger_url: String,
    /// The background checks' last verdict on the bus.
    ready: crate::telemetry::readiness::Readiness,
    /// Push notifications' and callbacks' key and queue.
    outbox: deliveries::Outbox,
    /// The last count of tasks waiting for a worker (`max_backlog`).
    backlog: backlog::Backlog,
}

impl Orchestrator {
    /// Opens the store and provisions the bus. Nothing runs in the
    /// background until [`Orchestrator::start`].
    pub async fn open(
        mut config: ServiceConfig,
        bus: Bus,
        catalog: Catalog,
        triggers: Triggers,
    ) -> Result<Orchestrator, ServiceError> {
        let mut store_config = StoreConfig::in_data_dir(&config.data_dir);
        store_config.idempotency_retention = config.idempotency_retention;
        store_config.cache_bytes = config.store_cache_bytes;
        store_config.retry = config.retry;
        let declared = Declared::new(catalog).map_err(ServiceError::InvalidCard)?;
        let store = Store::open(&store_config)?;
        let (minter, generated_keys) = config
            .tokens
            .minter(&config.data_dir)
            .map_err(|e| ServiceError::Keys(e.to_string()))?;
        if let Some(files) = &generated_keys {
            tracing::info!(
                signing = %files.signing.display(),
                verify = %files.verify.display(),
                "no signing key configured: generated a new Ed25519 pair; workers verify task tokens with the `verify` one (ORCH_VERIFY_KEY)"
            );
        }
        bus.provision().await?;
        let claims = bus.claims(bus.config().ack_wait).await?;
        let max_envelope = bus.max_payload().saturating_sub(HEADER_ROOM);
        // A request larger than any envelope the broker carries is refused
        // before it is read.
        config.max_envelope_bytes = config.max_envelope_bytes.min(bus.max_payload());
        let (publisher, publish_queue) = publisher::channel();
        let (deadlines, deadline_queue) = reaper::channel();
        let (engine, engine_queue) = workflows::channel();
        let jaeger_url = config.telemetry.jaeger_url(|k| std::env::var(k).ok());
        let delivery_key = match &config.deliveries.signing_key {
            Some(path) => path.clone(),
            None => crate::auth::settings::key_dir(&config.data_dir)
                .join(crate::auth::delivery_key::DELIVERY_SIGNING_FILE),
        };
        let outbox = deliveries::Outbox::open(&delivery_key)?;
        Ok(Orchestrator {
            inner: Arc::new(Inner {
                store,
                bus,
                claims,
                agents: tokio::sync::watch::Sender::new(Arc::new(declared)),
                triggers: tokio::sync::watch::Sender::new(Arc::new(triggers)),
                engine,
                config,
                max_envelope,
                publisher,
                deadlines,
                minter,
                generated_keys,
                jaeger_url,
                ready: Default::default(),
                outbox,
                backlog: Default::default(),
                pending: Mutex::new(Some(loops::Queues {
                    publish: publish_queue,
                    deadlines: deadline_queue,
                    runs: engine_queue,
                })),
            }),
        })
    }

    /// The key files generated when the orchestrator opened with no
    /// signing key (workers need the `verify` one).
    pub fn generated_keys(&self) -> Option<&crate::auth::KeyFiles> {
        self.inner.generated_keys.as_ref()
    }

    /// The store (the service's own: no face reaches it).
    pub(in crate::service) fn store(&self) -> &Store {
        &self.inner.store
    }

    /// The bus (the service's own: no face reaches it).
    pub(in crate::service) fn bus(&self) -> &Bus {
        &self.inner.bus
    }

    /// The agents declared now (with the files' problems).
    pub fn catalog(&self) -> Arc<Declared> {
        Arc::clone(&self.inner.agents.borrow())
    }

    /// Replaces the agents (their files changed): new tasks are checked
    /// against the new cards; the triggers are read again against them.
    pub fn replace_agents(&self, catalog: Catalog) -> Result<(), ServiceError> {
        let declared = Declared::new(catalog).map_err(ServiceError::InvalidCard)?;
        self.inner.agents.send_replace(Arc::new(declared));
        Ok(())
    }

    /// The triggers as loaded now.
    pub fn triggers(&self) -> Arc<Triggers> {
        Arc::clone(&self.inner.triggers.borrow())
    }

    /// The triggers now and each time they are replaced.
    pub(crate) fn watch_triggers(&self) -> tokio::sync::watch::Receiver<Arc<Triggers>> {
        self.inner.triggers.subscribe()
    }

    /// Replaces the triggers (the directory changed): new runs use the new
    /// definitions; a running run keeps the one it started with.
    pub fn replace_triggers(&self, triggers: Triggers) {
        self.inner.triggers.send_replace(Arc::new(triggers));
    }

    /// The settings in force.
    pub fn config(&self) -> &ServiceConfig {
        &self.inner.config
    }

    /// The Jaeger UI's page of a trace.
    pub fn trace_url(&self, trace_id: &str) -> String {
        format!("{}/trace/{trace_id}", self.inner.jaeger_url)
    }

    /// Reads the gauges that live on the broker (queue depth per agent and
    /// priority, the DLQ's size) into the metrics; one that cannot be read
    /// keeps its last value, and the failure is logged.
    pub async fn refresh_gauges(&self) {
        let bus = &self.inner.bus;
        let read = tokio::time::timeout(Duration::from_secs(2), async {
            match bus.queue_depths().await {
                Ok(depths) => {
                    for d in depths {
                        crate::telemetry::metrics::set_queue_depth(
                            &d.agent,
                            &d.priority,
                            d.pending,
                        );
                    }
                }
                Err(e) => tracing::debug!(error = %e, "queue depths not read"),
            }
            match bus.dlq_size().await {
                Ok(n) => crate::telemetry::metrics::set_dlq_size(n),
                Err(e) => tracing::debug!(error = %e, "DLQ size not read"),
            }
        });
        if read.await.is_err() {
            tracing::debug!("the broker did not answer in time: gauges keep their last values");
        }
    }

    /// Whether the orchestrator can work now (`ok`), and why: the
    /// background checks' last verdict on the broker, the streams and the
    /// queue, and the store able to flush.
    pub async fn readiness(&self) -> (bool, serde_json::Value) {
        let store = self.inner.store.flush().await.is_ok();
        let (bus, mut detail) = self.inner.ready.get();
        let ok = bus && store;
        detail["store"] = store.into();
        detail["ok"] = ok.into();
        (ok, detail)
    }

    /// Stores a task and publishes it. The same idempotency key with the same
    /// request returns the existing task; with another request it is an
    /// `idempotency_conflict`.
    pub async fn submit(
        &self,
        request: TaskRequest,
        caller: &Caller,
    ) -> Result<Submitted, ServiceError> {
        self.admit().await?;
        self.submit_with(request, Meta::default(), None, None, caller)
            .await
    }

    async fn submit_with(
        &self,
        request: TaskRequest,
        meta: Meta,
        causation: Option<TaskId>,
        step: Option<StepLink>,
        caller: &Caller,
    ) -> Result<Submitted, ServiceError> {
        let mut skill_scopes = Vec::new();
        let declared = self.catalog();
        // A task for an agent that is a prompt is a conversation the
        // orchestrator holds; its turns and its MCP tool calls are tasks
        // for the agent too, their params built from the model's words.
        let turn = meta.turn.is_some() || meta.mcp.is_some();
        let mut conversation = false;
        if !declared.agents.is_empty() {
            let card = declared
                .agents
                .get(&request.to)
                .ok_or_else(|| ServiceError::UnknownAgent(request.to.clone()))?;
            let Some(skill) = card.skill(request.action.as_str()) else {
                return Err(ServiceError::UnknownAction {
                    agent: request.to.clone(),
                    action: request.action.to_string(),
                });
            };
            skill_scopes.clone_from(&skill.scopes);
            conversation = !turn && card.held().is_some();
        }
        let mut envelope = request.envelope(Sender::orchestrator());
        envelope.payload.meta = meta;
        envelope.header.causation_id = causation.map(Into::into);
        // The token grants what the action declares it needs, besides what
        // the request or trigger asked for.
        let scopes = &mut envelope.control.required_scopes;
        scopes.extend(skill_scopes);
        scopes.sort_unstable_by(|a, b| a.as_str().cmp(b.as_str()));
        scopes.dedup();
        // The token's scopes are only ever narrowed from the caller's: a
        // caller lacking one is refused before anything is stored, and
        // before the params are looked at (so it cannot probe the schema).
        caller.require(
            format_args!("`{}` on `{}`", request.action, request.to),
            envelope.control.required_scopes.iter().map(|s| s.as_str()),
        )?;
        self.check_params(&declared, &request, turn).map_err(|e| {
            // A refusal's message may quote a value.
            let secrets = self.inner.config.sensitive_fields.secrets(&request.params);
            ServiceError::BadInput(e.scrubbed(&secrets))
        })?;
        if envelope.control.response_mode == crate::envelope::ResponseMode::Callback
            && let Some(url) = &envelope.control.callback_url
        {
            self.check_target("callback_url", url).await?;
        }
        let size = envelope.encoded_len();
        if size > self.inner.max_envelope {
            return Err(ServiceError::TooLarge {
                size,
                max: self.inner.max_envelope,
            });
        }
        let fingerprint = NewTask::claims(&envelope, step.as_ref()).then(|| request.fingerprint());
        let submitted = self
            .inner
            .store
            .submit(NewTask {
                envelope,
                scope: caller.principal.clone(),
                fingerprint,
                actor: caller.principal.clone(),
                // The span this runs in (the HTTP request's, a child of
                // the caller's `traceparent`) is the parent of every
                // publish of the task.
                trace: Some(StoredTrace::of(&tracing::Span::current())),
                step,
                conversation,
            })
            .await?;
        if let Submitted::Created(record) = &submitted {
            self.inner.deadlines.watch(&record.envelope).await;
            if conversation {
                self.inner
                    .engine
                    .nudge(crate::workflow::RunId::of_conversation(record.task_id()));
            } else {
                self.inner.publisher.now(record).await;
            }
            if record.envelope.control.response_mode == crate::envelope::ResponseMode::Callback {
                self.callback_owed(record.task_id());
            }
        }
        Ok(submitted)
    }

    /// The params' checks ([`Declared::check_params`]); a turn's params
    /// are the model request the orchestrator built, so no schema.
    fn check_params(
        &self,
        declared: &Declared,
        request: &TaskRequest,
        turn: bool,
    ) -> Result<(), crate::codec::DecodeError> {
        if turn {
            return Declared::check_form(&request.params);
        }
        declared.check_params(&request.to, request.action.as_str(), &request.params)
    }

    /// Cancels a task: idempotent for a canceled task, refused for one that
    /// ended otherwise. The store records it first; then the task's claim
    /// is marked canceled (a worker that claims it later never starts it,
    /// a running holder's next renewal fails), then the cancel is broadcast
    /// to the holder. If the mark cannot be written the call fails and can
    /// be repeated. Only the task's principal, or a caller with
    /// `orch:tasks:cancel_all`, may cancel it; a task the caller may not see
    /// is not found.
    pub async fn cancel(
        &self,
        task_id: TaskId,
        caller: &Caller,
    ) -> Result<TaskRecord, ServiceError> {
        match self.inner.store.status(task_id)? {
            Some(status) if caller.may_cancel(&status) => {}
            Some(status) if caller.may_see(&status) => {
                return Err(ServiceError::Forbidden {
                    what: "canceling another principal's task".into(),
                    missing: vec![crate::access::grants::CANCEL_ALL.into()],
                });
            }
            _ => return Err(ServiceError::Store(StoreError::NotFound(task_id))),
        }
        let change = Change::new(
            TaskEvent::Cancel,
            caller.principal.as_str(),
            "cancel requested",
        );
        let record = match self.inner.store.apply(task_id, change).await? {
            Applied::Moved(r) | Applied::Unchanged(r) => r,
            Applied::Ignored { record, .. } if record.state == TaskState::Canceled => record,
            Applied::Ignored { record, .. } => {
                return Err(ServiceError::NotCancelable {
                    task_id,
                    state: record.state,
                });
            }
        };
        if !reaper::stop_attempt(&self.inner.bus, &self.inner.claims, &record).await {
            return Err(ServiceError::Bus(BusError::Publish {
                subject: self.inner.bus.names().deliveries_bucket(),
                message:
                    "the task is canceled, but its cancel mark could not be written: cancel again"
                        .into(),
            }));
        }
        self.inner
            .store
            .get(task_id)?
            .ok_or(ServiceError::Store(StoreError::NotFound(task_id)))
    }

    /// Runs a dead-lettered task again, as a new task rebuilt from the
    /// store's own record of it (same agent, action, params and meta; the
    /// old task as its cause; a derived idempotency key), never from the
    /// letter: anyone who may dead-letter can write a letter. Only a task
    /// that ended `failed` or `rejected` is replayed, from a letter on its
    /// own agent's dead-letter subject whose envelope (when readable) is
    /// addressed to that agent; a letter that disagrees is refused and
    /// audited (`dlq.replay_refused`). The old task stays as it ended
    /// (terminal states are final); the letter is removed once the new task
    /// is stored.
    pub async fn replay(
        &self,
        task_id: TaskId,
        caller: &Caller,
    ) -> Result<Submitted, ServiceError> {
        caller.require(
            "replaying a dead letter",
            [crate::access::grants::DLQ_MANAGE],
        )?;
        let letters = dead_letters::letters_of(&self.inner.bus, task_id).await?;
        if letters.is_empty() {
            return Err(ServiceError::NoDeadLetter(task_id));
        }
        let record = match self.inner.store.get(task_id)? {
            Some(record) => record,
            None => {
                let why = "no task of this orchestrator has that id".to_string();
                return Err(self.refuse_replay(task_id, &letters, &why, caller).await);
            }
        };
        if !matches!(record.status.state, TaskState::Failed | TaskState::Rejected) {
            let why = format!(
                "the task is {}; only a task that failed or was rejected is replayed",
                record.status.state
            );
            return Err(self.refuse_replay(task_id, &letters, &why, caller).await);
        }
        let (agreeing, disagreeing): (Vec<_>, Vec<_>) = letters
            .into_iter()
            .partition(|l| l.disagrees_with(&record).is_none());
        for letter in &disagreeing {
            let why = letter.disagrees_with(&record).unwrap_or_default();
            self.inner
                .store
                .audit(dead_letters::refused_entry(
                    task_id,
                    letter,
                    &why,
                    &caller.principal,
                ))
                .await?;
        }
        let Some(letter) = agreeing.first() else {
            let why = disagreeing
                .first()
                .and_then(|l| l.disagrees_with(&record))
                .unwrap_or_default();
            return Err(ServiceError::ReplayRefused {
                task_id,
                reason: why,
            });
        };
        let old = &record.envelope;
        let key = format!("{}:replay:{}", old.control.idempotency_key, letter.seq);
        let request = TaskRequest {
            to: old.header.to.clone(),
            action: old.payload.action.clone(),
            params: old.payload.params.clone(),
            idempotency_key: key.parse().ok(),
            priority: Some(old.control.priority),
            response_mode: Some(old.control.response_mode),
            required_scopes: old.control.required_scopes.clone(),
            callback_url: old.control.callback_url.clone(),
            deadline: None,
            max_attempts: Some(old.control.max_attempts),
            correlation_id: Some(old.header.correlation_id.clone()),
        };
        let submitted = self
            .submit_with(
                request,
                old.payload.meta.clone(),
                Some(task_id),
                None,
                caller,
            )
            .await?;
        let new_id = submitted.record().task_id();
        self.inner
            .store
            .audit(dead_letters::replay_entry(
                task_id,
                new_id,
                letter.seq,
                &caller.principal,
            ))
            .await?;
        dead_letters::remove(&self.inner.bus, letter.seq).await?;
        Ok(submitted)
    }

    /// Audits every letter of `task_id` as refused for `why`; the error.
    async fn refuse_replay(
        &self,
        task_id: TaskId,
        letters: &[DeadLetter],
        why: &str,
        caller: &Caller,
    ) -> ServiceError {
        for letter in letters {
            let entry = dead_letters::refused_entry(task_id, letter, why, &caller.principal);
            if let Err(e) = self.inner.store.audit(entry).await {
                return e.into();
            }
        }
        ServiceError::ReplayRefused {
            task_id,
            reason: why.to_string(),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
