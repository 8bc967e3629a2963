//! What runs beside the pulls: the registry heartbeat, the readiness
//! check, the cancel listener.

use std::sync::Arc;

use futures::StreamExt;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{Shared, lock};
use crate::envelope::{TaskId, Timestamp};
use crate::telemetry::quiet::warn_quietly;
use crate::telemetry::readiness::{CHECK_EVERY, StallWatch};

/// Keeps this instance's card in the live registry until `stop` fires.
pub(super) async fn heartbeat(shared: Arc<Shared>, stop: CancellationToken) {
    let (agent, instance) = (&shared.card.name, shared.instance.as_str());
    let started_at = Timestamp::now();
    let mut tick = tokio::time::interval(shared.config.heartbeat);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let value = json!({
                    "agent": shared.card.name,
                    "instance": shared.instance,
                    "card": shared.card,
                    "started_at": started_at,
                    "heartbeat_at": Timestamp::now(),
                    "in_flight": lock(&shared.running).len(),
                });
                if let Err(e) = shared.bus.register(agent, instance, value.to_string().into()).await {
                    warn_quietly!("worker.heartbeat_failed", error = %e, "registry heartbeat failed");
                }
            }
            () = stop.cancelled() => break,
        }
    }
    let _ = shared.bus.unregister(agent, instance).await;
}

/// Checks until `stop` fires what the worker needs: the broker connected,
/// its consumers, the claims bucket and the events stream led, and its
/// queue not stalled while it has free slots.
pub(super) async fn check_readiness(shared: Arc<Shared>, stop: CancellationToken) {
    let mut stall = StallWatch::new(shared.config.stall_after);
    let mut tick = tokio::time::interval(CHECK_EVERY);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.cancelled() => return,
        }
        let nats = shared.bus.is_connected();
        let (unserved, flow) = shared.bus.worker_health(&shared.card.name).await;
        let busy = lock(&shared.running).len() >= shared.config.concurrency.max(1);
        let stalled = flow.and_then(|f| {
            let waiting = if busy { 0 } else { f.undelivered };
            let what = "messages wait for this agent while this worker has free slots";
            stall.report(waiting, f.mark, what)
        });
        let ok = nats && unserved.is_empty() && stalled.is_none();
        shared.config.readiness.set(
            ok,
            json!({"nats": nats, "unserved": unserved, "stalled": stalled}),
        );
    }
}

/// Cancels running tasks when their cancel is broadcast.
pub(super) async fn listen_for_cancels(shared: Arc<Shared>, stop: CancellationToken) {
    let subject = shared.bus.names().all_cancels();
    let mut sub = match shared.bus.client().subscribe(subject).await {
        Ok(sub) => sub,
        Err(e) => {
            warn!(error = %e, "cannot listen for cancels");
            return;
        }
    };
    loop {
        tokio::select! {
            msg = sub.next() => {
                let Some(msg) = msg else { return };
                let id = msg.subject.rsplit('.').next().and_then(|s| s.parse::<TaskId>().ok());
                if let Some(token) = id.and_then(|id| lock(&shared.running).get(&id).cloned()) {
                    info!(task_id = ?id, "cancel requested");
                    token.cancel();
                }
            }
            () = stop.cancelled() => return,
        }
    }
}
