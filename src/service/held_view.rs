//! What the views show of a task the orchestrator holds: its steps, and
//! what its model calls cost.

use super::{Orchestrator, ServiceError};
use crate::envelope::TaskId;
use crate::llm::plan;
use crate::task::TaskState;
use crate::workflow::{RunId, StepTask};

/// One step of a held task, as its view lists it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HeldStep {
    /// Its name (`turn-2`, `turn-1.call-0`, `generate-1`, `sample-3`).
    pub step: String,
    /// Its task.
    pub task_id: TaskId,
    /// The agent that runs it.
    pub agent: String,
    /// Where it stands.
    pub state: TaskState,
}

impl Orchestrator {
    /// The steps of `task` when the orchestrator holds it, in the order
    /// they were made (none for any other task).
    pub fn held_steps(&self, task: TaskId) -> Result<Vec<HeldStep>, ServiceError> {
        let store = self.store();
        if !store.status(task)?.is_some_and(|s| s.conversation) {
            return Ok(Vec::new());
        }
        let mut steps: Vec<HeldStep> = store
            .run_tasks(RunId::of_conversation(task))?
            .into_iter()
            .map(|(step, s)| HeldStep {
                step,
                task_id: s.task_id,
                agent: s.agent.to_string(),
                state: s.state,
            })
            .collect();
        // Task ids are UUIDv7: made later, larger.
        steps.sort_by_key(|s| s.task_id);
        Ok(steps)
    }

    /// What the model calls of `task`'s conversation cost, with those of
    /// the conversations its tool calls held (none when it holds none).
    pub fn model_use(&self, task: TaskId) -> Result<Option<crate::llm::Totals>, ServiceError> {
        let store = self.store();
        if !store.status(task)?.is_some_and(|s| s.conversation) {
            return Ok(None);
        }
        let mut totals = crate::llm::Totals::default();
        // Each conversation at most once (a chain is finite, but bounded
        // all the same).
        let mut todo = vec![task];
        let mut seen = 0;
        while let Some(t) = todo.pop() {
            seen += 1;
            if seen > 10_000 {
                break;
            }
            for (step, status) in store.run_tasks(RunId::of_conversation(t))? {
                // A step held in turn (a tool call's conversation, a
                // pattern's agent that is a prompt) adds its own.
                if status.conversation {
                    todo.push(status.task_id);
                } else if step.starts_with("turn-")
                    && !step.contains(".call-")
                    && let Ok(turn) = plan::read_turn(&StepTask::from(&status))
                {
                    let usage = turn.usage.unwrap_or_default();
                    totals.add(crate::llm::Totals {
                        model_calls: 1,
                        input_tokens: usage.prompt_tokens,
                        output_tokens: usage.completion_tokens,
                    });
                }
            }
        }
        Ok(Some(totals))
    }
}
