//! Workflow runs in A2A's words: a trigger is a skill (`trigger:<id>`), a
//! run is a task (its id, its correlation id as `contextId`), a wait at an
//! approval gate is `input-required`, and a message to the run while it
//! waits answers the gate.
//!
//! A run's events come from its stored record alone, in an order that
//! only grows: its start, then for each wait at a gate (`waits`, in
//! order) the wait and, when approved, the return to work, then its end.
//! So, as a task's, they and their numbers are the same on every read.

use std::collections::HashMap;

use a2a::{Message, Part, Role};
use serde_json::Value;

use super::error::A2aError;
use super::wire::{self, Event};
use crate::envelope::Timestamp;
use crate::run::{RunRecord, RunState, Wait};
use crate::service::Answer;
use crate::task::TaskState;
use crate::trigger::{StepKind, Trigger};

/// The prefix of a trigger's skill id on the card.
pub(super) const SKILL_PREFIX: &str = "trigger:";

/// A run's state as a task's (the one-to-one names A2A has for both).
pub(super) fn state(s: RunState) -> TaskState {
    match s {
        RunState::Working => TaskState::Working,
        RunState::InputRequired => TaskState::InputRequired,
        RunState::Completed => TaskState::Completed,
        RunState::Failed => TaskState::Failed,
        RunState::Canceled => TaskState::Canceled,
        RunState::Rejected => TaskState::Rejected,
    }
}

/// A task state as a run's; `None` for the states a run is never in.
pub(super) fn run_state(s: TaskState) -> Option<RunState> {
    Some(match s {
        TaskState::Working => RunState::Working,
        TaskState::InputRequired => RunState::InputRequired,
        TaskState::Completed => RunState::Completed,
        TaskState::Failed => RunState::Failed,
        TaskState::Canceled => RunState::Canceled,
        TaskState::Rejected => RunState::Rejected,
        TaskState::Submitted | TaskState::AuthRequired => return None,
    })
}

/// What gate `step` asks, from the definition the run started with.
fn prompt(trigger: Option<&Trigger>, step: &str) -> String {
    trigger
        .and_then(|t| {
            t.all_steps().into_iter().find_map(|s| match &s.kind {
                StepKind::Approval(a) if s.id == step => Some(a.prompt.clone()),
                _ => None,
            })
        })
        .unwrap_or_else(|| format!("approve step `{step}`"))
}

/// The run's waits at its gates, in order. A run stored before waits
/// were kept shows its answered gates by the time of their answer.
fn waits(run: &RunRecord) -> Vec<Wait> {
    if !run.waits.is_empty() {
        return run.waits.clone();
    }
    let mut decided: Vec<Wait> = run
        .decisions
        .iter()
        .map(|(step, d)| Wait {
            step: step.clone(),
            since: d.at,
        })
        .collect();
    decided.sort_by_key(|w| w.since);
    decided
}

/// Why a run ended as it did, in words (none for a completion).
fn end_words(run: &RunRecord) -> Option<String> {
    match run.state {
        RunState::Failed => Some(
            run.error
                .as_ref()
                .map_or_else(|| "the run failed".into(), |e| e.message.clone()),
        ),
        RunState::Rejected => run
            .decisions
            .iter()
            .find(|(_, d)| !d.approved)
            .map(|(step, d)| {
                if d.reason.is_empty() {
                    format!("rejected at `{step}` by {}", d.by)
                } else {
                    d.reason.clone()
                }
            }),
        RunState::Canceled => Some(match &run.cancel {
            Some(c) if !c.reason.is_empty() => c.reason.clone(),
            Some(c) => format!("canceled by {}", c.by),
            None => "canceled".into(),
        }),
        _ => None,
    }
}

/// A message of the run: from the agent (the orchestrator) or the user.
fn message(run: &RunRecord, id: String, role: Role, parts: Vec<Part>) -> Message {
    Message {
        message_id: id,
        context_id: Some(run.correlation_id.to_string()),
        task_id: Some(run.run_id.to_string()),
        role,
        parts,
        metadata: None,
        extensions: None,
        reference_task_ids: None,
    }
}

/// A status of the run: its state, what it says, since when.
fn status(state: RunState, said: Option<Message>, at: &Timestamp) -> a2a::TaskStatus {
    a2a::TaskStatus {
        state: wire::state(self::state(state)),
        message: said,
        timestamp: wire::time(at),
    }
}

/// What the run asks at its `i`th wait, at gate `step`: the gate's prompt.
fn asked(run: &RunRecord, trigger: Option<&Trigger>, i: usize, step: &str) -> Message {
    let id = format!("{}-w{i}", run.run_id);
    message(
        run,
        id,
        Role::Agent,
        vec![Part::text(prompt(trigger, step))],
    )
}

/// The statuses of the run, oldest first: its start, each wait at a gate
/// and each approval, its end.
fn statuses(run: &RunRecord) -> Vec<a2a::TaskStatus> {
    let trigger = run.trigger().ok();
    let mut out = vec![status(RunState::Working, None, &run.created_at)];
    let waits = waits(run);
    for (i, w) in waits.iter().enumerate() {
        let said = asked(run, trigger.as_ref(), i, &w.step);
        out.push(status(RunState::InputRequired, Some(said), &w.since));
        if let Some(d) = run.decisions.get(&w.step).filter(|d| d.approved) {
            out.push(status(RunState::Working, None, &d.at));
        }
    }
    let unrecorded = waits.iter().all(|w| run.decisions.contains_key(&w.step));
    if run.state == RunState::InputRequired && unrecorded {
        // Stored before waits were kept: waiting, at an unrecorded gate.
        let id = format!("{}-w{}", run.run_id, waits.len());
        let said = message(
            run,
            id,
            Role::Agent,
            vec![Part::text("waiting for approval")],
        );
        out.push(status(RunState::InputRequired, Some(said), &run.updated_at));
    }
    if run.state.is_terminal() {
        let said = end_words(run).map(|w| {
            let id = format!("{}-end", run.run_id);
            message(run, id, Role::Agent, vec![Part::text(w)])
        });
        out.push(status(run.state, said, &run.updated_at));
    }
    out
}

/// Every event of a run, oldest first, numbered from 1: a status update
/// per status, and before the completion its result as an artifact.
pub(super) fn events(run: &RunRecord) -> Vec<Event> {
    let update = wire::Updates::of(run.run_id.to_string(), run.correlation_id.to_string());
    let mut out = Vec::new();
    for s in statuses(run) {
        if s.state == a2a::TaskState::Completed
            && let Some(result) = &run.result
        {
            out.push(update.artifact(wire::result_artifact(result), false, true));
        }
        out.push(update.status(s));
    }
    wire::numbered(out)
}

/// The user's answer at a gate, as a message.
fn answer_message(run: &RunRecord, i: usize, d: &crate::run::Decision) -> Message {
    let said = if d.reason.is_empty() {
        if d.approved { "approve" } else { "reject" }.to_string()
    } else {
        d.reason.clone()
    };
    let mut parts = vec![Part::text(said)];
    if let Some(input) = &d.input {
        parts.push(Part::data(input.clone()));
    }
    let mut m = message(run, format!("{}-a{i}", run.run_id), Role::User, parts);
    m.metadata = Some(HashMap::from([
        (
            "decision".to_string(),
            Value::from(if d.approved { "approve" } else { "reject" }),
        ),
        ("by".to_string(), Value::from(d.by.as_str())),
    ]));
    m
}

/// The A2A task of a run: its status, its history (the input, each gate's
/// question and answer, its closing words) cut to the last
/// `history_length` messages when given, its result as an artifact when
/// `artifacts`.
pub(super) fn task(run: &RunRecord, history_length: Option<usize>, artifacts: bool) -> a2a::Task {
    let mut history = vec![message(
        run,
        run.run_id.to_string(),
        Role::User,
        vec![Part::data(run.input.clone())],
    )];
    let trigger = run.trigger().ok();
    for (i, w) in waits(run).iter().enumerate() {
        history.push(asked(run, trigger.as_ref(), i, &w.step));
        if let Some(d) = run.decisions.get(&w.step) {
            history.push(answer_message(run, i, d));
        }
    }
    let now = statuses(run)
        .pop()
        .unwrap_or_else(|| status(run.state, None, &run.updated_at));
    if let Some(m) = &now.message
        && !history.iter().any(|h| h.message_id == m.message_id)
    {
        history.push(m.clone());
    }
    if let Some(n) = history_length {
        let skip = history.len().saturating_sub(n);
        history.drain(..skip);
    }
    let artifacts = match (&run.result, run.state) {
        (Some(result), RunState::Completed) if artifacts => {
            Some(vec![wire::result_artifact(result)])
        }
        _ => None,
    };
    a2a::Task {
        id: run.run_id.to_string(),
        context_id: run.correlation_id.to_string(),
        status: now,
        artifacts,
        history: (!history.is_empty()).then_some(history),
        metadata: Some(HashMap::from([(
            "trigger".to_string(),
            Value::from(run.trigger_id.as_str()),
        )])),
    }
}

/// What a message to a run that waits at a gate answers: `approve` or
/// `reject` from `metadata.decision`, else from the first word of its
/// text; a data part is the input (then the answer is `input`, unless it
/// says `reject`); its text is the reason.
pub(super) fn gate_answer(
    send: &a2a::SendMessageRequest,
) -> Result<(Answer, String, Option<Value>), A2aError> {
    let message = &send.message;
    let text = super::send::text_of(message);
    let mut input = None;
    for (i, part) in message.parts.iter().enumerate() {
        if let a2a::PartContent::Data(v) = &part.content {
            if input.is_some() || !v.is_object() {
                return Err(A2aError::invalid_params(
                    format!("message.parts[{i}].data"),
                    "an answer carries at most one data part, a JSON object (the gate's input)",
                ));
            }
            input = Some(v.clone());
        }
    }
    let said = super::send::metadata_str(send, DECISION_KEY).map(str::to_ascii_lowercase);
    let first_word = text
        .split(|c: char| !c.is_alphanumeric())
        .find(|w| !w.is_empty())
        .map(str::to_ascii_lowercase);
    let decision = match said.as_deref() {
        Some("approve") => Some(Answer::Approve),
        Some("reject") => Some(Answer::Reject),
        Some("input") => Some(Answer::Input),
        Some(other) => {
            return Err(A2aError::invalid_params(
                "message.metadata.decision",
                format!("`{other}`: expected approve, reject or input"),
            ));
        }
        None => match first_word.as_deref() {
            Some("approve" | "approved" | "yes") => Some(Answer::Approve),
            Some("reject" | "rejected" | "no") => Some(Answer::Reject),
            _ => None,
        },
    };
    let answer = match (decision, &input) {
        (Some(Answer::Reject), _) => Answer::Reject,
        (_, Some(_)) => Answer::Input,
        (Some(a), None) => a,
        (None, None) => {
            return Err(A2aError::invalid_params(
                "message",
                "the run waits at a gate: answer with metadata.decision (approve, reject or input), a text that begins with approve or reject, or a data part with the gate's input",
            ));
        }
    };
    Ok((answer, text, input))
}

/// The metadata key of a gate's answer.
const DECISION_KEY: &str = "decision";

/// The card's skill for a trigger.
pub(super) fn skill(t: &Trigger) -> a2a::AgentSkill {
    a2a::AgentSkill {
        id: format!("{SKILL_PREFIX}{}", t.id),
        name: t.name.clone().unwrap_or_else(|| t.id.clone()),
        description: t
            .description
            .clone()
            .unwrap_or_else(|| format!("Runs the workflow `{}`.", t.id)),
        tags: vec!["workflow".into(), t.id.clone()],
        examples: (!t.examples.is_empty()).then(|| t.examples.clone()),
        input_modes: Some(vec!["application/json".into(), "text/plain".into()]),
        output_modes: Some(vec!["application/json".into(), "text/plain".into()]),
        security_requirements: None,
    }
}
