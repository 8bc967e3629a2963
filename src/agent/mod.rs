//! Agents, whatever format they are written in, read into one model (the
//! [`AgentCard`]) that the router, the capability checks, the task tokens,
//! the A2A card and the listings use; and how a worker invokes them.
//!
//! - `card`: the model, and `agent.json`'s form of it.
//! - `skill`, `invocation`, `prompt`: its skills, how a worker runs
//!   it, and (for agents that are prompts for a model) its instruction.
//! - `catalog`: reading files and directories that mix the formats:
//!   `agent.json` (`json`), `registry.json` (`registry`, with agents
//!   in git via `git`), PromptPacks (`pack`), Markdown and YAML
//!   AgentCards (`fast_agent`); cards' workflows (`workflow`); the
//!   topology (`topology`).

mod card;
mod catalog;
mod error;
mod fast_agent;
mod git;
mod invocation;
mod json;
pub mod kind;
mod pack;
mod prompt;
mod registry;
mod skill;
mod topology;
mod workflow;

pub use card::{AgentCard, Context, Dependencies, Format, McpDependency, Origin, Provider};
pub use catalog::{Catalog, is_agent_file};
pub use error::AgentError;
pub use git::{GitMode, GitOptions};
pub use invocation::{BUILTIN_HANDLERS, Delivery, Forward, Invocation, RemoteAuth};
pub use prompt::{HistoryMessage, Prompt, tool_allowed};
pub use registry::Routing;
pub use skill::Skill;
pub use topology::{Edge, mermaid};
pub use workflow::{CardWorkflow, Pattern};

use catalog::{Loaded, agent_id, joined, load_path};
