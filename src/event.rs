//! The status and result events a worker publishes about a task.
//!
//! Schema: `docs/schema/worker-event.schema.json`. A wire format, below
//! the task's state machine: what an event means for the task is the
//! orchestrator's to say (`service::loops::applier`).

use std::num::NonZeroU32;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::artifact::Artifact;
use crate::codec::{self, DecodeError, Strictness, Validate};
use crate::envelope::{AgentName, CorrelationId, TaskId, Timestamp, Version};

/// One status or result report from a worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerEvent {
    /// Wire format version; always 1.
    pub v: Version,
    /// The task reported on.
    pub task_id: TaskId,
    /// The task's correlation id, copied from its envelope.
    pub correlation_id: CorrelationId,
    /// The agent that ran the task.
    pub agent: AgentName,
    /// Which attempt this report is about.
    pub attempt: NonZeroU32,
    /// What the worker says the task's state is.
    pub state: ReportedState,
    /// The result value, for `completed` (and partial results otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Artifacts produced, for `completed` (files, documents, data parts).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "codec::objects"
    )]
    pub artifacts: Vec<Artifact>,
    /// The handler's words for the state it reports: what input it needs
    /// (`input_required`), a closing message (`completed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// A progress report (only with `working`): a status message, a chunk
    /// of an artifact, or both. A `working` event without it is the
    /// attempt's start.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "codec::optional_object"
    )]
    pub progress: Option<Progress>,
    /// For `completed`: the request is answered with `message` alone (an
    /// A2A client gets a Message, not the task).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reply: bool,
    /// Why the task failed or was rejected; required for those states.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "codec::optional_object"
    )]
    pub error: Option<ErrorInfo>,
    /// For a retryable failure: how long to wait before the next attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_seconds: Option<u64>,
    /// The worker instance that ran the attempt (for the audit trail).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// Whether the handler was told this delivery may repeat an earlier
    /// run of the attempt (a redelivery, or a copy published again).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub resumed: bool,
    /// When the worker made the report.
    pub at: Timestamp,
}

impl WorkerEvent {
    /// Whether this event, the last one about its task, shows `attempt`
    /// over: a final report of that attempt, or any report of a later one.
    /// The check a redelivered attempt is held to before it runs again.
    pub fn ends_attempt(&self, attempt: u32) -> bool {
        // (A run-abandoned note is published on a subject of its own, so
        // it is never a task's last event.)
        self.attempt.get() > attempt
            || (self.attempt.get() == attempt && self.state != ReportedState::Working)
    }
}

/// One progress report of an attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// 1 for the attempt's first report, then one more each time: reports
    /// are kept in this order, and a repeated one is dropped.
    pub seq: NonZeroU32,
    /// What the handler is doing, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// An artifact, or a chunk of one, produced so far.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "codec::optional_object"
    )]
    pub artifact: Option<Artifact>,
}

/// The longest message a report may carry.
pub const MAX_MESSAGE_LEN: usize = 16 * 1024;

fn check_message(field: &str, message: Option<&str>) -> Result<(), DecodeError> {
    match message {
        Some(m) if m.len() > MAX_MESSAGE_LEN => Err(DecodeError::invalid(
            field,
            format!("must be at most {MAX_MESSAGE_LEN} bytes"),
        )),
        _ => Ok(()),
    }
}

/// A task state as a worker may report it (`submitted` is the orchestrator's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportedState {
    /// The worker started the task.
    Working,
    /// The task waits for input from a person.
    InputRequired,
    /// The task waits for authorization.
    AuthRequired,
    /// The task finished with a result.
    Completed,
    /// The task failed; `error.retryable` says whether another attempt may help.
    Failed,
    /// The worker refused the task (unknown action, bad token, ...).
    Rejected,
    /// The worker stopped the task on a cancel request.
    Canceled,
}

impl ReportedState {
    /// The snake_case name used in JSON and message ids.
    pub fn as_str(self) -> &'static str {
        match self {
            ReportedState::Working => "working",
            ReportedState::InputRequired => "input_required",
            ReportedState::AuthRequired => "auth_required",
            ReportedState::Completed => "completed",
            ReportedState::Failed => "failed",
            ReportedState::Rejected => "rejected",
            ReportedState::Canceled => "canceled",
        }
    }
}

/// A failure, as told to the orchestrator and to users.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorInfo {
    /// A stable snake_case code (`upstream_timeout`).
    pub code: ErrorCode,
    /// What happened, for people.
    pub message: String,
    /// Whether another attempt may succeed.
    #[serde(default)]
    pub retryable: bool,
}

/// A snake_case error code: 1–64 characters of `a-z`, `0-9` and `_`,
/// starting with a letter.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ErrorCode(String);

impl ErrorCode {
    /// The code as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A text that is not an error code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a snake_case code of 1 to 64 characters")]
pub struct BadErrorCode(pub String);

impl TryFrom<String> for ErrorCode {
    type Error = BadErrorCode;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        let ok = !s.is_empty()
            && s.len() <= 64
            && s.starts_with(|c: char| c.is_ascii_lowercase())
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if ok {
            Ok(ErrorCode(s))
        } else {
            Err(BadErrorCode(s))
        }
    }
}

impl From<ErrorCode> for String {
    fn from(c: ErrorCode) -> String {
        c.0
    }
}

impl ErrorInfo {
    /// An error with a code that is known to be valid at compile time.
    ///
    /// Codes given here are literals of this crate; one that breaks the rule
    /// is a bug and becomes `internal_error`.
    pub fn new(code: &'static str, message: impl Into<String>, retryable: bool) -> Self {
        let code = ErrorCode::try_from(code.to_string())
            .unwrap_or_else(|_| ErrorCode("internal_error".to_string()));
        ErrorInfo {
            code,
            message: message.into(),
            retryable,
        }
    }
}

/// The longest worker instance name an event may carry.
pub const MAX_INSTANCE_LEN: usize = 128;

fn check_instance(instance: Option<&str>) -> Result<(), DecodeError> {
    match instance {
        Some(i) if i.is_empty() || i.len() > MAX_INSTANCE_LEN => Err(DecodeError::invalid(
            "instance",
            format!("must be 1 to {MAX_INSTANCE_LEN} bytes"),
        )),
        _ => Ok(()),
    }
}

impl Validate for WorkerEvent {
    fn validate(&self) -> Result<(), DecodeError> {
        let needs_error = matches!(self.state, ReportedState::Failed | ReportedState::Rejected);
        if needs_error && self.error.is_none() {
            return Err(DecodeError::MissingField {
                field: "error".into(),
            });
        }
        check_instance(self.instance.as_deref())?;
        check_message("message", self.message.as_deref())?;
        if self.reply && (self.state != ReportedState::Completed || self.message.is_none()) {
            return Err(DecodeError::invalid(
                "reply",
                "only a `completed` event with a `message` replies",
            ));
        }
        for (i, artifact) in self.artifacts.iter().enumerate() {
            artifact.validate(&format!("artifacts[{i}]"))?;
        }
        if let Some(progress) = &self.progress {
            if self.state != ReportedState::Working {
                return Err(DecodeError::invalid(
                    "progress",
                    "only a `working` event reports progress",
                ));
            }
            if progress.message.is_none() && progress.artifact.is_none() {
                return Err(DecodeError::invalid(
                    "progress",
                    "a progress report has a `message`, an `artifact` or both",
                ));
            }
            check_message("progress.message", progress.message.as_deref())?;
            if let Some(artifact) = &progress.artifact {
                artifact.validate("progress.artifact")?;
            }
        }
        Ok(())
    }
}

/// A worker's note that it ran an attempt but lost its claim before it
/// could report (a partition outlasted the lease, or the claims bucket was
/// away that long): whatever the run did, its outcome was dropped, and
/// another replica runs the attempt. It never changes the task; the
/// orchestrator records it in the audit trail (`task.run_abandoned`).
/// Published on `<prefix>.events.<agent>.<task id>.abandoned`.
///
/// Schema: `docs/schema/run-abandoned.schema.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunAbandoned {
    /// Wire format version; always 1.
    pub v: Version,
    /// The task.
    pub task_id: TaskId,
    /// The task's correlation id.
    pub correlation_id: CorrelationId,
    /// The agent.
    pub agent: AgentName,
    /// The attempt that ran.
    pub attempt: NonZeroU32,
    /// The worker instance that ran it.
    pub instance: String,
    /// Whether the handler had finished (its outcome was dropped) or was
    /// stopped when the claim was lost.
    pub finished: bool,
    /// Why, in words.
    pub reason: String,
    /// When the claim was found lost.
    pub at: Timestamp,
}

impl Validate for RunAbandoned {
    fn validate(&self) -> Result<(), DecodeError> {
        check_instance(Some(&self.instance))
    }
}

impl RunAbandoned {
    /// Decodes a note from the bus: unknown fields are ignored.
    pub fn from_wire(bytes: &[u8], max_bytes: usize) -> Result<Self, DecodeError> {
        codec::decode(bytes, Strictness::Tolerant, max_bytes)
    }

    /// Decodes a note strictly (unknown fields refused), as tools checking
    /// a worker written in another language do.
    pub fn from_user(bytes: &[u8], max_bytes: usize) -> Result<Self, DecodeError> {
        codec::decode(bytes, Strictness::Strict, max_bytes)
    }
}

impl WorkerEvent {
    /// Decodes an event from the bus: unknown fields are ignored.
    pub fn from_wire(bytes: &[u8], max_bytes: usize) -> Result<Self, DecodeError> {
        codec::decode(bytes, Strictness::Tolerant, max_bytes)
    }

    /// Decodes an event strictly (unknown fields refused), as tools checking
    /// a worker written in another language do.
    pub fn from_user(bytes: &[u8], max_bytes: usize) -> Result<Self, DecodeError> {
        codec::decode(bytes, Strictness::Strict, max_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::DEFAULT_MAX_BYTES;

    #[test]
    fn an_attempt_is_over_after_its_final_report_or_a_later_attempt() {
        let event = |attempt: u32, state: ReportedState| WorkerEvent {
            v: Version,
            task_id: TaskId::new(),
            correlation_id: "c".parse().unwrap(),
            agent: "a".parse().unwrap(),
            attempt: NonZeroU32::new(attempt).unwrap(),
            state,
            result: None,
            artifacts: Vec::new(),
            message: None,
            progress: None,
            reply: false,
            error: None,
            retry_after_seconds: None,
            instance: None,
            resumed: false,
            at: Timestamp::now(),
        };
        assert!(!event(2, ReportedState::Working).ends_attempt(2));
        assert!(event(2, ReportedState::Completed).ends_attempt(2));
        assert!(event(2, ReportedState::Failed).ends_attempt(2));
        assert!(event(3, ReportedState::Working).ends_attempt(2));
        assert!(!event(1, ReportedState::Completed).ends_attempt(2));
    }

    fn event(state: &str, error: Value) -> Result<WorkerEvent, DecodeError> {
        let v = serde_json::json!({
            "v": 1, "task_id": TaskId::new().to_string(), "correlation_id": "c",
            "agent": "echo", "attempt": 1, "state": state, "error": error,
            "at": "2026-11-22T10:00:00Z"
        });
        WorkerEvent::from_user(&serde_json::to_vec(&v).unwrap(), DEFAULT_MAX_BYTES)
    }

    #[test]
    fn failures_and_rejections_need_an_error() {
        assert_eq!(
            event("failed", Value::Null).unwrap_err().field(),
            Some("error")
        );
        assert_eq!(
            event("rejected", Value::Null).unwrap_err().field(),
            Some("error")
        );
        let permanent = serde_json::json!({"code": "bad_input", "message": "m"});
        assert!(event("failed", permanent).is_ok());
        assert!(event("working", Value::Null).is_ok());
    }

    #[test]
    fn names_match_the_json() {
        use ReportedState as R;
        let all = [
            R::Working,
            R::InputRequired,
            R::AuthRequired,
            R::Completed,
            R::Failed,
            R::Rejected,
            R::Canceled,
        ];
        for state in all {
            assert_eq!(serde_json::to_value(state).unwrap(), state.as_str());
        }
    }

    #[test]
    fn submitted_is_not_a_state_workers_report() {
        assert_eq!(
            event("submitted", Value::Null).unwrap_err().field(),
            Some("state")
        );
    }

    #[test]
    fn error_codes_are_snake_case() {
        let bad = serde_json::json!({"code": "Bad Code", "message": "m"});
        assert_eq!(
            event("failed", bad).unwrap_err().field(),
            Some("error.code")
        );
        assert_eq!(
            ErrorInfo::new("Not Valid", "m", false).code.as_str(),
            "internal_error"
        );
    }
}
