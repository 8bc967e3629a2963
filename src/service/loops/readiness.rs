//! The orchestrator's readiness: the broker connected, every stream and
//! bucket it needs led, and the task queue not stalled (work waiting for
//! delivery while nothing at all moved for `ready_stall_after`). The
//! checks run in the background every [`CHECK_EVERY`] and own the
//! `orch_ready` gauge; `/readyz` adds a store flush to their verdict.

use std::time::Duration;

use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::bus::Bus;
use crate::telemetry::readiness::{CHECK_EVERY, Readiness, StallWatch};

/// Checks the bus until `stop` fires, recording each verdict in `ready`.
pub(crate) async fn watch(
    bus: Bus,
    stall_after: Duration,
    ready: Readiness,
    stop: CancellationToken,
) {
    let mut stall = StallWatch::new(stall_after);
    let mut tick = tokio::time::interval(CHECK_EVERY);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.cancelled() => return,
        }
        let nats = bus.is_connected();
        let (unserved, flow) = bus.orchestrator_health().await;
        let stalled = flow.and_then(|f| {
            let what = "task messages wait for delivery (are the agents' workers up?)";
            stall.report(f.undelivered, f.mark, what)
        });
        let ok = nats && unserved.is_empty() && stalled.is_none();
        ready.set(
            ok,
            json!({
                "nats": nats,
                "unserved": unserved,
                "stalled": stalled,
                "waiting": flow.map(|f| f.undelivered),
            }),
        );
    }
}
