//! One run of a workflow: plans it and carries the plan out (submits
//! step tasks, records router choices, cancels tasks, settles the run).

use crate::telemetry::quiet::warn_quietly;
use tracing::{Instrument, debug, info};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::handle::RETRY_AFTER;
use crate::access::Grants;
use crate::envelope::{Meta, TaskId, Timestamp};
use crate::event::ErrorInfo;
use crate::run::{
    Act, RunChange, RunId, RunRecord, RunRefused, RunState, plan, route, waiting_gate,
};
use crate::service::{Caller, Orchestrator, ServiceError, TaskRequest};
use crate::store::{StepLink, StoreError};
use crate::telemetry::spans::{self, RunMark};
use crate::trigger::{Step, StepKind, Trigger};

/// Plans run `id` once and acts on the plan.
pub(super) async fn advance(o: &Orchestrator, id: RunId) -> Result<(), ServiceError> {
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
            let error = ErrorInfo::new("definition_unreadable", message.to_string(), false);
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
                Err(e) if e.is_passing() => {
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
                        let span = run.span(RunMark::Route(&step));
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
            run.span(RunMark::Wait(&step))
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
        let span = run.span(RunMark::End(state.as_str()));
        if let (RunState::Failed, Some(why)) = (state, &why) {
            spans::failed(&span, why);
        }
        span.in_scope(|| info!(run_id = %run.run_id, trigger_id = %run.trigger_id, state = %state, "run ended"));
    } else {
        debug!(run_id = %run.run_id, state = %state, "run moved");
    }
    Ok(true)
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
    let span = run.span(RunMark::Step(step_id));
    let submitted = o
        .submit_with(request, meta, None, Some(link), &caller)
        .instrument(span)
        .await?;
    Ok(submitted.record().task_id())
}
