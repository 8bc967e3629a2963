//! The orchestrator process: the service's background work and the HTTP API
//! over it, wired together here, above both, so the service knows nothing
//! of HTTP and the API nothing of the loops.

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::service::{Orchestrator, ServiceError};

/// Serves the orchestrator on `listener` until `shutdown` fires: recovery
/// first, then the background work and the HTTP API (every call but the
/// health checks authenticated by `access`); on shutdown the API finishes
/// its requests, the background stops, the store is flushed.
pub async fn serve(
    orchestrator: Orchestrator,
    access: std::sync::Arc<crate::access::Authenticator>,
    listener: tokio::net::TcpListener,
    shutdown: CancellationToken,
) -> Result<(), ServiceError> {
    let stop = CancellationToken::new();
    let background = orchestrator.start(stop.clone()).await?;
    let app = crate::http::router(orchestrator, access);
    info!(addr = ?listener.local_addr().ok(), "HTTP API listening");
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await;
    if let Err(e) = served {
        warn!(error = %e, "HTTP server ended with an error");
    }
    stop.cancel();
    background.join().await
}
