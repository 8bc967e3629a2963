//! Serving the API on a listener, with the bounds `axum::serve` lacks,
//! so that no caller can take the server from the others:
//! - a connection's request headers must arrive within a time (an idle
//!   keep-alive connection is closed after it too), shorter for new
//!   connections while more than half the slots are taken;
//! - at most so many connections are open at once for the API; past that
//!   a reserve of connections is served the probes only (anything else is
//!   503), so `/healthz`, `/readyz` and `/metrics` answer however full the
//!   API is; past the reserve a connection is answered 503 and closed;
//! - at most so many connections are open from one address, one more is
//!   answered 503 and closed, so one peer cannot hold the rest;
//! - shutdown lets requests in progress finish within a grace period.
//!
//! HTTP/1.1 only.

use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::{debug, error, warn};

use super::limits::{Share, Shares};

/// How the listener bounds its connections.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Time for a request's headers to arrive.
    pub header_timeout: Duration,
    /// Time for a new connection's headers while more than half of
    /// `max_connections` are open (the lower of the two applies).
    pub header_timeout_under_pressure: Duration,
    /// Connections open at once for the API.
    pub max_connections: usize,
    /// Connections beyond `max_connections` served the probes only.
    pub probe_connections: usize,
    /// Connections open at once from one address.
    pub max_connections_per_peer: usize,
    /// Time for requests in progress to finish once shutdown begins.
    pub shutdown_grace: Duration,
}

/// How often the connection cap is said in the log while it holds.
const CAP_WARNING_EVERY: Duration = Duration::from_secs(60);

/// How long a refused connection's 503 may take to write.
const REFUSAL_WRITE: Duration = Duration::from_millis(200);

/// The whole answer to a refused connection.
const REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
content-type: application/json\r\nretry-after: 1\r\nconnection: close\r\n\
content-length: 97\r\n\r\n\
{\"error\":{\"code\":\"too_many_connections\",\"message\":\"too many connections; try again shortly\"}}";

/// Serves `app` on `listener` within `bounds` until `shutdown` resolves;
/// a connection from the probes' reserve is served by `probes` instead.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    probes: Router,
    bounds: Bounds,
    shutdown: impl Future<Output = ()>,
) {
    let slots = Slots::new(&bounds);
    let graceful = GracefulShutdown::new();
    let (relaxed, pressed, reserve) = (
        builder(bounds.header_timeout, true),
        builder(
            bounds
                .header_timeout
                .min(bounds.header_timeout_under_pressure),
            true,
        ),
        builder(
            bounds
                .header_timeout
                .min(bounds.header_timeout_under_pressure),
            false,
        ),
    );
    let mut warned: Option<Instant> = None;
    tokio::pin!(shutdown);
    loop {
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
        let slot = match slots.take(peer.ip()) {
            Ok(slot) => slot,
            Err(reason) => {
                crate::telemetry::metrics::http_connection_refused(reason.label());
                if reason == Refused::Full {
                    cap_reached(bounds.max_connections, &mut warned);
                }
                tokio::spawn(refuse(stream));
                continue;
            }
        };
        let (http, service) = match slot.kind {
            Kind::Api { pressed: false } => (&relaxed, &app),
            Kind::Api { pressed: true } => (&pressed, &app),
            Kind::Probes => {
                cap_reached(bounds.max_connections, &mut warned);
                (&reserve, &probes)
            }
        };
        let service = TowerToHyperService::new(service.clone());
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

/// An HTTP/1.1 connection builder with this header deadline.
fn builder(header_timeout: Duration, keep_alive: bool) -> hyper::server::conn::http1::Builder {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .keep_alive(keep_alive);
    http
}

/// Says that the API's connections are all taken, at most once a minute.
fn cap_reached(max: usize, warned: &mut Option<Instant>) {
    crate::telemetry::metrics::http_connection_cap_reached();
    if warned.is_none_or(|at| at.elapsed() >= CAP_WARNING_EVERY) {
        *warned = Some(Instant::now());
        warn!(
            max_connections = max,
            "HTTP connection cap reached: new connections are served the probes only, or refused (http_max_connections)"
        );
    }
}

/// Answers a refused connection 503 (within a moment) and closes it.
async fn refuse(mut stream: TcpStream) {
    let _ = tokio::time::timeout(REFUSAL_WRITE, async {
        stream.write_all(REFUSAL).await?;
        stream.shutdown().await
    })
    .await;
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refused {
    /// Its address holds `max_connections_per_peer`.
    Peer,
    /// The API's slots and the probes' reserve are all taken.
    Full,
}

impl Refused {
    fn label(self) -> &'static str {
        match self {
            Refused::Peer => "peer",
            Refused::Full => "full",
        }
    }
}

/// What a connection may ask for.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// The whole API; `pressed`: opened while over half the slots were
    /// taken.
    Api { pressed: bool },
    /// The probes only, from the reserve.
    Probes,
}

/// The connections open: the API's slots, the probes' reserve, and a
/// count per address.
struct Slots {
    api: Arc<Semaphore>,
    probes: Arc<Semaphore>,
    /// Half of the API's slots: fewer free than this is pressure.
    pressure_below: usize,
    per_peer: Arc<Shares<IpAddr>>,
}

/// One open connection: its slot and its address's share, given back
/// when dropped.
struct Slot {
    kind: Kind,
    _permit: OwnedSemaphorePermit,
    _peer: Share<IpAddr>,
}

impl Slots {
    fn new(bounds: &Bounds) -> Self {
        Slots {
            api: Arc::new(Semaphore::new(bounds.max_connections)),
            probes: Arc::new(Semaphore::new(bounds.probe_connections)),
            pressure_below: bounds.max_connections / 2,
            per_peer: Shares::new(bounds.max_connections_per_peer),
        }
    }

    /// A slot for a connection from `peer`: the API's, else the probes',
    /// else refused.
    fn take(&self, peer: IpAddr) -> Result<Slot, Refused> {
        let (kind, permit) = if let Ok(permit) = Arc::clone(&self.api).try_acquire_owned() {
            let pressed = self.api.available_permits() < self.pressure_below;
            (Kind::Api { pressed }, permit)
        } else if let Ok(permit) = Arc::clone(&self.probes).try_acquire_owned() {
            (Kind::Probes, permit)
        } else {
            return Err(Refused::Full);
        };
        // 127.0.0.1 and ::ffff:127.0.0.1 are one address.
        let share = self
            .per_peer
            .enter(&peer.to_canonical())
            .ok_or(Refused::Peer)?;
        Ok(Slot {
            kind,
            _permit: permit,
            _peer: share,
        })
    }
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
