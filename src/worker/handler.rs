//! A handler: what runs one task, as the pipeline sees it. Native Rust
//! handlers implement [`Handler`]; for a worker started from the CLI the
//! card's `invocation` picks one of the kinds in `handlers`.

use std::path::PathBuf;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::Outcome;
use crate::envelope::Envelope;

/// One task as a handler sees it.
#[derive(Debug, Clone)]
pub struct Task {
    /// The envelope, without its token.
    pub envelope: Envelope,
    /// The task's token (checked), for a handler that hands it on to the
    /// agent's own service as its credential (`http`); shown redacted.
    pub token: Option<crate::envelope::BearerToken>,
    /// Which attempt this is.
    pub attempt: u32,
    /// An earlier run of this attempt lost its lease (its worker died or
    /// stalled): it may have partly happened. Reconcile side effects with the
    /// idempotency key before repeating them.
    pub resumed: bool,
    /// The agent's directory (where its card is).
    pub agent_dir: PathBuf,
    /// Fires when the task is canceled; long handlers should watch it.
    pub cancel: CancellationToken,
    /// The handler's span as W3C trace context (`TRACEPARENT`, and
    /// `TRACESTATE` when there is one), for work that starts its own spans:
    /// a command gets them in its environment. Empty when not traced.
    pub trace: Vec<(&'static str, String)>,
    /// Where the handler reports progress, any number of times: status
    /// messages and artifact chunks, shown to REST readers and A2A streams
    /// in order.
    pub progress: super::Reporter,
    /// A note the handler may leave on the task, kept by the broker: found
    /// again by a later run of the task (after its worker died, or at its
    /// next attempt).
    pub notes: super::Notes,
}

/// Runs tasks for an agent.
pub trait Handler: Send + Sync + 'static {
    /// Runs one task to its outcome.
    fn handle(&self, task: Task) -> BoxFuture<'static, Outcome>;

    /// The credentials this handler holds (an API key, a remote's
    /// password): the worker scrubs them from every error and status
    /// message it reports, as a service may quote them in its own.
    fn credentials(&self) -> crate::redact::Secrets {
        crate::redact::Secrets::default()
    }
}
