//! Handlers: what runs one task. Native Rust handlers implement [`Handler`];
//! the card's `invocation` picks one for a worker started from the CLI.

use std::path::PathBuf;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::Outcome;
use super::command::CommandHandler;
use crate::agent::{AgentCard, Invocation};
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

/// Answers every task with its own params: `{"echo": params}`. For tests
/// and benchmarks.
#[derive(Debug, Clone, Copy, Default)]
pub struct EchoHandler;

impl Handler for EchoHandler {
    fn handle(&self, task: Task) -> BoxFuture<'static, Outcome> {
        let params = Value::Object(task.envelope.payload.params);
        Box::pin(async move { Outcome::completed(serde_json::json!({ "echo": params })) })
    }
}

/// The handler a card's `invocation` names ([`AgentCard::runnable`]);
/// an `llm` one takes what its card leaves out from `llm`, and the MCP
/// servers its card names from `mcp`.
pub fn handler_for(
    card: &AgentCard,
    llm: &crate::llm::LlmSettings,
    mcp: &crate::llm::mcp::McpSettings,
) -> Result<Arc<dyn Handler>, String> {
    match card.runnable().map_err(|e| e.to_string())? {
        Invocation::Command {
            command,
            timeout,
            env,
        } => Ok(Arc::new(CommandHandler::new(
            command.clone(),
            *timeout,
            CommandHandler::environment(env, std::env::vars()),
        ))),
        // `runnable` allows only the built-in handlers there are.
        Invocation::Builtin { .. } => Ok(Arc::new(EchoHandler)),
        a2a @ Invocation::A2a { .. } => Ok(Arc::new(super::remote::RemoteHandler::new(a2a)?)),
        http @ Invocation::Http { .. } => Ok(Arc::new(super::http_agent::HttpHandler::new(http)?)),
        llm_call @ Invocation::Llm { .. } => {
            let tools = super::mcp::McpTools::new(card, mcp)?;
            Ok(Arc::new(super::llm::LlmHandler::new(llm_call, llm, tools)?))
        }
        // `runnable` refuses the others.
        other => Err(format!("`{}` invocations are not run here", other.kind())),
    }
}
