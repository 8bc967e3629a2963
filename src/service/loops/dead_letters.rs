//! Dead letters: poison tasks are moved from the work queue to the DLQ
//! stream when JetStream gives up on them (listed and replayed through
//! `service::dead_letters`).
//!
//! JetStream publishes a MAX_DELIVERIES advisory when a message has been
//! delivered `max_deliver` times without an ack. The advisories are kept in
//! a stream (so none is lost while the orchestrator is down) and consumed
//! durably: the message is fetched by its sequence, copied to
//! `orch.dlq.<agent>` with the reason in headers, removed from the work
//! queue, and its task marked failed. Nothing is silently dropped.

use std::time::Duration;

use crate::telemetry::quiet::warn_quietly;
use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::stream::RawMessageErrorKind;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::bus::{
    Bus, BusError, DeadLetterCopy, Original, PullSettings, Puller, Settlement, settle,
};
use crate::claim::{ClaimValue, Claims};
use crate::envelope::Envelope;
use crate::event::ErrorInfo;
use crate::store::{Change, Store, StoreError};
use crate::task::Transition;

/// What JetStream says in a MAX_DELIVERIES advisory.
#[derive(Debug, Deserialize)]
struct Advisory {
    stream: String,
    consumer: String,
    stream_seq: u64,
    deliveries: u64,
}

pub(crate) async fn consumer(bus: &Bus) -> Result<PullConsumer, BusError> {
    let n = bus.names();
    // No delivery limit: an advisory about a running task is looked at
    // again until the task is resolved.
    bus.durable_consumer(&n.advisories_stream(), &n.advisories_consumer(), -1, 1024)
        .await
}

/// What to do with an advisory after one look.
enum Verdict {
    /// Handled (moved, or nothing left to move).
    Done,
    /// Look again after this long (a dependency failed, or the task is
    /// still running under a live claim).
    Later(Duration),
}

/// Dead-letters poison tasks until `stop` fires.
pub(crate) async fn handle_advisories(
    bus: Bus,
    store: Store,
    claims: Claims,
    advisories: PullConsumer,
    stop: CancellationToken,
) {
    let mut pull = Puller::new(advisories, PullSettings::short());
    loop {
        let msg = tokio::select! {
            m = pull.next() => m,
            () = stop.cancelled() => return,
        };
        let verdict = match serde_json::from_slice::<Advisory>(&msg.payload) {
            Ok(advisory) => dead_letter(&bus, &store, &claims, &advisory).await,
            Err(e) => {
                warn!(error = %e, "undecodable advisory");
                Verdict::Done
            }
        };
        let how = match verdict {
            Verdict::Done => Settlement::Ack,
            Verdict::Later(delay) => Settlement::Nak(delay),
        };
        settle(&msg, how).await;
    }
}

/// Moves the message of one advisory, unless its task is running.
async fn dead_letter(bus: &Bus, store: &Store, claims: &Claims, advisory: &Advisory) -> Verdict {
    let retry = Verdict::Later(bus.settings().retry_delay);
    let js = bus.jetstream();
    let tasks = match js.get_stream(&advisory.stream).await {
        Ok(s) => s,
        Err(e) => {
            warn_quietly!("orchestrator.dlq_stream_unavailable", error = %e, "task stream unavailable");
            return retry;
        }
    };
    let message = match tasks.get_raw_message(advisory.stream_seq).await {
        Ok(m) => m,
        // Acked or removed meanwhile: nothing left to move.
        Err(e) if e.kind() == RawMessageErrorKind::NoMessageFound => return Verdict::Done,
        Err(e) => {
            warn_quietly!("orchestrator.dlq_read_failed", seq = advisory.stream_seq, error = %e, "cannot read the poison message");
            return retry;
        }
    };
    let envelope = Envelope::from_wire(&message.payload, usize::MAX).ok();
    if let Some(env) = &envelope {
        // A live claim on this attempt: a worker runs it (the deliveries
        // that ran out were copies, or redeliveries while it ran). It will
        // ack the message itself; if it dies, the next look moves it.
        match claims.peek(&env.header.to, env.header.task_id).await {
            Ok((Some(ClaimValue::Running { attempt, .. }), _))
                if attempt == env.control.attempt.get() =>
            {
                return Verdict::Later(bus.settings().ack_wait);
            }
            Ok(_) => {}
            Err(e) => {
                warn_quietly!("orchestrator.dlq_claim_unreadable", task_id = %env.header.task_id, error = %e, "cannot read the claim");
                return retry;
            }
        }
    }
    let agent = message
        .subject
        .split('.')
        .nth(2)
        .unwrap_or("unknown")
        .to_string();
    let reason = format!(
        "delivered {} times to {} without an ack",
        advisory.deliveries, advisory.consumer
    );
    let letter = DeadLetterCopy {
        agent: &agent,
        payload: &message.payload,
        code: "max_deliveries",
        reason: &reason,
        original_subject: message.subject.as_str(),
        stream: &advisory.stream,
        stream_seq: advisory.stream_seq,
        task_id: envelope.as_ref().map(|e| e.header.task_id),
    };
    if let Err(e) = bus.move_to_dlq(letter, Original::Stored).await {
        warn_quietly!("orchestrator.dlq_move_failed", seq = advisory.stream_seq, error = %e, "poison message not moved to the DLQ");
        return retry;
    }
    let Some(env) = envelope else {
        info!(
            seq = advisory.stream_seq,
            "dead-lettered an unreadable message"
        );
        return Verdict::Done;
    };
    let task_id = env.header.task_id;
    info!(task_id = %task_id, "dead-lettered: {reason}");
    let mut change = Change::new(
        Transition::Fail,
        "orchestrator",
        format!("dead-lettered: {reason}"),
    );
    // Only the attempt that ran out: a later attempt is left alone.
    change.attempt = Some(env.control.attempt.get());
    change.error = Some(ErrorInfo::new("dead_lettered", reason, false));
    match store.apply(task_id, change).await {
        Ok(_) | Err(StoreError::NotFound(_)) | Err(StoreError::Transition { .. }) => Verdict::Done,
        Err(e) => {
            warn_quietly!("orchestrator.dlq_mark_failed", task_id = %task_id, error = %e, "could not mark the dead-lettered task failed");
            retry
        }
    }
}
