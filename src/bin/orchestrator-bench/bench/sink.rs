//! An OTLP/HTTP endpoint that takes every export and keeps only counts:
//! what the deployed processes export to when the bench measures tracing.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// What arrived.
#[derive(Default)]
pub(super) struct Received {
    /// Export requests.
    pub(super) requests: AtomicU64,
    /// Their bodies' bytes (OTLP protobuf).
    pub(super) bytes: AtomicU64,
}

/// Starts the sink on a port of 127.0.0.1; returns its base URL and counts.
pub(super) async fn start() -> Result<(String, Arc<Received>), String> {
    let received = Arc::new(Received::default());
    let counts = Arc::clone(&received);
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| {
            let counts = Arc::clone(&counts);
            async move {
                counts.requests.fetch_add(1, Ordering::Relaxed);
                counts.bytes.fetch_add(body.len() as u64, Ordering::Relaxed);
                // An empty ExportTraceServiceResponse.
                axum::http::StatusCode::OK
            }
        }),
    );
    let url = super::serve_loopback(app, "").await?;
    Ok((url, received))
}
