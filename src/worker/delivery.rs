//! One delivery, from pulled message to settlement: decode, check, claim
//! ([`super::acquire`]), run and report ([`super::attempt`]); refusals and
//! dead letters of what cannot run.

use std::sync::Arc;

use async_nats::jetstream::Message;
use serde_json::Value;
use tokio::sync::OwnedSemaphorePermit;
use tracing::{Instrument, Span, info, warn};

use super::acquire::{self, Claimed};
use super::{Outcome, Shared, Stops, attempt, event_for};
use crate::agent::AgentCard;
use crate::bus::{DeadLetterCopy, Original, REPUBLISHED_HEADER, Settlement};
use crate::claim::Delivery;
use crate::envelope::{Envelope, Timestamp};
use crate::event::{ErrorInfo, ReportedState, WorkerEvent};
use crate::telemetry::quiet::warn_quietly;
use crate::telemetry::{context, metrics, spans};

pub(super) async fn handle(
    shared: Arc<Shared>,
    msg: Message,
    permit: OwnedSemaphorePermit,
    stops: Stops,
) {
    let _permit = permit;
    let (stream_seq, delivered) = msg
        .info()
        .map(|i| (i.stream_sequence, i.delivered))
        .unwrap_or((0, 1));
    metrics::delivered(shared.card.name.as_str(), delivered);
    let envelope = match Envelope::from_wire(&msg.payload, shared.config.max_envelope_bytes) {
        Ok(env) => env,
        Err(e) => {
            let span = spans::dead_letter(&msg.subject);
            context::follow_message(&span, msg.headers.as_ref());
            let (code, why) = (e.code(), e.to_string());
            return dead_letter(&shared, msg, code, &why, &span)
                .instrument(span.clone())
                .await;
        }
    };
    // The delivery's span, a child of the publish that sent it: every log
    // line from here on carries the task's ids.
    let consumer = shared
        .bus
        .names()
        .agent_consumer(&envelope.header.to, envelope.control.priority);
    let span = spans::process_task(&envelope, &msg.subject, delivered, &consumer);
    context::follow_message(&span, msg.headers.as_ref());
    handle_envelope(shared, msg, envelope, stream_seq, delivered, stops, &span)
        .instrument(span.clone())
        .await;
}

/// A header of the message, if it has one.
fn header<'m>(msg: &'m Message, name: &str) -> Option<&'m async_nats::HeaderValue> {
    msg.headers.as_ref().and_then(|h| h.get(name))
}

async fn handle_envelope(
    shared: Arc<Shared>,
    msg: Message,
    envelope: Envelope,
    stream_seq: u64,
    delivered: i64,
    stops: Stops,
    trace: &Span,
) {
    if envelope.header.to != shared.card.name {
        let why = format!("addressed to `{}`, not to this agent", envelope.header.to);
        return reject(
            &shared,
            &msg,
            &envelope,
            ("wrong_agent", &why),
            &stops,
            trace,
        )
        .await;
    }
    let action = envelope.payload.action.as_str();
    let Some(skill) = shared.card.skill(action) else {
        let why = format!("`{}` has no skill `{action}`", shared.card.name);
        return reject(
            &shared,
            &msg,
            &envelope,
            ("unknown_action", &why),
            &stops,
            trace,
        )
        .await;
    };
    if let Some(verifier) = &shared.config.verifier
        && let Err(refusal) = verifier.verify(&msg.payload, &envelope, &skill.scopes)
    {
        warn!(task_id = %envelope.header.task_id, code = refusal.code, "task token refused: {}", refusal.message);
        let error = ErrorInfo::new(refusal.code, refusal.message, false);
        let outcome = match refusal.verdict {
            crate::task_token::Verdict::AuthRequired => Outcome::AuthRequired(error),
            crate::task_token::Verdict::Rejected => Outcome::Rejected(error),
        };
        return refuse(&shared, &msg, &envelope, &outcome, &stops, trace).await;
    }
    let task_id = envelope.header.task_id;
    let attempt = envelope.control.attempt.get();
    // A redelivery, or a copy published again after an orchestrator
    // restart, may be of an attempt that partly ran.
    let republished = header(&msg, REPUBLISHED_HEADER).is_some();
    let resumed = delivered > 1 || republished;
    if resumed {
        info!(task_id = %task_id, attempt, delivered, republished, "a repeated delivery: an earlier one may have partly run");
    }
    let delivery = Delivery {
        attempt,
        stream_seq,
    };
    // A worker that stops hands back what it has not started at once,
    // and stops what runs only past its grace period.
    if let Claimed::Run(held) = acquire::claim(
        &shared,
        &msg,
        &envelope,
        (delivery, resumed),
        &stops.shutdown,
    )
    .await
    {
        attempt::run_task(&shared, msg, envelope, resumed, held, &stops, trace).await;
    }
}

/// Refuses a well-formed envelope this agent will not run.
async fn reject(
    shared: &Shared,
    msg: &Message,
    envelope: &Envelope,
    (code, why): (&'static str, &str),
    stops: &Stops,
    trace: &Span,
) {
    warn!(task_id = %envelope.header.task_id, code, "rejected: {why}");
    let outcome = Outcome::Rejected(ErrorInfo::new(code, why, false));
    refuse(shared, msg, envelope, &outcome, stops, trace).await;
}

/// Ends an attempt that never ran with `outcome` (a rejection, or a token
/// that asks for authorization): its final event, then the ack.
async fn refuse(
    shared: &Shared,
    msg: &Message,
    envelope: &Envelope,
    outcome: &Outcome,
    stops: &Stops,
    trace: &Span,
) {
    let mut event = event_for(envelope, envelope.control.attempt.get(), outcome);
    event.agent = shared.card.name.clone();
    shared.stamp(&mut event, false);
    // Without a claim there is nothing to lose: it is always settled.
    attempt::report_and_ack(shared, msg, &event, trace, None, &stops.shutdown).await;
}

/// Moves an envelope that cannot be read to the dead-letter stream, tells
/// the orchestrator when the task can be identified, and terminates it.
async fn dead_letter(shared: &Shared, msg: Message, code: &'static str, why: &str, trace: &Span) {
    let seq = msg.info().map(|i| i.stream_sequence).unwrap_or_default();
    warn!(
        stream_seq = seq,
        code, "dead-lettering an unreadable envelope: {why}"
    );
    let mut fragments = rejected_from_fragments(&shared.card, &msg.payload, code, why);
    if let Some(event) = fragments.as_mut() {
        shared.stamp(event, false);
    }
    let tasks_stream = shared.bus.names().tasks_stream();
    let letter = DeadLetterCopy {
        agent: shared.card.name.as_str(),
        payload: &msg.payload,
        code,
        reason: why,
        original_subject: msg.subject.as_str(),
        stream: &tasks_stream,
        stream_seq: seq,
        task_id: fragments.as_ref().map(|e| e.task_id),
    };
    let moved = shared
        .bus
        .move_to_dlq(letter, Original::Delivered(&msg, Settlement::Term))
        .await;
    if let Err(e) = moved {
        // Not copied: it comes back rather than being lost.
        return warn_quietly!("worker.dead_letter_failed", stream_seq = seq, error = %e, "dead letter not copied; redelivering");
    }
    if let Some(event) = fragments
        && let Err(e) = shared.bus.publish_event(&event, trace).await
    {
        warn_quietly!("worker.report_failed", task_id = %event.task_id, error = %e, "could not report the rejection");
    }
}

/// A `rejected` event for a message that did not parse, when its task id
/// and correlation id can still be read from it; about the attempt in
/// `control.attempt` when that is a positive integer, else attempt 1.
fn rejected_from_fragments(
    card: &AgentCard,
    payload: &[u8],
    code: &'static str,
    why: &str,
) -> Option<WorkerEvent> {
    let value: Value = serde_json::from_slice(payload).ok()?;
    let header = value.get("header")?;
    let task_id = header.get("task_id")?.as_str()?.parse().ok()?;
    let correlation_id = header.get("correlation_id")?.as_str()?.parse().ok()?;
    let attempt = value
        .get("control")
        .and_then(|c| c.get("attempt"))
        .and_then(Value::as_u64)
        .and_then(|a| u32::try_from(a).ok())
        .and_then(std::num::NonZeroU32::new)
        .unwrap_or(std::num::NonZeroU32::MIN);
    Some(WorkerEvent {
        v: crate::envelope::Version,
        task_id,
        correlation_id,
        agent: card.name.clone(),
        attempt,
        state: ReportedState::Rejected,
        result: None,
        artifacts: Vec::new(),
        message: None,
        progress: None,
        reply: false,
        error: Some(ErrorInfo::new(
            code,
            format!("malformed envelope: {why}"),
            false,
        )),
        retry_after_seconds: None,
        instance: None,
        resumed: false,
        at: Timestamp::now(),
    })
}
