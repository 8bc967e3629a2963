//! The kinds of handler a card's `invocation` names, each in its own
//! file: `command` (a process per task, with its progress channel in
//! `command_progress`), `a2a` (a remote A2A agent), `http` (an HTTP
//! endpoint), `llm` (one model call per turn, with the MCP servers of
//! `mcp`), and the built-in `echo`. What the handlers that call a service
//! over HTTP share is `upstream`. The pipeline that takes, claims, runs
//! and settles a task is the rest of `worker`; it knows a handler only as
//! a [`Handler`].

mod a2a;
mod command;
mod command_progress;
mod echo;
mod error;
mod http;
mod llm;
mod mcp;
mod upstream;

pub use a2a::RemoteHandler;
pub use command::{CommandHandler, EXIT_RETRY};
pub use command_progress::PROGRESS_FD;
pub use echo::EchoHandler;
pub use error::HandlerError;

use std::sync::Arc;

use crate::agent::{AgentCard, Invocation};
use crate::worker::Handler;

/// The handler a card's `invocation` names ([`AgentCard::runnable`]);
/// an `llm` one takes what its card leaves out from `llm`, and the MCP
/// servers its card names from `mcp`.
pub fn handler_for(
    card: &AgentCard,
    llm: &crate::llm::LlmSettings,
    mcp: &crate::llm::mcp::McpSettings,
) -> Result<Arc<dyn Handler>, HandlerError> {
    match card.runnable()? {
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
        a2a @ Invocation::A2a { .. } => Ok(Arc::new(a2a::RemoteHandler::new(a2a)?)),
        http @ Invocation::Http { .. } => Ok(Arc::new(http::HttpHandler::new(http)?)),
        llm_call @ Invocation::Llm { .. } => {
            let tools = mcp::McpTools::new(card, mcp)?;
            Ok(Arc::new(llm::LlmHandler::new(llm_call, llm, tools)?))
        }
        // `runnable` refuses the others.
        other => Err(HandlerError::NotRunHere(other.kind().to_string())),
    }
}
