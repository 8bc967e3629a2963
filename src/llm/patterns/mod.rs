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

mod evaluator_optimizer;
mod maker;
mod next;

pub use crate::agent::kind::{
    Conversation, EvaluatorOptimizer, Kind, Maker, MatchStrategy, Rating,
};
pub use evaluator_optimizer::evaluator_optimizer;
pub use maker::maker;
pub use next::{Next, Start};
use next::{message, step_error, text};

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
