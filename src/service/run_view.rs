//! Runs as callers see them: a run's view, its steps' states from the
//! same plan the engine makes, their details from their tasks (or, for a
//! step without a task of its own, from what the plan says it came to).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Orchestrator, ServiceError};
use crate::envelope::{CorrelationId, TaskId, Timestamp};
use crate::event::ErrorInfo;
use crate::run::{
    CancelRequest, Decision, Origin, RouteChoice, RunId, RunRecord, RunState, StepState, StepTask,
    plan, waiting_gate,
};
use crate::task::{TaskState, TaskStatus};
use crate::trigger::StepKind;

/// A run as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunView {
    /// Its id.
    pub run_id: RunId,
    /// The trigger it runs.
    pub trigger_id: String,
    /// Where it stands.
    pub state: RunState,
    /// Its input.
    pub input: Value,
    /// Its result (the last step's), once completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
    /// The gate it waits at, when `input_required`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<Waiting>,
    /// Who started it.
    pub started_by: String,
    /// How.
    pub origin: Origin,
    /// The digest of the definition it runs.
    pub definition_hash: String,
    /// Shared by its tasks.
    pub correlation_id: CorrelationId,
    /// Its trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// The trace's page in the Jaeger UI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_url: Option<String>,
    /// When it must have ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Timestamp>,
    /// A cancel asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel: Option<CancelRequest>,
    /// Every step, in definition order (branches after their step).
    pub steps: Vec<StepView>,
    /// What the model calls of its steps' conversations cost
    /// (`docs/llm.md`), when any step holds one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_use: Option<crate::llm::Totals>,
    /// When it started.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
}

/// The gate a run waits at.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Waiting {
    /// The approval step.
    pub step: String,
    /// What the person is asked.
    pub prompt: String,
    /// The input the gate asks for (answered with `/input`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Value>,
}

/// One step of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepView {
    /// Its id.
    pub id: String,
    /// `task`, `parallel`, `approval` or `route`.
    pub kind: String,
    /// The parallel step it is a branch of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch_of: Option<String>,
    /// The step it compensates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compensates: Option<String>,
    /// Where it stands.
    pub state: StepState,
    /// Its task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<TaskId>,
    /// Its task's own state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_state: Option<TaskState>,
    /// The agent its task is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Its task's attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// Its result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Its error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
    /// The answer at its gate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
    /// Its router's choice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<RouteChoice>,
    /// When its task was created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Timestamp>,
    /// When its task ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<Timestamp>,
}

impl Orchestrator {
    /// The view of a run: its steps' states from the same plan the engine
    /// makes, their details from their tasks.
    pub(super) fn view(&self, run: RunRecord) -> Result<RunView, ServiceError> {
        let statuses = self.inner.store.run_tasks(run.run_id)?;
        let mut steps = Vec::new();
        let mut waiting = None;
        if let Ok(trigger) = run.trigger() {
            let planned = plan(&trigger, &run, &step_tasks(&statuses), Timestamp::now());
            waiting =
                waiting_gate(&trigger, run.state, &planned.steps).map(|(step, gate)| Waiting {
                    step: step.to_string(),
                    prompt: gate.prompt.clone(),
                    input_schema: gate.input_schema.clone(),
                });
            for placed in trigger.placed() {
                let id = &placed.step.id;
                let status = statuses.get(id);
                let state = planned.steps.get(id).copied().unwrap_or(StepState::Pending);
                // What the plan says it came to: a fan-out's merge, a
                // gate's answer, a template that would not render.
                let ended = planned.ended.get(id);
                let (started_at, ended_at) = step_times(placed.step, &statuses, ended.is_some());
                steps.push(StepView {
                    id: id.clone(),
                    kind: placed.step.kind_name().to_string(),
                    branch_of: placed.branch_of.map(str::to_string),
                    compensates: placed.compensates.map(str::to_string),
                    state,
                    task_id: status.map(|s| s.task_id),
                    task_state: status.map(|s| s.state),
                    agent: status.map(|s| s.agent.to_string()),
                    attempt: status.map(|s| s.attempt),
                    result: status
                        .and_then(|s| s.result.clone())
                        .or_else(|| ended.map(|e| e.result.clone()).filter(|r| !r.is_null())),
                    error: status
                        .and_then(|s| s.error.clone())
                        .or_else(|| run.step_errors.get(id).cloned())
                        .or_else(|| ended.and_then(|e| e.error.clone())),
                    decision: run.decisions.get(id).cloned(),
                    route: run.routes.get(id).cloned(),
                    started_at,
                    ended_at,
                });
            }
        }
        let mut model_use: Option<crate::llm::Totals> = None;
        for status in statuses.values().filter(|s| s.conversation) {
            if let Some(used) = self.model_use(status.task_id)? {
                model_use.get_or_insert_default().add(used);
            }
        }
        let trace_id = run.trace.as_ref().and_then(|t| t.trace_id());
        Ok(RunView {
            run_id: run.run_id,
            trigger_id: run.trigger_id,
            state: run.state,
            input: run.input,
            result: run.result,
            error: run.error,
            waiting,
            started_by: run.started_by,
            origin: run.origin,
            definition_hash: run.definition_hash,
            correlation_id: run.correlation_id,
            trace_url: trace_id.as_deref().map(|t| self.trace_url(t)),
            trace_id,
            deadline: run.deadline,
            cancel: run.cancel,
            steps,
            model_use,
            created_at: run.created_at,
            updated_at: run.updated_at,
        })
    }
}

/// When `step` started and, once it `ended`, ended: its task's times, or,
/// for a fan-out, its first branch's start and its last branch's end.
fn step_times(
    step: &crate::trigger::Step,
    statuses: &BTreeMap<String, TaskStatus>,
    ended: bool,
) -> (Option<Timestamp>, Option<Timestamp>) {
    let tasks: Vec<&TaskStatus> = match &step.kind {
        StepKind::Parallel(p) => p
            .branches
            .iter()
            .filter_map(|b| statuses.get(&b.id))
            .collect(),
        _ => statuses.get(&step.id).into_iter().collect(),
    };
    let started = tasks.iter().map(|t| t.created_at).min();
    let over = ended && tasks.iter().all(|t| t.state.is_terminal());
    let finished = over
        .then(|| tasks.iter().map(|t| t.updated_at).max())
        .flatten();
    (started, finished)
}

/// What the plan reads of a run's step tasks.
pub(super) fn step_tasks(statuses: &BTreeMap<String, TaskStatus>) -> BTreeMap<String, StepTask> {
    statuses
        .iter()
        .map(|(step, status)| (step.clone(), StepTask::from(status)))
        .collect()
}
