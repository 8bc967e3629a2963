//! Conversations with a model (`docs/llm.md`): carries out what
//! [`crate::llm::conversation`] decides for a task whose agent is a prompt.
//!
//! Such a task is held by the orchestrator, never published. Its model
//! calls (turns) and its tool calls are tasks of their own, linked to it
//! as steps under [`RunId::of_conversation`] in the transaction that
//! creates them, so a second submit of one returns the first: the
//! workflow engine's queue advances conversations too (nudged when the
//! task, a turn or a call ends, and at start for every live one), and a
//! restart plans from the same stored facts.
//!
//! - A turn is a task to the agent itself, carrying the whole Chat
//!   Completions request (`payload.meta.turn` says whose and which); its
//!   worker sends it to the model.
//! - A tool call is a task to the agent and skill the tool stands for:
//!   the same correlation id, caused by the conversation's task, acting
//!   for its principal with at most its scopes (a skill needing more is
//!   refused), its params the call's arguments (checked against the
//!   skill's schema).
//! - A call to anything else is refused, and the model told why (audited
//!   as `llm.tool_refused`); so is one past `llm.max_depth` conversations
//!   deep.
//! - When the task ends (canceled, past its deadline), its running turns
//!   and calls are canceled.
//! - The card types that are not one conversation (`evaluator_optimizer`,
//!   `MAKER`) are planned by [`super::patterns`], their steps made the
//!   same way ([`submit_step`]).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use tracing::{info, warn};

use super::held::{Held, end, finish, submit_step};
use crate::access::Grants;
use crate::envelope::{McpCall, Meta, TaskId, TurnOf};
use crate::event::ErrorInfo;
use crate::llm::ToolCall;
use crate::llm::conversation::{self, Limits, Next};
use crate::llm::model_request::{self, Tool};
use crate::llm::patterns::{Conversation, Kind};
use crate::run::{RunId, StepTask};
use crate::service::{Caller, Orchestrator, ServiceError, TaskRequest};
use crate::store::{Change, StepLink};
use crate::task::{Submitted, TaskState, TaskStatus, Transition};

/// Plans the conversation of `task` once and acts on the plan; nothing
/// for a task that holds none.
pub(super) async fn advance(o: &Orchestrator, id: RunId) -> Result<(), ServiceError> {
    let task = id.task();
    let store = o.store();
    let Some(status) = store.status(task)? else {
        return Ok(());
    };
    if !status.conversation {
        return Ok(());
    }
    let engine = &o.inner.engine;
    let steps = store.run_step_tasks(id)?;
    for t in steps.values().filter(|t| !t.state.is_terminal()) {
        engine.watch(o, t.task_id, id);
    }
    if status.state.is_terminal() {
        // Canceled, or past its deadline: what still runs for it stops.
        let caller = Caller::new(format!("task:{task}"), Grants::all());
        for t in steps.values().filter(|t| !t.state.is_terminal()) {
            match o.cancel(t.task_id, &caller).await {
                Ok(_) | Err(ServiceError::NotCancelable { .. }) => {}
                Err(e) => {
                    warn!(task_id = %t.task_id, error = %e, "a conversation's task not canceled")
                }
            }
        }
        return Ok(());
    }
    engine.watch(o, task, id);
    let Some(envelope) = store.envelope(task)? else {
        return Ok(());
    };
    let declared = o.catalog();
    let Some(card) = declared.agents.get(&status.agent) else {
        let error = ErrorInfo::new(
            "unknown_agent",
            format!("agent `{}` is no longer declared", status.agent),
            false,
        );
        return end(o, &status, Err(error)).await;
    };
    let grants = Grants::new(
        envelope
            .control
            .required_scopes
            .iter()
            .map(|s| s.as_str().to_string()),
    );
    let caller = Caller::new(
        status
            .requested_by
            .clone()
            .unwrap_or_else(|| "unknown".into()),
        grants,
    );
    let Some(kind) = card.held() else {
        let error = ErrorInfo::new(
            "unknown_agent",
            format!(
                "agent `{}` is no longer one the orchestrator holds tasks of",
                status.agent
            ),
            false,
        );
        return end(o, &status, Err(error)).await;
    };
    let held = Held {
        o,
        status: &status,
        envelope: &envelope,
        card,
        declared: &declared,
        caller: &caller,
    };
    let (started, goes_on) = match kind {
        Kind::Conversation(c) => converse(&held, &steps, &c).await,
        other => super::patterns::advance(&held, &steps, &other).await,
    };
    match started {
        // The store or the broker: the engine tries again shortly.
        Err(e) if e.is_passing() => Err(e),
        // Refused (the agent files changed since the plan): it would be
        // refused again.
        Err(e) => {
            let error = ErrorInfo::new("step_refused", e.to_string(), false);
            end(o, &status, Err(error)).await
        }
        // Working from its first step on (also when a crash came between
        // that step's submit and this move).
        Ok(()) if goes_on && status.state == TaskState::Submitted => {
            let change = Change::new(
                Transition::Start,
                "orchestrator",
                "the conversation started",
            );
            o.store().apply(task, change).await?;
            Ok(())
        }
        Ok(()) => Ok(()),
    }
}

/// Plans a conversation once and acts on the plan: whether it acted, and
/// whether the conversation goes on.
async fn converse(
    held: &Held<'_>,
    steps: &BTreeMap<String, StepTask>,
    pattern: &Conversation,
) -> (Result<(), ServiceError>, bool) {
    let Held {
        o,
        status,
        envelope,
        card,
        declared,
        caller,
    } = *held;
    let task = status.task_id;
    let settings = &o.settings().llm;
    let limits = Limits {
        max_turns: pattern
            .max_turns
            .or_else(|| model_request::max_turns(card))
            .unwrap_or(settings.max_turns),
        token_budget: settings.token_budget,
        route: pattern.route,
    };
    let next = {
        // Read only when a plan needs them: the last request when the next
        // turn starts, the depth when a call reaches a conversation.
        let last = || match last_request(o, steps) {
            Ok(r) => r,
            Err(e) => {
                warn!(task_id = %task, error = %e, "a conversation's last request cannot be read");
                None
            }
        };
        let depth = std::cell::OnceCell::new();
        let refuse = |call: &ToolCall| -> Option<String> {
            let tool = match model_request::resolve(card, &declared.catalog, &call.function.name) {
                Ok(found) => found,
                Err(why) => return Some(why.to_string()),
            };
            let params = match arguments(call) {
                Ok(p) => p,
                Err(why) => return Some(why),
            };
            // An MCP server checks its own tool's arguments against its
            // schema; they are a task's params all the same.
            let Tool::Agent(agent, skill) = tool else {
                return crate::service::Declared::check_form(&params)
                    .err()
                    .map(|e| format!("the arguments do not fit `{}`: {e}", call.function.name));
            };
            if agent.held().is_some() {
                match depth.get_or_init(|| depth_of(o, envelope).map_err(|e| e.to_string())) {
                    Ok(d) if *d >= settings.max_depth => {
                        return Some(format!(
                            "`{}` holds a conversation of its own, and this one is {d} deep already (llm.max_depth)",
                            agent.name
                        ));
                    }
                    Ok(_) => {}
                    Err(e) => return Some(format!("the chain of callers cannot be read: {e}")),
                }
            }
            let needed: Vec<&str> = agent
                .skill(skill)
                .map(|s| s.scopes.iter().map(|x| x.as_str()).collect())
                .unwrap_or_default();
            let missing = caller.grants.missing(needed);
            if !missing.is_empty() {
                return Some(format!(
                    "`{}` needs the scopes {} that this task does not hold",
                    call.function.name,
                    missing.join(", ")
                ));
            }
            declared
                .check_params(&agent.name, skill, &params)
                .err()
                .map(|e| format!("the arguments do not fit `{}`: {e}", call.function.name))
        };
        conversation::plan(steps, &last, &refuse, limits)
    };
    let goes_on = !matches!(next, Next::Complete(_) | Next::Routed(_) | Next::Fail(_));
    let started = match next {
        Next::Wait => Ok(()),
        Next::First => {
            let first = model_request::first(card, envelope, &declared.catalog, pattern);
            start_turn(o, status, envelope, 1, first, caller)
                .await
                .map(|_| ())
        }
        Next::Turn {
            n,
            request,
            refused,
        } => {
            let created = start_turn(o, status, envelope, n, request, caller).await;
            // Once: with the turn that tells the model, not at every plan.
            if matches!(created, Ok(true)) {
                for (id, tool, why) in &refused {
                    audit_refusal(o, status, id, tool, why).await;
                }
            }
            created.map(|_| ())
        }
        Next::Calls { n, calls } => {
            let mut started = Ok(());
            for (i, call) in calls {
                started = start_call(held, n, i, &call).await;
                if started.is_err() {
                    break;
                }
            }
            started
        }
        Next::Complete(text) => {
            let action = envelope.payload.action.as_str();
            let result = answer(card, action, text);
            finish(held, result).await
        }
        Next::Routed(result) => finish(held, Ok(result)).await,
        Next::Fail(error) => end(o, status, Err(error)).await,
    };
    (started, goes_on)
}

/// The request of the last turn, read from its envelope.
fn last_request(
    o: &Orchestrator,
    steps: &BTreeMap<String, StepTask>,
) -> Result<Option<Map<String, Value>>, ServiceError> {
    let last = steps
        .iter()
        .filter_map(|(k, t)| Some((k.strip_prefix("turn-")?.parse::<u32>().ok()?, t)))
        .max_by_key(|(n, _)| *n);
    let Some((_, turn)) = last else {
        return Ok(None);
    };
    Ok(o.store().envelope(turn.task_id)?.map(|e| e.payload.params))
}

/// How many conversations up the causation chain `envelope`'s task is.
fn depth_of(o: &Orchestrator, envelope: &crate::envelope::Envelope) -> Result<u32, ServiceError> {
    let mut depth = 0;
    let mut cause = envelope.header.causation_id.clone();
    // A chain is finite (each cause was created before), but bounded all
    // the same.
    for _ in 0..64 {
        let Some(id) = cause.and_then(|c| c.as_str().parse::<TaskId>().ok()) else {
            break;
        };
        let Some(status) = o.store().status(id)? else {
            break;
        };
        if status.conversation {
            depth += 1;
        }
        cause = o.store().envelope(id)?.and_then(|e| e.header.causation_id);
    }
    Ok(depth)
}

/// A tool call's arguments: a JSON object (empty text is none).
fn arguments(call: &ToolCall) -> Result<Map<String, Value>, String> {
    let text = call.function.arguments.trim();
    if text.is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(other) => Err(format!(
            "the arguments of `{}` must be a JSON object, not {other}",
            call.function.name
        )),
        Err(e) => Err(format!(
            "the arguments of `{}` are not JSON: {e}",
            call.function.name
        )),
    }
}

/// The task's result from the model's last text: parsed as JSON when the
/// skill declares an output schema.
fn answer(card: &crate::agent::AgentCard, action: &str, text: String) -> Result<Value, ErrorInfo> {
    let schema = card.skill(action).and_then(|s| s.output_schema.as_ref());
    if schema.is_none() {
        return Ok(Value::String(text));
    }
    let trimmed = text
        .trim()
        .trim_start_matches("```json")
        .trim_start_matches("```")
        .trim_end_matches("```")
        .trim();
    serde_json::from_str(trimmed).map_err(|e| {
        ErrorInfo::new(
            "invalid_output",
            format!("the skill `{action}` declares an output schema, and the model's answer is not JSON: {e}"),
            false,
        )
    })
}

/// Submits turn `n` of `status`'s conversation; whether this submit made
/// it (not an earlier one).
async fn start_turn(
    o: &Orchestrator,
    status: &TaskStatus,
    envelope: &crate::envelope::Envelope,
    n: u32,
    request: Map<String, Value>,
    caller: &Caller,
) -> Result<bool, ServiceError> {
    let task = status.task_id;
    let request = TaskRequest {
        to: status.agent.clone(),
        action: envelope.payload.action.clone(),
        params: request,
        idempotency_key: format!("llm:{task}:turn-{n}").parse().ok(),
        priority: Some(envelope.control.priority),
        response_mode: None,
        required_scopes: Vec::new(),
        callback_url: None,
        deadline: envelope.control.deadline,
        max_attempts: Some(envelope.control.max_attempts),
        correlation_id: Some(envelope.header.correlation_id.clone()),
    };
    let meta = Meta {
        trigger_id: envelope.payload.meta.trigger_id.clone(),
        turn: Some(TurnOf { task, n }),
        ..Meta::default()
    };
    let link = StepLink {
        run: RunId::of_conversation(task),
        step: conversation::turn_step(n),
    };
    let submitted = o
        .submit_with(request, meta, Some(task), Some(link), caller)
        .await?;
    o.inner.engine.watch(
        o,
        submitted.record().task_id(),
        RunId::of_conversation(task),
    );
    Ok(matches!(submitted, Submitted::Created(_)))
}

/// Submits the `i`th tool call of turn `n` (one the plan did not refuse).
async fn start_call(
    held: &Held<'_>,
    n: u32,
    i: usize,
    call: &ToolCall,
) -> Result<(), ServiceError> {
    // The plan refused what does not resolve or parse.
    let (Ok(tool), Ok(params)) = (
        model_request::resolve(held.card, &held.declared.catalog, &call.function.name),
        arguments(call),
    ) else {
        return Ok(());
    };
    // An agent's skill is a task of that agent; an MCP server's tool is
    // one of the calling agent, whose worker has the server.
    let (to, action, mcp) = match tool {
        Tool::Agent(agent, skill) => (agent.name.clone(), skill, None),
        Tool::Mcp { server, tool } => (
            held.status.agent.clone(),
            held.envelope.payload.action.as_str(),
            Some(McpCall {
                server: server.into(),
                tool: tool.into(),
            }),
        ),
    };
    let child = submit_step(held, conversation::call_step(n, i), to, action, params, mcp).await?;
    info!(task_id = %held.status.task_id, tool = %call.function.name, child = %child, "tool call");
    Ok(())
}

/// Records that the model called a tool it may not.
async fn audit_refusal(o: &Orchestrator, status: &TaskStatus, id: &str, tool: &str, why: &str) {
    let task = status.task_id;
    warn!(task_id = %task, tool, why, "a tool call was refused");
    let entry = crate::audit::AuditEntry {
        actor: "orchestrator".into(),
        kind: "llm.tool_refused".into(),
        task_id: Some(task),
        correlation_id: Some(status.correlation_id.clone()),
        trace_id: status.trace_id.clone(),
        detail: json!({"call": id, "tool": tool, "why": why}),
    };
    if let Err(e) = o.store().audit(entry).await {
        warn!(task_id = %task, error = %e, "a refused tool call was not audited");
    }
}
