//! What a held task does next, as its planner says: start steps, wait,
//! answer or fail; and what the planners share to say it.

use serde_json::{Map, Value};

use crate::envelope::AgentName;
use crate::event::ErrorInfo;
use crate::run::StepTask;

/// What a held task does next.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// Start these steps: a task of `agent`'s first skill with `params`.
    Start(Vec<Start>),
    /// A step runs.
    Wait,
    /// The answer.
    Complete(Value),
    /// The task fails.
    Fail(ErrorInfo),
}

/// A step to start.
#[derive(Debug, Clone, PartialEq)]
pub struct Start {
    /// Its name among the task's steps.
    pub step: String,
    /// The agent.
    pub agent: AgentName,
    /// Its params.
    pub params: Map<String, Value>,
}

/// A step's params: `text` as its message.
pub(super) fn message(text: String) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("message".into(), Value::String(text));
    m
}

/// A result as text: a string as it is, anything else as JSON.
pub(super) fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The error of a step that ended other than completed: its own code.
pub(super) fn step_error(name: &str, t: &StepTask) -> ErrorInfo {
    match &t.error {
        Some(e) => ErrorInfo {
            message: format!("step `{name}`: {}", e.message),
            retryable: false,
            ..e.clone()
        },
        None => ErrorInfo::new(
            "step_failed",
            format!("step `{name}`: it ended {}", t.state),
            false,
        ),
    }
}
