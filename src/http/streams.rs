//! What every long-lived response (SSE) shares: a bound on how many are
//! open at once (`a2a.max_streams`, the A2A face's and the console's
//! together) and on how many one principal holds
//! (`http_max_streams_per_principal`, so one key cannot take every
//! connection with idle streams), the signal that the server is closing
//! (each ends then), and the keep-alive interval (`a2a.keepalive`).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use super::limits::{Entered, PerPrincipal};

pub(crate) struct Streams {
    /// Streams open, over every caller.
    open: Arc<Semaphore>,
    /// Streams open, per principal.
    per_principal: Arc<PerPrincipal>,
    closing: CancellationToken,
    keepalive: Duration,
}

/// One open stream: held until the stream ends.
pub(crate) struct StreamPermit {
    _open: OwnedSemaphorePermit,
    _principal: Entered,
}

/// Why a stream was not opened.
#[derive(Debug)]
pub(crate) enum StreamRefused {
    /// Every stream of the server is taken (503).
    Full,
    /// The principal holds its share (429); the message says which.
    PrincipalShare(String),
}

impl StreamRefused {
    /// For people.
    pub(crate) fn message(&self) -> String {
        match self {
            StreamRefused::Full => "too many streams open; try again shortly".into(),
            StreamRefused::PrincipalShare(message) => message.clone(),
        }
    }
}

impl Streams {
    /// At most `max` streams open at once, `per_principal` of one
    /// principal; each ends when `closing` fires.
    pub(crate) fn new(
        max: usize,
        per_principal: usize,
        keepalive: Duration,
        closing: CancellationToken,
    ) -> Self {
        Streams {
            open: Arc::new(Semaphore::new(max)),
            per_principal: PerPrincipal::new(
                per_principal,
                "streams open",
                "http_max_streams_per_principal",
            ),
            closing,
            keepalive,
        }
    }

    /// Room for one more stream of `principal` (held until the stream
    /// ends), or why not.
    pub(crate) fn enter(&self, principal: &str) -> Result<StreamPermit, StreamRefused> {
        let Some(entered) = self.per_principal.enter(principal) else {
            crate::telemetry::metrics::http_stream_refused("principal");
            return Err(StreamRefused::PrincipalShare(
                self.per_principal.refusal(principal),
            ));
        };
        let Ok(open) = Arc::clone(&self.open).try_acquire_owned() else {
            crate::telemetry::metrics::http_stream_refused("full");
            return Err(StreamRefused::Full);
        };
        Ok(StreamPermit {
            _open: open,
            _principal: entered,
        })
    }

    /// Fires when the server closes.
    pub(crate) fn closing(&self) -> CancellationToken {
        self.closing.clone()
    }

    pub(crate) fn keepalive(&self) -> Duration {
        self.keepalive
    }
}
