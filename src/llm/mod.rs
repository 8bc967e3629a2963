//! Agents that are prompts for a model (`docs/llm.md`). The orchestrator
//! holds each conversation: every model call is a *turn*, a task to the
//! agent's worker carrying the whole Chat Completions request; every tool
//! call the model makes is a task to the agent it names. So a conversation
//! is made of stored tasks: a crash repeats no model call that returned
//! and no tool call that ran, and a caller waiting for its tools holds no
//! worker slot.
//!
//! - [`model_request`]: the first request of a conversation (system prompt,
//!   history, the user message, the tools) and the names of tools.
//! - [`patterns`]: the AgentCard types that need a model, and the
//!   planners of those that are not one conversation.
//! - [`conversation`]: what a conversation does next, from its stored turns and
//!   calls.
//! - [`mcp`]: MCP servers' tools: the `mcp` settings, names, filters.
//! - [`settings`]: the `llm` settings.
//! - `turn`: a turn's result (the model's message, its tool calls, the
//!   usage) and the totals over a conversation.

pub mod conversation;
mod error;
pub mod mcp;
pub mod model_request;
pub mod patterns;
pub mod settings;
mod turn;

pub use error::LlmError;
pub use settings::LlmSettings;
pub use turn::{AssistantMessage, FunctionCall, ToolCall, Totals, TurnResult, Usage};
