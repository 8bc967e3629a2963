//! What the model side of an agent refuses: a tool it may not call, an
//! MCP server it cannot reach, a turn whose result is no model's answer.

/// Why a model's request, tool or answer cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LlmError {
    /// The model called a tool its agent does not offer.
    #[error("`{name}` is not a tool of agent `{agent}`: it may call only {may}")]
    UnknownTool {
        /// The tool's name, as the model wrote it.
        name: String,
        /// The agent whose model called it.
        agent: String,
        /// What it may call, in words.
        may: String,
    },
    /// The tool is an MCP server's, but the agent's filter leaves it out.
    #[error(
        "`{tool}` of the MCP server `{server}` is not a tool of agent `{agent}`: its `tools` filter leaves it out"
    )]
    FilteredTool {
        /// The server.
        server: String,
        /// The tool.
        tool: String,
        /// The agent.
        agent: String,
    },
    /// An MCP server's settings name no way to reach it.
    #[error("{0}")]
    Unreachable(&'static str),
    /// A turn has no result yet.
    #[error("no result")]
    NoResult,
    /// A turn's result is not a model's answer.
    #[error("its result is not a model's answer: {0}")]
    NotAnAnswer(String),
}
