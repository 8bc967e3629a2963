//! Workflow runs as callers use them: start one, read one or a list (with
//! every step's state), answer an approval gate, cancel.
//!
//! A caller sees its own runs, or every run with `orch:tasks:read_all`;
//! it answers the gates of its own runs, or of every run with
//! `orch:runs:approve`; it cancels its own runs, or every run with
//! `orch:tasks:cancel_all`.

use std::sync::Arc;
use std::time::Duration;

use opentelemetry::trace::TraceContextExt;
use serde_json::Value;
use tracing::{Span, info};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::run_view::RunView;
use super::{Caller, Orchestrator, ServiceError};
use crate::access::grants;
use crate::codec::DecodeError;
use crate::envelope::{CorrelationId, Timestamp};
use crate::run::{
    CancelRequest, Decision, Origin, RunChange, RunId, RunRecord, RunRefused, RunStarted, RunState,
    plan, waiting_gate,
};
use crate::store::{Fingerprint, NewRun, ScheduleCursor, StoreError};
use crate::telemetry::context::StoredTrace;
use crate::telemetry::spans::{self, RunMark};
use crate::trigger::Trigger;

/// How a run starts, beside its trigger, input and key.
pub(crate) struct RunStart {
    /// What started it.
    pub(crate) origin: Origin,
    /// A scheduled run also moves its schedule's cursor to this time (in
    /// the same transaction).
    pub(crate) slot: Option<Timestamp>,
    /// The context it joins: its correlation id (none: its own).
    pub(crate) context: Option<CorrelationId>,
    /// Where its view is POSTed when it waits and when it ends.
    pub(crate) callback_url: Option<String>,
}

/// What a caller may ask of a run it starts, beside its input and key.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// The context it joins: its correlation id (none: its own).
    pub context: Option<CorrelationId>,
    /// Where its view is POSTed when it waits for its caller and when it
    /// ends (a checked target, as a push config's URL is).
    pub callback_url: Option<String>,
}

/// A person's answer at a gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Go on.
    Approve,
    /// Stop: the run ends `rejected`.
    Reject,
    /// Go on, with this input (the step's result carries it).
    Input,
}

/// What a caller does to a run, for the check of whether it may.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunAct {
    /// Answers its gate (approve, reject, input): its starter, or a caller
    /// with `orch:runs:approve`.
    Answer,
    /// Cancels it: its starter, or a caller with `orch:tasks:cancel_all`.
    Cancel,
}

impl Answer {
    /// Its name: `approve`, `reject` or `input`.
    pub fn as_str(self) -> &'static str {
        match self {
            Answer::Approve => "approve",
            Answer::Reject => "reject",
            Answer::Input => "input",
        }
    }
}

impl Orchestrator {
    /// Starts a run of trigger `id` with `input` (checked against its
    /// schema) for `caller`, who must hold the trigger's scopes; in
    /// `context` (its correlation id, shared by its tasks) when given, else
    /// in a context of its own. The same idempotency key with the same
    /// input and context returns the run it started.
    pub async fn start_run(
        &self,
        id: &str,
        input: Value,
        idempotency_key: Option<String>,
        options: RunOptions,
        caller: &Caller,
    ) -> Result<RunStarted, ServiceError> {
        self.admit().await?;
        let key = idempotency_key.map(|k| (caller.principal.clone(), k));
        let start = RunStart {
            origin: Origin::Request,
            slot: None,
            context: options.context,
            callback_url: options.callback_url,
        };
        self.begin_run(id, input, key, start, caller).await
    }

    /// Starts a run of trigger `id`, with its idempotency key's scope and
    /// key, as `start` says.
    pub(crate) async fn begin_run(
        &self,
        id: &str,
        input: Value,
        key: Option<(String, String)>,
        start: RunStart,
        caller: &Caller,
    ) -> Result<RunStarted, ServiceError> {
        let RunStart {
            origin,
            slot,
            context,
            callback_url,
        } = start;
        let trigger = self.startable(id, caller)?;
        if let Some(url) = &callback_url {
            self.check_target("callback_url", url).await?;
        }
        crate::codec::check_depth("input", [&input], 0).map_err(ServiceError::BadInput)?;
        trigger.check_input(&input).map_err(|e| {
            // The schema's message may quote the value.
            let secrets = self.inner.config.sensitive_fields.secrets_in(&input);
            ServiceError::BadInput(e.scrubbed(&secrets))
        })?;
        let run_id = RunId::new();
        let span = spans::run(id, &run_id.to_string(), RunMark::Start);
        let mut record = RunRecord::new(
            run_id,
            &trigger,
            input.clone(),
            origin,
            caller.principal.clone(),
            caller.grants.clone(),
        );
        record.trace = Some(StoredTrace::of(&span));
        record.callback_url = callback_url;
        // A run in a context of its own has the same fingerprint as before
        // contexts could be given.
        let fingerprint = match &context {
            None => Fingerprint::of(&(id, &input)),
            Some(c) => Fingerprint::of(&(id, &input, c)),
        };
        if let Some(c) = context {
            record.correlation_id = c;
        }
        let started = self
            .inner
            .store
            .start_run(NewRun {
                record,
                key,
                fingerprint,
                schedule: slot.map(|slot| ScheduleCursor {
                    slot,
                    run: Some(run_id),
                    queued: None,
                }),
            })
            .await?;
        if let RunStarted::Created(r) = &started {
            crate::telemetry::metrics::run_started(id);
            span.in_scope(|| tracing::info!(run_id = %r.run_id, trigger_id = %id, "run started"));
            self.inner.engine.nudge(r.run_id);
            if r.callback_url.is_some() {
                self.callback_owed(crate::envelope::TaskId::from_bytes(*r.run_id.as_bytes()));
            }
        }
        Ok(started)
    }

    /// The trigger with this id, as loaded now.
    pub fn trigger(&self, id: &str) -> Option<std::sync::Arc<Trigger>> {
        self.triggers().loaded.get(id).cloned()
    }

    /// The run with this id, if the caller may see it.
    pub async fn run(&self, id: RunId, caller: &Caller) -> Result<Option<RunView>, ServiceError> {
        self.run_when_settled(id, Duration::ZERO, caller).await
    }

    /// The run once it has ended or waits at a gate, or as it is when
    /// `within` has passed (whichever comes first), if the caller may see
    /// it. Only the run's record is read while waiting.
    pub async fn run_when_settled(
        &self,
        id: RunId,
        within: Duration,
        caller: &Caller,
    ) -> Result<Option<RunView>, ServiceError> {
        let store = &self.inner.store;
        let until = tokio::time::Instant::now() + within;
        loop {
            let Some(run) = store.run(id)?.filter(|r| caller.may_see_run(r)) else {
                return Ok(None);
            };
            let settled = run.state.is_terminal() || run.state == RunState::InputRequired;
            if settled || tokio::time::Instant::now() >= until {
                let view = self.view(run)?;
                store.settled().await?;
                return Ok(Some(view));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Trigger `id`, if `caller` may start it (it holds the trigger's
    /// scopes): checked before its input is looked at, so a caller who may
    /// not start it learns nothing of what the input must look like.
    fn startable(&self, id: &str, caller: &Caller) -> Result<Arc<Trigger>, ServiceError> {
        let trigger = self
            .trigger(id)
            .ok_or_else(|| ServiceError::UnknownTrigger(id.to_string()))?;
        caller.require(
            format_args!("trigger `{id}`"),
            trigger.required_scopes.iter().map(|s| s.as_str()),
        )?;
        Ok(trigger)
    }

    /// Refuses a caller who may not start trigger `id`: for a face to ask
    /// before it reads the request's body.
    pub fn may_start(&self, id: &str, caller: &Caller) -> Result<(), ServiceError> {
        self.startable(id, caller).map(|_| ())
    }

    /// Run `id`, if `caller` may `act` on it: one it may see, its own or
    /// with the act's grant.
    fn run_to(&self, id: RunId, act: RunAct, caller: &Caller) -> Result<RunRecord, ServiceError> {
        let run = self.visible_run(id, caller)?;
        let (what, grant) = match act {
            RunAct::Answer => ("answering another principal's run", grants::RUNS_APPROVE),
            RunAct::Cancel => ("canceling another principal's run", grants::CANCEL_ALL),
        };
        caller.require_on_run(&run, what, grant)?;
        Ok(run)
    }

    /// Refuses a caller who may not `act` on run `id`: for a face to ask
    /// before it reads the request's body.
    pub fn may_act_on_run(
        &self,
        id: RunId,
        act: RunAct,
        caller: &Caller,
    ) -> Result<(), ServiceError> {
        self.run_to(id, act, caller).map(|_| ())
    }

    /// The run with this id, if the caller may see it; not found otherwise.
    fn visible_run(&self, id: RunId, caller: &Caller) -> Result<RunRecord, ServiceError> {
        self.inner
            .store
            .run(id)?
            .filter(|r| caller.may_see_run(r))
            .ok_or(ServiceError::Store(StoreError::RunNotFound(id)))
    }

    /// Up to `limit` runs the caller may see, newest first, before run
    /// `before`, of trigger `trigger` and in `state` when given.
    pub async fn runs(
        &self,
        trigger: Option<&str>,
        state: Option<RunState>,
        before: Option<RunId>,
        limit: usize,
        caller: &Caller,
    ) -> Result<Vec<RunView>, ServiceError> {
        let store = &self.inner.store;
        let mut out = Vec::new();
        let mut cursor = before;
        // A caller who sees only its own runs walks past the others.
        while out.len() < limit {
            let page = store.runs(trigger, state, cursor, limit.max(50))?;
            let Some(last) = page.last() else { break };
            cursor = Some(last.run_id);
            let full = page.len() >= limit.max(50);
            for run in page {
                if out.len() < limit && caller.may_see_run(&run) {
                    out.push(self.view(run)?);
                }
            }
            if !full {
                break;
            }
        }
        store.settled().await?;
        Ok(out)
    }

    /// Answers the gate run `id` waits at, as `caller`, with `reason` (and
    /// `input` for [`Answer::Input`], checked against the gate's schema).
    /// With an idempotency `key`, the same key from the same caller once
    /// the gate is answered is the run as it is now, answered once.
    pub async fn answer(
        &self,
        id: RunId,
        answer: Answer,
        reason: String,
        input: Option<Value>,
        key: Option<String>,
        caller: &Caller,
    ) -> Result<RunView, ServiceError> {
        let store = &self.inner.store;
        let run = self.run_to(id, RunAct::Answer, caller)?;
        let earlier = run
            .decisions
            .iter()
            .find(|(_, d)| key.is_some() && d.key == key && d.by == caller.principal);
        if let Some((step, d)) = earlier {
            // The same key with another decision is not a resend.
            if d.approved != (answer != Answer::Reject)
                || (answer == Answer::Input && d.input != input)
            {
                return Err(ServiceError::KeyReused {
                    key: key.unwrap_or_default(),
                    earlier: format!(
                        "another decision at step `{step}` ({})",
                        if d.approved { "approved" } else { "rejected" }
                    ),
                });
            }
            return self
                .run(id, caller)
                .await?
                .ok_or(ServiceError::Store(StoreError::RunNotFound(id)));
        }
        let not_waiting = || {
            StoreError::RunRefused(RunRefused::NotWaiting {
                run: id,
                step: None,
            })
        };
        let trigger = run.trigger().map_err(|_| not_waiting())?;
        let tasks = store.run_step_tasks(id)?;
        let planned = plan(&trigger, &run, &tasks, Timestamp::now());
        let (step, gate) =
            waiting_gate(&trigger, run.state, &planned.steps).ok_or_else(not_waiting)?;
        if answer == Answer::Input {
            let input = input.as_ref().ok_or_else(|| {
                ServiceError::BadInput(DecodeError::MissingField {
                    field: "input".into(),
                })
            })?;
            crate::codec::check_depth("input", [input], 0).map_err(ServiceError::BadInput)?;
            if let Some(schema) = &gate.input_schema {
                let validator = jsonschema::validator_for(schema).map_err(|e| {
                    ServiceError::BadInput(DecodeError::invalid("input_schema", e.to_string()))
                })?;
                crate::codec::check_schema(
                    &validator,
                    input,
                    "input",
                    &format!("step `{step}`'s input_schema"),
                )
                .map_err(|e| {
                    // The schema's message may quote the value.
                    let secrets = self.inner.config.sensitive_fields.secrets_in(input);
                    ServiceError::BadInput(e.scrubbed(&secrets))
                })?;
            }
        }
        let decision = Decision {
            approved: answer != Answer::Reject,
            by: caller.principal.clone(),
            reason,
            input,
            key,
            at: Timestamp::now(),
        };
        let change = RunChange::Decide {
            step: step.to_string(),
            decision,
        };
        let decided = store.change_run(id, change, &caller.principal).await?;
        // In the run's trace, linked to the request that answered.
        let span = run.span(RunMark::Answer(step, answer.as_str()));
        span.add_link(Span::current().context().span().span_context().clone());
        span.set_attribute("decided_by", caller.principal.clone());
        span.in_scope(|| info!(run_id = %id, step = %step, answer = answer.as_str(), by = %caller.principal, "gate answered"));
        self.inner.engine.nudge(id);
        // As the engine leaves it: moved on (its record changed again) or
        // waiting at another gate.
        let answered = step.to_string();
        self.run_once(id, caller, |view| {
            view.updated_at != decided.updated_at
                || view.waiting.as_ref().is_some_and(|w| w.step != answered)
        })
        .await
    }

    /// Run `id` as the caller sees it once `settled` holds for it (the
    /// engine acted on a change just made), or as it is after
    /// [`ACTED_WITHIN`].
    async fn run_once(
        &self,
        id: RunId,
        caller: &Caller,
        settled: impl Fn(&RunView) -> bool,
    ) -> Result<RunView, ServiceError> {
        let until = tokio::time::Instant::now() + ACTED_WITHIN;
        loop {
            let view = self
                .run(id, caller)
                .await?
                .ok_or(ServiceError::Store(StoreError::RunNotFound(id)))?;
            if settled(&view) || tokio::time::Instant::now() >= until {
                return Ok(view);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Cancels run `id` (idempotent while it runs): its running steps are
    /// canceled and it ends `canceled`.
    pub async fn cancel_run(
        &self,
        id: RunId,
        reason: String,
        caller: &Caller,
    ) -> Result<RunView, ServiceError> {
        let store = &self.inner.store;
        self.run_to(id, RunAct::Cancel, caller)?;
        let request = CancelRequest {
            by: caller.principal.clone(),
            reason,
            at: Timestamp::now(),
        };
        match store
            .change_run(id, RunChange::Cancel(request), &caller.principal)
            .await
        {
            Ok(_) => {}
            // Canceling a canceled run is done already.
            Err(StoreError::RunRefused(RunRefused::Ended {
                state: RunState::Canceled,
                ..
            })) => {}
            Err(e) => return Err(e.into()),
        }
        self.inner.engine.nudge(id);
        // As the engine leaves it: canceled (its steps' tasks too).
        self.run_once(id, caller, |view| view.state.is_terminal())
            .await
    }
}

/// How often a wait for a run looks at its record again.
const POLL: Duration = Duration::from_millis(100);

/// How long an answer or a cancel waits for the engine to act on it
/// before it shows the run as it is.
const ACTED_WITHIN: Duration = Duration::from_secs(5);
