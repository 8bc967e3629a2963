//! What the views show of a task the orchestrator holds: its steps, and
//! what its model calls cost.

use super::{Orchestrator, ServiceError};
use crate::envelope::TaskId;
use crate::llm::conversation;
use crate::run::{RunId, StepTask};
use crate::task::TaskState;

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
    /// What the model calls of `task`'s conversation cost, with those of
    /// the conversations its steps held (none when it holds none).
    pub fn model_use(&self, task: TaskId) -> Result<Option<crate::llm::Totals>, ServiceError> {
        if !self.store().status(task)?.is_some_and(|s| s.conversation) {
            return Ok(None);
        }
        self.held_view(task).map(|(_, totals)| Some(totals))
    }

    /// The steps of `task`, a task the orchestrator holds, in the order
    /// they were made, and what its model calls cost, with those of the
    /// conversations its steps held: each held task's steps read once.
    pub fn held_view(
        &self,
        task: TaskId,
    ) -> Result<(Vec<HeldStep>, crate::llm::Totals), ServiceError> {
        let store = self.store();
        let mut steps = Vec::new();
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
                    && let Ok(turn) = conversation::read_turn(&StepTask::from(&status))
                {
                    let usage = turn.usage.unwrap_or_default();
                    totals.add(crate::llm::Totals {
                        model_calls: 1,
                        input_tokens: usage.prompt_tokens,
                        output_tokens: usage.completion_tokens,
                    });
                }
                if t == task {
                    steps.push(HeldStep {
                        step,
                        task_id: status.task_id,
                        agent: status.agent.to_string(),
                        state: status.state,
                    });
                }
            }
        }
        // Task ids are UUIDv7: made later, larger.
        steps.sort_by_key(|s| s.task_id);
        Ok((steps, totals))
    }
}
