//! A turn's result as a worker reports it: the model's message (its text
//! and tool calls), the model, its token usage and latency; and the
//! totals over a conversation's turns.

use serde::{Deserialize, Serialize};

/// A model's message, as Chat Completions writes it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AssistantMessage {
    /// Its text.
    #[serde(default)]
    pub content: Option<String>,
    /// The tools it calls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
}

/// One tool call of a model's message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call's id, which its result names.
    pub id: String,
    /// Always `function`.
    #[serde(rename = "type", default = "function")]
    pub kind: String,
    /// The function and its arguments.
    pub function: FunctionCall,
}

fn function() -> String {
    "function".into()
}

/// The function a tool call names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    /// The tool's name.
    pub name: String,
    /// Its arguments: JSON text.
    #[serde(default)]
    pub arguments: String,
}

/// What one model call cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Input tokens.
    #[serde(default)]
    pub prompt_tokens: u64,
    /// Output tokens.
    #[serde(default)]
    pub completion_tokens: u64,
    /// Their sum.
    #[serde(default)]
    pub total_tokens: u64,
}

impl Usage {
    /// Both counts together.
    pub fn total(&self) -> u64 {
        self.total_tokens
            .max(self.prompt_tokens + self.completion_tokens)
    }
}

/// What a worker answers a turn with: the result of the turn's task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnResult {
    /// The model's message.
    pub message: AssistantMessage,
    /// The model that answered, as the endpoint names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// What the call cost, when the endpoint said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// How long the call took, in milliseconds.
    #[serde(default)]
    pub latency_ms: u64,
    /// Why the model stopped (`stop`, `tool_calls`, `length`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
}

/// What the model calls of a conversation cost, those of the
/// conversations its tool calls held included.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    /// Model calls that answered.
    pub model_calls: u64,
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
}

impl Totals {
    /// Adds `other`.
    pub fn add(&mut self, other: Totals) {
        self.model_calls += other.model_calls;
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
    }
}
