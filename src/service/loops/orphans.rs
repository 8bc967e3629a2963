//! Envelopes for agents nobody knows: published straight onto
//! `orch.tasks.<agent>.*` for an agent without a card, they would wait in
//! the work queue forever. A periodic sweep moves them to the DLQ
//! (`unknown_agent`) and rejects their tasks, if the store has them.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::telemetry::quiet::warn_quietly;
use async_nats::jetstream::consumer;
use futures::StreamExt;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::agent::AgentCard;
use crate::bus::{Bus, DeadLetterCopy, Original, Settlement};
use crate::envelope::{AgentName, Envelope};
use crate::event::ErrorInfo;
use crate::store::{Change, Store};
use crate::task::Transition;

/// Sweeps every `interval` until `stop` fires. Does nothing when no cards
/// are configured (then every agent is acceptable).
pub(crate) async fn sweep(
    bus: Bus,
    store: Store,
    agents: tokio::sync::watch::Receiver<std::sync::Arc<crate::service::Declared>>,
    interval: Duration,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(interval);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.cancelled() => return,
        }
        let declared = agents.borrow().clone();
        if declared.agents.is_empty() {
            continue;
        }
        if let Err(e) = sweep_once(&bus, &store, &declared.agents).await {
            warn_quietly!("orchestrator.orphan_sweep_failed", error = %e, "orphan sweep failed");
        }
    }
}

async fn sweep_once(
    bus: &Bus,
    store: &Store,
    cards: &BTreeMap<AgentName, AgentCard>,
) -> Result<(), String> {
    let names = bus.names();
    let tasks_stream = names.tasks_stream();
    let stream = bus
        .jetstream()
        .get_stream(names.tasks_stream())
        .await
        .map_err(|e| e.to_string())?;
    let mut subjects = stream
        .info_with_subjects(names.all_tasks())
        .await
        .map_err(|e| e.to_string())?;
    let mut orphans: BTreeMap<String, usize> = BTreeMap::new();
    while let Some(item) = subjects.next().await {
        let (subject, count) = item.map_err(|e| e.to_string())?;
        let agent = subject.split('.').nth(2).unwrap_or_default().to_string();
        let known = agent
            .parse::<AgentName>()
            .is_ok_and(|a| cards.contains_key(&a));
        if !known && count > 0 {
            *orphans.entry(agent).or_default() += count;
        }
    }
    for (agent, count) in orphans {
        let filter = format!("{}.tasks.{agent}.>", subject_prefix(&names.all_tasks()));
        // An overlapping consumer exists when an unlisted worker serves this
        // agent: then its tasks are not orphans, and creation fails.
        let Ok(sweeper) = stream
            .create_consumer(consumer::pull::Config {
                filter_subject: filter,
                ack_policy: consumer::AckPolicy::Explicit,
                inactive_threshold: Duration::from_secs(30),
                ..Default::default()
            })
            .await
        else {
            continue;
        };
        let batch = sweeper
            .fetch()
            .max_messages(count)
            .messages()
            .await
            .map_err(|e| e.to_string())?;
        let messages: Vec<_> = batch.filter_map(|m| async { m.ok() }).collect().await;
        for msg in messages {
            let seq = msg.info().map(|i| i.stream_sequence).unwrap_or_default();
            let envelope = Envelope::from_wire(&msg.payload, usize::MAX).ok();
            let reason = format!("no agent `{agent}` is known");
            let letter = DeadLetterCopy {
                agent: &agent,
                payload: &msg.payload,
                code: "unknown_agent",
                reason: &reason,
                original_subject: msg.subject.as_str(),
                stream: &tasks_stream,
                stream_seq: seq,
                task_id: envelope.as_ref().map(|e| e.header.task_id),
            };
            let moved = bus
                .move_to_dlq(letter, Original::Delivered(&msg, Settlement::Ack))
                .await;
            if moved.is_err() {
                continue;
            }
            info!(agent = %agent, stream_seq = seq, "dead-lettered an envelope for an unknown agent");
            if let Some(env) = envelope {
                let mut change = Change::new(Transition::Reject, "orchestrator", reason.clone());
                change.error = Some(ErrorInfo::new("unknown_agent", reason, false));
                let _ = store.apply(env.header.task_id, change).await;
            }
        }
        let _ = stream.delete_consumer(&sweeper.cached_info().name).await;
    }
    Ok(())
}

/// `orch` from `orch.tasks.>`.
fn subject_prefix(all_tasks: &str) -> &str {
    all_tasks.split(".tasks.").next().unwrap_or(all_tasks)
}
