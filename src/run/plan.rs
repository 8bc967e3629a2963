//! The engine's one decision, as a pure function: given a run's definition,
//! its own facts and what its steps' tasks did, where does every step stand
//! and what must happen next? The engine runs it after every change and
//! carries out the actions; running it twice on the same facts gives the
//! same answer, so a restart simply runs it again.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::record::RouteChoice;
use super::record::{RunRecord, RunState};
use crate::envelope::{Action, AgentName, TaskId, Timestamp};
use crate::event::ErrorInfo;
use crate::task::{TaskState, TaskStatus};
use crate::trigger::{
    Approval, FailurePolicy, Merge, OnFailure, Parallel, Route, Step, StepKind, TaskStep, Trigger,
    condition, render, render_text,
};

/// What a step's task did, as the store has it: read straight from the
/// stored status (its other fields skipped, not decoded).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct StepTask {
    /// The task.
    pub task_id: TaskId,
    /// Its state.
    pub state: TaskState,
    /// Its result.
    #[serde(default)]
    pub result: Option<Value>,
    /// Its error.
    #[serde(default)]
    pub error: Option<ErrorInfo>,
    /// When it last changed (for `merge: first`, the order branches ended).
    pub updated_at: Timestamp,
}

impl From<&TaskStatus> for StepTask {
    fn from(s: &TaskStatus) -> StepTask {
        StepTask {
            task_id: s.task_id,
            state: s.state,
            result: s.result.clone(),
            error: s.error.clone(),
            updated_at: s.updated_at,
        }
    }
}

/// Where a step stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepState {
    /// Not reached yet.
    Pending,
    /// Its `when` was false.
    Skipped,
    /// Its task is queued or running (the task's own state says which).
    Running,
    /// An approval gate waiting for a person.
    Waiting,
    /// Ended well.
    Completed,
    /// Ended badly.
    Failed,
    /// Canceled.
    Canceled,
    /// Rejected at its gate.
    Rejected,
}

/// Something the engine must do.
#[derive(Debug, Clone, PartialEq)]
pub enum Act {
    /// Submit the task of a step (the store returns the existing one if it
    /// was submitted before).
    Start {
        /// The step (its timeout, attempts, priority and system prompt
        /// are its task's).
        step: Box<Step>,
        /// The agent.
        agent: AgentName,
        /// The skill.
        action: Action,
        /// The rendered params.
        params: Map<String, Value>,
    },
    /// Choose the agent of a route step for `text`, and record the choice.
    Route {
        /// The step's id.
        step: String,
        /// The rendered request.
        text: String,
        /// The agents it may choose from; empty = every known agent.
        agents: Vec<AgentName>,
    },
    /// Cancel a step's task.
    Cancel(TaskId),
}

/// The decision.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Every step that has a state, by id.
    pub steps: BTreeMap<String, StepState>,
    /// What every step that ended came to (its result or error: a task's,
    /// a gate's answer, a fan-out's merge, a template that would not
    /// render), by id.
    pub ended: BTreeMap<String, StepEnd>,
    /// What to do now.
    pub acts: Vec<Act>,
    /// The state the run should be in.
    pub state: RunState,
    /// The run's result, when it completes.
    pub result: Option<Value>,
    /// The run's error, when it fails.
    pub error: Option<ErrorInfo>,
}

/// What an ended step came to.
#[derive(Debug, Clone, PartialEq)]
pub struct StepEnd {
    /// Its result (null when it has none).
    pub result: Value,
    /// Why it did not complete, when it did not.
    pub error: Option<ErrorInfo>,
}

/// How a step came out, so far.
enum Outcome {
    /// Ended, with what the templates see of it; `cleanup` cancels what
    /// is still running under it.
    Ended {
        state: StepState,
        result: Value,
        error: Option<ErrorInfo>,
        cleanup: Vec<Act>,
    },
    /// Not ended; these acts move it on (none: it waits).
    Going { acts: Vec<Act>, waiting: bool },
}

/// A run's or step's error (never retryable: the step's task had its
/// attempts).
fn error(code: &'static str, message: impl Into<String>) -> ErrorInfo {
    ErrorInfo::new(code, message, false)
}

struct Planner<'a> {
    run: &'a RunRecord,
    tasks: &'a BTreeMap<String, StepTask>,
    /// What templates see: `input`, `steps`, `run`, `trigger`.
    context: Value,
    steps: BTreeMap<String, StepState>,
    ended: BTreeMap<String, StepEnd>,
    /// The text each routed step's task was chosen for: its params see it
    /// as `route.text`.
    route_texts: BTreeMap<String, String>,
}

/// Decides where run `run` (of definition `trigger`) stands, given its
/// steps' tasks, at time `now`.
pub fn plan(
    trigger: &Trigger,
    run: &RunRecord,
    tasks: &BTreeMap<String, StepTask>,
    now: Timestamp,
) -> Plan {
    let mut p = Planner {
        run,
        tasks,
        context: json!({
            "input": run.input,
            "steps": {},
            "run": { "id": run.run_id, "started_by": run.started_by,
                     "correlation_id": run.correlation_id },
            "trigger": { "id": trigger.id },
        }),
        steps: BTreeMap::new(),
        ended: BTreeMap::new(),
        route_texts: BTreeMap::new(),
    };
    let stop = if run.cancel.is_some() {
        Some((RunState::Canceled, None))
    } else if run.deadline.is_some_and(|d| d <= now) {
        Some((
            RunState::Failed,
            Some(error(
                "deadline_exceeded",
                "the run did not end before its deadline",
            )),
        ))
    } else {
        None
    };
    if let Some((state, error)) = stop {
        // Whatever is still running is canceled; the states shown are the
        // tasks'.
        let mut acts = Vec::new();
        for step in trigger.all_steps() {
            if let Some(t) = tasks.get(&step.id) {
                p.steps.insert(step.id.clone(), task_state(t.state));
                if !t.state.is_terminal() {
                    acts.push(Act::Cancel(t.task_id));
                }
            }
        }
        return p.finish(state, None, error, acts);
    }
    let mut last = Value::Null;
    for step in &trigger.steps {
        match p.outcome(step) {
            Outcome::Going { acts, waiting } => {
                let state = if waiting && acts.is_empty() {
                    RunState::InputRequired
                } else {
                    RunState::Working
                };
                return p.finish(state, None, None, acts);
            }
            Outcome::Ended {
                state: StepState::Completed | StepState::Skipped,
                result,
                cleanup,
                ..
            } => {
                if !result.is_null() {
                    last = result;
                }
                if !cleanup.is_empty() {
                    // A fan-out that ended early: its stragglers are
                    // canceled before anything else starts.
                    return p.finish(RunState::Working, None, None, cleanup);
                }
            }
            Outcome::Ended {
                state: StepState::Rejected,
                cleanup,
                ..
            } => return p.finish(RunState::Rejected, None, None, cleanup),
            Outcome::Ended { error, cleanup, .. } => {
                let error = error.unwrap_or_else(|| {
                    self::error("step_failed", format!("step `{}` failed", step.id))
                });
                match &step.on_failure {
                    OnFailure::Continue => {
                        if !cleanup.is_empty() {
                            return p.finish(RunState::Working, None, None, cleanup);
                        }
                    }
                    OnFailure::Fail => {
                        return p.finish(RunState::Failed, None, Some(error), cleanup);
                    }
                    OnFailure::Compensate(c) => match p.outcome(c) {
                        Outcome::Going { mut acts, .. } => {
                            acts.extend(cleanup);
                            return p.finish(RunState::Working, None, None, acts);
                        }
                        Outcome::Ended { .. } => {
                            return p.finish(RunState::Failed, None, Some(error), cleanup);
                        }
                    },
                }
            }
        }
    }
    p.finish(RunState::Completed, Some(last), None, Vec::new())
}

fn task_state(state: TaskState) -> StepState {
    match state {
        TaskState::Completed => StepState::Completed,
        TaskState::Failed => StepState::Failed,
        TaskState::Canceled => StepState::Canceled,
        TaskState::Rejected => StepState::Rejected,
        _ => StepState::Running,
    }
}

impl Planner<'_> {
    fn finish(
        self,
        state: RunState,
        result: Option<Value>,
        error: Option<ErrorInfo>,
        acts: Vec<Act>,
    ) -> Plan {
        Plan {
            steps: self.steps,
            ended: self.ended,
            acts,
            state,
            result,
            error,
        }
    }

    /// Records what templates see of an ended step.
    fn ended(
        &mut self,
        step: &Step,
        state: StepState,
        result: Value,
        error: Option<ErrorInfo>,
        cleanup: Vec<Act>,
    ) -> Outcome {
        self.steps.insert(step.id.clone(), state);
        self.ended.insert(
            step.id.clone(),
            StepEnd {
                result: result.clone(),
                error: error.clone(),
            },
        );
        let task_id = self.tasks.get(&step.id).map(|t| t.task_id);
        self.context["steps"][&step.id] = json!({
            "state": state, "result": result, "error": error, "task_id": task_id,
        });
        Outcome::Ended {
            state,
            result,
            error,
            cleanup,
        }
    }

    fn outcome(&mut self, step: &Step) -> Outcome {
        // A step that started is past its `when`.
        let started = self.tasks.contains_key(&step.id)
            || self.run.decisions.contains_key(&step.id)
            || self.run.step_errors.contains_key(&step.id)
            || self.run.routes.contains_key(&step.id)
            || step
                .walk()
                .iter()
                .skip(1)
                .any(|s| self.tasks.contains_key(&s.id));
        if !started && let Some(when) = &step.when {
            match condition(when, &self.context) {
                Ok(true) => {}
                Ok(false) => {
                    return self.ended(step, StepState::Skipped, Value::Null, None, Vec::new());
                }
                Err(e) => {
                    let e = error("template_error", format!("step `{}` when: {e}", step.id));
                    return self.ended(step, StepState::Failed, Value::Null, Some(e), Vec::new());
                }
            }
        }
        match &step.kind {
            StepKind::Task(t) => {
                self.task(step, || Ok((t.agent.clone(), t.action.clone())), &t.params)
            }
            StepKind::Route(r) => {
                if !self.tasks.contains_key(&step.id)
                    && !self.run.routes.contains_key(&step.id)
                    && !self.run.step_errors.contains_key(&step.id)
                {
                    return match render_text(&r.text, &self.context) {
                        Ok(text) => {
                            self.steps.insert(step.id.clone(), StepState::Running);
                            Outcome::Going {
                                acts: vec![Act::Route {
                                    step: step.id.clone(),
                                    text,
                                    agents: r.agents.clone(),
                                }],
                                waiting: false,
                            }
                        }
                        Err(e) => {
                            let e = error("template_error", format!("step `{}`: {e}", step.id));
                            self.ended(step, StepState::Failed, Value::Null, Some(e), Vec::new())
                        }
                    };
                }
                let choice = self.run.routes.get(&step.id).cloned();
                if let Some(c) = &choice {
                    if !c.also.is_empty() {
                        return self.route_parts(step, r, c);
                    }
                    self.route_texts.insert(step.id.clone(), c.text.clone());
                }
                self.task(
                    step,
                    || {
                        let c = choice.ok_or("the route was chosen but not recorded")?;
                        let action = c
                            .skill
                            .parse()
                            .map_err(|_| "the route chose an invalid skill")?;
                        Ok((c.agent, action))
                    },
                    &r.params,
                )
            }
            StepKind::Approval(_) => match self.run.decisions.get(&step.id) {
                Some(d) if d.approved => {
                    let result = json!({
                        "approved": true, "by": d.by, "reason": d.reason, "input": d.input,
                    });
                    self.ended(step, StepState::Completed, result, None, Vec::new())
                }
                Some(d) => {
                    let e = error(
                        "rejected",
                        format!("rejected at `{}` by {}: {}", step.id, d.by, d.reason),
                    );
                    self.ended(step, StepState::Rejected, Value::Null, Some(e), Vec::new())
                }
                None => {
                    self.steps.insert(step.id.clone(), StepState::Waiting);
                    Outcome::Going {
                        acts: Vec::new(),
                        waiting: true,
                    }
                }
            },
            StepKind::Parallel(p) => self.parallel(step, p),
        }
    }

    /// A step that is one task: ended if its task has, else started.
    fn task(
        &mut self,
        step: &Step,
        target: impl FnOnce() -> Result<(AgentName, Action), &'static str>,
        params: &Map<String, Value>,
    ) -> Outcome {
        if let Some(e) = self.run.step_errors.get(&step.id) {
            let e = e.clone();
            return self.ended(step, StepState::Failed, Value::Null, Some(e), Vec::new());
        }
        if let Some(t) = self.tasks.get(&step.id) {
            let state = task_state(t.state);
            if state == StepState::Running {
                self.steps.insert(step.id.clone(), state);
                return Outcome::Going {
                    acts: Vec::new(),
                    waiting: false,
                };
            }
            let (result, error) = (t.result.clone().unwrap_or(Value::Null), t.error.clone());
            return self.ended(step, state, result, error, Vec::new());
        }
        // A routed step's params see the text it was routed for.
        if let Some(text) = self.route_texts.get(&step.id) {
            self.context["route"] = json!({ "text": text });
        }
        let rendered = target()
            .map_err(|why| format!("step `{}`: {why}", step.id))
            .and_then(|(agent, action)| {
                render(params, &self.context)
                    .map(|params| (agent, action, params))
                    .map_err(|e| format!("step `{}` params: {e}", step.id))
            });
        if let Some(context) = self.context.as_object_mut() {
            context.remove("route");
        }
        match rendered {
            Ok((agent, action, params)) => {
                self.steps.insert(step.id.clone(), StepState::Running);
                Outcome::Going {
                    acts: vec![Act::Start {
                        step: Box::new(step.clone()),
                        agent,
                        action,
                        params,
                    }],
                    waiting: false,
                }
            }
            Err(message) => {
                let e = error("template_error", message);
                self.ended(step, StepState::Failed, Value::Null, Some(e), Vec::new())
            }
        }
    }

    /// A route step whose request was split into parts: one task per
    /// part (`<step>-part-<n>`), on the agent chosen for it, with the
    /// step's params (`route.text` is the part), run at once as a fan-out
    /// whose result is the list of theirs, in order.
    fn route_parts(&mut self, step: &Step, r: &Route, first: &RouteChoice) -> Outcome {
        let mut branches = Vec::new();
        for (i, c) in std::iter::once(first).chain(&first.also).enumerate() {
            let Ok(action) = c.skill.parse() else {
                let e = error(
                    "route_error",
                    format!("step `{}`: the route chose an invalid skill", step.id),
                );
                return self.ended(step, StepState::Failed, Value::Null, Some(e), Vec::new());
            };
            let id = format!("{}-part-{}", step.id, i + 1);
            self.route_texts.insert(id.clone(), c.text.clone());
            branches.push(Step {
                id,
                when: None,
                timeout: step.timeout,
                max_attempts: step.max_attempts,
                priority: step.priority,
                on_failure: OnFailure::Fail,
                kind: StepKind::Task(TaskStep {
                    agent: c.agent.clone(),
                    action,
                    params: r.params.clone(),
                    system_prompt: r.system_prompt.clone(),
                }),
            });
        }
        let parts = Parallel {
            branches,
            merge: Merge::List,
            failure: FailurePolicy::FailFast,
        };
        self.parallel(step, &parts)
    }

    fn parallel(&mut self, step: &Step, p: &Parallel) -> Outcome {
        /// A branch that has ended.
        struct Branch<'s> {
            step: &'s Step,
            state: StepState,
            result: Value,
            error: Option<ErrorInfo>,
            at: Option<Timestamp>,
            /// Failed, and not allowed to (`on_failure: fail`).
            failed: bool,
        }
        let mut acts = Vec::new();
        let mut running = Vec::new();
        let mut ended = Vec::new();
        for b in &p.branches {
            match self.outcome(b) {
                Outcome::Going { acts: a, .. } => {
                    acts.extend(a);
                    if let Some(t) = self.tasks.get(&b.id) {
                        running.push(t.task_id);
                    }
                }
                Outcome::Ended {
                    state,
                    result,
                    error,
                    ..
                } => ended.push(Branch {
                    step: b,
                    state,
                    result,
                    error,
                    at: self.tasks.get(&b.id).map(|t| t.updated_at),
                    failed: matches!(state, StepState::Failed | StepState::Canceled)
                        && matches!(b.on_failure, OnFailure::Fail),
                }),
            }
        }
        let cancel_rest = || {
            running
                .iter()
                .map(|id| Act::Cancel(*id))
                .collect::<Vec<_>>()
        };
        if p.merge == Merge::First {
            let first = ended
                .iter()
                .filter(|b| b.state == StepState::Completed)
                .min_by_key(|b| b.at);
            if let Some(first) = first {
                let result = first.result.clone();
                return self.ended(step, StepState::Completed, result, None, cancel_rest());
            }
        } else if p.failure == FailurePolicy::FailFast
            // The branch that failed first, not one canceled because of
            // it: the same answer before and after the cancel lands.
            && let Some(failed) = ended
                .iter()
                .filter(|b| b.failed)
                .min_by_key(|b| (b.state != StepState::Failed, b.at))
        {
            let why = failed
                .error
                .as_ref()
                .map_or("failed", |e| e.message.as_str());
            let e = error(
                "step_failed",
                format!("branch `{}` of `{}` failed: {why}", failed.step.id, step.id),
            );
            return self.ended(step, StepState::Failed, Value::Null, Some(e), cancel_rest());
        }
        if ended.len() < p.branches.len() {
            self.steps.insert(step.id.clone(), StepState::Running);
            return Outcome::Going {
                acts,
                waiting: false,
            };
        }
        if ended.iter().all(|b| b.failed) {
            let e = error(
                "step_failed",
                format!("every branch of `{}` failed", step.id),
            );
            return self.ended(step, StepState::Failed, Value::Null, Some(e), Vec::new());
        }
        let result = match p.merge {
            Merge::Object => Value::Object(
                ended
                    .into_iter()
                    .map(|b| (b.step.id.clone(), b.result))
                    .collect(),
            ),
            Merge::List => Value::Array(ended.into_iter().map(|b| b.result).collect()),
            // Every branch ended and none completed: all failed (above),
            // or were allowed to fail or skipped.
            Merge::First => Value::Null,
        };
        self.ended(step, StepState::Completed, result, None, Vec::new())
    }
}

/// The approval gate a run in `state` with its steps `planned` waits at:
/// its step id and its settings.
pub fn waiting_gate<'t>(
    trigger: &'t Trigger,
    state: RunState,
    planned: &BTreeMap<String, StepState>,
) -> Option<(&'t str, &'t Approval)> {
    if state != RunState::InputRequired {
        return None;
    }
    trigger
        .all_steps()
        .into_iter()
        .find_map(|step| match &step.kind {
            StepKind::Approval(a) if planned.get(&step.id) == Some(&StepState::Waiting) => {
                Some((step.id.as_str(), a))
            }
            _ => None,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::Grants;
    use crate::run::{CancelRequest, Decision, Origin, RunId};

    fn trigger(yaml: &str) -> Trigger {
        serde_norway::from_str(yaml).unwrap()
    }

    fn run(input: Value) -> RunRecord {
        let t = trigger("id: t\nsteps: [{id: a, agent: x, action: y}]");
        RunRecord::new(
            RunId::new(),
            &t,
            input,
            Origin::Request,
            "alice".into(),
            Grants::all(),
        )
    }

    fn done(state: TaskState, result: Value) -> StepTask {
        StepTask {
            task_id: TaskId::new(),
            state,
            result: Some(result),
            error: None,
            updated_at: Timestamp::now(),
        }
    }

    fn started(acts: &[Act]) -> Vec<(&str, &Map<String, Value>)> {
        acts.iter()
            .filter_map(|a| match a {
                Act::Start { step, params, .. } => Some((step.id.as_str(), params)),
                _ => None,
            })
            .collect()
    }

    const CASCADE: &str = r#"
id: t
steps:
  - { id: a, agent: x, action: y, params: { q: "{{ input.q }}" } }
  - { id: b, agent: x, action: y, params: { n: "{{ steps.a.result.n }}", s: "n={{ steps.a.result.n }}" } }
  - { id: gate, approval: { prompt: "go?" } }
  - { id: c, agent: x, action: y, when: "steps.b.result.ok" }
"#;

    #[test]
    fn a_cascade_moves_one_step_at_a_time_and_keeps_json_types() {
        let t = trigger(CASCADE);
        let mut r = run(serde_json::json!({"q": "hi"}));
        let mut tasks = BTreeMap::new();
        let p = plan(&t, &r, &tasks, Timestamp::now());
        assert_eq!(
            started(&p.acts),
            [(
                "a",
                &serde_json::json!({"q": "hi"}).as_object().unwrap().clone()
            )]
        );
        assert_eq!(p.state, RunState::Working);
        // The same facts give the same plan: a restart starts `a` again,
        // and the store returns its task.
        assert_eq!(plan(&t, &r, &tasks, Timestamp::now()).acts, p.acts);

        tasks.insert(
            "a".into(),
            done(TaskState::Completed, serde_json::json!({"n": 3})),
        );
        let p = plan(&t, &r, &tasks, Timestamp::now());
        let s = started(&p.acts);
        assert_eq!(s[0].0, "b");
        assert_eq!(s[0].1["n"], 3, "a lone placeholder keeps the number");
        assert_eq!(s[0].1["s"], "n=3");

        tasks.insert(
            "b".into(),
            done(TaskState::Completed, serde_json::json!({"ok": false})),
        );
        let p = plan(&t, &r, &tasks, Timestamp::now());
        assert_eq!(p.state, RunState::InputRequired);
        assert!(p.acts.is_empty());
        assert_eq!(p.steps["gate"], StepState::Waiting);

        r.decisions.insert(
            "gate".into(),
            Decision {
                approved: true,
                by: "bob".into(),
                reason: "ok".into(),
                input: None,
                key: None,
                at: Timestamp::now(),
            },
        );
        let p = plan(&t, &r, &tasks, Timestamp::now());
        assert_eq!(p.steps["c"], StepState::Skipped, "its when is false");
        assert_eq!(p.state, RunState::Completed);
        assert_eq!(
            p.result,
            Some(serde_json::json!({"approved": true, "by": "bob", "reason": "ok", "input": null}))
        );

        r.decisions.get_mut("gate").unwrap().approved = false;
        assert_eq!(
            plan(&t, &r, &tasks, Timestamp::now()).state,
            RunState::Rejected
        );
    }

    #[test]
    fn failures_follow_on_failure_and_cancel_and_deadline_stop_everything() {
        let t = trigger(
            r#"
id: t
steps:
  - { id: a, agent: x, action: y, on_failure: continue }
  - { id: b, agent: x, action: y, on_failure: compensate, compensate: { id: undo, agent: x, action: z } }
  - { id: c, agent: x, action: y }
"#,
        );
        let mut r = run(Value::Null);
        let mut tasks = BTreeMap::new();
        tasks.insert("a".into(), done(TaskState::Failed, Value::Null));
        assert_eq!(
            started(&plan(&t, &r, &tasks, Timestamp::now()).acts)[0].0,
            "b"
        );
        tasks.insert("b".into(), done(TaskState::Failed, Value::Null));
        assert_eq!(
            started(&plan(&t, &r, &tasks, Timestamp::now()).acts)[0].0,
            "undo"
        );
        tasks.insert("undo".into(), done(TaskState::Completed, Value::Null));
        let p = plan(&t, &r, &tasks, Timestamp::now());
        assert_eq!(p.state, RunState::Failed);
        assert!(p.acts.is_empty(), "c never starts");

        let mut running = BTreeMap::new();
        running.insert("a".into(), done(TaskState::Working, Value::Null));
        let id = running["a"].task_id;
        r.deadline = Some(Timestamp::now().before(std::time::Duration::from_secs(1)));
        let p = plan(&t, &r, &running, Timestamp::now());
        assert_eq!(
            (p.state, p.acts.clone()),
            (RunState::Failed, vec![Act::Cancel(id)])
        );
        assert_eq!(p.error.unwrap().code.as_str(), "deadline_exceeded");
        r.deadline = None;
        r.cancel = Some(CancelRequest {
            by: "alice".into(),
            reason: String::new(),
            at: Timestamp::now(),
        });
        let p = plan(&t, &r, &running, Timestamp::now());
        assert_eq!(
            (p.state, p.acts),
            (RunState::Canceled, vec![Act::Cancel(id)])
        );
    }

    #[test]
    fn a_fan_out_starts_every_branch_and_merges_by_its_policy() {
        let yaml = |merge: &str, failure: &str| {
            trigger(&format!(
                r#"
id: t
steps:
  - id: fan
    merge: {merge}
    failure: {failure}
    parallel:
      - {{ id: a, agent: x, action: y }}
      - {{ id: b, agent: x, action: y }}
"#
            ))
        };
        let r = run(Value::Null);
        let none = BTreeMap::new();
        let p = plan(&yaml("object", "fail_fast"), &r, &none, Timestamp::now());
        assert_eq!(
            started(&p.acts).iter().map(|s| s.0).collect::<Vec<_>>(),
            ["a", "b"]
        );

        let mut both = BTreeMap::new();
        both.insert("a".into(), done(TaskState::Completed, serde_json::json!(1)));
        both.insert("b".into(), done(TaskState::Completed, serde_json::json!(2)));
        let merged = |m: &str| plan(&yaml(m, "fail_fast"), &r, &both, Timestamp::now()).result;
        assert_eq!(merged("object"), Some(serde_json::json!({"a": 1, "b": 2})));
        assert_eq!(merged("list"), Some(serde_json::json!([1, 2])));

        let mut one_failed = BTreeMap::new();
        one_failed.insert("a".into(), done(TaskState::Failed, Value::Null));
        one_failed.insert("b".into(), done(TaskState::Working, Value::Null));
        let b = one_failed["b"].task_id;
        let p = plan(
            &yaml("object", "fail_fast"),
            &r,
            &one_failed,
            Timestamp::now(),
        );
        assert_eq!((p.state, p.acts), (RunState::Failed, vec![Act::Cancel(b)]));
        let p = plan(
            &yaml("object", "collect"),
            &r,
            &one_failed,
            Timestamp::now(),
        );
        assert_eq!(
            (p.state, p.acts.len()),
            (RunState::Working, 0),
            "collect waits for b"
        );
        one_failed.insert("b".into(), done(TaskState::Completed, serde_json::json!(2)));
        let p = plan(&yaml("list", "collect"), &r, &one_failed, Timestamp::now());
        assert_eq!(
            (p.state, p.result),
            (RunState::Completed, Some(serde_json::json!([null, 2])))
        );

        // The branch that failed is named, also once the other one's
        // cancel has landed.
        let mut b_failed = BTreeMap::new();
        b_failed.insert("b".into(), done(TaskState::Failed, Value::Null));
        b_failed.get_mut("b").unwrap().error = Some(error("boom", "boom"));
        b_failed.insert("a".into(), done(TaskState::Canceled, Value::Null));
        let p = plan(
            &yaml("object", "fail_fast"),
            &r,
            &b_failed,
            Timestamp::now(),
        );
        let why = p.error.map(|e| e.message).unwrap_or_default();
        assert!(why.starts_with("branch `b` of `fan` failed"), "{why}");

        let mut first = BTreeMap::new();
        first.insert("a".into(), done(TaskState::Working, Value::Null));
        first.insert(
            "b".into(),
            done(TaskState::Completed, serde_json::json!("fast")),
        );
        let a = first["a"].task_id;
        let p = plan(&yaml("first", "fail_fast"), &r, &first, Timestamp::now());
        assert_eq!(
            p.acts,
            vec![Act::Cancel(a)],
            "the slower branch is canceled"
        );
    }
}
