//! Applies worker events to the store, from a durable consumer: events
//! published while the orchestrator is down are applied when it is back.

use std::time::Duration;

use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::{AckKind, Message};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::TaskUpdate;
use crate::bus::{Bus, BusError, PullSettings, Puller};
use crate::event::WorkerEvent;
use crate::store::{Applied, AuditEntry, Change, Store, StoreError};
use serde_json::json;

/// The orchestrator's durable consumer of worker events.
pub(crate) async fn consumer(bus: &Bus) -> Result<PullConsumer, BusError> {
    let n = bus.names();
    bus.durable_consumer(&n.events_stream(), &n.events_consumer())
        .await
}

/// How many tasks' events are applied at once.
const SHARDS: usize = 16;

/// Applies events as they arrive until `stop` fires. Events of one task go
/// to one shard and are applied in order; shards run concurrently (the
/// store batches their changes into shared transactions).
pub(crate) async fn apply_events(
    store: Store,
    events: PullConsumer,
    updates: broadcast::Sender<TaskUpdate>,
    stop: CancellationToken,
) {
    let mut shards = Vec::new();
    let mut senders = Vec::new();
    for _ in 0..SHARDS {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Message>(64);
        let store = store.clone();
        let updates = updates.clone();
        senders.push(tx);
        shards.push(tokio::spawn(async move {
            while let Some(msg) = rx.recv().await {
                let event =
                    WorkerEvent::from_wire(&msg.payload, crate::codec::DEFAULT_MAX_BYTES).ok();
                apply_one(&store, &updates, msg, event).await;
            }
        }));
    }
    let mut pull = Puller::new(events, PullSettings::short());
    loop {
        let msg = tokio::select! {
            m = pull.next() => m,
            () = stop.cancelled() => break,
        };
        if senders[shard_of(&msg)].send(msg).await.is_err() {
            break;
        }
    }
    drop(senders);
    for shard in shards {
        let _ = shard.await;
    }
}

/// The shard of a message: by its task id header, so one task's events
/// stay in order.
fn shard_of(msg: &Message) -> usize {
    use std::hash::{Hash, Hasher};
    let key = msg
        .headers
        .as_ref()
        .and_then(|h| h.get(crate::bus::TASK_ID_HEADER))
        .map(|v| v.as_str().to_string())
        .unwrap_or_else(|| msg.subject.to_string());
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut hasher);
    (hasher.finish() % SHARDS as u64) as usize
}

async fn apply_one(
    store: &Store,
    updates: &broadcast::Sender<TaskUpdate>,
    msg: Message,
    event: Option<WorkerEvent>,
) {
    let Some(event) = event else {
        warn!(subject = %msg.subject, "dropping an undecodable worker event");
        let _ = msg.ack_with(AckKind::Term).await;
        return;
    };
    let reason = match (&event.error, event.state) {
        (Some(e), _) => format!("{}: {}", e.code.as_str(), e.message),
        (None, state) => format!("worker reported {}", state.as_str()),
    };
    let change = Change {
        event: event.task_event(),
        attempt: Some(event.attempt.get()),
        actor: format!("agent:{}", event.agent),
        reason,
        result: event.result.clone(),
        error: event.error.clone(),
    };
    // The change is made in order here; its flush and the ack run on their
    // own, so this task's next event can be applied meanwhile.
    match store.apply_deferred(event.task_id, change).await {
        Ok(applied) => {
            let store = store.clone();
            let updates = updates.clone();
            tokio::spawn(async move {
                if store.flush().await.is_err() {
                    let _ = msg
                        .ack_with(AckKind::Nak(Some(Duration::from_millis(500))))
                        .await;
                    return;
                }
                let _ = msg.ack().await;
                match applied {
                    Applied::Moved(record) => {
                        // Nobody listening is fine.
                        let _ = updates.send(TaskUpdate {
                            task_id: record.task_id(),
                            state: record.state,
                        });
                    }
                    Applied::Ignored { reason, .. } => {
                        debug!(task_id = %event.task_id, "event ignored: {reason}");
                    }
                    Applied::Unchanged(_) => {}
                }
            });
        }
        Err(StoreError::NotFound(_)) => {
            // Not a task of this orchestrator (published straight onto the
            // bus, or from another deployment): keep a record of it.
            warn!(task_id = %event.task_id, "event for an unknown task");
            let entry = AuditEntry {
                actor: format!("agent:{}", event.agent),
                kind: "task.unknown_event".into(),
                task_id: Some(event.task_id),
                correlation_id: Some(event.correlation_id.clone()),
                trace_id: None,
                detail: json!({"state": event.state, "attempt": event.attempt, "error": event.error}),
            };
            match store.audit(entry).await {
                Ok(_) => {
                    let _ = msg.ack().await;
                }
                Err(_) => {
                    let _ = msg
                        .ack_with(AckKind::Nak(Some(Duration::from_millis(500))))
                        .await;
                }
            }
        }
        Err(e @ StoreError::Transition { .. }) => {
            warn!(task_id = %event.task_id, error = %e, "event not applied");
            let _ = msg.ack().await;
        }
        Err(e) => {
            warn!(task_id = %event.task_id, error = %e, "store failed; the event will be redelivered");
            let _ = msg
                .ack_with(AckKind::Nak(Some(Duration::from_millis(500))))
                .await;
        }
    }
}
