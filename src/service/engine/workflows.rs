//! The workflow engine: carries out what [`crate::workflow::plan`] decides.
//!
//! A run is advanced whenever something it depends on changes: it started,
//! a step's task ended (a store watch), a person answered its gate, it was
//! canceled, its deadline came, the orchestrator started (every unfinished
//! run). Advancing reads the run and its steps' tasks, plans, and acts:
//! submits step tasks, records router choices, cancels tasks, settles the
//! run's state. Advances of one run never overlap; a change that arrives
//! during one makes it run again.
//!
//! Why a crash loses or repeats nothing: a step's task is created in the
//! same store transaction that links it to the step, and a second submit
//! for the step returns the linked task; everything else the plan reads is
//! flushed before it is acted on. So a restart plans from the same facts
//! and gets the same answer.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::telemetry::quiet::warn_quietly;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, Span, debug, error, info, warn};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::runs::waiting_gate;
use super::{Caller, Orchestrator, ServiceError, TaskRequest, lock};
use crate::access::Grants;
use crate::envelope::{Meta, TaskId, Timestamp};
use crate::event::ErrorInfo;
use crate::store::{StepLink, StoreError};
use crate::telemetry::context;
use crate::telemetry::spans::{self, RunMark};
use crate::trigger::{Step, StepKind, Trigger};
use crate::workflow::{Act, RunChange, RunId, RunRecord, RunRefused, RunState, plan, route};

/// How long a step whose task could not be submitted for a passing reason
/// (the store or broker) waits before the run is advanced again.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// The handle the rest of the orchestrator nudges runs through.
#[derive(Clone)]
pub(crate) struct Engine {
    nudges: mpsc::UnboundedSender<RunId>,
    /// Tasks whose end is being watched (one watch per task).
    watched: Arc<Mutex<HashSet<TaskId>>>,
    /// Runs with a deadline timer.
    timed: Arc<Mutex<HashSet<RunId>>>,
    /// Fired when the engine stops: the watches end with it (they hold the
    /// store, which a restart in the same process opens again).
    stopped: CancellationToken,
}

/// The receiving end of the nudges.
pub(crate) type EngineQueue = mpsc::UnboundedReceiver<RunId>;

pub(crate) fn channel() -> (Engine, EngineQueue) {
    let (nudges, queue) = mpsc::unbounded_channel();
    (
        Engine {
            nudges,
            watched: Arc::default(),
            timed: Arc::default(),
            stopped: CancellationToken::new(),
        },
        queue,
    )
}

impl Engine {
    /// Asks for run `id` to be advanced.
    pub(crate) fn nudge(&self, id: RunId) {
        let _ = self.nudges.send(id);
    }

    /// Nudges `run` when `task` ends (once per task).
    pub(super) fn watch(&self, o: &Orchestrator, task: TaskId, run: RunId) {
        if !lock(&self.watched).insert(task) {
            return;
        }
        let store = o.store().clone();
        let engine = self.clone();
        let mut watch = store.watch(task);
        let stopped = self.stopped.clone();
        tokio::spawn(async move {
            let live = matches!(store.state(task), Ok(Some(s)) if !s.is_terminal());
            drop(store);
            if live {
                tokio::select! {
                    () = watch.ended() => {}
                    () = stopped.cancelled() => return,
                }
            }
            lock(&engine.watched).remove(&task);
            engine.nudge(run);
        });
    }

    /// Nudges `run` at its deadline (once per run).
    fn time(&self, run: &RunRecord) {
        let Some(deadline) = run.deadline else { return };
        if !lock(&self.timed).insert(run.run_id) {
            return;
        }
        let engine = self.clone();
        let id = run.run_id;
        tokio::spawn(async move {
            tokio::time::sleep(deadline.remaining()).await;
            lock(&engine.timed).remove(&id);
            engine.nudge(id);
        });
    }

    /// Nudges `run` after `delay`.
    fn later(&self, run: RunId, delay: Duration) {
        let engine = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            engine.nudge(run);
        });
    }
}

/// Advances runs as they are nudged, until `stop`; first nudges every run
/// that has not ended.
pub(crate) async fn drive(o: Orchestrator, mut queue: EngineQueue, stop: CancellationToken) {
    match o.store().live_runs() {
        Ok(live) => {
            if !live.is_empty() {
                info!(runs = live.len(), "resuming unfinished runs");
            }
            for id in live {
                o.inner.engine.nudge(id);
            }
        }
        Err(e) => warn!(error = %e, "unfinished runs could not be listed: they resume when nudged"),
    }
    let (done, mut finished) = mpsc::unbounded_channel::<RunId>();
    // Runs being advanced; `true`: nudged again meanwhile.
    let mut busy: HashMap<RunId, bool> = HashMap::new();
    // The advances under way: waited for once stopped (within the loops'
    // bound), so none is cut between its writes by the stop itself.
    let advancing = tokio_util::task::TaskTracker::new();
    let spawn = |id: RunId| {
        let o = o.clone();
        let done = done.clone();
        advancing.spawn(async move {
            match advance(&o, id).await {
                Ok(()) => {}
                // Reading it again will not help: said once, left alone
                // (`store verify` names it).
                Err(ServiceError::Store(e)) if super::quarantine::unreadable(&e) => {
                    error!(run_id = %id, error = %e, "a run's stored record cannot be read: it is not advanced");
                }
                Err(e) => {
                    warn_quietly!("orchestrator.run_not_advanced", run_id = %id, error = %e, "run not advanced; trying again shortly");
                    o.inner.engine.later(id, RETRY_AFTER);
                }
            }
            let _ = done.send(id);
        });
    };
    loop {
        tokio::select! {
            () = stop.cancelled() => {
                o.inner.engine.stopped.cancel();
                break;
            }
            Some(id) = queue.recv() => match busy.get_mut(&id) {
                Some(again) => *again = true,
                None => {
                    busy.insert(id, false);
                    spawn(id);
                }
            },
            Some(id) = finished.recv() => {
                if busy.remove(&id) == Some(true) {
                    busy.insert(id, false);
                    spawn(id);
                }
            }
        }
    }
    advancing.close();
    advancing.wait().await;
}

/// Whether a failed submit may succeed later (the store or the broker).
pub(super) fn passing(e: &ServiceError) -> bool {
    matches!(
        e,
        ServiceError::Bus(_) | ServiceError::Store(StoreError::Io(_))
    )
}

/// Plans run `id` once and acts on the plan.
async fn advance(o: &Orchestrator, id: RunId) -> Result<(), ServiceError> {
    let store = o.store();
    let Some(run) = store.run(id)? else {
        // A conversation's steps are linked under its task's id.
        return super::conversations::advance(o, id).await;
    };
    if run.state.is_terminal() {
        return Ok(());
    }
    let engine = &o.inner.engine;
    let trigger = match run.trigger() {
        Ok(t) => t,
        Err(message) => {
            let error = ErrorInfo::new("definition_unreadable", message, false);
            settle(o, &run, RunState::Failed, None, Some(error), None).await?;
            return Ok(());
        }
    };
    let tasks = store.run_step_tasks(id)?;
    for t in tasks.values().filter(|t| !t.state.is_terminal()) {
        engine.watch(o, t.task_id, id);
    }
    engine.time(&run);
    let decided = plan(&trigger, &run, &tasks, Timestamp::now());
    let mut again = false;
    for act in decided.acts {
        match act {
            Act::Start {
                step,
                agent,
                action,
                params,
            } => match start_step(o, &trigger, &run, &step, agent, action, params).await {
                Ok(task) => engine.watch(o, task, id),
                Err(e) if passing(&e) => {
                    warn_quietly!("orchestrator.step_not_submitted", run_id = %id, step = %step.id, error = %e, "step not submitted; trying again shortly");
                    engine.later(id, RETRY_AFTER);
                }
                Err(e) => {
                    let step = step.id;
                    let error =
                        ErrorInfo::new("step_refused", format!("step `{step}`: {e}"), false);
                    change(o, id, RunChange::StepFailed { step, error }).await?;
                    again = true;
                }
            },
            Act::Route { step, text, agents } => {
                let change_made = match route::choose_parts(&text, &o.catalog(), &agents) {
                    Some(choice) => {
                        let span = mark(&run, RunMark::Route(&step));
                        span.set_attribute("agent", choice.agent.to_string());
                        span.set_attribute("skill", choice.skill.clone());
                        span.set_attribute("score", i64::from(choice.score));
                        span.set_attribute("matched", choice.matched.join(", "));
                        span.set_attribute("parts", (choice.also.len() + 1) as i64);
                        span.in_scope(|| info!(run_id = %id, step = %step, agent = %choice.agent, skill = %choice.skill, "routed"));
                        RunChange::Route { step, choice }
                    }
                    None => RunChange::StepFailed {
                        error: ErrorInfo::new(
                            "no_route",
                            format!("step `{step}`: no agent's skills or signals match `{text}`"),
                            false,
                        ),
                        step,
                    },
                };
                change(o, id, change_made).await?;
                again = true;
            }
            Act::Cancel(task) => {
                let caller = Caller::new(format!("run:{id}"), Grants::all());
                match o.cancel(task, &caller).await {
                    Ok(_) | Err(ServiceError::NotCancelable { .. }) => {}
                    Err(e) => {
                        warn_quietly!("orchestrator.step_not_canceled", run_id = %id, task_id = %task, error = %e, "step task not canceled; trying again shortly");
                        engine.later(id, RETRY_AFTER);
                    }
                }
            }
        }
    }
    if again {
        engine.nudge(id);
        return Ok(());
    }
    if decided.state != run.state {
        let gate =
            waiting_gate(&trigger, decided.state, &decided.steps).map(|(step, _)| step.to_string());
        let moved = settle(
            o,
            &run,
            decided.state,
            decided.result,
            decided.error,
            gate.clone(),
        )
        .await?;
        // `gate` is found only for a run that now waits.
        if moved && let Some(step) = gate {
            mark(&run, RunMark::Wait(&step))
                .in_scope(|| info!(run_id = %id, step = %step, "run waits at its gate"));
        }
    }
    Ok(())
}

/// Records a change the engine made; whether it was made. A run that
/// moved meanwhile is advanced again instead.
async fn change(o: &Orchestrator, id: RunId, c: RunChange) -> Result<bool, ServiceError> {
    match o.store().change_run(id, c, "orchestrator").await {
        Ok(_) => Ok(true),
        Err(StoreError::RunRefused(RunRefused::Stale { .. } | RunRefused::Ended { .. })) => {
            o.inner.engine.nudge(id);
            Ok(false)
        }
        Err(e) => Err(e.into()),
    }
}

/// Moves `run` to `state`; whether it moved (a run that moved meanwhile
/// is advanced again instead).
async fn settle(
    o: &Orchestrator,
    run: &RunRecord,
    state: RunState,
    result: Option<serde_json::Value>,
    error: Option<ErrorInfo>,
    gate: Option<String>,
) -> Result<bool, ServiceError> {
    // The code, not the message: a message may quote what a handler saw.
    let why = error
        .as_ref()
        .map(|e| format!("the run failed: {}", e.code.as_str()));
    let c = RunChange::Settle {
        from: run.state,
        state,
        result,
        error,
        gate,
    };
    if !change(o, run.run_id, c).await? {
        return Ok(false);
    }
    if state.is_terminal() {
        crate::telemetry::metrics::run_ended(&run.trigger_id, state.as_str(), &run.created_at);
        let span = mark(run, RunMark::End(state.as_str()));
        if let (RunState::Failed, Some(why)) = (state, &why) {
            spans::failed(&span, why);
        }
        span.in_scope(|| info!(run_id = %run.run_id, trigger_id = %run.trigger_id, state = %state, "run ended"));
    } else {
        debug!(run_id = %run.run_id, state = %state, "run moved");
    }
    Ok(true)
}

/// A span marking `what` in `run`'s trace: a child of the run's span, also
/// after a restart.
pub(crate) fn mark(run: &RunRecord, what: RunMark<'_>) -> Span {
    let span = spans::run(&run.trigger_id, &run.run_id.to_string(), what);
    if let Some(stored) = &run.trace {
        context::follow_stored(&span, stored);
    }
    span
}

/// Submits the task of `step` of `run`: the run's starter is its actor
/// and the limit of its scopes; its idempotency key is the run id and step
/// id; it is linked to the step in the transaction that creates it, so
/// submitting it again returns it.
async fn start_step(
    o: &Orchestrator,
    trigger: &Trigger,
    run: &RunRecord,
    step: &Step,
    agent: crate::envelope::AgentName,
    action: crate::envelope::Action,
    params: serde_json::Map<String, serde_json::Value>,
) -> Result<TaskId, ServiceError> {
    let step_id = step.id.as_str();
    let defaults = &trigger.defaults;
    let system_prompt = match &step.kind {
        StepKind::Task(t) => t.system_prompt.clone(),
        StepKind::Route(r) => r.system_prompt.clone(),
        _ => None,
    }
    .or_else(|| trigger.default_system_prompt.clone());
    let request = TaskRequest {
        to: agent,
        action,
        params,
        idempotency_key: format!("run:{}:{step_id}", run.run_id).parse().ok(),
        priority: step.priority.or(defaults.priority),
        response_mode: defaults.response_mode,
        // With cards, each task carries its skill's scopes (added at
        // submit); without, the trigger's.
        required_scopes: if o.catalog().agents.is_empty() {
            trigger.required_scopes.clone()
        } else {
            Vec::new()
        },
        callback_url: None,
        deadline: step
            .timeout
            .or(defaults.timeout)
            .map(|t| Timestamp::now().after(t)),
        max_attempts: step.max_attempts.or(defaults.max_attempts),
        correlation_id: Some(run.correlation_id.clone()),
    };
    let meta = Meta {
        trigger_id: Some(trigger.id.clone()),
        system_prompt,
        run_id: Some(run.run_id.to_string()),
        step_id: Some(step_id.to_string()),
        ..Meta::default()
    };
    let caller = Caller::new(run.started_by.clone(), run.grants.clone());
    let link = StepLink {
        run: run.run_id,
        step: step_id.to_string(),
    };
    let span = mark(run, RunMark::Step(step_id));
    let submitted = o
        .submit_with(request, meta, None, Some(link), &caller)
        .instrument(span)
        .await?;
    Ok(submitted.record().task_id())
}
