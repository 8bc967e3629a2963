//! The running loops: one tracker, a bounded stop, the store flushed
//! after.

use std::time::Duration;

use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::service::ServiceError;

/// How long stopping waits for the loops once the stop token fired; what
/// still runs then is left to end with the process (as after a crash,
/// which recovery handles), so a stuck loop cannot hold a shutdown.
pub const STOP_WITHIN: Duration = Duration::from_secs(10);

/// The orchestrator's running background work: every loop on one tracker.
pub struct Background {
    /// The loops, each ending when the stop token fires.
    loops: TaskTracker,
    /// How long [`Background::join`] waits for them.
    within: Duration,
    /// Flushed once they have stopped.
    store: crate::store::Store,
}

impl Background {
    pub(super) fn new(store: crate::store::Store) -> Background {
        Background {
            loops: TaskTracker::new(),
            within: STOP_WITHIN,
            store,
        }
    }

    /// Runs `work` as one of the loops: stopped with them, waited for by
    /// [`Background::join`].
    pub(super) fn spawn<F>(&self, work: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.loops.spawn(work);
    }

    /// Waits for every loop to stop (after the stop token fired), at most
    /// [`STOP_WITHIN`], then flushes the store.
    pub async fn join(self) -> Result<(), ServiceError> {
        self.loops.close();
        if tokio::time::timeout(self.within, self.loops.wait())
            .await
            .is_err()
        {
            warn!(
                running = self.loops.len(),
                within = ?self.within,
                "background loops still running past the stop bound: left to end with the process"
            );
        }
        self.store.flush().await?;
        info!("orchestrator stopped");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;
    use crate::store::{Store, StoreSettings};

    fn background(dir: &std::path::Path) -> Background {
        let store = Store::open(&StoreSettings::new(dir)).unwrap();
        Background::new(store)
    }

    /// A loop that ends is waited for; one that does not end holds the
    /// stop no longer than the bound.
    #[tokio::test]
    async fn stopping_waits_for_the_loops_within_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let bg = background(dir.path());
        let ended = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&ended);
        bg.spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            flag.store(true, Ordering::SeqCst);
        });
        bg.join().await.unwrap();
        assert!(
            ended.load(Ordering::SeqCst),
            "join returned before the loop ended"
        );

        let dir = tempfile::tempdir().unwrap();
        let mut bg = background(dir.path());
        bg.within = Duration::from_millis(200);
        let (_held, never) = tokio::sync::oneshot::channel::<()>();
        bg.spawn(async move {
            let _ = never.await;
        });
        let joined = tokio::time::timeout(Duration::from_secs(10), bg.join()).await;
        assert!(
            matches!(joined, Ok(Ok(()))),
            "a loop that never stops held the stop: {joined:?}"
        );
    }
}
