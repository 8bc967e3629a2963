//! What can go wrong replicating the store.

use crate::bus::Cause;

/// A failure of the store's log.
#[derive(Debug, thiserror::Error)]
pub enum ReplicationError {
    /// The log's stream cannot be made or reached.
    #[error("the store's log {stream}: {source}")]
    Stream {
        /// The stream.
        stream: String,
        /// Why.
        #[source]
        source: Cause,
    },
    /// A message of the log cannot be read as one.
    #[error("the store's log, message {seq}: {source}")]
    Frame {
        /// Its stream sequence.
        seq: u64,
        /// Why.
        #[source]
        source: super::FrameError,
    },
    /// The store and the log are not at the same position: a leader
    /// appends only to the log it has applied to its end.
    #[error(
        "the store is at log position {store} but the log at {log}: it must be made the log's view first"
    )]
    NotAtEnd {
        /// The store's position.
        store: u64,
        /// The log's last position.
        log: u64,
    },
    /// Another process appended while this one sealed the log: catch up
    /// and try again (or follow: it leads).
    #[error(
        "another process appended to the store's log after sequence {after} while this one took it over"
    )]
    Overtaken {
        /// The sequence this one expected to follow.
        after: u64,
    },
    /// The snapshots' bucket cannot be made, read or written.
    #[error("the store's snapshots {bucket}: {source}")]
    Snapshots {
        /// The bucket.
        bucket: String,
        /// Why.
        #[source]
        source: Cause,
    },
    /// The log no longer holds what a store needs (it was trimmed below a
    /// snapshot) and no snapshot covers it.
    #[error(
        "the store's log no longer holds the records after position {position} and no snapshot covers them"
    )]
    NoSnapshot {
        /// The store's position.
        position: u64,
    },
    /// A snapshot cannot be written or loaded.
    #[error("the store's snapshot {name}: {source}")]
    Snapshot {
        /// The snapshot's name.
        name: String,
        /// The store's failure.
        #[source]
        source: crate::store::StoreError,
    },
    /// A commit of the log cannot be applied to the store.
    #[error("applying the store's log, message {seq}: {source}")]
    Apply {
        /// The message's stream sequence.
        seq: u64,
        /// The store's failure.
        #[source]
        source: crate::store::StoreError,
    },
}
