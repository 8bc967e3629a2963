//! What a worker runs with, and why it may not start.

use std::sync::Arc;
use std::time::Duration;

use crate::bus::BusError;
use crate::codec::DEFAULT_MAX_BYTES;
use crate::telemetry::readiness::Readiness;

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
