//! A task held by the orchestrator while its steps run (a conversation
//! with a model, an evaluator-optimizer, `MAKER`): what its planners act
//! with, how a step of it is submitted, and how it ends.

use serde_json::{Map, Value};
use tracing::info;

use crate::envelope::{AgentName, McpCall, Meta, TaskId};
use crate::event::ErrorInfo;
use crate::run::RunId;
use crate::service::{Caller, Declared, Orchestrator, ServiceError, TaskRequest};
use crate::store::{Applied, Change, StepLink};
use crate::task::{TaskStatus, Transition};

/// What a held task's planners act with.
pub(super) struct Held<'a> {
    pub o: &'a Orchestrator,
    pub status: &'a TaskStatus,
    pub envelope: &'a crate::envelope::Envelope,
    pub card: &'a crate::agent::AgentCard,
    pub declared: &'a Declared,
    /// Its steps act for the task's principal, with at most its scopes.
    pub caller: &'a Caller,
}

/// Ends a held task with `result`, checked against its skill's output
/// schema, or with its error.
pub(super) async fn finish(
    held: &Held<'_>,
    result: Result<Value, ErrorInfo>,
) -> Result<(), ServiceError> {
    let action = held.envelope.payload.action.as_str();
    let result = result.and_then(|v| {
        held.declared
            .check_result(&held.status.agent, action, &v)
            .map(|()| v)
            .map_err(|e| ErrorInfo::new("invalid_output", e.to_string(), false))
    });
    end(held.o, held.status, result).await
}

/// Submits step `step` of a held task: a task of `to`'s skill `action`
/// with `params`, caused by the held task, in its correlation, acting for
/// its principal with at most its scopes, its idempotency key
/// `llm:<task>:<step>`, linked to it as that step; the task's id.
pub(super) async fn submit_step(
    held: &Held<'_>,
    step: String,
    to: AgentName,
    action: &str,
    params: Map<String, Value>,
    mcp: Option<McpCall>,
) -> Result<TaskId, ServiceError> {
    let Held {
        o,
        status,
        envelope,
        caller,
        ..
    } = *held;
    let task = status.task_id;
    let request = TaskRequest {
        to,
        action: action.parse().map_err(|e: crate::envelope::ParseError| {
            ServiceError::BadInput(crate::codec::DecodeError::invalid("action", e))
        })?,
        params,
        idempotency_key: format!("llm:{task}:{step}").parse().ok(),
        priority: Some(envelope.control.priority),
        response_mode: None,
        required_scopes: Vec::new(),
        callback_url: None,
        deadline: envelope.control.deadline,
        max_attempts: None,
        correlation_id: Some(envelope.header.correlation_id.clone()),
    };
    let mut callers = envelope.payload.meta.callers.clone();
    callers.push(status.agent.clone());
    let meta = Meta {
        trigger_id: envelope.payload.meta.trigger_id.clone(),
        system_prompt: envelope.payload.meta.system_prompt.clone(),
        callers,
        mcp,
        ..Meta::default()
    };
    let link = StepLink {
        run: RunId::of_conversation(task),
        step,
    };
    let submitted = o
        .submit_with(request, meta, Some(task), Some(link), caller)
        .await?;
    let child = submitted.record().task_id();
    o.inner.engine.watch(o, child, RunId::of_conversation(task));
    Ok(child)
}

/// Ends the conversation's task with its answer or error.
pub(super) async fn end(
    o: &Orchestrator,
    status: &TaskStatus,
    outcome: Result<Value, ErrorInfo>,
) -> Result<(), ServiceError> {
    let mut change = match outcome {
        Ok(result) => {
            let mut c = Change::new(Transition::Complete, "orchestrator", "the model answered");
            c.result = Some(result);
            c
        }
        Err(error) => {
            let mut c = Change::new(Transition::Fail, "orchestrator", error.message.clone());
            c.error = Some(error);
            c
        }
    };
    change.attempt = Some(status.attempt);
    // A task that moved meanwhile (canceled) keeps its state.
    if let Applied::Ignored { reason, .. } = o.store().apply(status.task_id, change).await? {
        info!(task_id = %status.task_id, "the conversation's end was not recorded: {reason}");
    }
    o.store().flush().await?;
    Ok(())
}
