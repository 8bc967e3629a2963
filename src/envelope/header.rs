//! The envelope's header: who sends the task to whom, when, the ids that
//! tie tasks together, and the short-lived token (never shown).

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{AgentName, CorrelationId, Sender, TaskId, Timestamp};

/// The envelope's routing and identity part.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// This task's id (UUIDv7).
    pub task_id: TaskId,
    /// Shared by every task of one user request or run.
    pub correlation_id: CorrelationId,
    /// The task or run that caused this one, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub causation_id: Option<CorrelationId>,
    /// The sender.
    pub from: Sender,
    /// The target agent.
    pub to: AgentName,
    /// When the envelope was made.
    pub timestamp: Timestamp,
    /// The short-lived delegation token (a JWT). Absent at rest: the
    /// orchestrator mints one per publish, and it is never logged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<BearerToken>,
}

/// A bearer token whose text never appears in `Debug` output or logs.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct BearerToken(String);

impl BearerToken {
    /// Wraps a token.
    pub fn new(token: impl Into<String>) -> Self {
        BearerToken(token.into())
    }

    /// The token text, for verification only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BearerToken(<redacted>)")
    }
}
