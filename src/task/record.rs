//! What the store keeps of one task.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{TaskState, Transition};
use crate::artifact::Artifact;
use crate::envelope::{Action, AgentName, CorrelationId, Envelope, TaskId, Timestamp};
use crate::event::{ErrorInfo, Progress};

/// A task as it is shown: its envelope, its status and its history. The
/// store keeps the three apart (the envelope written once, the status
/// rewritten on each change, the history in the audit log) and assembles
/// them on read.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskRecord {
    /// The envelope as submitted, without a token: what is (re)published.
    pub envelope: Envelope,
    /// The current state and what goes with it.
    pub status: TaskStatus,
    /// Every transition, oldest first; the first is the creation.
    pub history: Vec<HistoryEntry>,
}

/// One transition of a task, or a progress report (`progress` set; the
/// state did not change).
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
    pub event: Option<Transition>,
    /// The attempt after the transition.
    pub attempt: u32,
    /// Who caused it: a principal, an agent instance, `orchestrator`.
    pub actor: String,
    /// Why, in words.
    pub reason: String,
    /// What the change said beside its states.
    #[serde(flatten)]
    pub said: Said,
    /// A progress report of the running attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
}

/// What a change of a task says beside its states, kept in its audit
/// record (under these names) and shown in the task's history. A progress
/// report, kept as a record of its own, is apart.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Said {
    /// The reporter's words for the new state (what input it needs, a
    /// closing message).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Artifacts that came with it (a completion's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<Artifact>,
    /// The reporter answered the request with `message` alone.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reply: bool,
    /// For an answer: the input given, which the next attempt runs with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<serde_json::Map<String, Value>>,
    /// For an answer: its idempotency key, when its sender gave one (the
    /// same answer sent again is then known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_key: Option<String>,
}

impl HistoryEntry {
    /// A task's creation: submitted, at `attempt`, by `actor`.
    pub fn created(at: Timestamp, attempt: u32, actor: &str) -> Self {
        HistoryEntry {
            at,
            from: None,
            to: TaskState::Submitted,
            event: None,
            attempt,
            actor: actor.to_string(),
            reason: "submitted".into(),
            said: Said::default(),
            progress: None,
        }
    }

    /// Every artifact chunk of these entries, in order: progress chunks
    /// and completions' artifacts.
    pub fn artifact_chunks(entries: &[HistoryEntry]) -> impl Iterator<Item = &Artifact> {
        entries.iter().flat_map(|h| {
            h.progress
                .iter()
                .filter_map(|p| p.artifact.as_ref())
                .chain(h.said.artifacts.iter())
        })
    }
}

impl TaskRecord {
    /// The task's id.
    pub fn task_id(&self) -> TaskId {
        self.status.task_id
    }

    /// The task's correlation id.
    pub fn correlation_id(&self) -> &CorrelationId {
        &self.status.correlation_id
    }

    /// The agent the task is for.
    pub fn agent(&self) -> &AgentName {
        &self.status.agent
    }

    /// The action asked of the agent.
    pub fn action(&self) -> &Action {
        &self.envelope.payload.action
    }

    /// The envelope to publish for the current attempt (token still absent).
    pub fn envelope_for_attempt(&self) -> Envelope {
        self.status.publishable(self.envelope.clone())
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
    /// The principal who asked for the task: the `sub` of its tokens.
    /// `None` only for tasks stored before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<String>,
    /// The trace this task belongs to (W3C trace id), for the Jaeger link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// The span that created the task, as W3C trace context: every publish
    /// of the task is its child, so all its attempts are in one trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_parent: Option<crate::telemetry::context::StoredTrace>,
    /// The orchestrator holds this task's conversation with a model
    /// (`docs/llm.md`): it is never published; its model calls and tool
    /// calls are tasks of their own.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub conversation: bool,
    /// The task stream's sequence of the current attempt's envelope, once
    /// the broker acknowledged it; `None`: not published yet (recovery
    /// publishes it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub published_seq: Option<u64>,
    /// When the current attempt may be published: set by a scheduled retry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<Timestamp>,
    /// The last answer to the task's request for input: the attempts after
    /// it run with it (`payload.input`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<serde_json::Map<String, Value>>,
    /// The last progress report of the current attempt that was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<ProgressMark>,
    /// The audit record of the last change the history shows (written
    /// with it): a read of the status, then of the history up to it, is
    /// of one moment. `None` in records written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_seq: Option<u64>,
    /// When the task was created.
    pub created_at: Timestamp,
    /// When the task last changed.
    pub updated_at: Timestamp,
}

/// Which progress report of an attempt was kept last: a report is kept
/// unless it is this one or an earlier one of the same run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgressMark {
    /// The worker instance whose run reported it (a run that resumed the
    /// attempt elsewhere counts its reports from 1 again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// Its `seq`.
    pub seq: u32,
}

impl TaskStatus {
    /// The task's stored `envelope` as published for its current attempt:
    /// that attempt's number, and the answer it runs with, if any.
    pub fn publishable(&self, envelope: Envelope) -> Envelope {
        let mut envelope = envelope.for_attempt(self.attempt);
        envelope.payload.input.clone_from(&self.input);
        envelope
    }
}

/// What a submission did: created a task, or found the one the same
/// request made before.
#[derive(Debug, Clone, PartialEq)]
pub enum Submitted {
    /// A new task was created.
    Created(TaskRecord),
    /// The same request was made before: this is its task.
    Existing(TaskRecord),
}

impl Submitted {
    /// The task, new or existing.
    pub fn record(&self) -> &TaskRecord {
        match self {
            Submitted::Created(r) | Submitted::Existing(r) => r,
        }
    }
}
