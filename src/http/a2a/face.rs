//! What the A2A face's handlers share beyond the orchestrator: its open
//! streams, whether callers authenticate, when it started and its
//! settings.

use std::sync::Arc;

use crate::http::streams::Streams;

/// What the handlers share beyond the orchestrator.
pub(crate) struct Face {
    /// Open streams and their bound (shared with the console's).
    pub(super) streams: Arc<Streams>,
    /// Whether callers authenticate (the card says how).
    pub(super) auth: bool,
    /// When the face started: the card's `Last-Modified`, unless the
    /// triggers were read since.
    pub(super) started: std::time::SystemTime,
    /// The face's settings (`a2a`, and the longest wait of a request).
    pub(super) http: Arc<crate::http::HttpSettings>,
}

impl Face {
    /// The face's state: streams bounded as configured, ended when
    /// `closing` fires.
    pub(crate) fn new(
        auth: bool,
        streams: Arc<Streams>,
        http: Arc<crate::http::HttpSettings>,
    ) -> Arc<Face> {
        Arc::new(Face {
            streams,
            auth,
            http,
            started: std::time::SystemTime::now(),
        })
    }
}
