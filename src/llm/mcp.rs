//! MCP servers as a model's tools (`docs/llm.md`, "MCP tools"): the
//! `mcp` section of the settings file, which names the servers a worker
//! may start (fast-agent's `mcp.servers`, the shape `.mcp.json` writes),
//! the names their tools take in a model's request, and the card's
//! filters on them.
//!
//! A card names the servers it uses (AgentCard `servers`, `agent.json`
//! `dependencies.mcps`) and may narrow each to some tools (`tools:
//! {server: [name or pattern]}`, `*` matching any run of characters). The
//! worker that runs the card's turns starts the servers and offers their
//! tools; the orchestrator refuses a call to a server the card does not
//! name or to a tool its filter leaves out, before anything runs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The MCP servers a worker may start (`mcp` in the settings file).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpSettings {
    /// By name, as cards name them.
    pub servers: BTreeMap<String, McpServer>,
}

/// How to reach one MCP server.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpServer {
    /// `stdio` (a process the worker starts) or `http` (streamable HTTP);
    /// left out: `http` when a `url` is given, else `stdio`.
    #[serde(alias = "type")]
    pub transport: Option<Transport>,
    /// The program (stdio).
    pub command: Option<String>,
    /// Its arguments (stdio).
    pub args: Vec<String>,
    /// Its environment besides the few every process gets (`PATH`,
    /// `LANG`, ...): a value `${NAME}` is the worker's variable `NAME`,
    /// anything else is taken as written. None of the worker's other
    /// variables (its keys) reach the server.
    pub env: BTreeMap<String, String>,
    /// Its working directory (stdio); default: the worker's.
    pub cwd: Option<String>,
    /// The endpoint (http).
    pub url: Option<String>,
    /// Headers of every request (http); values as in `env`.
    pub headers: BTreeMap<String, String>,
}

/// How a server is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    /// A child process speaking on its stdin and stdout.
    Stdio,
    /// Streamable HTTP.
    #[serde(alias = "streamable_http", alias = "streamable-http")]
    Http,
}

impl McpServer {
    /// How it is reached, or why it cannot be.
    pub fn transport(&self) -> Result<Transport, super::LlmError> {
        let transport = self.transport.unwrap_or(if self.url.is_some() {
            Transport::Http
        } else {
            Transport::Stdio
        });
        match transport {
            Transport::Stdio if self.command.is_none() => Err(super::LlmError::Unreachable(
                "a stdio server needs a `command`",
            )),
            Transport::Http if self.url.is_none() => {
                Err(super::LlmError::Unreachable("an http server needs a `url`"))
            }
            t => Ok(t),
        }
    }
}

impl crate::codec::Validate for McpSettings {
    fn validate(&self) -> Result<(), crate::codec::DecodeError> {
        for (name, server) in &self.servers {
            if name.is_empty() || name.contains("__") || !name.chars().all(name_char) {
                return Err(crate::codec::DecodeError::invalid(
                    format!("mcp.servers.{name}"),
                    "a server's name is letters, digits, `_` and `-`, with no `__` (tools are named `mcp__<server>__<tool>`)",
                ));
            }
            server.transport().map_err(|e| {
                crate::codec::DecodeError::invalid(format!("mcp.servers.{name}"), e)
            })?;
        }
        Ok(())
    }
}

/// What a tool name starts with when it stands for an MCP server's tool.
pub const PREFIX: &str = "mcp__";

/// The name of `server`'s tool `tool` in a model's request:
/// `mcp__<server>__<tool>`, the tool's characters a function name may not
/// hold (`[A-Za-z0-9_-]`) as `_` (a server's name holds none: the
/// settings refuse it). Cards' filters match this form of the tool's name.
pub fn tool_name(server: &str, tool: &str) -> String {
    let tool: String = tool
        .chars()
        .map(|c| if name_char(c) { c } else { '_' })
        .collect();
    format!("{PREFIX}{server}__{tool}")
}

fn name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// The server and tool a name made by [`tool_name`] stands for.
pub fn parse(name: &str) -> Option<(&str, &str)> {
    let rest = name.strip_prefix(PREFIX)?;
    let (server, tool) = rest.split_once("__")?;
    (!server.is_empty() && !tool.is_empty()).then_some((server, tool))
}

pub use crate::agent::tool_allowed as allowed;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_join_server_and_tool() {
        let name = tool_name("time", "get.time");
        assert_eq!(name, "mcp__time__get_time");
        assert_eq!(parse(&name), Some(("time", "get_time")));
        assert_eq!(parse("mcp__time"), None);
        assert_eq!(parse("planner"), None);
    }

    #[test]
    fn a_server_says_how_it_is_reached() {
        let http: McpServer =
            serde_json::from_value(serde_json::json!({"url": "http://x/mcp"})).unwrap();
        assert_eq!(http.transport(), Ok(Transport::Http));
        let stdio: McpServer =
            serde_json::from_value(serde_json::json!({"type": "stdio", "command": "uvx"})).unwrap();
        assert_eq!(stdio.transport(), Ok(Transport::Stdio));
        let neither = McpServer::default();
        assert!(matches!(
            neither.transport(),
            Err(super::super::LlmError::Unreachable(_))
        ));
    }
}
