//! One delivery, from pulled message to ack: decode, check, claim, run,
//! report, settle.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{AckKind, Message};
use serde_json::Value;
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::claims::{self, Decision};
use super::{Disposition, Outcome, Shared, Task, event_for, lock, report, settle};
use crate::agent::AgentCard;
use crate::bus::{BusError, DeadLetterCopy, TRACEPARENT, TraceContext};
use crate::envelope::{Envelope, Timestamp};
use crate::event::{ErrorInfo, ReportedState, WorkerEvent};

pub(super) async fn handle(
    shared: Arc<Shared>,
    msg: Message,
    permit: OwnedSemaphorePermit,
    hard_stop: CancellationToken,
) {
    let trace = msg
        .headers
        .as_ref()
        .and_then(|h| h.get(TRACEPARENT))
        .and_then(|v| TraceContext::parse(v.as_str()));
    let trace = trace.as_ref();
    let _permit = permit;
    let envelope = match Envelope::from_wire(&msg.payload, shared.config.max_envelope_bytes) {
        Ok(env) => env,
        Err(e) => return dead_letter(&shared, msg, e.code(), &e.to_string(), trace).await,
    };
    if envelope.header.to != shared.card.name {
        let why = format!("addressed to `{}`, not to this agent", envelope.header.to);
        return reject(&shared, msg, &envelope, "wrong_agent", &why, trace).await;
    }
    let action = envelope.payload.action.as_str();
    if shared.card.skill(action).is_none() {
        let why = format!("`{}` has no skill `{action}`", shared.card.name);
        return reject(&shared, msg, &envelope, "unknown_action", &why, trace).await;
    }
    let decision = match shared
        .claims
        .acquire(
            &envelope.control.idempotency_key,
            envelope.control.attempt.get(),
        )
        .await
    {
        Ok(d) => d,
        Err(e) => {
            warn!(task_id = %envelope.header.task_id, error = %e, "claim failed; redelivering");
            let _ = msg
                .ack_with(AckKind::Nak(Some(Duration::from_secs(1))))
                .await;
            return;
        }
    };
    match decision {
        Decision::Busy(wait) => {
            let _ = msg.ack_with(AckKind::Nak(Some(wait))).await;
        }
        Decision::Republish(event) => {
            info!(task_id = %envelope.header.task_id, "already done: republishing its result");
            finish(&shared, &msg, &event, AckKind::Ack, trace).await;
        }
        Decision::Run {
            attempt,
            resumed,
            held,
        } => {
            run_task(
                &shared,
                msg,
                envelope,
                (attempt, resumed),
                held,
                hard_stop,
                trace,
            )
            .await;
        }
    }
}

async fn run_task(
    shared: &Arc<Shared>,
    msg: Message,
    envelope: Envelope,
    (attempt, resumed): (u32, bool),
    mut held: claims::Held,
    hard_stop: CancellationToken,
    trace: Option<&TraceContext>,
) {
    let task_id = envelope.header.task_id;
    let cancel = CancellationToken::new();
    lock(&shared.running).insert(task_id, cancel.clone());
    // Reported while the handler runs; awaited before the final report, so
    // the orchestrator sees them in order.
    let working = {
        let bus = shared.bus.clone();
        let event = report(&envelope, attempt, ReportedState::Working);
        let trace = trace.copied();
        tokio::spawn(async move {
            if let Err(e) = bus.publish_event(&event, trace.as_ref()).await {
                warn!(task_id = %event.task_id, error = %e, "could not report working");
            }
        })
    };
    let task = Task {
        envelope: envelope.without_token(),
        attempt,
        resumed,
        agent_dir: shared.dir.clone(),
        cancel: cancel.clone(),
    };
    let mut run = shared.handler.handle(task);
    let mut progress = tokio::time::interval((shared.lease / 3).max(Duration::from_millis(100)));
    progress.tick().await;
    let outcome = loop {
        tokio::select! {
            outcome = &mut run => break Some(outcome),
            _ = progress.tick() => {
                let _ = msg.ack_with(AckKind::Progress).await;
                if let Err(e) = shared.claims.renew(&mut held).await {
                    warn!(task_id = %task_id, error = %e, "lease renewal failed");
                }
            }
            () = hard_stop.cancelled() => break None,
        }
    };
    lock(&shared.running).remove(&task_id);
    let _ = working.await;
    let Some(outcome) = outcome else {
        cancel.cancel();
        drop(run);
        if let Err(e) = shared.claims.abandon(held).await {
            warn!(task_id = %task_id, error = %e, "could not release the claim");
        }
        let _ = msg.ack_with(AckKind::Nak(None)).await;
        return;
    };
    let max_attempts = envelope.control.max_attempts.get();
    let (state, disposition) = settle(&outcome, attempt, max_attempts, &shared.config.retry);
    let event = event_for(&envelope, attempt, state, &outcome);
    info!(task_id = %task_id, attempt, state = ?state, "task ran");
    match disposition {
        Disposition::Ack | Disposition::Term => {
            let kind = if disposition == Disposition::Ack {
                AckKind::Ack
            } else {
                AckKind::Term
            };
            // The claim must hold the result before the ack, so that a
            // redelivery republishes it; recording and publishing it can
            // happen at once.
            let (recorded, published) = tokio::join!(
                shared.claims.finish(held, &event),
                shared.bus.publish_event(&event, trace)
            );
            if let Err(e) = recorded {
                warn!(task_id = %task_id, error = %e, "could not record the result in the claim");
            }
            settle_delivery(&msg, &event, kind, published).await;
        }
        Disposition::Nak(delay) => {
            if let Err(e) = shared.claims.release_for_retry(held, attempt + 1).await {
                warn!(task_id = %task_id, error = %e, "could not release the claim for retry");
            }
            if let Err(e) = shared.bus.publish_event(&event, trace).await {
                warn!(task_id = %task_id, error = %e, "could not report the failure");
            }
            let _ = msg.ack_with(AckKind::Nak(Some(delay))).await;
        }
    }
}

/// Publishes the final event, then acks; if the publish fails the delivery
/// is left to be redelivered (and the claim republishes the event then).
async fn finish(
    shared: &Shared,
    msg: &Message,
    event: &WorkerEvent,
    kind: AckKind,
    trace: Option<&TraceContext>,
) {
    let published = shared.bus.publish_event(event, trace).await;
    settle_delivery(msg, event, kind, published).await;
}

/// Acks a delivery whose final event was published; otherwise leaves it to
/// be redelivered.
async fn settle_delivery(
    msg: &Message,
    event: &WorkerEvent,
    kind: AckKind,
    published: Result<(), BusError>,
) {
    if let Err(e) = published {
        warn!(task_id = %event.task_id, error = %e, "could not publish the result; it will be redelivered");
        let _ = msg
            .ack_with(AckKind::Nak(Some(Duration::from_secs(1))))
            .await;
        return;
    }
    if let Err(e) = msg.double_ack_with(kind).await {
        warn!(task_id = %event.task_id, error = %e, "ack not confirmed; a redelivery will republish");
    }
}

/// Refuses a well-formed envelope this agent will not run.
async fn reject(
    shared: &Shared,
    msg: Message,
    envelope: &Envelope,
    code: &'static str,
    why: &str,
    trace: Option<&TraceContext>,
) {
    warn!(task_id = %envelope.header.task_id, code, "rejected: {why}");
    let outcome = Outcome::Rejected(ErrorInfo::new(code, why, false));
    let mut event = event_for(
        envelope,
        envelope.control.attempt.get(),
        ReportedState::Rejected,
        &outcome,
    );
    event.agent = shared.card.name.clone();
    finish(shared, &msg, &event, AckKind::Term, trace).await;
}

/// Moves an envelope that cannot be read to the dead-letter stream, tells
/// the orchestrator when the task can be identified, and terminates it.
async fn dead_letter(
    shared: &Shared,
    msg: Message,
    code: &'static str,
    why: &str,
    trace: Option<&TraceContext>,
) {
    let seq = msg.info().map(|i| i.stream_sequence).unwrap_or_default();
    warn!(
        stream_seq = seq,
        code, "dead-lettering an unreadable envelope: {why}"
    );
    let fragments = rejected_from_fragments(&shared.card, &msg.payload, code, why);
    let letter = DeadLetterCopy {
        agent: shared.card.name.as_str(),
        payload: &msg.payload,
        code,
        reason: why,
        original_subject: msg.subject.as_str(),
        stream_seq: seq,
        task_id: fragments.as_ref().map(|e| e.task_id),
    };
    if shared.bus.dead_letter(letter).await.is_err() {
        // Not copied: leave it to be redelivered rather than lose it.
        let _ = msg
            .ack_with(AckKind::Nak(Some(Duration::from_secs(1))))
            .await;
        return;
    }
    if let Some(event) = fragments {
        let _ = shared.bus.publish_event(&event, trace).await;
    }
    let _ = msg.double_ack_with(AckKind::Term).await;
}

/// A `rejected` event for a message that did not parse, when its task id
/// and correlation id can still be read from it.
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
    Some(WorkerEvent {
        v: crate::envelope::Version,
        task_id,
        correlation_id,
        agent: card.name.clone(),
        attempt: std::num::NonZeroU32::MIN,
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
