//! How a worker runs one task of an agent (`invocation`), and the
//! agent's own delivery settings (`delivery`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::codec::DecodeError;

/// How a worker runs one task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Invocation {
    /// A subprocess per task: the envelope (without its token) on stdin, the
    /// result JSON on stdout; exit 0 = completed, 75 = retryable failure,
    /// other = failed with the last stderr line as the message.
    Command {
        /// Program and arguments, run in the agent's directory.
        command: Vec<String>,
        /// Killed (and failed, retryably) after this long.
        #[serde(default = "default_timeout", with = "humantime_serde")]
        timeout: Duration,
        /// Variables of the worker's environment the process may see,
        /// besides the few every process gets (`PATH`, `LANG`, ...): the
        /// rest of the worker's environment (its keys, credentials) is not
        /// passed.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        env: Vec<String>,
    },
    /// A handler built into this binary (`echo`).
    Builtin {
        /// The handler's name.
        handler: String,
    },
    /// A remote A2A agent (JSON-RPC, A2A 1.0): each task is sent to it as
    /// a message and followed until it ends (`docs/a2a.md`, "A2A agents as
    /// workers").
    A2a {
        /// The remote agent's card (`https://host/.well-known/agent-card.json`).
        card: String,
        /// Credentials for the remote, read from the worker's environment:
        /// the orchestrator's own never leave.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        auth: Option<RemoteAuth>,
        /// What of the envelope the remote gets besides the params:
        /// `system_prompt` (as the message's `metadata.systemPrompt`),
        /// `context` (our correlation id as its `contextId`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        forward: Vec<Forward>,
        /// How often the remote task is read while it runs.
        #[serde(default = "default_poll", with = "humantime_serde")]
        poll: Duration,
        /// How long one request to the remote may take.
        #[serde(default = "default_timeout", with = "humantime_serde")]
        timeout: Duration,
    },
    /// The conventions' Claude CLI subprocess: read (its system prompt
    /// becomes the agent's instruction) but not run by this binary.
    #[serde(rename = "claude-subprocess", rename_all = "camelCase")]
    ClaudeSubprocess {
        /// The system prompt's file, relative to the agent's directory.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        system_prompt: Option<String>,
        /// The MCP configuration's file (`.mcp.json`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mcp_config: Option<String>,
        /// The knowledge directory.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        knowledge_path: Option<String>,
    },
    /// The agent's own HTTP service (the push-delegate pattern): each
    /// task's envelope is POSTed to it with the task's token as the
    /// bearer credential (`docs/agents.md`, "The http invocation").
    Http {
        /// The endpoint.
        url: String,
        /// How long one request may take.
        #[serde(default = "default_timeout", with = "humantime_serde")]
        timeout: Duration,
        /// How often a job it accepted (202) is read.
        #[serde(default = "default_poll", with = "humantime_serde")]
        poll: Duration,
    },
    /// A prompt for an OpenAI-compatible Chat Completions endpoint
    /// (`docs/llm.md`): the orchestrator holds the conversation and sends
    /// each model call to the agent's worker as a turn; the worker sends it
    /// to the endpoint with its key. Where a field is left out, the
    /// worker's settings (`llm`) apply.
    #[serde(rename_all = "camelCase")]
    Llm {
        /// The agent's instruction: a file, relative to the agent's
        /// directory.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        system_prompt: Option<String>,
        /// The model, as the endpoint names it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        /// The endpoint's base URL (`/chat/completions` is added).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        base_url: Option<String>,
        /// The variable of the worker's environment holding the API key.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        api_key_env: Option<String>,
        /// How long one model call may take.
        #[serde(
            default,
            with = "humantime_serde",
            skip_serializing_if = "Option::is_none"
        )]
        timeout: Option<Duration>,
        /// Parameters of each request (`temperature`, `max_tokens`, ...).
        #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
        params: serde_json::Map<String, serde_json::Value>,
    },
    /// A gRPC endpoint (the conventions list it as future): read, not run.
    Grpc {
        /// The endpoint.
        url: String,
    },
}

/// How a worker authenticates to a remote A2A agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteAuth {
    /// The variable of the worker's environment holding the credential.
    pub env: String,
    /// The header it goes in (default `Authorization`).
    #[serde(default = "default_auth_header")]
    pub header: String,
    /// The scheme before it (default `Bearer`; empty: none, as for an API
    /// key header).
    #[serde(default = "default_auth_scheme")]
    pub scheme: String,
}

/// What of a task's envelope a remote A2A agent is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Forward {
    /// The trigger's system prompt, as `metadata.systemPrompt`.
    SystemPrompt,
    /// The correlation id, as the message's `contextId`.
    Context,
}

fn default_timeout() -> Duration {
    Duration::from_secs(30)
}

fn default_poll() -> Duration {
    Duration::from_secs(1)
}

fn default_auth_header() -> String {
    "Authorization".into()
}

fn default_auth_scheme() -> String {
    "Bearer".into()
}

/// Per-agent delivery settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Delivery {
    /// How long a delivery may go without an ack or progress.
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub ack_wait: Option<Duration>,
    /// Deliveries before a message is dead-lettered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_deliver: Option<i64>,
    /// Redelivery delays after missed acks (`["1s", "5s"]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<Vec<humantime_serde::Serde<Duration>>>,
    /// Tasks one worker runs at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<usize>,
}

/// The handlers built into this binary that `invocation.type: builtin`
/// may name.
pub const BUILTIN_HANDLERS: [&str; 1] = ["echo"];

impl Invocation {
    /// Whether `orchestrator worker` can run it, and why not when it
    /// cannot (naming the field to blame).
    pub fn runnable(&self) -> Result<(), DecodeError> {
        match self {
            Invocation::Command { command, .. } if command.is_empty() => Err(DecodeError::invalid(
                "invocation.command",
                "must name a program",
            )),
            Invocation::Builtin { handler } if !BUILTIN_HANDLERS.contains(&handler.as_str()) => {
                Err(DecodeError::invalid(
                    "invocation.handler",
                    format!(
                        "`{handler}` is not a built-in handler (known: {})",
                        BUILTIN_HANDLERS.join(", ")
                    ),
                ))
            }
            Invocation::A2a { card, .. }
                if !(card.starts_with("http://") || card.starts_with("https://")) =>
            {
                Err(DecodeError::invalid(
                    "invocation.card",
                    format!("`{card}` is not an http(s) URL of the remote agent's card"),
                ))
            }
            Invocation::Http { url, .. }
                if !reqwest::Url::parse(url)
                    .is_ok_and(|u| matches!(u.scheme(), "http" | "https")) =>
            {
                Err(DecodeError::invalid(
                    "invocation.url",
                    format!("`{url}` is not an http(s) URL of the agent's service"),
                ))
            }
            Invocation::ClaudeSubprocess { .. } | Invocation::Grpc { .. } => {
                Err(DecodeError::invalid(
                    "invocation.type",
                    format!(
                        "`{}` is read but not run by `orchestrator worker` (it runs `command`, `builtin`, `a2a`, `http` and `llm`); a worker of your own can serve the agent (docs/worker-protocol.md)",
                        self.kind()
                    ),
                ))
            }
            Invocation::Llm {
                base_url: Some(url),
                ..
            } if !reqwest::Url::parse(url)
                .is_ok_and(|u| matches!(u.scheme(), "http" | "https")) =>
            {
                Err(DecodeError::invalid(
                    "invocation.baseUrl",
                    format!("`{url}` is not an http(s) URL of a Chat Completions endpoint"),
                ))
            }
            Invocation::Command { .. }
            | Invocation::Builtin { .. }
            | Invocation::A2a { .. }
            | Invocation::Http { .. }
            | Invocation::Llm { .. } => Ok(()),
        }
    }

    /// The `type` as written.
    pub fn kind(&self) -> &'static str {
        match self {
            Invocation::Command { .. } => "command",
            Invocation::Builtin { .. } => "builtin",
            Invocation::A2a { .. } => "a2a",
            Invocation::ClaudeSubprocess { .. } => "claude-subprocess",
            Invocation::Http { .. } => "http",
            Invocation::Llm { .. } => "llm",
            Invocation::Grpc { .. } => "grpc",
        }
    }
}
