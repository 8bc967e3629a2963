//! Submitting a task: the checks a request must pass (its agent, skill,
//! scopes, params, callback and size), then the store, then the publisher
//! (or, for a conversation the orchestrator holds, the engine).

use super::{Caller, Declared, Orchestrator, ServiceError, TaskRequest};
use crate::envelope::{Meta, Sender, TaskId};
use crate::store::{NewTask, StepLink};
use crate::task::Submitted;
use crate::telemetry::context::StoredTrace;

impl Orchestrator {
    /// Stores a task and publishes it. The same idempotency key with the same
    /// request returns the existing task; with another request it is an
    /// `idempotency_conflict`.
    pub async fn submit(
        &self,
        request: TaskRequest,
        caller: &Caller,
    ) -> Result<Submitted, ServiceError> {
        self.admit().await?;
        self.submit_with(request, Meta::default(), None, None, caller)
            .await
    }

    /// The path of every submit (a face's, a workflow step's, a
    /// conversation's turn or tool call): `request` with `meta`, caused by
    /// `causation` and linked to run step `step` when given.
    pub(super) async fn submit_with(
        &self,
        request: TaskRequest,
        meta: Meta,
        causation: Option<TaskId>,
        step: Option<StepLink>,
        caller: &Caller,
    ) -> Result<Submitted, ServiceError> {
        let declared = self.catalog();
        // A task for an agent that is a prompt is a conversation the
        // orchestrator holds; its turns and its MCP tool calls are tasks
        // for the agent too, their params built from the model's words.
        let turn = meta.turn.is_some() || meta.mcp.is_some();
        let (skill_scopes, conversation) = skill_of(&declared, &request, turn)?;
        let mut envelope = request.envelope(Sender::orchestrator());
        envelope.payload.meta = meta;
        envelope.header.causation_id = causation.map(Into::into);
        // The token grants what the action declares it needs, besides what
        // the request or trigger asked for.
        let scopes = &mut envelope.control.required_scopes;
        scopes.extend(skill_scopes);
        scopes.sort_unstable_by(|a, b| a.as_str().cmp(b.as_str()));
        scopes.dedup();
        // The token's scopes are only ever narrowed from the caller's: a
        // caller lacking one is refused before anything is stored, and
        // before the params are looked at (so it cannot probe the schema).
        caller.require(
            format_args!("`{}` on `{}`", request.action, request.to),
            envelope.control.required_scopes.iter().map(|s| s.as_str()),
        )?;
        self.check_params(&declared, &request, turn).map_err(|e| {
            // A refusal's message may quote a value.
            let secrets = self.inner.config.sensitive_fields.secrets(&request.params);
            ServiceError::BadInput(e.scrubbed(&secrets))
        })?;
        if envelope.control.response_mode == crate::envelope::ResponseMode::Callback
            && let Some(url) = &envelope.control.callback_url
        {
            self.check_target("callback_url", url).await?;
        }
        let size = envelope.encoded_len();
        if size > self.inner.max_envelope {
            return Err(ServiceError::TooLarge {
                size,
                max: self.inner.max_envelope,
            });
        }
        let fingerprint = NewTask::claims(&envelope, step.as_ref()).then(|| request.fingerprint());
        let submitted = self
            .inner
            .store
            .submit(NewTask {
                envelope,
                scope: caller.principal.clone(),
                fingerprint,
                actor: caller.principal.clone(),
                // The span this runs in (the HTTP request's, a child of
                // the caller's `traceparent`) is the parent of every
                // publish of the task.
                trace: Some(StoredTrace::of(&tracing::Span::current())),
                step,
                conversation,
            })
            .await?;
        if let Submitted::Created(record) = &submitted {
            self.created(record, conversation).await;
        }
        Ok(submitted)
    }

    /// Sets a task just stored on its way: its deadline watched, then
    /// published (or, held for a conversation, handed to the engine), and
    /// its callback owed.
    async fn created(&self, record: &crate::task::TaskRecord, conversation: bool) {
        self.inner.deadlines.watch(&record.envelope).await;
        if conversation {
            self.inner
                .engine
                .nudge(crate::run::RunId::of_conversation(record.task_id()));
        } else {
            self.inner.publisher.now(record).await;
        }
        if record.envelope.control.response_mode == crate::envelope::ResponseMode::Callback {
            self.callback_owed(record.task_id());
        }
    }

    /// The params' checks ([`Declared::check_params`]); a turn's params
    /// are the model request the orchestrator built, so no schema.
    fn check_params(
        &self,
        declared: &Declared,
        request: &TaskRequest,
        turn: bool,
    ) -> Result<(), crate::codec::DecodeError> {
        if turn {
            return Declared::check_form(&request.params);
        }
        declared.check_params(&request.to, request.action.as_str(), &request.params)
    }
}

/// The scopes `request`'s skill declares it needs, and whether the task is
/// a conversation the orchestrator holds (a task for an agent that is a
/// prompt, not one of its turns): none and no when no agent is declared.
fn skill_of(
    declared: &Declared,
    request: &TaskRequest,
    turn: bool,
) -> Result<(Vec<crate::envelope::Scope>, bool), ServiceError> {
    if declared.agents.is_empty() {
        return Ok((Vec::new(), false));
    }
    let card = declared
        .agents
        .get(&request.to)
        .ok_or_else(|| ServiceError::UnknownAgent(request.to.clone()))?;
    let Some(skill) = card.skill(request.action.as_str()) else {
        return Err(ServiceError::UnknownAction {
            agent: request.to.clone(),
            action: request.action.to_string(),
        });
    };
    Ok((skill.scopes.clone(), !turn && card.held().is_some()))
}
