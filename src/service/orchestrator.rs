//! The orchestrator: what it holds, opening it, and what the faces read
//! of it directly.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::loops::{self, publisher, reaper};
use super::{Declared, ServiceError, ServiceSettings, backlog, engine, push};
use crate::agent::Catalog;
use crate::bus::Bus;
use crate::claim::Claims;
use crate::store::Store;
use crate::trigger::Triggers;
use publisher::Publisher;
use reaper::Deadlines;

/// Room left in a message for its headers: the largest envelope accepted
/// is the broker's `max_payload` less this.
pub const HEADER_ROOM: usize = 1024;

/// A cheap, cloneable handle to the running orchestrator.
#[derive(Clone)]
pub struct Orchestrator {
    /// Shared by every clone (HTTP handlers, background loops).
    pub(in crate::service) inner: Arc<Inner>,
}

pub(in crate::service) struct Inner {
    /// Tasks, idempotency, audit: the owner of every task fact.
    pub(in crate::service) store: Store,
    /// The broker.
    pub(in crate::service) bus: Bus,
    /// Delivery claims, for cancel marks and liveness checks.
    pub(in crate::service) claims: Claims,
    /// The agents declared, with their compiled schemas; no agents =
    /// accept any agent. Replaced whole when the agent files change.
    pub(in crate::service) agents: tokio::sync::watch::Sender<Arc<Declared>>,
    /// The triggers, by id, with the files that did not load; replaced
    /// whole when the directory changes, and the schedules and event
    /// listeners follow.
    pub(in crate::service) triggers: tokio::sync::watch::Sender<Arc<Triggers>>,
    /// Advances workflow runs (the loop starts with `start`).
    pub(in crate::service) engine: engine::Engine,
    /// The settings in force.
    pub(in crate::service) config: ServiceSettings,
    /// The largest envelope the broker carries (from its max_payload).
    pub(in crate::service) max_envelope: usize,
    /// Publishes envelopes (the loop starts with `start`).
    pub(in crate::service) publisher: Publisher,
    /// Watches deadlines (the loop starts with `start`).
    pub(in crate::service) deadlines: Deadlines,
    /// Signs each published attempt's token.
    pub(in crate::service) minter: crate::task_token::Minter,
    /// The key files generated at open, when there were none.
    pub(in crate::service) generated_keys: Option<crate::task_token::KeyFiles>,
    /// The loops' receiving ends, until `start` takes them.
    pub(in crate::service) pending: Mutex<Option<loops::Queues>>,
    /// The Jaeger UI that trace links point at.
    pub(in crate::service) jaeger_url: String,
    /// The background checks' last verdict on the bus.
    pub(in crate::service) ready: crate::telemetry::readiness::Readiness,
    /// Push notifications' and callbacks' key and queue.
    pub(in crate::service) outbox: push::Outbox,
    /// The last count of tasks waiting for a worker (`max_backlog`).
    pub(in crate::service) backlog: backlog::Backlog,
}

impl Orchestrator {
    /// Opens the store and provisions the bus. Nothing runs in the
    /// background until [`Orchestrator::start`].
    pub async fn open(
        config: ServiceSettings,
        bus: Bus,
        catalog: Catalog,
        triggers: Triggers,
    ) -> Result<Orchestrator, ServiceError> {
        Orchestrator::open_logged(config, bus, catalog, triggers, None).await
    }

    /// [`Orchestrator::open`] for the leader of a replicated store: every
    /// commit goes to `commits` (the log's appender) and is reported only
    /// once the log holds it.
    pub async fn open_logged(
        config: ServiceSettings,
        bus: Bus,
        catalog: Catalog,
        triggers: Triggers,
        commits: Option<crate::store::CommitSink>,
    ) -> Result<Orchestrator, ServiceError> {
        let mut store_config = config.store_settings();
        store_config.commits = commits;
        let declared = Declared::new(catalog)?;
        let store = Store::open(&store_config)?;
        bus.provision().await?;
        Orchestrator::around(config, bus, declared, triggers, store).await
    }

    /// A standby's orchestrator over its copy of the store, `store` (which
    /// its follower keeps applying the leader's commits to): it serves
    /// reads; every write is refused (`not_leader`), and nothing runs in
    /// the background.
    pub(crate) async fn replica(
        config: ServiceSettings,
        bus: Bus,
        catalog: Catalog,
        triggers: Triggers,
        store: &Store,
    ) -> Result<Orchestrator, ServiceError> {
        let declared = Declared::new(catalog)?;
        Orchestrator::around(config, bus, declared, triggers, store.read_only()).await
    }

    /// The orchestrator around an open store, on a provisioned bus.
    async fn around(
        mut config: ServiceSettings,
        bus: Bus,
        declared: Declared,
        triggers: Triggers,
        store: Store,
    ) -> Result<Orchestrator, ServiceError> {
        let (minter, generated_keys) = config.tokens.minter(&config.data_dir)?;
        if let Some(files) = &generated_keys {
            tracing::info!(
                signing = %files.signing.display(),
                verify = %files.verify.display(),
                "no signing key configured: generated a new Ed25519 pair; workers verify task tokens with the `verify` one (ORCH_VERIFY_KEY)"
            );
        }
        let claims = bus.claims(bus.settings().ack_wait).await?;
        let max_envelope = bus.max_payload().saturating_sub(HEADER_ROOM);
        // A request larger than any envelope the broker carries is refused
        // before it is read.
        config.max_envelope_bytes = config.max_envelope_bytes.min(bus.max_payload());
        let (publisher, publish_queue) = publisher::channel();
        let (deadlines, deadline_queue) = reaper::channel();
        let (engine, engine_queue) = engine::channel();
        let jaeger_url = config.telemetry.jaeger_url(|k| std::env::var(k).ok());
        let push_key = match &config.deliveries.signing_key {
            Some(path) => path.clone(),
            None => crate::task_token::settings::key_dir(&config.data_dir)
                .join(crate::task_token::push_key::DELIVERY_SIGNING_FILE),
        };
        let outbox = push::Outbox::open(&push_key)?;
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
    pub fn generated_keys(&self) -> Option<&crate::task_token::KeyFiles> {
        self.inner.generated_keys.as_ref()
    }

    /// The last position of the store's log its store applied (0 when it
    /// is not on a log).
    pub fn store_position(&self) -> Result<u64, ServiceError> {
        Ok(self.inner.store.log_position()?)
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
        let declared = Declared::new(catalog)?;
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
    pub fn settings(&self) -> &ServiceSettings {
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
        let r = &self.inner.config.replication;
        if r.enabled {
            detail["role"] = "leader".into();
            detail["leader"] = serde_json::json!({"name": r.name, "url": r.advertise_url});
        }
        (ok, detail)
    }
}

pub(in crate::service) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
