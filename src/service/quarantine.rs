//! Tasks whose stored records cannot be read are set aside (the store's
//! quarantine), never left to stop the orchestrator: recovery at start,
//! the publisher, the event applier and single reads quarantine the task
//! they meet; what listings skipped (noted by the store) is quarantined at
//! the reaper's next scan.

use tracing::{error, warn};

use crate::envelope::TaskId;
use crate::store::{Store, StoreError};

/// Sets task `id` aside because of `why`; logs what happened.
pub(crate) async fn set_aside(store: &Store, id: TaskId, why: &str) {
    match store.quarantine(id, why).await {
        Ok(Some(q)) => error!(
            task_id = %id,
            trees = ?q.trees,
            reason = why,
            "a task's stored record cannot be read: set aside (quarantined, audited); `orchestrator store verify` lists it"
        ),
        Ok(None) => {}
        Err(e) => {
            warn!(task_id = %id, error = %e, "a task's unreadable record could not be set aside; trying again later")
        }
    }
}

/// Sets aside every task readers found unreadable since the last call;
/// how many.
pub(crate) async fn set_aside_noted(store: &Store) -> usize {
    let noted = store.take_unreadable();
    for (id, why) in &noted {
        set_aside(store, *id, why).await;
    }
    noted.len()
}

/// Whether `e` says a task's record cannot be read.
pub(crate) fn unreadable(e: &StoreError) -> bool {
    matches!(e, StoreError::Decode { .. })
}
