//! The `llm` section of the settings file: where a worker sends model
//! calls when the card does not say, and the orchestrator's bounds on one
//! conversation.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Model calls (`llm` in the settings file; every field optional).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LlmSettings {
    /// The Chat Completions endpoint's base URL, for agents whose card
    /// names none (`/chat/completions` is added).
    pub base_url: String,
    /// The variable of the worker's environment holding the API key, for
    /// agents whose card names none; unset: requests carry no key (a
    /// local server).
    pub api_key_env: String,
    /// The model, for agents whose card names none.
    pub model: Option<String>,
    /// How long one model call may take, for agents whose card says not.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Whether answers are streamed (each delta reported as progress).
    pub stream: bool,
    /// Model calls one conversation may make; one more fails its task
    /// (`turn_limit`).
    pub max_turns: u32,
    /// How deep conversations may call agents that hold conversations of
    /// their own: a tool call deeper than this is refused.
    pub max_depth: u32,
    /// Tokens (input and output) one conversation may spend; past it, its
    /// task fails (`token_budget`) instead of calling the model again.
    pub token_budget: Option<u64>,
}

impl Default for LlmSettings {
    fn default() -> Self {
        LlmSettings {
            base_url: "https://api.openai.com/v1".into(),
            api_key_env: "OPENAI_API_KEY".into(),
            model: None,
            timeout: Duration::from_secs(120),
            stream: true,
            max_turns: 10,
            max_depth: 3,
            token_budget: None,
        }
    }
}
