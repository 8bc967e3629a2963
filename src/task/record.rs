//! What the store keeps of one task.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{TaskEvent, TaskState};
use crate::envelope::{Action, AgentName, CorrelationId, Envelope, TaskId, Timestamp};
use crate::event::ErrorInfo;

/// A task with its full history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRecord {
    /// The envelope as submitted, without a token: what is (re)published.
    pub envelope: Envelope,
    /// The current state.
    pub state: TaskState,
    /// The current attempt, from 1; a retry adds one.
    pub attempt: u32,
    /// The result, once completed (or a partial result reported earlier).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The last error reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
    /// Every transition, oldest first; the first is the creation.
    pub history: Vec<HistoryEntry>,
    /// The trace this task belongs to (W3C trace id), for the Jaeger link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// The task stream's sequence of the current attempt's envelope, once
    /// the broker acknowledged it; `None`: not published yet (recovery
    /// publishes it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub published_seq: Option<u64>,
    /// When the current attempt may be published: set by a scheduled retry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<Timestamp>,
    /// When the task was created.
    pub created_at: Timestamp,
    /// When the task last changed.
    pub updated_at: Timestamp,
}

/// One transition of a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryEntry {
    /// When it happened.
    pub at: Timestamp,
    /// The state before; `None` for the creation.
    pub from: Option<TaskState>,
    /// The state after.
    pub to: TaskState,
    /// The event that caused it; `None` for the creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<TaskEvent>,
    /// The attempt after the transition.
    pub attempt: u32,
    /// Who caused it: a principal, an agent instance, `orchestrator`.
    pub actor: String,
    /// Why, in words.
    pub reason: String,
}

impl TaskRecord {
    /// The task's id.
    pub fn task_id(&self) -> TaskId {
        self.envelope.header.task_id
    }

    /// The task's correlation id.
    pub fn correlation_id(&self) -> &CorrelationId {
        &self.envelope.header.correlation_id
    }

    /// The agent the task is for.
    pub fn agent(&self) -> &AgentName {
        &self.envelope.header.to
    }

    /// The action asked of the agent.
    pub fn action(&self) -> &Action {
        &self.envelope.payload.action
    }

    /// The task's attempt budget.
    pub fn max_attempts(&self) -> u32 {
        self.envelope.control.max_attempts.get()
    }

    /// The envelope to publish for the current attempt (token still absent).
    pub fn envelope_for_attempt(&self) -> Envelope {
        let mut env = self.envelope.clone();
        if let Some(attempt) = std::num::NonZeroU32::new(self.attempt) {
            env.control.attempt = attempt;
        }
        env
    }
}

/// What the store rewrites on every change of a task: its state and the
/// few facts a change needs, without the envelope (stored once, apart) or
/// the history (read from the audit log).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskStatus {
    /// The task.
    pub task_id: TaskId,
    /// Its request (from the envelope; never changes).
    pub correlation_id: CorrelationId,
    /// The agent it is for (from the envelope; never changes).
    pub agent: AgentName,
    /// Its attempt budget (from the envelope; never changes).
    pub max_attempts: u32,
    /// The current state.
    pub state: TaskState,
    /// The current attempt, from 1; a retry adds one.
    pub attempt: u32,
    /// The result, once completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The last error reported (cleared by a completion).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
    /// The trace this task belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// See [`TaskRecord::published_seq`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub published_seq: Option<u64>,
    /// See [`TaskRecord::retry_at`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<Timestamp>,
    /// When the task was created.
    pub created_at: Timestamp,
    /// When the task last changed.
    pub updated_at: Timestamp,
}

impl TaskRecord {
    /// The whole task from its three stored parts.
    pub fn assemble(status: TaskStatus, envelope: Envelope, history: Vec<HistoryEntry>) -> Self {
        TaskRecord {
            envelope,
            state: status.state,
            attempt: status.attempt,
            result: status.result,
            error: status.error,
            history,
            trace_id: status.trace_id,
            published_seq: status.published_seq,
            retry_at: status.retry_at,
            created_at: status.created_at,
            updated_at: status.updated_at,
        }
    }

    /// The part the store rewrites on each change.
    pub fn status(&self) -> TaskStatus {
        TaskStatus {
            task_id: self.task_id(),
            correlation_id: self.correlation_id().clone(),
            agent: self.agent().clone(),
            max_attempts: self.max_attempts(),
            state: self.state,
            attempt: self.attempt,
            result: self.result.clone(),
            error: self.error.clone(),
            trace_id: self.trace_id.clone(),
            published_seq: self.published_seq,
            retry_at: self.retry_at,
            created_at: self.created_at,
            updated_at: self.updated_at,
        }
    }
}
