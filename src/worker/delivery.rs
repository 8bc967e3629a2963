//! One delivery, from pulled message to settlement: decode, check, look up
//! the attempt's record, claim, run, fence, report, ack.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::Message;
use serde_json::Value;
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, warn};

use super::{Outcome, Shared, Task, event_for, lock, report};
use crate::agent::AgentCard;
use crate::bus::{DeadLetterCopy, Original, REPUBLISHED_HEADER, Settlement, settle};
use crate::claim::{Acquired, ClaimErrorKind, Decision, Delivery, Held};
use crate::envelope::{Envelope, Timestamp};
use crate::event::{ErrorInfo, ReportedState, WorkerEvent};
use crate::telemetry::{context, metrics, spans};
use tracing::Span;

pub(super) async fn handle(
    shared: Arc<Shared>,
    msg: Message,
    permit: OwnedSemaphorePermit,
    hard_stop: CancellationToken,
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
    handle_envelope(
        shared, msg, envelope, stream_seq, delivered, hard_stop, &span,
    )
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
    hard_stop: CancellationToken,
    trace: &Span,
) {
    if envelope.header.to != shared.card.name {
        let why = format!("addressed to `{}`, not to this agent", envelope.header.to);
        return reject(&shared, &msg, &envelope, "wrong_agent", &why, trace).await;
    }
    let action = envelope.payload.action.as_str();
    let Some(skill) = shared.card.skill(action) else {
        let why = format!("`{}` has no skill `{action}`", shared.card.name);
        return reject(&shared, &msg, &envelope, "unknown_action", &why, trace).await;
    };
    if let Some(verifier) = &shared.config.verifier
        && let Err(refusal) = verifier.verify(&msg.payload, &envelope, &skill.scopes)
    {
        warn!(task_id = %envelope.header.task_id, code = refusal.code, "task token refused: {}", refusal.message);
        let error = ErrorInfo::new(refusal.code, refusal.message, false);
        let outcome = match refusal.verdict {
            crate::auth::Verdict::AuthRequired => Outcome::AuthRequired(error),
            crate::auth::Verdict::Rejected => Outcome::Rejected(error),
        };
        return refuse(&shared, &msg, &envelope, &outcome, trace).await;
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
    // Any delivery, whatever its headers, may be a copy of an attempt that
    // already reported its result (its exact bytes, published again): the
    // attempt's record is read beside the claim, so it costs no wait.
    let (over, acquired) = tokio::join!(
        attempt_is_over(&shared, &envelope),
        shared
            .claims
            .acquire(&envelope.header.to, task_id, delivery, &shared.instance)
    );
    if over {
        debug!(task_id = %task_id, attempt, delivered, "attempt already reported: settling the copy");
        if let Ok(Acquired::Run(held)) = acquired
            && let Err(e) = shared.claims.release(held).await
        {
            warn!(task_id = %task_id, error = %e, "could not release the claim of a copy");
        }
        return settle(&msg, Settlement::Ack).await;
    }
    match acquired {
        Ok(Acquired::Run(held)) => {
            run_task(&shared, msg, envelope, resumed, held, hard_stop, trace).await;
        }
        Ok(Acquired::Skip(Decision::Busy)) => {
            // Its holder missed a whole lease of in-progress acks: it died
            // (its claim ends within moments) or it is cut off (it gives
            // the claim up within a lease). Look again soon.
            debug!(task_id = %task_id, "another holder has this message: looking again after the retry delay");
            settle(&msg, Settlement::Nak(shared.retry_delay())).await;
        }
        Ok(Acquired::Skip(decision)) => {
            info!(task_id = %task_id, attempt, ?decision, "not run: settling the message");
            settle(&msg, Settlement::Ack).await;
        }
        Err(e) => {
            warn!(task_id = %task_id, error = %e, "claim failed; redelivering");
            settle(&msg, Settlement::Nak(shared.retry_delay())).await;
        }
    }
}

/// Whether the task's last event shows this attempt over: a final report
/// of it, or any report of a later attempt. A lookup that fails says no
/// (the claim still keeps two runs apart).
async fn attempt_is_over(shared: &Shared, envelope: &Envelope) -> bool {
    let attempt = envelope.control.attempt.get();
    match shared
        .bus
        .last_event(&envelope.header.to, envelope.header.task_id)
        .await
    {
        Ok(Some(last)) => last.ends_attempt(attempt),
        Ok(None) => false,
        Err(e) => {
            warn!(task_id = %envelope.header.task_id, error = %e, "cannot read the attempt's record");
            false
        }
    }
}

/// How a run ended before its outcome could be reported.
enum Stopped {
    /// The handler finished.
    Finished(Outcome),
    /// A cancel mark replaced the claim: the handler was canceled.
    Canceled,
    /// The claim was lost (its lease ended and another replica took over):
    /// the handler was canceled.
    Lost,
    /// The worker is shutting down past its grace period.
    HardStop,
}

async fn run_task(
    shared: &Arc<Shared>,
    msg: Message,
    envelope: Envelope,
    resumed: bool,
    mut held: Held,
    hard_stop: CancellationToken,
    trace: &Span,
) {
    let task_id = envelope.header.task_id;
    let attempt = envelope.control.attempt.get();
    let cancel = CancellationToken::new();
    lock(&shared.running).insert(task_id, cancel.clone());
    let handling = trace.in_scope(|| spans::handle(&envelope));
    let task = Task {
        envelope: envelope.without_token(),
        attempt,
        resumed,
        agent_dir: shared.dir.clone(),
        cancel: cancel.clone(),
        trace: context::environment(&handling),
    };
    let running = metrics::handler_started(shared.card.name.as_str());
    let started = std::time::Instant::now();
    let mut run = shared.handler.handle(task).instrument(handling.clone());
    let every = shared.beat();
    let mut renew = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    let working_at = tokio::time::sleep(shared.config.working_after);
    tokio::pin!(working_at);
    let mut working: Option<tokio::task::JoinHandle<()>> = None;
    let stopped = loop {
        tokio::select! {
            outcome = &mut run => break Stopped::Finished(outcome),
            () = &mut working_at, if working.is_none() => {
                let bus = shared.bus.clone();
                let event = report(&envelope, attempt, ReportedState::Working);
                let trace = trace.clone();
                working = Some(tokio::spawn(async move {
                    if let Err(e) = bus.publish_event(&event, &trace).await {
                        warn!(task_id = %event.task_id, error = %e, "could not report working");
                    }
                }));
            }
            _ = renew.tick() => {
                // The claim first, then the message's ack wait, and the
                // latter only once the former is renewed: a holder that
                // dies (or stays cut off) leaves a claim that ends no later
                // than its message comes back.
                match shared.claims.renew(&mut held).await {
                    Ok(()) => settle(&msg, Settlement::Progress).await,
                    Err(e) if e.kind == ClaimErrorKind::Unavailable && !held.expired(shared.lease()) => {
                        warn!(task_id = %task_id, error = %e, "lease renewal failed; trying again");
                        renew.reset_after(shared.renew_retry());
                    }
                    Err(e) => {
                        warn!(task_id = %task_id, error = %e, "claim lost: canceling the handler");
                        cancel.cancel();
                        break match e.kind {
                            ClaimErrorKind::Canceled => Stopped::Canceled,
                            _ => Stopped::Lost,
                        };
                    }
                }
            }
            () = hard_stop.cancelled() => break Stopped::HardStop,
        }
    };
    // Dropping the run stops a handler that ignored its cancel token (a
    // command handler's process is killed).
    drop(run);
    drop(running);
    let outcome_label = match &stopped {
        Stopped::Finished(outcome) => outcome.label(),
        Stopped::Canceled => "canceled",
        Stopped::Lost => "claim_lost",
        Stopped::HardStop => "shutdown",
    };
    metrics::handler_finished(
        shared.card.name.as_str(),
        envelope.payload.action.as_str(),
        outcome_label,
        started.elapsed(),
    );
    if outcome_label != "completed" {
        spans::failed(&handling, outcome_label);
    }
    drop(handling);
    lock(&shared.running).remove(&task_id);
    if let Some(working) = working {
        let _ = working.await;
    }
    let outcome = match stopped {
        Stopped::Finished(outcome) => outcome,
        Stopped::Canceled => return settle(&msg, Settlement::Ack).await,
        // Another replica runs the attempt now and settles the message.
        Stopped::Lost => return,
        Stopped::HardStop => {
            cancel.cancel();
            if let Err(e) = shared.claims.release(held).await {
                warn!(task_id = %task_id, error = %e, "could not release the claim");
            }
            return settle(&msg, Settlement::Nak(Duration::ZERO)).await;
        }
    };
    // The fence: a holder whose lease may have ended reports nothing.
    if !held.fresh(shared.lease() / 2)
        && let Err(e) = shared.claims.renew(&mut held).await
    {
        match e.kind {
            ClaimErrorKind::Canceled => settle(&msg, Settlement::Ack).await,
            ClaimErrorKind::Lost => {
                warn!(task_id = %task_id, error = %e, "claim lost before reporting: result dropped");
            }
            _ => {
                warn!(task_id = %task_id, error = %e, "cannot confirm the claim: redelivering");
                settle(&msg, Settlement::Nak(shared.retry_delay())).await;
            }
        }
        return;
    }
    let outcome = outcome.redacted(&shared.config.sensitive, &envelope.payload.params);
    let event = event_for(&envelope, attempt, &outcome);
    info!(task_id = %task_id, attempt, state = event.state.as_str(), "task ran");
    report_and_ack(shared, &msg, &event, trace, Some(held)).await;
}

/// Publishes the attempt's final event, then acks: the event is the
/// attempt's record, so a lost ack is harmless (a redelivery finds it). If
/// the publish fails the message is redelivered, after the claim is given
/// up so the next delivery need not wait out the lease.
async fn report_and_ack(
    shared: &Shared,
    msg: &Message,
    event: &WorkerEvent,
    trace: &Span,
    held: Option<Held>,
) {
    match shared.bus.publish_event(event, trace).await {
        Ok(()) => settle(msg, Settlement::Ack).await,
        Err(e) => {
            warn!(task_id = %event.task_id, error = %e, "could not publish the result; it will be redelivered");
            if let Some(held) = held {
                let _ = shared.claims.release(held).await;
            }
            settle(msg, Settlement::Nak(shared.retry_delay())).await;
        }
    }
}

/// Refuses a well-formed envelope this agent will not run.
async fn reject(
    shared: &Shared,
    msg: &Message,
    envelope: &Envelope,
    code: &'static str,
    why: &str,
    trace: &Span,
) {
    warn!(task_id = %envelope.header.task_id, code, "rejected: {why}");
    let outcome = Outcome::Rejected(ErrorInfo::new(code, why, false));
    refuse(shared, msg, envelope, &outcome, trace).await;
}

/// Ends an attempt that never ran with `outcome` (a rejection, or a token
/// that asks for authorization): its final event, then the ack.
async fn refuse(
    shared: &Shared,
    msg: &Message,
    envelope: &Envelope,
    outcome: &Outcome,
    trace: &Span,
) {
    let mut event = event_for(envelope, envelope.control.attempt.get(), outcome);
    event.agent = shared.card.name.clone();
    report_and_ack(shared, msg, &event, trace, None).await;
}

/// Moves an envelope that cannot be read to the dead-letter stream, tells
/// the orchestrator when the task can be identified, and terminates it.
async fn dead_letter(shared: &Shared, msg: Message, code: &'static str, why: &str, trace: &Span) {
    let seq = msg.info().map(|i| i.stream_sequence).unwrap_or_default();
    warn!(
        stream_seq = seq,
        code, "dead-lettering an unreadable envelope: {why}"
    );
    let fragments = rejected_from_fragments(&shared.card, &msg.payload, code, why);
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
        return warn!(stream_seq = seq, error = %e, "dead letter not copied; redelivering");
    }
    if let Some(event) = fragments
        && let Err(e) = shared.bus.publish_event(&event, trace).await
    {
        warn!(task_id = %event.task_id, error = %e, "could not report the rejection");
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
        error: Some(ErrorInfo::new(
            code,
            format!("malformed envelope: {why}"),
            false,
        )),
        retry_after_seconds: None,
        at: Timestamp::now(),
    })
}
