//! Applies worker events to the store, from a durable consumer: events
//! published while the orchestrator is down are applied when it is back.

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::jetstream::consumer::{self, PullConsumer};
use async_nats::jetstream::{AckKind, Message};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::bus::{Bus, BusError};
use crate::envelope::TaskId;
use crate::event::WorkerEvent;
use crate::store::{Applied, Change, Store, StoreError};

/// Creates (or finds) the orchestrator's durable consumer of worker events.
pub(crate) async fn consumer(bus: &Bus) -> Result<PullConsumer, BusError> {
    let n = bus.names();
    let stream = bus
        .jetstream()
        .get_stream(n.events_stream())
        .await
        .map_err(|e| BusError::Provision {
            what: n.events_stream(),
            message: e.to_string(),
        })?;
    stream
        .get_or_create_consumer(
            &n.events_consumer(),
            consumer::pull::Config {
                durable_name: Some(n.events_consumer()),
                ack_policy: consumer::AckPolicy::Explicit,
                ack_wait: Duration::from_secs(30),
                max_ack_pending: -1,
                ..Default::default()
            },
        )
        .await
        .map_err(|e| BusError::Provision {
            what: n.events_consumer(),
            message: e.to_string(),
        })
}

/// Applies events until `stop` fires. Events of one task are applied in
/// order; different tasks' events are applied concurrently (the store
/// batches them into shared transactions).
pub(crate) async fn apply_events(store: Store, events: PullConsumer, stop: CancellationToken) {
    loop {
        let batch = tokio::select! {
            b = events.batch().max_messages(512).expires(Duration::from_secs(1)).messages() => b,
            () = stop.cancelled() => return,
        };
        let batch = match batch {
            Ok(b) => b,
            Err(e) => {
                warn!(error = %e, "fetching worker events failed");
                tokio::time::sleep(Duration::from_millis(250)).await;
                continue;
            }
        };
        let msgs: Vec<Message> = batch.filter_map(|m| async { m.ok() }).collect().await;
        let mut by_task: BTreeMap<Option<TaskId>, Vec<(Message, Option<WorkerEvent>)>> =
            BTreeMap::new();
        for msg in msgs {
            let event = WorkerEvent::from_wire(&msg.payload, crate::codec::DEFAULT_MAX_BYTES).ok();
            by_task
                .entry(event.as_ref().map(|e| e.task_id))
                .or_default()
                .push((msg, event));
        }
        let groups = by_task.into_values().map(|group| {
            let store = store.clone();
            async move {
                for (msg, event) in group {
                    apply_one(&store, msg, event).await;
                }
            }
        });
        futures::future::join_all(groups).await;
    }
}

async fn apply_one(store: &Store, msg: Message, event: Option<WorkerEvent>) {
    let Some(event) = event else {
        warn!(subject = %msg.subject, "dropping an undecodable worker event");
        let _ = msg.ack_with(AckKind::Term).await;
        return;
    };
    let reason = match (&event.error, event.state) {
        (Some(e), _) => format!("{}: {}", e.code.as_str(), e.message),
        (None, state) => format!(
            "worker reported {}",
            serde_json::to_value(state)
                .unwrap_or_default()
                .as_str()
                .unwrap_or("")
        ),
    };
    let change = Change {
        event: event.task_event(),
        attempt: Some(event.attempt.get()),
        actor: format!("agent:{}", event.agent),
        reason,
        result: event.result.clone(),
        error: event.error.clone(),
    };
    match store.apply(event.task_id, change).await {
        Ok(Applied::Ignored { reason, .. }) => {
            debug!(task_id = %event.task_id, "event ignored: {reason}");
            let _ = msg.ack().await;
        }
        Ok(_) => {
            let _ = msg.ack().await;
        }
        Err(e @ (StoreError::NotFound(_) | StoreError::Transition { .. })) => {
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
