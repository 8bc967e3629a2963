//! Stopping an attempt that ended on the orchestrator's side: a cancel
//! (`cancel`) or a deadline (`loops::reaper`).

use crate::bus::Bus;
use crate::claim::Claims;
use crate::task::TaskStatus;
use crate::telemetry::quiet::warn_quietly;

/// Stops whatever runs a task that just ended on the orchestrator's side
/// (canceled, or past its deadline): the claim is marked canceled first, so
/// a worker that claims later never starts, then the cancel is broadcast to
/// the holder. A mark that cannot be written is an error the caller may
/// report; the broadcast is best effort.
pub(crate) async fn stop_attempt(bus: &Bus, claims: &Claims, record: &TaskStatus) -> bool {
    let task_id = record.task_id;
    let marked = match claims
        .mark_canceled(&record.agent, task_id, record.attempt)
        .await
    {
        Ok(()) => true,
        Err(e) => {
            warn_quietly!("orchestrator.cancel_mark_failed", task_id = %task_id, error = %e, "cannot mark the claim canceled");
            false
        }
    };
    let subject = bus.names().cancel_subject(task_id);
    if let Err(e) = bus.client().publish(subject, "cancel".into()).await {
        warn_quietly!("orchestrator.cancel_broadcast_failed", task_id = %task_id, error = %e, "cancel broadcast failed");
    }
    marked
}
