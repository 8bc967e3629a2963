//! Our tasks in A2A's words (1.0, ProtoJSON through the `a2a-lf` types):
//! a task record becomes an A2A `Task`, and its stored history the
//! task's events, each with its generation.
//!
//! The events are derived from the history alone, which is append-only
//! and stored (the audit trail), so a task's events and their numbers are
//! the same on every read, after any restart: that is what lets a stream
//! resume from `Last-Event-ID` with nothing lost and nothing repeated.

use std::collections::HashMap;

use a2a::{
    Artifact, Message, Part, Role, StreamResponse, Task, TaskArtifactUpdateEvent,
    TaskStatusUpdateEvent,
};
use serde_json::Value;

use crate::envelope::Timestamp;
use crate::task::{HistoryEntry, TaskRecord, TaskState};

/// The prefix of the idempotency key a message's id becomes.
pub(super) const MESSAGE_KEY_PREFIX: &str = "a2a:";

/// The id of the artifact a task's result becomes.
pub(super) const RESULT_ARTIFACT: &str = "result";

/// Our state, as A2A names it (one to one).
pub(super) fn state(s: TaskState) -> a2a::TaskState {
    match s {
        TaskState::Submitted => a2a::TaskState::Submitted,
        TaskState::Working => a2a::TaskState::Working,
        TaskState::Completed => a2a::TaskState::Completed,
        TaskState::Failed => a2a::TaskState::Failed,
        TaskState::Canceled => a2a::TaskState::Canceled,
        TaskState::Rejected => a2a::TaskState::Rejected,
        TaskState::InputRequired => a2a::TaskState::InputRequired,
        TaskState::AuthRequired => a2a::TaskState::AuthRequired,
    }
}

/// An A2A state as ours; `None` for `TASK_STATE_UNSPECIFIED`.
pub(super) fn our_state(s: &a2a::TaskState) -> Option<TaskState> {
    Some(match s {
        a2a::TaskState::Unspecified => return None,
        a2a::TaskState::Submitted => TaskState::Submitted,
        a2a::TaskState::Working => TaskState::Working,
        a2a::TaskState::Completed => TaskState::Completed,
        a2a::TaskState::Failed => TaskState::Failed,
        a2a::TaskState::Canceled => TaskState::Canceled,
        a2a::TaskState::Rejected => TaskState::Rejected,
        a2a::TaskState::InputRequired => TaskState::InputRequired,
        a2a::TaskState::AuthRequired => TaskState::AuthRequired,
    })
}

/// Whether a stream of a task in state `s` ends: a terminal state, or one
/// that waits for the client.
pub(super) fn closes(s: TaskState) -> bool {
    s.is_terminal() || matches!(s, TaskState::InputRequired | TaskState::AuthRequired)
}

fn time(t: &Timestamp) -> Option<chrono::DateTime<chrono::Utc>> {
    let t = t.as_offset_date_time();
    chrono::DateTime::from_timestamp(t.unix_timestamp(), t.nanosecond())
}

/// The agent's words for a transition into `to`: why it failed, was
/// refused, or waits.
fn agent_message(record: &TaskRecord, to: TaskState, text: &str, n: usize) -> Option<Message> {
    let says = matches!(
        to,
        TaskState::Failed
            | TaskState::Rejected
            | TaskState::Canceled
            | TaskState::InputRequired
            | TaskState::AuthRequired
    );
    if !says || text.is_empty() {
        return None;
    }
    Some(Message {
        message_id: format!("{}-{n}", record.task_id()),
        context_id: Some(record.correlation_id().to_string()),
        task_id: Some(record.task_id().to_string()),
        role: Role::Agent,
        parts: vec![Part::text(text)],
        metadata: None,
        extensions: None,
        reference_task_ids: None,
    })
}

/// The status a history entry stands for (the `n`th event).
fn status_of(record: &TaskRecord, h: &HistoryEntry, n: usize) -> a2a::TaskStatus {
    a2a::TaskStatus {
        state: state(h.to),
        message: agent_message(record, h.to, &h.reason, n),
        timestamp: time(&h.at),
    }
}

/// The message the task was asked with, as we took it: its id (when it
/// came through A2A) and its params as a data part.
fn request_message(record: &TaskRecord) -> Message {
    let key = record.envelope.control.idempotency_key.as_str();
    let message_id = key
        .strip_prefix(MESSAGE_KEY_PREFIX)
        .unwrap_or(key)
        .to_string();
    Message {
        message_id,
        context_id: Some(record.correlation_id().to_string()),
        task_id: Some(record.task_id().to_string()),
        role: Role::User,
        parts: vec![Part::data(Value::Object(
            record.envelope.payload.params.clone(),
        ))],
        metadata: None,
        extensions: None,
        reference_task_ids: None,
    }
}

/// The artifact a result becomes: a string as a text part, anything else
/// as a data part.
fn result_artifact(result: &Value) -> Artifact {
    let part = match result {
        Value::String(s) => Part::text(s.clone()),
        other => Part::data(other.clone()),
    };
    Artifact {
        artifact_id: RESULT_ARTIFACT.into(),
        name: Some(RESULT_ARTIFACT.into()),
        description: None,
        parts: vec![part],
        metadata: None,
        extensions: None,
    }
}

/// What a task shows beside the protocol's fields: the agent and skill
/// that run it, and the attempt.
fn metadata(record: &TaskRecord) -> HashMap<String, Value> {
    HashMap::from([
        ("agent".to_string(), Value::from(record.agent().as_str())),
        ("skill".to_string(), Value::from(record.action().as_str())),
        ("attempt".to_string(), Value::from(record.status.attempt)),
    ])
}

/// The A2A task of a record: its history (the request, then the agent's
/// messages) cut to the last `history_length` messages when given, its
/// artifacts when `artifacts`.
pub(super) fn task(record: &TaskRecord, history_length: Option<usize>, artifacts: bool) -> Task {
    let last = record.history.last();
    let status = match last {
        Some(h) => status_of(record, h, record.history.len()),
        None => a2a::TaskStatus {
            state: state(record.status.state),
            message: None,
            timestamp: time(&record.status.updated_at),
        },
    };
    let mut history = vec![request_message(record)];
    history.extend(
        record
            .history
            .iter()
            .enumerate()
            .filter_map(|(i, h)| agent_message(record, h.to, &h.reason, i + 1)),
    );
    if let Some(n) = history_length {
        let skip = history.len().saturating_sub(n);
        history.drain(..skip);
    }
    let result = record
        .status
        .result
        .as_ref()
        .filter(|_| artifacts && record.status.state == TaskState::Completed);
    Task {
        id: record.task_id().to_string(),
        context_id: record.correlation_id().to_string(),
        status,
        artifacts: result.map(|r| vec![result_artifact(r)]),
        history: (!history.is_empty()).then_some(history),
        metadata: Some(metadata(record)),
    }
}

/// One event of a task: its generation (from 1, without gaps) and what it
/// says.
pub(super) struct Event {
    pub(super) id: u64,
    pub(super) body: StreamResponse,
    /// Whether a stream ends after it.
    pub(super) closes: bool,
}

/// Every event of a task, oldest first: a status update per transition
/// (the first is the creation), and the result as an artifact update just
/// before the completion's status.
pub(super) fn events(record: &TaskRecord) -> Vec<Event> {
    let task_id = record.task_id().to_string();
    let context_id = record.correlation_id().to_string();
    let mut out = Vec::with_capacity(record.history.len() + 1);
    for (i, h) in record.history.iter().enumerate() {
        if h.to == TaskState::Completed
            && let Some(result) = &record.status.result
        {
            out.push(StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
                task_id: task_id.clone(),
                context_id: context_id.clone(),
                artifact: result_artifact(result),
                append: None,
                last_chunk: Some(true),
                metadata: None,
            }));
        }
        out.push(StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: task_id.clone(),
            context_id: context_id.clone(),
            status: status_of(record, h, i + 1),
            metadata: None,
        }));
    }
    out.into_iter()
        .enumerate()
        .map(|(i, body)| {
            let closes = matches!(&body, StreamResponse::StatusUpdate(s)
                if our_state(&s.status.state).is_some_and(closes));
            Event {
                id: i as u64 + 1,
                body,
                closes,
            }
        })
        .collect()
}

/// The generation a task has reached: the id of its last event.
pub(super) fn generation(record: &TaskRecord) -> u64 {
    events(record).last().map_or(0, |e| e.id)
}
