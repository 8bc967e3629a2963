//! Why a card's handler cannot be made: said when the worker starts, so a
//! worker that could not run its agent's tasks never takes one.

/// Why the handler a card names cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    /// The card cannot run here (no invocation, or one this worker does
    /// not run).
    #[error(transparent)]
    NotRunnable(#[from] crate::codec::DecodeError),
    /// A kind of invocation no handler here runs.
    #[error("`{0}` invocations are not run here")]
    NotRunHere(String),
    /// A handler was given another kind's invocation.
    #[error("not an `{0}` invocation")]
    WrongKind(&'static str),
    /// A field of the invocation cannot be used (`invocation.url`).
    #[error("{field}: {why}")]
    Field {
        /// The field.
        field: &'static str,
        /// What is wrong with it.
        why: String,
    },
    /// The model endpoint is not a URL.
    #[error("the model endpoint `{base}`: {why}")]
    Endpoint {
        /// The configured base URL.
        base: String,
        /// What the URL parser said.
        why: String,
    },
    /// The API key in `${variable}` cannot be sent as a header.
    #[error("${variable} cannot be sent as a header")]
    KeyNotHeader {
        /// The variable.
        variable: String,
    },
    /// The card names an MCP server the settings do not define.
    #[error("the card names the MCP server `{0}`, which the settings' `mcp.servers` do not define")]
    UndefinedServer(String),
    /// An MCP server the card needs cannot be reached as configured.
    #[error(transparent)]
    Server(#[from] crate::llm::LlmError),
    /// The HTTP client could not be built.
    #[error(transparent)]
    Client(#[from] reqwest::Error),
}
