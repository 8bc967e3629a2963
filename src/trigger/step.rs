//! A trigger's steps: a task for an agent, a parallel fan-out, an approval
//! gate or a router, each with its own `when`, timeout, attempts and
//! failure handling.
//!
//! A step is written as one flat mapping (`id`, then the fields of its
//! kind); it is read through [`RawStep`], which names the field that is
//! wrong, and turned into the typed [`Step`].

use std::num::NonZeroU32;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::envelope::{Action, AgentName, Priority};

/// One step of a trigger.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawStep", into = "RawStep")]
pub struct Step {
    /// Unique within the trigger (branches of a `parallel` step included):
    /// `steps.<id>` in templates, and part of its task's idempotency key.
    pub id: String,
    /// A template expression; when false the step is skipped.
    pub when: Option<String>,
    /// How long the step's task may take, every attempt included
    /// (the task's `control.deadline`).
    pub timeout: Option<Duration>,
    /// The step's task's attempt budget.
    pub max_attempts: Option<NonZeroU32>,
    /// The step's task's queue priority.
    pub priority: Option<Priority>,
    /// What a failure of this step does to the run.
    pub on_failure: OnFailure,
    /// What the step does.
    pub kind: StepKind,
}

/// What a step does.
#[derive(Debug, Clone, PartialEq)]
pub enum StepKind {
    /// Runs one task on an agent.
    Task(TaskStep),
    /// Runs its branches at once and merges their results.
    Parallel(Parallel),
    /// Waits for a person to approve, reject or supply input.
    Approval(Approval),
    /// Picks the agent and skill for a free-text request, then runs it.
    Route(Route),
}

/// A task for one agent.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskStep {
    /// The agent that runs it.
    pub agent: AgentName,
    /// The skill.
    pub action: Action,
    /// Parameters, with `{{ … }}` templates.
    pub params: Map<String, Value>,
    /// Overrides the trigger's system prompt.
    pub system_prompt: Option<String>,
}

/// A fan-out.
#[derive(Debug, Clone, PartialEq)]
pub struct Parallel {
    /// The branches (task or route steps).
    pub branches: Vec<Step>,
    /// How the branches' results become the step's result.
    pub merge: Merge,
    /// What a failed branch does to the others.
    pub failure: FailurePolicy,
}

/// How a fan-out's results are merged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Merge {
    /// An object keyed by branch id.
    #[default]
    Object,
    /// A list, in the branches' order.
    List,
    /// The result of the first branch to complete; the others are canceled.
    First,
}

/// What a failed branch does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailurePolicy {
    /// The first failure cancels the other branches and fails the step.
    #[default]
    FailFast,
    /// Every branch runs to its end; the step fails only if all failed,
    /// and its result holds what completed (failures under `errors`).
    Collect,
}

/// A human gate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Approval {
    /// What the person is asked.
    pub prompt: String,
    /// A JSON Schema for the input a person may supply with `runs input`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Value>,
}

/// A router: the agent and skill are chosen at run time.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    /// The request to route: a template, usually `{{ input.request }}`.
    pub text: String,
    /// The agents it may choose from; empty = every known agent.
    pub agents: Vec<AgentName>,
    /// Parameters for the chosen skill, with templates.
    pub params: Map<String, Value>,
    /// Overrides the trigger's system prompt.
    pub system_prompt: Option<String>,
}

/// What a failed step does to its run.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum OnFailure {
    /// The run fails.
    #[default]
    Fail,
    /// The run goes on; the step's result is null.
    Continue,
    /// This step runs, then the run fails (a saga's compensation).
    Compensate(Box<Step>),
}

impl Step {
    /// The step and its branches (and compensations), depth first.
    pub fn walk(&self) -> Vec<&Step> {
        let mut out = vec![self];
        if let StepKind::Parallel(p) = &self.kind {
            for b in &p.branches {
                out.extend(b.walk());
            }
        }
        if let OnFailure::Compensate(c) = &self.on_failure {
            out.extend(c.walk());
        }
        out
    }

    /// The templates of the step itself, with the field each is in
    /// (branches and compensations not included).
    pub fn templates(&self) -> Vec<(String, &Value)> {
        let mut out = Vec::new();
        match &self.kind {
            StepKind::Task(t) => {
                out.extend(t.params.iter().map(|(k, v)| (format!("params.{k}"), v)));
            }
            StepKind::Route(r) => {
                out.extend(r.params.iter().map(|(k, v)| (format!("params.{k}"), v)));
            }
            StepKind::Parallel(_) | StepKind::Approval(_) => {}
        }
        out
    }

    /// The step's kind, as a word for people.
    pub fn kind_name(&self) -> &'static str {
        match self.kind {
            StepKind::Task(_) => "task",
            StepKind::Parallel(_) => "parallel",
            StepKind::Approval(_) => "approval",
            StepKind::Route(_) => "route",
        }
    }
}

/// A step as written: every field of every kind, each optional.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RawStep {
    id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    agent: Option<AgentName>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    action: Option<Action>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    params: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    system_prompt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    parallel: Option<Vec<Step>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    merge: Option<Merge>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    failure: Option<FailurePolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    approval: Option<Approval>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    route: Option<RawRoute>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    when: Option<String>,
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    timeout: Option<Duration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_attempts: Option<NonZeroU32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    priority: Option<Priority>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    on_failure: Option<RawOnFailure>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    compensate: Option<Box<Step>>,
}

/// `route:` as written.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct RawRoute {
    text: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    agents: Vec<AgentName>,
}

/// `on_failure:` as written: `fail`, `continue` or `compensate` (with the
/// step in `compensate:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum RawOnFailure {
    Fail,
    Continue,
    Compensate,
}

/// Checks a step id: 1 to 64 of `a-z`, `0-9`, `-` and `_`, starting with
/// a letter (it is a template name and part of an idempotency key).
pub fn check_id(id: &str) -> Result<(), BadStepId> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id.as_bytes()[0].is_ascii_lowercase()
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(BadStepId(id.to_string()))
    }
}

/// A step id that is not 1 to 64 of a-z, 0-9, `-` and `_`, starting with
/// a letter.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("step id `{0}`: must be 1 to 64 of a-z, 0-9, `-` and `_`, starting with a letter")]
pub struct BadStepId(pub String);

/// Why a step as written is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StepError {
    /// Its id is not one.
    #[error(transparent)]
    Id(#[from] BadStepId),
    /// Its fields do not make a step.
    #[error("step `{id}`: {problem}")]
    Step {
        /// The step's id.
        id: String,
        /// What is wrong.
        problem: StepProblem,
    },
}

/// What is wrong with a step's fields.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StepProblem {
    /// Not exactly one kind (the kinds' fields found).
    #[error(
        "needs exactly one of `agent` (with `action`), `parallel`, `approval` or `route`; found {}",
        if .0.is_empty() { "none".to_string() } else { .0.join(", ") }
    )]
    Kinds(Vec<&'static str>),
    /// A field another kind of step has.
    #[error("`{field}` does not apply to a {kind} step")]
    NotApplicable {
        /// The field.
        field: &'static str,
        /// The step's kind.
        kind: &'static str,
    },
    /// A task step without its skill.
    #[error("a step with `agent` needs `action`, the skill to run")]
    NoAction,
    /// A parallel step without branches.
    #[error("`parallel` needs at least one branch")]
    NoBranches,
    /// A branch that is not a task or a route.
    #[error("branch `{branch}` is a {kind} step; a branch is a task or a route")]
    BranchKind {
        /// The branch's id.
        branch: String,
        /// Its kind.
        kind: &'static str,
    },
    /// A branch with a compensation.
    #[error(
        "branch `{0}`: `compensate` is for steps of the run, not branches (use it on the parallel step)"
    )]
    BranchCompensates(String),
    /// A compensation that is not a task step.
    #[error("a compensating step is a task step (`agent` and `action`)")]
    CompensationNotTask,
    /// `on_failure: compensate` without the step.
    #[error("`on_failure: compensate` needs the step in `compensate:`")]
    NoCompensation,
    /// A compensation without `on_failure: compensate`.
    #[error("`compensate:` needs `on_failure: compensate`")]
    CompensationUnasked,
}

impl TryFrom<RawStep> for Step {
    type Error = StepError;

    fn try_from(raw: RawStep) -> Result<Step, StepError> {
        check_id(&raw.id)?;
        let id = raw.id;
        let kinds: Vec<&str> = [
            ("agent", raw.agent.is_some()),
            ("parallel", raw.parallel.is_some()),
            ("approval", raw.approval.is_some()),
            ("route", raw.route.is_some()),
        ]
        .iter()
        .filter(|(_, present)| *present)
        .map(|(name, _)| *name)
        .collect();
        let step = |problem: StepProblem| StepError::Step {
            id: id.clone(),
            problem,
        };
        if kinds.len() != 1 {
            return Err(step(StepProblem::Kinds(kinds)));
        }
        let refuse = |fields: &[(&'static str, bool)], kind: &'static str| match fields
            .iter()
            .find(|(_, present)| *present)
        {
            Some((field, _)) => Err(step(StepProblem::NotApplicable { field, kind })),
            None => Ok(()),
        };
        let kind = if let Some(agent) = raw.agent {
            refuse(
                &[
                    ("merge", raw.merge.is_some()),
                    ("failure", raw.failure.is_some()),
                ],
                "task",
            )?;
            let action = raw.action.ok_or_else(|| step(StepProblem::NoAction))?;
            StepKind::Task(TaskStep {
                agent,
                action,
                params: raw.params.unwrap_or_default(),
                system_prompt: raw.system_prompt,
            })
        } else if let Some(branches) = raw.parallel {
            refuse(
                &[
                    ("action", raw.action.is_some()),
                    ("params", raw.params.is_some()),
                    ("system_prompt", raw.system_prompt.is_some()),
                ],
                "parallel",
            )?;
            if branches.is_empty() {
                return Err(step(StepProblem::NoBranches));
            }
            if let Some(b) = branches
                .iter()
                .find(|b| !matches!(b.kind, StepKind::Task(_) | StepKind::Route(_)))
            {
                return Err(step(StepProblem::BranchKind {
                    branch: b.id.clone(),
                    kind: b.kind_name(),
                }));
            }
            if let Some(b) = branches
                .iter()
                .find(|b| matches!(b.on_failure, OnFailure::Compensate(_)))
            {
                return Err(step(StepProblem::BranchCompensates(b.id.clone())));
            }
            StepKind::Parallel(Parallel {
                branches,
                merge: raw.merge.unwrap_or_default(),
                failure: raw.failure.unwrap_or_default(),
            })
        } else if let Some(approval) = raw.approval {
            refuse(
                &[
                    ("action", raw.action.is_some()),
                    ("params", raw.params.is_some()),
                    ("system_prompt", raw.system_prompt.is_some()),
                    ("merge", raw.merge.is_some()),
                    ("failure", raw.failure.is_some()),
                    ("timeout", raw.timeout.is_some()),
                    ("max_attempts", raw.max_attempts.is_some()),
                    ("priority", raw.priority.is_some()),
                ],
                "approval",
            )?;
            StepKind::Approval(approval)
        } else {
            let route = raw.route.unwrap_or_else(|| RawRoute {
                text: String::new(),
                agents: Vec::new(),
            });
            refuse(
                &[
                    ("action", raw.action.is_some()),
                    ("merge", raw.merge.is_some()),
                    ("failure", raw.failure.is_some()),
                ],
                "route",
            )?;
            StepKind::Route(Route {
                text: route.text,
                agents: route.agents,
                params: raw.params.unwrap_or_default(),
                system_prompt: raw.system_prompt,
            })
        };
        let on_failure = match (raw.on_failure, raw.compensate) {
            (None | Some(RawOnFailure::Fail), None) => OnFailure::Fail,
            (Some(RawOnFailure::Continue), None) => OnFailure::Continue,
            (Some(RawOnFailure::Compensate), Some(c)) => {
                if !matches!(c.kind, StepKind::Task(_)) {
                    return Err(step(StepProblem::CompensationNotTask));
                }
                OnFailure::Compensate(c)
            }
            (Some(RawOnFailure::Compensate), None) => {
                return Err(step(StepProblem::NoCompensation));
            }
            (_, Some(_)) => {
                return Err(step(StepProblem::CompensationUnasked));
            }
        };
        Ok(Step {
            id,
            when: raw.when,
            timeout: raw.timeout,
            max_attempts: raw.max_attempts,
            priority: raw.priority,
            on_failure,
            kind,
        })
    }
}

impl From<Step> for RawStep {
    fn from(step: Step) -> RawStep {
        let mut raw = RawStep {
            id: step.id,
            when: step.when,
            timeout: step.timeout,
            max_attempts: step.max_attempts,
            priority: step.priority,
            ..RawStep::default()
        };
        match step.on_failure {
            OnFailure::Fail => {}
            OnFailure::Continue => raw.on_failure = Some(RawOnFailure::Continue),
            OnFailure::Compensate(c) => {
                raw.on_failure = Some(RawOnFailure::Compensate);
                raw.compensate = Some(c);
            }
        }
        match step.kind {
            StepKind::Task(t) => {
                raw.agent = Some(t.agent);
                raw.action = Some(t.action);
                raw.params = Some(t.params);
                raw.system_prompt = t.system_prompt;
            }
            StepKind::Parallel(p) => {
                raw.parallel = Some(p.branches);
                raw.merge = Some(p.merge);
                raw.failure = Some(p.failure);
            }
            StepKind::Approval(a) => raw.approval = Some(a),
            StepKind::Route(r) => {
                raw.route = Some(RawRoute {
                    text: r.text,
                    agents: r.agents,
                });
                raw.params = Some(r.params);
                raw.system_prompt = r.system_prompt;
            }
        }
        raw
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn refused(step: Value) -> StepError {
        let raw: RawStep = serde_json::from_value(step).unwrap();
        Step::try_from(raw).unwrap_err()
    }

    fn problem(step: Value) -> StepProblem {
        match refused(step) {
            StepError::Step { problem, .. } => problem,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn each_way_a_step_is_wrong_has_its_kind() {
        assert!(matches!(refused(json!({"id": "Bad"})), StepError::Id(_)));
        assert_eq!(problem(json!({"id": "s"})), StepProblem::Kinds(vec![]));
        assert_eq!(
            problem(json!({"id": "s", "agent": "a", "action": "x", "approval": {"prompt": "ok?"}})),
            StepProblem::Kinds(vec!["agent", "approval"])
        );
        assert_eq!(
            problem(json!({"id": "s", "agent": "a", "action": "x", "merge": "object"})),
            StepProblem::NotApplicable {
                field: "merge",
                kind: "task"
            }
        );
        assert_eq!(
            problem(json!({"id": "s", "agent": "a"})),
            StepProblem::NoAction
        );
        assert_eq!(
            problem(json!({"id": "s", "parallel": []})),
            StepProblem::NoBranches
        );
        assert_eq!(
            problem(json!({"id": "s", "agent": "a", "action": "x", "on_failure": "compensate"})),
            StepProblem::NoCompensation
        );
        assert_eq!(
            problem(json!({"id": "s", "agent": "a", "action": "x",
                "compensate": {"id": "c", "agent": "a", "action": "undo"}})),
            StepProblem::CompensationUnasked
        );
        // What the file's reader is told names the step.
        assert_eq!(
            refused(json!({"id": "s", "agent": "a"})).to_string(),
            "step `s`: a step with `agent` needs `action`, the skill to run"
        );
    }
}
