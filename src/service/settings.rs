//! The service's settings: every field optional in the file
//! (`--config FILE`, JSON), each with the default docs/operations.md
//! prints, read strictly (with the faces' part, by `server::Settings`).

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::bus::BusSettings;
use crate::store::StoreSettings;
use crate::task::RetryPolicy;

/// The service's part of the settings file (`--config FILE`, JSON; every
/// field optional). The file's other members are the faces'
/// (`http::HttpSettings`): `server::Settings` reads both and refuses a
/// member neither knows, so this part has no `deny_unknown_fields`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ServiceSettings {
    /// Where the store (and a managed broker's data) live.
    pub data_dir: PathBuf,
    /// The broker: one NATS URL, or several (a cluster's nodes) as a list
    /// or comma-separated; `None`: `nats://127.0.0.1:4222`.
    pub nats_url: Option<crate::bus::Servers>,
    /// Bus layout and delivery settings.
    pub bus: BusSettings,
    /// Largest request or envelope accepted, in bytes.
    pub max_envelope_bytes: usize,
    /// How long an idempotency key stays claimed.
    #[serde(with = "humantime_serde")]
    pub idempotency_retention: Duration,
    /// How often envelopes for unknown agents are moved to the DLQ.
    #[serde(with = "humantime_serde")]
    pub orphan_sweep: Duration,
    /// The store's page cache, in bytes.
    pub store_cache_bytes: u64,
    /// Delays between attempts after retryable failures.
    pub retry: RetryPolicy,
    /// How often live tasks are checked for lost attempts.
    #[serde(with = "humantime_serde")]
    pub reap_interval: Duration,
    /// How long a live task may stay unchanged before it is checked.
    #[serde(with = "humantime_serde")]
    pub stall_after: Duration,
    /// Readiness (`/readyz`, `orch_ready`) turns false when task messages
    /// wait for delivery and nothing has moved for this long (`0s`: never);
    /// set it above the longest time a full set of workers may spend on
    /// tasks without finishing one.
    #[serde(with = "humantime_serde")]
    pub ready_stall_after: Duration,
    /// Tasks waiting for a worker (`submitted`) past which a new task or
    /// run from a caller is refused (429 with `Retry-After`), so an
    /// overload is shed instead of queued without bound.
    pub max_backlog: usize,
    /// Envelopes published but not yet acknowledged by the broker, at most.
    pub publish_in_flight: usize,
    /// Task tokens: keys, issuer, lifetime, checking.
    pub tokens: crate::task_token::TokenSettings,
    /// Param field names whose values are secrets: they are scrubbed from
    /// error messages, the audit trail and logs.
    pub sensitive_fields: crate::redact::SensitiveFields,
    /// Variables of a worker's environment whose values are credentials
    /// (besides the model's API key, a remote agent's credential and the
    /// MCP servers' `${NAME}` values, which each handler knows): a worker
    /// scrubs them from every error and status message it reports.
    pub secret_env: Vec<String>,
    /// Who may call the HTTP API: API keys, a JWT issuer, or `mode: none`.
    pub api_auth: crate::access::ApiAuthSettings,
    /// Traces, metrics and the Jaeger link (see docs/observability.md).
    pub telemetry: crate::telemetry::TelemetrySettings,
    /// Push notifications and callbacks (docs/a2a.md, "Push
    /// notifications").
    pub deliveries: PushSettings,
    /// Reading the agent files (docs/agents.md).
    pub agents: AgentSettings,
    /// Several orchestrators sharing the store's log (docs/store.md).
    pub replication: crate::replication::ReplicationSettings,
    /// Model calls: where workers send them, and the orchestrator's
    /// bounds on a conversation (docs/llm.md).
    pub llm: crate::llm::LlmSettings,
    /// The MCP servers a worker may start for its agent's model
    /// (docs/llm.md, "MCP tools").
    pub mcp: crate::llm::mcp::McpSettings,
}

/// How agent files are read (`agents` in the file; every field
/// optional).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentSettings {
    /// Where a registry's git agents without a `localPath` are cloned
    /// (`<dir>/<agent>`); default `<data_dir>/agents-git`.
    pub git_dir: Option<PathBuf>,
    /// How long one git command (a clone, a fetch) may take.
    #[serde(with = "humantime_serde")]
    pub git_timeout: Duration,
}

impl Default for AgentSettings {
    fn default() -> Self {
        AgentSettings {
            git_dir: None,
            git_timeout: Duration::from_secs(120),
        }
    }
}

impl ServiceSettings {
    /// How agent files are read by `orchestrator run`: git agents cloned
    /// when missing, or (`reload`) fetched again.
    pub fn git_options(&self, reload: bool) -> crate::agent::GitOptions {
        crate::agent::GitOptions {
            mode: if reload {
                crate::agent::GitMode::Fetch
            } else {
                crate::agent::GitMode::Clone
            },
            dir: self
                .agents
                .git_dir
                .clone()
                .unwrap_or_else(|| self.data_dir.join("agents-git")),
            timeout: self.agents.git_timeout,
        }
    }
}

/// How push notifications and callbacks are sent (`deliveries` in the
/// file; every field optional).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PushSettings {
    /// The kinds of address a target may be besides public ones:
    /// `loopback`, `private`, `link_local` (default none).
    pub allow_addresses: Vec<crate::target::Reach>,
    /// How long one attempt may take, response included.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Attempts at one event before it is given up on.
    pub max_attempts: u32,
    /// The delay after the first failure; it doubles per failure.
    #[serde(with = "humantime_serde")]
    pub backoff_first: Duration,
    /// The longest delay between attempts.
    #[serde(with = "humantime_serde")]
    pub backoff_max: Duration,
    /// Requests in flight at once, over every target.
    pub max_in_flight: usize,
    /// The Ed25519 key deliveries are signed with (PKCS#8 PEM); default
    /// `<data_dir>/keys/delivery-signing.pem`, made when missing.
    pub signing_key: Option<PathBuf>,
}

impl Default for PushSettings {
    fn default() -> Self {
        PushSettings {
            allow_addresses: Vec::new(),
            timeout: Duration::from_secs(10),
            max_attempts: 20,
            backoff_first: Duration::from_secs(1),
            backoff_max: Duration::from_secs(600),
            max_in_flight: 64,
            signing_key: None,
        }
    }
}

impl ServiceSettings {
    /// How the store of this data directory is opened.
    pub fn store_settings(&self) -> crate::store::StoreSettings {
        let mut store = crate::store::StoreSettings::in_data_dir(&self.data_dir);
        store.idempotency_retention = self.idempotency_retention;
        store.cache_bytes = self.store_cache_bytes;
        store.retry = self.retry;
        store
    }
}

impl Default for ServiceSettings {
    fn default() -> Self {
        ServiceSettings {
            data_dir: PathBuf::from("data"),
            nats_url: None,
            bus: BusSettings::default(),
            max_envelope_bytes: crate::codec::DEFAULT_MAX_BYTES,
            idempotency_retention: Duration::from_secs(24 * 3600),
            orphan_sweep: Duration::from_secs(10),
            store_cache_bytes: StoreSettings::new("").cache_bytes,
            retry: RetryPolicy::default(),
            reap_interval: Duration::from_secs(10),
            stall_after: Duration::from_secs(60),
            ready_stall_after: Duration::from_secs(300),
            max_backlog: 100_000,
            publish_in_flight: 1024,
            tokens: crate::task_token::TokenSettings::default(),
            sensitive_fields: crate::redact::SensitiveFields::default(),
            secret_env: Vec::new(),
            api_auth: crate::access::ApiAuthSettings::default(),
            telemetry: crate::telemetry::TelemetrySettings::default(),
            deliveries: PushSettings::default(),
            agents: AgentSettings::default(),
            replication: crate::replication::ReplicationSettings::default(),
            llm: crate::llm::LlmSettings::default(),
            mcp: crate::llm::mcp::McpSettings::default(),
        }
    }
}

impl crate::codec::Validate for ServiceSettings {
    fn validate(&self) -> Result<(), crate::codec::DecodeError> {
        let positive = [
            ("max_envelope_bytes", self.max_envelope_bytes),
            ("publish_in_flight", self.publish_in_flight),
            ("max_backlog", self.max_backlog),
            ("deliveries.max_in_flight", self.deliveries.max_in_flight),
            ("llm.max_turns", self.llm.max_turns as usize),
            (
                "deliveries.max_attempts",
                self.deliveries.max_attempts as usize,
            ),
        ];
        if let Some((field, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(crate::codec::DecodeError::invalid(
                *field,
                "must be positive",
            ));
        }
        self.bus.check()?;
        self.replication.check()?;
        crate::codec::Validate::validate(&self.mcp)?;
        let timeouts = [
            ("deliveries.timeout", self.deliveries.timeout),
            ("deliveries.backoff_first", self.deliveries.backoff_first),
        ];
        if let Some((field, _)) = timeouts.iter().find(|(_, t)| t.is_zero()) {
            return Err(crate::codec::DecodeError::invalid(
                *field,
                "must be positive",
            ));
        }
        Ok(())
    }
}

/// The default broker URL.
pub const DEFAULT_NATS_URL: &str = "nats://127.0.0.1:4222";
