//! The envelope's payload: the action, its params, the trigger's metadata
//! (system prompt, run and step, a turn or tool call it is part of), and
//! an answer to input the task asked for.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{Action, AgentName, TaskId};
use crate::codec;

/// The envelope's work part.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Payload {
    /// A skill id of the target agent.
    pub action: Action,
    /// The action's parameters: always a JSON object.
    #[serde(default)]
    pub params: Map<String, Value>,
    /// Trigger metadata the agent may use (system prompt for an LLM step).
    #[serde(default, deserialize_with = "codec::object")]
    pub meta: Meta,
    /// The answer to the input the task asked for (its last
    /// `input_required`), for the attempts after it: always a JSON object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Map<String, Value>>,
}

/// Metadata injected by the trigger that caused the task.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// The trigger this task belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_id: Option<String>,
    /// The system instruction for agents that run an LLM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// The workflow run this task is a step of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The step of that run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_id: Option<String>,
    /// For a model call of an agent that is a prompt: the conversation it
    /// is a turn of (`docs/llm.md`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<TurnOf>,
    /// For a tool call: the agents whose models called, the first caller
    /// first; the token's `act` chain names them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub callers: Vec<AgentName>,
    /// For a model's call of an MCP server's tool: the server and the
    /// tool, which the calling agent's worker runs (`docs/llm.md`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<McpCall>,
}

/// An MCP server's tool a model called (`payload.meta.mcp`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpCall {
    /// The server, as the settings' `mcp.servers` name it.
    pub server: String,
    /// The tool, as the model named it.
    pub tool: String,
}

/// Which conversation a model call belongs to (`payload.meta.turn`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnOf {
    /// The task whose conversation it is.
    pub task: TaskId,
    /// Its number, from 1.
    pub n: u32,
}
