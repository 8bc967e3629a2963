//! How a store is opened.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// How a store is opened.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreSettings {
    /// The directory holding the sled database.
    pub path: PathBuf,
    /// How long an idempotency key stays claimed (default 24 h).
    pub idempotency_retention: Duration,
    /// How often expired keys are collected (default 10 min).
    pub gc_interval: Duration,
    /// Whether this store collects expired keys itself (default true; a
    /// standby's store only applies the leader's commits).
    pub collect_keys: bool,
    /// sled's page cache size in bytes (default 8 MiB: sled's own default
    /// of 1 GiB would dwarf the orchestrator's memory budget; 32 MiB is
    /// about 10 % faster and 24 MiB larger at 100,000 tasks).
    pub cache_bytes: u64,
    /// When the next attempt runs after a retryable failure: the store owns
    /// the attempt number, so it also decides this.
    pub retry: crate::task::RetryPolicy,
    /// Where each commit goes as a record, in order, once sled has it
    /// (none by default).
    pub commits: Option<super::CommitSink>,
}

impl StoreSettings {
    /// The defaults, for the store of the data directory `data_dir`
    /// (its `store/` subdirectory).
    pub fn in_data_dir(data_dir: impl AsRef<Path>) -> Self {
        StoreSettings::new(data_dir.as_ref().join("store"))
    }

    /// The defaults, for a store at `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        StoreSettings {
            path: path.into(),
            idempotency_retention: Duration::from_secs(24 * 3600),
            gc_interval: Duration::from_secs(600),
            collect_keys: true,
            cache_bytes: 8 * 1024 * 1024,
            retry: crate::task::RetryPolicy::default(),
            commits: None,
        }
    }
}
