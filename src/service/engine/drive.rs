//! The engine's loop: advances runs as they are nudged, one advance of a
//! run at a time, each tracked so a stop waits for it.

use std::collections::HashMap;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::EngineQueue;
use super::handle::RETRY_AFTER;
use super::workflows::advance;
use crate::run::RunId;
use crate::service::{Orchestrator, ServiceError, quarantine};
use crate::telemetry::quiet::warn_quietly;

/// Advances runs as they are nudged, until `stop`; first nudges every run
/// that has not ended.
pub(crate) async fn drive(o: Orchestrator, mut queue: EngineQueue, stop: CancellationToken) {
    match o.store().live_runs() {
        Ok(live) => {
            if !live.is_empty() {
                info!(runs = live.len(), "resuming unfinished runs");
            }
            for id in live {
                o.inner.engine.nudge(id);
            }
        }
        Err(e) => warn!(error = %e, "unfinished runs could not be listed: they resume when nudged"),
    }
    let (done, mut finished) = mpsc::unbounded_channel::<RunId>();
    // Runs being advanced; `true`: nudged again meanwhile.
    let mut busy: HashMap<RunId, bool> = HashMap::new();
    // The advances under way: waited for once stopped (within the loops'
    // bound), so none is cut between its writes by the stop itself.
    let advancing = tokio_util::task::TaskTracker::new();
    let spawn = |id: RunId| {
        let o = o.clone();
        let done = done.clone();
        advancing.spawn(async move {
            match advance(&o, id).await {
                Ok(()) => {}
                // Reading it again will not help: said once, left alone
                // (`store verify` names it).
                Err(ServiceError::Store(e)) if quarantine::unreadable(&e) => {
                    error!(run_id = %id, error = %e, "a run's stored record cannot be read: it is not advanced");
                }
                Err(e) => {
                    warn_quietly!("orchestrator.run_not_advanced", run_id = %id, error = %e, "run not advanced; trying again shortly");
                    o.inner.engine.later(id, RETRY_AFTER);
                }
            }
            let _ = done.send(id);
        });
    };
    loop {
        tokio::select! {
            () = stop.cancelled() => {
                o.inner.engine.stopped.cancel();
                break;
            }
            Some(id) = queue.recv() => match busy.get_mut(&id) {
                Some(again) => *again = true,
                None => {
                    busy.insert(id, false);
                    spawn(id);
                }
            },
            Some(id) = finished.recv() => {
                if busy.remove(&id) == Some(true) {
                    busy.insert(id, false);
                    spawn(id);
                }
            }
        }
    }
    advancing.close();
    advancing.wait().await;
}
