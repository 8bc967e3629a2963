//! Taking a delivery's claim, and waiting out what is not the task's fault.
//!
//! Two answers say nothing about the task: another replica holds the claim
//! (`Busy`: its holder runs the attempt, or died and its lease is about to
//! end), and the claims bucket cannot be reached (`Unavailable`: its node
//! is down or its leader is being elected). A nak would spend one of the
//! task's `max_deliver` deliveries on each, and a bucket away for seconds
//! would dead-letter tasks that never ran. So the worker keeps the message
//! (an in-progress ack every beat) and looks again after a backoff with
//! jitter, until it may run the attempt, finds it over, or stops. A
//! repeated delivery whose record cannot be read (the events stream is
//! electing its leader) waits the same way: its attempt may have reported
//! already, its ack lost with a killed node.

use std::time::Duration;

use async_nats::jetstream::Message;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::Shared;
use crate::bus::{Settlement, settle};
use crate::claim::{Acquired, ClaimErrorKind, Decision, Delivery, Held};
use crate::envelope::Envelope;
use crate::telemetry::metrics;
use crate::telemetry::quiet::warn_quietly;

/// What came of claiming.
pub(super) enum Claimed {
    /// This process holds the claim: run the attempt.
    Run(Held),
    /// The message is settled (or left to its holder): nothing to run.
    Settled,
}

/// Claims `delivery` of `envelope` for this worker, waiting while another
/// replica holds it or the bucket is away; settles the message when the
/// attempt is not to run here.
pub(super) async fn claim(
    shared: &Shared,
    msg: &Message,
    envelope: &Envelope,
    (delivery, resumed): (Delivery, bool),
    hard_stop: &CancellationToken,
) -> Claimed {
    let task_id = envelope.header.task_id;
    let agent = &envelope.header.to;
    let mut backoff = shared.bus.settings().backoff();
    let mut kept_alive = Instant::now();
    loop {
        // Any delivery, whatever its headers, may be a copy of an attempt
        // that already reported its result (its exact bytes, published
        // again): the attempt's record is read beside the claim, so it
        // costs no wait.
        let (record, acquired) = tokio::join!(
            attempt_record(shared, envelope),
            shared
                .claims
                .acquire(agent, task_id, delivery, &shared.instance)
        );
        if record == Record::Over {
            debug!(task_id = %task_id, attempt = delivery.attempt, "attempt already reported: settling the copy");
            return settle_copy(shared, msg, task_id, acquired).await;
        }
        let reason = match acquired {
            // A repeated delivery may be of an attempt that reported while
            // its ack was lost: it runs only once the record says it is
            // not over. (A first delivery runs: the claim keeps copies
            // apart.)
            Ok(Acquired::Run(held)) if record == Record::Unknown && resumed => {
                if let Err(e) = shared.claims.release(held).await {
                    warn_quietly!("worker.release_failed", task_id = %task_id, error = %e, "could not release the claim");
                }
                "record_unavailable"
            }
            Ok(Acquired::Run(held)) => return Claimed::Run(held),
            Ok(Acquired::Skip(Decision::Busy)) => {
                // Its holder missed a whole ack wait of in-progress acks:
                // it died (its claim ends within a lease) or it is cut off
                // (it gives the claim up within a lease).
                debug!(task_id = %task_id, "another replica holds the claim: looking again");
                "claim_busy"
            }
            Ok(Acquired::Skip(decision)) => {
                info!(task_id = %task_id, attempt = delivery.attempt, ?decision, "not run: settling the message");
                settle(msg, Settlement::Ack).await;
                return Claimed::Settled;
            }
            Err(e) if e.kind == ClaimErrorKind::Unavailable => {
                warn_quietly!("worker.claims_unavailable", task_id = %task_id, error = %e, "the claims bucket cannot be reached: keeping the message and trying again");
                "claims_unavailable"
            }
            Err(e) => {
                // Not a claim at all: a broken value no wait repairs.
                warn!(task_id = %task_id, error = %e, "unreadable claim; redelivering");
                settle(msg, Settlement::Nak(shared.retry_delay())).await;
                return Claimed::Settled;
            }
        };
        metrics::worker_waited(shared.card.name.as_str(), reason);
        if !keep_waiting(
            shared,
            msg,
            backoff.next_delay(),
            &mut kept_alive,
            hard_stop,
        )
        .await
        {
            settle(msg, Settlement::Nak(Duration::ZERO)).await;
            return Claimed::Settled;
        }
    }
}

/// Settles a copy of an attempt that already reported, releasing the
/// claim it may have got.
async fn settle_copy(
    shared: &Shared,
    msg: &Message,
    task_id: crate::envelope::TaskId,
    acquired: Result<Acquired, crate::claim::ClaimError>,
) -> Claimed {
    if let Ok(Acquired::Run(held)) = acquired
        && let Err(e) = shared.claims.release(held).await
    {
        warn_quietly!("worker.release_failed", task_id = %task_id, error = %e, "could not release the claim of a copy");
    }
    settle(msg, Settlement::Ack).await;
    Claimed::Settled
}

/// What the task's last event says of an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Record {
    /// A final report of it, or a report of a later attempt: it is over.
    Over,
    /// No event yet, or a `working` one: it may run.
    Open,
    /// The events stream could not be read.
    Unknown,
}

/// Reads the task's last event: is `envelope`'s attempt over?
async fn attempt_record(shared: &Shared, envelope: &Envelope) -> Record {
    let attempt = envelope.control.attempt.get();
    match shared
        .bus
        .last_event(&envelope.header.to, envelope.header.task_id)
        .await
    {
        Ok(Some(last)) if last.ends_attempt(attempt) => Record::Over,
        Ok(_) => Record::Open,
        Err(e) => {
            warn_quietly!("worker.record_unreadable", task_id = %envelope.header.task_id, error = %e, "cannot read the attempt's record");
            Record::Unknown
        }
    }
}

/// Waits `delay` holding `msg`: an in-progress ack whenever a beat has
/// passed since `kept_alive`. False when the worker must stop first.
pub(super) async fn keep_waiting(
    shared: &Shared,
    msg: &Message,
    delay: Duration,
    kept_alive: &mut Instant,
    hard_stop: &CancellationToken,
) -> bool {
    let until = Instant::now() + delay;
    loop {
        let beat_at = *kept_alive + shared.beat();
        tokio::select! {
            () = tokio::time::sleep_until(until.min(beat_at)) => {}
            () = hard_stop.cancelled() => return false,
        }
        let now = Instant::now();
        if now >= beat_at {
            settle(msg, Settlement::Progress).await;
            *kept_alive = now;
        }
        if now >= until {
            return true;
        }
    }
}
