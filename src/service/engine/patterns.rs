//! The AgentCard types that are not one conversation
//! (`evaluator_optimizer`, `MAKER`; `docs/llm.md`): carries out what
//! their planners ([`crate::llm::patterns`]) decide, each step a task of
//! one of the card's agents, linked to the held task as a conversation's
//! turns and calls are, so the same engine advances them and a restart
//! plans from the same stored facts.

use std::collections::BTreeMap;

use super::held::{Held, finish, submit_step};
use crate::event::ErrorInfo;
use crate::llm::patterns::{self, Kind, Next};
use crate::run::StepTask;
use crate::service::ServiceError;

/// Plans `held`'s task of `kind` once and acts on the plan: whether it
/// acted, and whether the task goes on.
pub(super) async fn advance(
    held: &Held<'_>,
    steps: &BTreeMap<String, StepTask>,
    kind: &Kind,
) -> (Result<(), ServiceError>, bool) {
    let request = crate::llm::model_request::user_message(&held.envelope.payload.params);
    let next = match kind {
        Kind::EvaluatorOptimizer(cfg) => patterns::evaluator_optimizer(cfg, &request, steps),
        Kind::Maker(cfg) => patterns::maker(cfg, &request, steps),
        Kind::Conversation(_) => return (Ok(()), true),
    };
    match next {
        Next::Wait => (Ok(()), true),
        Next::Start(list) => {
            for start in list {
                // The agent's first skill, as a card's workflow runs it.
                let Some(skill) = held
                    .declared
                    .agents
                    .get(&start.agent)
                    .and_then(|a| a.skills().first())
                else {
                    let error = ErrorInfo::new(
                        "step_refused",
                        format!(
                            "step `{}`: agent `{}` is not declared, or has no skill",
                            start.step, start.agent
                        ),
                        false,
                    );
                    return (finish(held, Err(error)).await, false);
                };
                let action = skill.id.clone();
                if let Err(e) =
                    submit_step(held, start.step, start.agent, &action, start.params, None).await
                {
                    return (Err(e), true);
                }
            }
            (Ok(()), true)
        }
        Next::Complete(result) => (finish(held, Ok(result)).await, false),
        Next::Fail(error) => (finish(held, Err(error)).await, false),
    }
}
