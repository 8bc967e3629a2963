//! Shedding what cannot be taken: past `max_backlog` tasks waiting for a
//! worker (`submitted`), a new request from a face is refused
//! ([`ServiceError::Overloaded`], 429 with `Retry-After`) instead of
//! growing the queue without bound; what was accepted runs on. A
//! workflow's steps and a conversation's turns and calls are never shed:
//! they belong to work already accepted.
//!
//! The count is the store's index of tasks by state, read again at most
//! every [`RECOUNT`] (one scan, up to the bound) so a burst of submits
//! does not scan once each.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{Orchestrator, ServiceError};
use crate::task::TaskState;

/// How long a count of the backlog is used before it is read again.
const RECOUNT: Duration = Duration::from_millis(250);

/// The last count of the backlog, and whether a count is under way.
#[derive(Default)]
pub(super) struct Backlog {
    counted: Mutex<(Option<(Instant, usize)>, bool)>,
}

impl Backlog {
    fn lock(&self) -> std::sync::MutexGuard<'_, (Option<(Instant, usize)>, bool)> {
        self.counted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A count under way; ends it when dropped.
struct Counting<'a>(&'a Backlog);

impl Drop for Counting<'_> {
    fn drop(&mut self) {
        self.0.lock().1 = false;
    }
}

impl Orchestrator {
    /// Refuses a new request when `max_backlog` tasks wait for a worker.
    /// One caller at a time counts again (off the runtime's threads) when
    /// the count is stale; the others go by the last count.
    pub(super) async fn admit(&self) -> Result<(), ServiceError> {
        let max = self.inner.config.max_backlog;
        let backlog = &self.inner.backlog;
        let waiting = {
            let mut counted = backlog.lock();
            match *counted {
                (Some((at, n)), _) if at.elapsed() < RECOUNT => Some(n),
                (Some((_, n)), true) => Some(n),
                _ => {
                    counted.1 = true;
                    None
                }
            }
        };
        let waiting = match waiting {
            Some(n) => n,
            None => {
                // Cleared however this ends, a dropped request included,
                // so a count is never left under way for good.
                let _counting = Counting(backlog);
                let store = self.inner.store.clone();
                let count = tokio::task::spawn_blocking(move || {
                    store.count_in_state(TaskState::Submitted, max)
                })
                .await;
                let n = match count {
                    Ok(Ok(n)) => n,
                    Ok(Err(e)) => return Err(e.into()),
                    // The count's thread panicked: let the request in.
                    Err(_) => 0,
                };
                backlog.lock().0 = Some((Instant::now(), n));
                n
            }
        };
        if waiting >= max {
            crate::telemetry::metrics::shed();
            return Err(ServiceError::Overloaded { waiting, max });
        }
        Ok(())
    }
}
