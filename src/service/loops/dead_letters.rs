//! Dead letters: poison tasks are moved from the work queue to the DLQ
//! stream when JetStream gives up on them, and can be listed and replayed.
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
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::audit::AuditEntry;
use crate::bus::{
    Bus, BusError, DLQ_CODE_HEADER as CODE_HEADER, DLQ_REASON_HEADER as REASON_HEADER,
    DeadLetterCopy, Original, PullSettings, Puller, Settlement, TASK_ID_HEADER, settle,
};
use crate::claim::{ClaimValue, Claims};
use crate::envelope::{Envelope, TaskId};
use crate::event::ErrorInfo;
use crate::store::{Change, Store, StoreError};
use crate::task::TaskEvent;

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
    let retry = Verdict::Later(bus.config().retry_delay);
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
                return Verdict::Later(bus.config().ack_wait);
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
        TaskEvent::Fail,
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

/// One dead letter as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeadLetter {
    /// Its sequence in the DLQ stream.
    pub seq: u64,
    /// The agent it was for.
    pub agent: String,
    /// Its task, when the envelope could be read.
    pub task_id: Option<TaskId>,
    /// Why, as a code.
    pub code: Option<String>,
    /// Why, in words.
    pub reason: Option<String>,
    /// When it was dead-lettered.
    pub at: String,
    /// The envelope (token removed), or the raw text when unreadable.
    pub message: Value,
}

/// Up to `limit` dead letters after sequence `after`.
pub(crate) async fn list(bus: &Bus, after: u64, limit: usize) -> Result<Vec<DeadLetter>, BusError> {
    let stream_error = |e: String| BusError::Provision {
        what: bus.names().dlq_stream(),
        message: e,
    };
    let mut stream = bus
        .jetstream()
        .get_stream(bus.names().dlq_stream())
        .await
        .map_err(|e| stream_error(e.to_string()))?;
    let state = stream
        .info()
        .await
        .map_err(|e| stream_error(e.to_string()))?
        .state
        .clone();
    let mut out = Vec::new();
    let mut seq = after.max(state.first_sequence.saturating_sub(1)) + 1;
    while seq <= state.last_sequence && out.len() < limit {
        if let Ok(m) = stream.get_raw_message(seq).await {
            let header = |name: &str| m.headers.get(name).map(|v| v.to_string());
            let message = match Envelope::from_wire(&m.payload, usize::MAX) {
                Ok(env) => serde_json::to_value(env.without_token()).unwrap_or(Value::Null),
                Err(_) => Value::String(
                    String::from_utf8_lossy(&m.payload)
                        .chars()
                        .take(4096)
                        .collect(),
                ),
            };
            out.push(DeadLetter {
                seq,
                agent: m.subject.split('.').nth(2).unwrap_or("").to_string(),
                task_id: header(TASK_ID_HEADER).and_then(|t| t.parse().ok()),
                code: header(CODE_HEADER),
                reason: header(REASON_HEADER),
                at: m.time.to_string(),
                message,
            });
        }
        seq += 1;
    }
    Ok(out)
}

/// Every dead letter that names `task_id` (in its `Orch-Task-Id`
/// header), oldest first. Anyone who may dead-letter may name any task
/// there: what a letter says is checked against the store before use.
pub(crate) async fn letters_of(bus: &Bus, task_id: TaskId) -> Result<Vec<DeadLetter>, BusError> {
    let mut after = 0;
    let mut found = Vec::new();
    loop {
        let page = list(bus, after, 256).await?;
        let Some(last) = page.last() else {
            return Ok(found);
        };
        after = last.seq;
        found.extend(page.into_iter().filter(|d| d.task_id == Some(task_id)));
    }
}

impl DeadLetter {
    /// The agent the letter's envelope is addressed to (`header.to`),
    /// when its envelope could be read.
    pub(crate) fn addressed_to(&self) -> Option<&str> {
        self.message.get("header")?.get("to")?.as_str()
    }

    /// Why this letter may not stand for the stored task `record`, if it
    /// may not: the agent of its subject (who dead-lettered it: an agent
    /// may write only its own), its envelope's `header.to` and the task's
    /// agent must agree.
    pub(crate) fn disagrees_with(&self, record: &crate::task::TaskRecord) -> Option<String> {
        let agent = record.agent().as_str();
        if self.agent != agent {
            return Some(format!(
                "the letter was dead-lettered on agent `{}`'s subject; task {} is for `{agent}`",
                self.agent,
                record.task_id()
            ));
        }
        match self.addressed_to() {
            Some(to) if to != agent => Some(format!(
                "the letter's envelope is addressed to `{to}`; task {} is for `{agent}`",
                record.task_id()
            )),
            _ => None,
        }
    }
}

/// Removes a replayed dead letter.
pub(crate) async fn remove(bus: &Bus, seq: u64) -> Result<(), BusError> {
    let stream = bus
        .jetstream()
        .get_stream(bus.names().dlq_stream())
        .await
        .map_err(|e| BusError::Provision {
            what: bus.names().dlq_stream(),
            message: e.to_string(),
        })?;
    stream
        .delete_message(seq)
        .await
        .map(|_| ())
        .map_err(|e| BusError::Provision {
            what: format!("dead letter {seq}"),
            message: e.to_string(),
        })
}

/// The audit record of a replay.
pub(crate) fn replay_entry(old: TaskId, new: TaskId, seq: u64, principal: &str) -> AuditEntry {
    AuditEntry {
        actor: principal.to_string(),
        kind: "dlq.replay".into(),
        task_id: Some(new),
        correlation_id: None,
        trace_id: None,
        detail: json!({"replayed_task": old, "dlq_seq": seq}),
    }
}

/// The audit record of a dead letter refused as the source of a replay.
pub(crate) fn refused_entry(
    task: TaskId,
    letter: &DeadLetter,
    why: &str,
    principal: &str,
) -> AuditEntry {
    AuditEntry {
        actor: principal.to_string(),
        kind: "dlq.replay_refused".into(),
        task_id: Some(task),
        correlation_id: None,
        trace_id: None,
        detail: json!({
            "dlq_seq": letter.seq,
            "letter_agent": letter.agent,
            "addressed_to": letter.addressed_to(),
            "reason": why,
        }),
    }
}
