//! What every long-lived response (SSE) shares: a bound on how many are
//! open at once (`a2a.max_streams`, the A2A face's and the console's
//! together), the signal that the server is closing (each ends then), and
//! the keep-alive interval (`a2a.keepalive`).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

pub(crate) struct Streams {
    open: Arc<Semaphore>,
    closing: CancellationToken,
    keepalive: Duration,
}

impl Streams {
    /// At most `max` streams open at once; each ends when `closing` fires.
    pub(crate) fn new(max: usize, keepalive: Duration, closing: CancellationToken) -> Self {
        Streams {
            open: Arc::new(Semaphore::new(max)),
            closing,
            keepalive,
        }
    }

    /// Room for one more stream (held until the stream ends), or none
    /// when every one is taken.
    pub(crate) fn enter(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.open).try_acquire_owned().ok()
    }

    /// Fires when the server closes.
    pub(crate) fn closing(&self) -> CancellationToken {
        self.closing.clone()
    }

    pub(crate) fn keepalive(&self) -> Duration {
        self.keepalive
    }
}
