//! Serving the API on a listener, with the bounds `axum::serve` lacks:
//! a connection's request headers must arrive within a time (an idle
//! keep-alive connection is closed after it too), at most so many
//! connections are open at once (more wait in the kernel's backlog, and
//! the cap is said in the log), and shutdown lets requests in progress
//! finish within a grace period. HTTP/1.1 only.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::{debug, error, warn};

/// How the listener bounds its connections.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Time for a request's headers to arrive.
    pub header_timeout: Duration,
    /// Connections open at once.
    pub max_connections: usize,
    /// Time for requests in progress to finish once shutdown begins.
    pub shutdown_grace: Duration,
}

/// How often the connection cap is said in the log while it holds.
const CAP_WARNING_EVERY: Duration = Duration::from_secs(60);

/// Serves `app` on `listener` within `bounds` until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    bounds: Bounds,
    shutdown: impl Future<Output = ()>,
) {
    let slots = Arc::new(Semaphore::new(bounds.max_connections));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(bounds.header_timeout);
    let mut warned: Option<Instant> = None;
    tokio::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            slot = slot(&slots, bounds.max_connections, &mut warned) => slot,
            () = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let service = TowerToHyperService::new(app.clone());
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                debug!(peer = %peer, error = %e, "HTTP connection ended with an error");
            }
            drop(slot);
        });
    }
    drop(listener);
    if tokio::time::timeout(bounds.shutdown_grace, graceful.shutdown())
        .await
        .is_err()
    {
        warn!(
            grace = %humantime::format_duration(bounds.shutdown_grace),
            "HTTP connections still open after the shutdown grace period: closed"
        );
    }
}

/// A connection slot; at the cap, waits for one (saying so at most once a
/// minute): the connections beyond it stay in the listen backlog.
async fn slot(
    slots: &Arc<Semaphore>,
    max: usize,
    warned: &mut Option<Instant>,
) -> OwnedSemaphorePermit {
    if let Ok(slot) = Arc::clone(slots).try_acquire_owned() {
        return slot;
    }
    crate::telemetry::metrics::http_connection_cap_reached();
    if warned.is_none_or(|at| at.elapsed() >= CAP_WARNING_EVERY) {
        *warned = Some(Instant::now());
        warn!(
            max_connections = max,
            "HTTP connection cap reached: new connections wait until one closes (http_max_connections)"
        );
    }
    // The semaphore is never closed.
    Arc::clone(slots)
        .acquire_owned()
        .await
        .unwrap_or_else(|_| unreachable!("the connection semaphore is never closed"))
}

/// After a failed accept: a connection's own error is nothing; anything
/// else (out of file descriptors) is said and waited out.
async fn accept_failed(e: std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        e.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return;
    }
    error!(error = %e, "cannot accept an HTTP connection; trying again in a second");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// Raises this process's soft limit of open files to its hard limit, and
/// returns `wanted` connections, fewer if the limit cannot hold them
/// beside `reserved` descriptors for everything else; both said in the
/// log.
pub fn fit_connections(wanted: usize, reserved: u64) -> usize {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return wanted;
    };
    let limit = if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        tracing::info!(from = soft, to = hard, "raised the open-file limit");
        hard
    } else {
        soft
    };
    let room = usize::try_from(limit.saturating_sub(reserved)).unwrap_or(usize::MAX);
    if wanted > room {
        warn!(
            http_max_connections = wanted,
            open_file_limit = limit,
            "http_max_connections lowered to {room} to fit the open-file limit"
        );
        return room.max(1);
    }
    wanted
}
