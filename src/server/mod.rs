//! The orchestrator process: the service's background work and the HTTP API
//! over it, wired together here, above both, so the service knows nothing
//! of HTTP and the API nothing of the loops.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::info;

/// File descriptors kept for everything but API connections: the store's
/// files, the broker's connection, a managed broker's pipes, logs.
const RESERVED_FILES: u64 = 256;

use crate::service::{Orchestrator, ServiceError};

mod settings;

pub use settings::Settings;

/// Serves the orchestrator on `listener` until `shutdown` fires: recovery
/// first, then the background work and the HTTP API (every call but the
/// health checks authenticated by `access`); on shutdown the API finishes
/// its requests, the background stops, the store is flushed.
pub async fn serve(
    orchestrator: Orchestrator,
    http: crate::http::HttpSettings,
    access: std::sync::Arc<crate::access::Authenticator>,
    listener: tokio::net::TcpListener,
    shutdown: CancellationToken,
) -> Result<(), ServiceError> {
    let stop = CancellationToken::new();
    // What the push outbox sends is in the words of the face that took
    // the push config.
    let bodies = crate::http::push_bodies(&http);
    let background = orchestrator.start(stop.clone(), bodies).await?;
    // A long poll answers within the request timeout.
    let bounds = bounds(&http, http.request_timeout + Duration::from_secs(1));
    let probes = crate::http::probes_router(orchestrator.clone(), http.clone());
    let app = crate::http::router(orchestrator, http, access, shutdown.clone());
    info!(addr = ?listener.local_addr().ok(), "HTTP API listening");
    crate::http::listen::serve(listener, app, probes, bounds, shutdown.cancelled_owned()).await;
    stop.cancel();
    background.join().await
}

/// How the API's listener bounds its connections; `shutdown_grace` for
/// the requests in progress at shutdown.
fn bounds(
    http: &crate::http::HttpSettings,
    shutdown_grace: Duration,
) -> crate::http::listen::Bounds {
    crate::http::listen::Bounds {
        header_timeout: http.header_timeout,
        header_timeout_under_pressure: http.header_timeout_under_pressure,
        max_connections: crate::http::listen::fit_connections(
            http.max_connections,
            RESERVED_FILES + http.probe_connections as u64,
        ),
        probe_connections: http.probe_connections,
        max_connections_per_peer: http.max_connections_per_peer,
        shutdown_grace,
    }
}

/// What a standby's face answers from: who leads, its copy's reads, who
/// may read them.
pub struct Standing {
    /// The leader, as last read from the lease.
    pub leader: tokio::sync::watch::Receiver<Option<crate::service::Leader>>,
    /// Reads from this node's copy of the store, when offered.
    pub replica: tokio::sync::watch::Receiver<Option<crate::service::Replica>>,
    /// Who may call the API (the reads served here).
    pub access: std::sync::Arc<crate::access::Authenticator>,
    /// This node's name, on the reads it answers.
    pub name: String,
}

/// Serves a standby's face on `listener` until `stop` fires: its own
/// probes and metrics, reads that ask for it from its copy of the store,
/// every other request forwarded to the leader. Requests in progress get
/// a second once it stops (the leader they went to is gone when this
/// node takes over).
pub async fn stand_by(
    standing: Standing,
    http: crate::http::HttpSettings,
    listener: tokio::net::TcpListener,
    stop: CancellationToken,
) {
    let reads = crate::http::LocalReads::new(
        standing.replica,
        standing.access,
        http.clone(),
        stop.clone(),
        standing.name,
    );
    let app = crate::http::standby_router(standing.leader, reads);
    info!(addr = ?listener.local_addr().ok(), "the API forwards to the leader while this node stands by");
    let bounds = bounds(&http, Duration::from_secs(1));
    crate::http::listen::serve(listener, app.clone(), app, bounds, stop.cancelled_owned()).await;
}
