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

/// With `a2a.message_ids: ignored`, a message's key is this prefix,
/// [`NONCE_LEN`] random hex digits, `:` and its id: a key of its own, that
/// still says which message asked.
pub(super) const UNKEYED_PREFIX: &str = "a2a~";

/// The random part of such a key (64 bits).
const NONCE_LEN: usize = 16;

/// The message id an idempotency key holds, if it was made from one.
pub(super) fn message_id_of(key: &str) -> Option<&str> {
    if let Some(id) = key.strip_prefix(MESSAGE_KEY_PREFIX) {
        return Some(id);
    }
    let rest = key.strip_prefix(UNKEYED_PREFIX)?;
    let (nonce, id) = rest.split_at_checked(NONCE_LEN)?;
    let id = id.strip_prefix(':')?;
    nonce.bytes().all(|b| b.is_ascii_hexdigit()).then_some(id)
}

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

pub(super) fn time(t: &Timestamp) -> Option<chrono::DateTime<chrono::Utc>> {
    let t = t.as_offset_date_time();
    chrono::DateTime::from_timestamp(t.unix_timestamp(), t.nanosecond())
}

/// The agent's words in a history entry: a progress report's message, the
/// worker's message for a new state, or why the task failed, was refused
/// or waits.
fn words(h: &HistoryEntry) -> Option<&str> {
    if let Some(progress) = &h.progress {
        return progress.message.as_deref();
    }
    if let Some(message) = &h.said.message {
        return Some(message);
    }
    let says = matches!(
        h.to,
        TaskState::Failed
            | TaskState::Rejected
            | TaskState::Canceled
            | TaskState::InputRequired
            | TaskState::AuthRequired
    );
    (says && !h.reason.is_empty()).then_some(h.reason.as_str())
}

/// The agent's message of the `n`th history entry, if it says something.
fn agent_message(record: &TaskRecord, h: &HistoryEntry, n: usize) -> Option<Message> {
    let text = words(h)?;
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

/// The message a completed task answered its request with, when its
/// worker replied with a message alone.
pub(super) fn reply(record: &TaskRecord) -> Option<Message> {
    let last = record.history.last().filter(|h| h.said.reply)?;
    agent_message(record, last, record.history.len())
}

/// The client's answer in the `n`th history entry, if it is one: a user
/// message with the input as a data part.
fn answer_message(record: &TaskRecord, h: &HistoryEntry, n: usize) -> Option<Message> {
    let input = h.said.input.as_ref()?;
    Some(Message {
        message_id: format!("{}-{n}", record.task_id()),
        context_id: Some(record.correlation_id().to_string()),
        task_id: Some(record.task_id().to_string()),
        role: Role::User,
        parts: vec![Part::data(Value::Object(input.clone()))],
        metadata: None,
        extensions: None,
        reference_task_ids: None,
    })
}

/// The status a history entry stands for (the `n`th entry).
fn status_of(record: &TaskRecord, h: &HistoryEntry, n: usize) -> a2a::TaskStatus {
    a2a::TaskStatus {
        state: state(h.to),
        message: agent_message(record, h, n),
        timestamp: time(&h.at),
    }
}

/// One of our artifact parts in A2A's words.
fn part(p: &crate::artifact::Part) -> Part {
    let mut out = match (&p.text, &p.data, &p.url, p.raw_bytes()) {
        (Some(text), ..) => Part::text(text.clone()),
        (_, Some(data), ..) => Part::data(data.clone()),
        (_, _, Some(url), _) => Part::url(url.clone()),
        (.., Some(bytes)) => Part::raw(bytes),
        // Validated on arrival: a part has one content.
        _ => Part::text(""),
    };
    out.media_type.clone_from(&p.media_type);
    out.filename.clone_from(&p.filename);
    out
}

/// One of our artifacts (or chunks) in A2A's words.
fn artifact(a: &crate::artifact::Artifact) -> Artifact {
    Artifact {
        artifact_id: a.artifact_id.clone(),
        name: a.name.clone(),
        description: a.description.clone(),
        parts: a.parts.iter().map(part).collect(),
        metadata: None,
        extensions: None,
    }
}

/// The message the task was asked with, as we took it: its id (when it
/// came through A2A) and its params as a data part.
fn request_message(record: &TaskRecord) -> Message {
    let key = record.envelope.control.idempotency_key.as_str();
    let message_id = message_id_of(key).unwrap_or(key).to_string();
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
pub(super) fn result_artifact(result: &Value) -> Artifact {
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
    history.extend(record.history.iter().enumerate().filter_map(|(i, h)| {
        answer_message(record, h, i + 1).or_else(|| agent_message(record, h, i + 1))
    }));
    if let Some(n) = history_length {
        let skip = history.len().saturating_sub(n);
        history.drain(..skip);
    }
    let artifacts = artifacts
        .then(|| all_artifacts(record))
        .filter(|a| !a.is_empty());
    Task {
        id: record.task_id().to_string(),
        context_id: record.correlation_id().to_string(),
        status,
        artifacts,
        history: (!history.is_empty()).then_some(history),
        metadata: Some(metadata(record)),
    }
}

/// A task's artifacts as they stand: what its progress reports and its
/// completion produced (chunks put together), then its result.
fn all_artifacts(record: &TaskRecord) -> Vec<Artifact> {
    let mut out: Vec<Artifact> =
        crate::artifact::assemble(HistoryEntry::artifact_chunks(&record.history))
            .iter()
            .map(artifact)
            .collect();
    if record.status.state == TaskState::Completed
        && let Some(result) = &record.status.result
    {
        out.push(result_artifact(result));
    }
    out
}

/// One event of a task: its generation (from 1, without gaps) and what it
/// says.
pub(super) struct Event {
    pub(super) id: u64,
    pub(super) body: StreamResponse,
    /// For a status update: the state it is in (a stream may end there).
    pub(super) state: Option<TaskState>,
}

/// Every event of a task, oldest first: a status update per transition
/// (the first is the creation); for a progress report, a status update
/// with its message and an artifact update with its chunk; for the
/// completion, its artifacts and the result as artifact updates just
/// before its status.
pub(super) fn events(record: &TaskRecord) -> Vec<Event> {
    let update = Updates::of(
        record.task_id().to_string(),
        record.correlation_id().to_string(),
    );
    let mut out = Vec::with_capacity(record.history.len() + 1);
    for (i, h) in record.history.iter().enumerate() {
        if let Some(progress) = &h.progress {
            if progress.message.is_some() {
                out.push(update.status(status_of(record, h, i + 1)));
            }
            if let Some(chunk) = &progress.artifact {
                out.push(update.artifact(artifact(chunk), chunk.append, chunk.last_chunk));
            }
            continue;
        }
        if h.to == TaskState::Completed {
            for a in &h.said.artifacts {
                out.push(update.artifact(artifact(a), false, true));
            }
            if let Some(result) = &record.status.result {
                out.push(update.artifact(result_artifact(result), false, true));
            }
        }
        out.push(update.status(status_of(record, h, i + 1)));
    }
    numbered(out)
}

/// The updates of one task (or run), for its stream.
pub(super) struct Updates {
    task_id: String,
    context_id: String,
}

impl Updates {
    /// The updates of task `task_id` in context `context_id`.
    pub(super) fn of(task_id: String, context_id: String) -> Self {
        Updates {
            task_id,
            context_id,
        }
    }

    /// A status update.
    pub(super) fn status(&self, status: a2a::TaskStatus) -> StreamResponse {
        StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: self.task_id.clone(),
            context_id: self.context_id.clone(),
            status,
            metadata: None,
        })
    }

    /// An artifact update (or chunk).
    pub(super) fn artifact(&self, a: Artifact, append: bool, last_chunk: bool) -> StreamResponse {
        StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
            task_id: self.task_id.clone(),
            context_id: self.context_id.clone(),
            artifact: a,
            append: append.then_some(true),
            last_chunk: Some(last_chunk),
            metadata: None,
        })
    }
}

/// Updates as events: numbered from 1, each status update with its state.
pub(super) fn numbered(updates: Vec<StreamResponse>) -> Vec<Event> {
    updates
        .into_iter()
        .enumerate()
        .map(|(i, body)| {
            let state = match &body {
                StreamResponse::StatusUpdate(s) => our_state(&s.status.state),
                _ => None,
            };
            Event {
                id: i as u64 + 1,
                body,
                state,
            }
        })
        .collect()
}

/// The generation a task has reached: the id of its last event.
pub(super) fn generation(record: &TaskRecord) -> u64 {
    events(record).last().map_or(0, |e| e.id)
}

/// A 1.0 value as JSON (the `a2a` types always serialize).
pub(super) fn to_json(v: impl serde::Serialize) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or_default()
}
