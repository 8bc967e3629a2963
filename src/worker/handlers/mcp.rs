//! The MCP servers of an agent that is a prompt, the worker's side
//! (`docs/llm.md`, "MCP tools"), through the official Rust SDK (`rmcp`).
//!
//! - A server is started (stdio) or connected to (streamable HTTP) when a
//!   task first needs it, and kept; one that went away is started again
//!   at the next need.
//! - Each turn's request is offered the tools of the card's servers that
//!   its filters let through, named `mcp__<server>__<tool>`.
//! - A task carrying `payload.meta.mcp` is one call of one tool: its
//!   params are the arguments; its result is the tool's structured
//!   content, else its text. A tool's own error fails the task
//!   (`tool_error`, the model is told); a server that cannot be reached
//!   is a retryable failure (`mcp_unavailable`).
//! - A stdio server gets the few variables every process needs and those
//!   its settings give, none of the worker's others (its keys).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, Tool};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ServiceError, ServiceExt};
use serde_json::{Map, Value, json};
use tokio::sync::Mutex;

use crate::agent::AgentCard;
use crate::llm::mcp::{McpServer, McpSettings, Transport, allowed, parse, tool_name};
use crate::worker::Outcome;

/// How long connecting to a server (starting it, the MCP handshake) may
/// take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// How long one tool call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// The MCP servers one agent's model may use.
pub struct McpTools {
    servers: Vec<Server>,
}

struct Server {
    name: String,
    /// The agent cannot work without it: a turn waits for it.
    required: bool,
    /// The card's filter on its tools.
    filter: Option<Vec<String>>,
    config: McpServer,
    conn: Mutex<Option<Arc<Conn>>>,
}

struct Conn {
    client: RunningService<RoleClient, ()>,
    tools: Vec<Tool>,
}

impl McpTools {
    /// The servers `card` names, as `settings` define them; none: `None`.
    /// A needed server the settings do not define is an error now, when
    /// the worker starts; one not needed is left out with a warning.
    pub fn new(
        card: &AgentCard,
        settings: &McpSettings,
    ) -> Result<Option<McpTools>, super::HandlerError> {
        let mut servers = Vec::new();
        for (name, required) in card.mcp_servers() {
            let Some(config) = settings.servers.get(name) else {
                if required {
                    return Err(super::HandlerError::UndefinedServer(name.to_string()));
                }
                tracing::warn!(
                    server = name,
                    "an MCP server the card may use is not in the settings' `mcp.servers`: its tools are not offered"
                );
                continue;
            };
            config.transport()?;
            servers.push(Server {
                name: name.to_string(),
                required,
                filter: card
                    .prompt
                    .as_ref()
                    .and_then(|p| p.tools.get(name))
                    .cloned(),
                config: config.clone(),
                conn: Mutex::new(None),
            });
        }
        Ok((!servers.is_empty()).then_some(McpTools { servers }))
    }

    /// The credentials the servers are given: every `${NAME}` value of
    /// their environments and headers, as the worker's environment has it
    /// now (a handler scrubs them from what it reports).
    pub fn credentials(&self) -> crate::redact::Secrets {
        let worker: Vec<(String, String)> = std::env::vars().collect();
        let named = |values: &BTreeMap<String, String>| -> Vec<String> {
            let referenced: BTreeMap<String, String> = values
                .iter()
                .filter(|(_, v)| v.starts_with("${") && v.ends_with('}'))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            expand(&referenced, worker.iter().cloned())
                .into_iter()
                .map(|(_, v)| v)
                .collect()
        };
        crate::redact::Secrets::credentials(self.servers.iter().flat_map(|s| {
            named(&s.config.env)
                .into_iter()
                .chain(named(&s.config.headers))
        }))
    }

    /// The function tools of the servers, for a model's request: a needed
    /// server that cannot be reached fails the turn (retryably), another
    /// is left out.
    pub async fn offered(&self) -> Result<Vec<Value>, Outcome> {
        let mut out = Vec::new();
        for server in &self.servers {
            let conn = match server.connect().await {
                Ok(c) => c,
                Err(why) if server.required => {
                    return Err(Outcome::retryable("mcp_unavailable", why));
                }
                Err(why) => {
                    tracing::warn!(server = %server.name, why, "an MCP server's tools are not offered");
                    continue;
                }
            };
            for tool in &conn.tools {
                let name = tool_name(&server.name, &tool.name);
                // Filters match the tool's name as the model sees it.
                let shown = parse(&name).map_or("", |(_, t)| t);
                if !allowed(server.filter.as_deref(), shown) {
                    continue;
                }
                out.push(json!({
                    "type": "function",
                    "function": {
                        "name": name,
                        "description": tool.description.as_deref().unwrap_or_default(),
                        "parameters": Value::Object((*tool.input_schema).clone()),
                    }
                }));
            }
        }
        Ok(out)
    }

    /// Calls `server`'s tool `tool` (as the model named it) with `args`.
    pub async fn call(&self, server: &str, tool: &str, args: Map<String, Value>) -> Outcome {
        let Some(s) = self.servers.iter().find(|s| s.name == server) else {
            return Outcome::permanent(
                "mcp_refused",
                format!("`{server}` is not an MCP server of this agent"),
            );
        };
        if !allowed(s.filter.as_deref(), tool) {
            return Outcome::permanent(
                "mcp_refused",
                format!("the card's `tools` filter leaves `{tool}` of `{server}` out"),
            );
        }
        let conn = match s.connect().await {
            Ok(c) => c,
            Err(why) => return Outcome::retryable("mcp_unavailable", why),
        };
        let wanted = tool_name(server, tool);
        let Some(found) = conn
            .tools
            .iter()
            .find(|t| tool_name(server, &t.name) == wanted)
        else {
            return Outcome::permanent(
                "mcp_refused",
                format!("the MCP server `{server}` has no tool `{tool}`"),
            );
        };
        let mut params = CallToolRequestParams::new(found.name.clone());
        params.arguments = Some(args);
        match tokio::time::timeout(CALL_TIMEOUT, conn.client.call_tool(params)).await {
            Err(_) => Outcome::retryable(
                "mcp_unavailable",
                format!(
                    "`{tool}` of `{server}` took longer than {}s",
                    CALL_TIMEOUT.as_secs()
                ),
            ),
            Ok(Ok(result)) => answer(server, tool, result),
            Ok(Err(ServiceError::McpError(e))) => Outcome::permanent(
                "tool_error",
                format!("`{tool}` of `{server}`: {}", e.message),
            ),
            Ok(Err(e)) => {
                s.forget(&conn).await;
                Outcome::retryable("mcp_unavailable", format!("`{tool}` of `{server}`: {e}"))
            }
        }
    }
}

impl Server {
    /// The live connection, made now when there is none (or it closed).
    async fn connect(&self) -> Result<Arc<Conn>, String> {
        let mut held = self.conn.lock().await;
        if let Some(c) = held.as_ref()
            && !c.client.is_closed()
        {
            return Ok(Arc::clone(c));
        }
        let conn = tokio::time::timeout(CONNECT_TIMEOUT, self.start())
            .await
            .map_err(|_| {
                format!(
                    "the MCP server `{}` did not answer within {}s",
                    self.name,
                    CONNECT_TIMEOUT.as_secs()
                )
            })??;
        tracing::info!(server = %self.name, tools = conn.tools.len(), "MCP server connected");
        let conn = Arc::new(conn);
        *held = Some(Arc::clone(&conn));
        Ok(conn)
    }

    /// Drops `conn` if it is still the live one, so the next need
    /// connects again.
    async fn forget(&self, conn: &Arc<Conn>) {
        let mut held = self.conn.lock().await;
        if held.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn)) {
            *held = None;
        }
    }

    async fn start(&self) -> Result<Conn, String> {
        let name = &self.name;
        let fail = |e: &dyn std::fmt::Display| format!("the MCP server `{name}`: {e}");
        let client = match self.config.transport().map_err(|e| e.to_string())? {
            Transport::Stdio => {
                let program = self.config.command.as_deref().unwrap_or_default();
                let mut command = tokio::process::Command::new(program);
                command
                    .args(&self.config.args)
                    .env_clear()
                    .envs(environment(&self.config.env, std::env::vars()))
                    .kill_on_drop(true);
                if let Some(cwd) = &self.config.cwd {
                    command.current_dir(cwd);
                }
                let transport = TokioChildProcess::new(command)
                    .map_err(|e| fail(&format!("`{program}` cannot be started: {e}")))?;
                ().serve(transport).await.map_err(|e| fail(&e))?
            }
            Transport::Http => {
                let url = self.config.url.clone().unwrap_or_default();
                let mut headers = std::collections::HashMap::new();
                for (k, v) in expand(&self.config.headers, std::env::vars()) {
                    let name = reqwest::header::HeaderName::try_from(k.as_str())
                        .map_err(|e| fail(&format!("header `{k}`: {e}")))?;
                    let mut value = reqwest::header::HeaderValue::try_from(v.as_str())
                        .map_err(|_| fail(&format!("header `{k}` cannot be sent")))?;
                    value.set_sensitive(true);
                    headers.insert(name, value);
                }
                let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .custom_headers(headers);
                ().serve(StreamableHttpClientTransport::from_config(config))
                    .await
                    .map_err(|e| fail(&e))?
            }
        };
        let tools = client.list_all_tools().await.map_err(|e| fail(&e))?;
        Ok(Conn { client, tools })
    }
}

/// A stdio server's environment: the few variables every process needs
/// (as a command gets them), taken from `worker`, then `env` expanded.
fn environment(
    env: &BTreeMap<String, String>,
    worker: impl Iterator<Item = (String, String)>,
) -> Vec<(String, String)> {
    let worker: Vec<(String, String)> = worker.collect();
    let mut out = super::command::CommandHandler::environment(&[], worker.iter().cloned());
    out.extend(expand(env, worker.into_iter()));
    out
}

/// `values` with each `${NAME}` value replaced by `worker`'s `NAME`
/// (empty when unset).
fn expand(
    values: &BTreeMap<String, String>,
    worker: impl Iterator<Item = (String, String)>,
) -> Vec<(String, String)> {
    let worker: BTreeMap<String, String> = worker.collect();
    values
        .iter()
        .map(|(k, v)| {
            let value = match v.strip_prefix("${").and_then(|r| r.strip_suffix('}')) {
                Some(var) => worker.get(var).cloned().unwrap_or_default(),
                None => v.clone(),
            };
            (k.clone(), value)
        })
        .collect()
}

/// A tool's result as the task's: its structured content, else its
/// text (one text block as it is, several joined by lines, other blocks
/// as JSON); a result marked as an error fails the task with that text.
fn answer(server: &str, tool: &str, result: CallToolResult) -> Outcome {
    let text = result
        .content
        .iter()
        .map(|block| match block.as_text() {
            Some(t) => t.text.clone(),
            None => serde_json::to_string(block).unwrap_or_default(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    if result.is_error == Some(true) {
        return Outcome::permanent("tool_error", format!("`{tool}` of `{server}`: {text}"));
    }
    match result.structured_content {
        Some(v) if !v.is_null() => Outcome::completed(v),
        _ => Outcome::completed(Value::String(text)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_gets_only_what_it_is_given() {
        let env = BTreeMap::from([
            ("TOKEN".to_string(), "${GITHUB_TOKEN}".to_string()),
            ("MODE".to_string(), "ro".to_string()),
        ]);
        let worker = [
            ("PATH", "/bin"),
            ("OPENAI_API_KEY", "sk-secret"),
            ("GITHUB_TOKEN", "ghp"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let got = environment(&env, worker.into_iter());
        let names: Vec<&str> = got.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["PATH", "MODE", "TOKEN"]);
        assert!(got.contains(&("TOKEN".into(), "ghp".into())));
        assert!(!got.iter().any(|(_, v)| v.contains("sk-")));
    }
}
