//! The orchestrator's readiness: the broker connected, the store able to
//! flush, every stream and bucket it needs led, and the task queue not
//! stalled (work waiting for delivery while nothing at all moved for
//! `ready_stall_after`). The bus checks run in the background every
//! [`CHECK_EVERY`]; `/readyz` adds the connection and a store flush.

use std::time::Duration;

use serde_json::{Value, json};
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
        let unserved = bus.orchestrator_unserved().await;
        let flow = bus.flow().await;
        let stalled = match &flow {
            Ok(f) => stall.observe(f.undelivered, f.mark).map(|still| {
                json!({
                    "waiting": f.undelivered,
                    "seconds": still.as_secs(),
                    "why": format!(
                        "{} task messages wait for delivery and nothing has moved for {}s (are the agents' workers up?)",
                        f.undelivered,
                        still.as_secs()
                    ),
                })
            }),
            Err(_) => None,
        };
        let ok = unserved.is_empty() && stalled.is_none();
        ready.set(
            ok,
            json!({
                "unserved": unserved,
                "stalled": stalled.unwrap_or(Value::Null),
                "waiting": flow.as_ref().map(|f| f.undelivered).ok(),
            }),
        );
    }
}
