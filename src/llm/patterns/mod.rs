//! The AgentCard types that need a model (`docs/llm.md`, "Workflow types
//! that need a model"), each a task the orchestrator holds, its steps
//! tasks of other agents linked to it:
//!
//! - `orchestrator`, `iterative_planner`: a conversation whose tools are
//!   the card's `agents`, the model planning and delegating within
//!   `plan_iterations` model calls that call tools (one more answers);
//! - `router` with a `model`: one model call that must call one of the
//!   card's `agents`; that agent's result is the answer;
//! - `evaluator_optimizer`: the `generator`'s answer, rated by the
//!   `evaluator`, refined until the rating reaches `min_rating` or
//!   `max_refinements` refinements were made ([`evaluator_optimizer()`]);
//! - `MAKER`: samples of the `worker` until one answer is `k` votes ahead
//!   of any other under `match_strategy` ([`maker()`]).
//!
//! [`Kind::of`] (the agent layer's: a card's attributes, read when the
//! card is loaded and when its task is planned) says which; the planners
//! are pure functions of the steps the store holds.

use serde_json::{Map, Value};

use crate::envelope::AgentName;
use crate::event::ErrorInfo;
use crate::run::StepTask;

mod evaluator_optimizer;
mod maker;

pub use crate::agent::kind::{
    Conversation, EvaluatorOptimizer, Kind, Maker, MatchStrategy, Rating,
};
pub use evaluator_optimizer::evaluator_optimizer;
pub use maker::maker;

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

fn message(text: String) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("message".into(), Value::String(text));
    m
}

/// A result as text: a string as it is, anything else as JSON.
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The error of a step that ended other than completed: its own code.
fn step_error(name: &str, t: &StepTask) -> ErrorInfo {
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

#[cfg(test)]
mod testing {
    use super::Next;
    use crate::envelope::{TaskId, Timestamp};
    use crate::run::StepTask;
    use crate::task::TaskState;
    use serde_json::Value;

    pub fn done(result: Value) -> StepTask {
        StepTask {
            task_id: TaskId::new(),
            state: TaskState::Completed,
            result: Some(result),
            error: None,
            updated_at: Timestamp::now(),
        }
    }

    pub fn running() -> StepTask {
        StepTask {
            state: TaskState::Working,
            result: None,
            ..done(Value::Null)
        }
    }

    pub fn started(next: &Next) -> Vec<String> {
        match next {
            Next::Start(s) => s.iter().map(|s| s.step.clone()).collect(),
            other => panic!("{other:?}"),
        }
    }
}
