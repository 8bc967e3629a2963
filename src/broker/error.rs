//! Why a local broker (one `nats-server`, or a cluster of them) did not
//! start or settle.

use std::path::PathBuf;

/// Why a managed broker or a local cluster is not serving.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// A file or directory could not be written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// The server's users could not be written.
    #[error(transparent)]
    Users(#[from] crate::bus::permissions::PermissionsError),
    /// `nats-server` could not be started.
    #[error(
        "cannot start {} ({source}): install nats-server (scripts/ensure-nats-server) or set NATS_SERVER_BIN",
        bin.display()
    )]
    Spawn {
        /// The program.
        bin: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// A server did not accept connections in time.
    #[error("{server} did not start on port {port}; see {}", log.display())]
    NotListening {
        /// `nats-server`, or the cluster node's name.
        server: String,
        /// The client port.
        port: u16,
        /// Its log.
        log: PathBuf,
    },
    /// No port could be had on a host.
    #[error("no free port on {host}: {source}")]
    NoPort {
        /// The host.
        host: String,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// The cluster elected no JetStream meta leader in time.
    #[error("the cluster elected no JetStream meta leader within {} s", within.as_secs())]
    NoMetaLeader {
        /// How long it was given.
        within: std::time::Duration,
    },
    /// A stream had no leader in time.
    #[error("{stream} had no leader within {}s", within.as_secs())]
    NoLeader {
        /// The stream.
        stream: String,
        /// How long it was given.
        within: std::time::Duration,
    },
}

impl BrokerError {
    pub(super) fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> BrokerError + '_ {
        move |source| BrokerError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}
