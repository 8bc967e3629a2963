//! `replication` in the settings file: whether this orchestrator is one of
//! several sharing the store's log, and its lease's timing.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How this process takes part in the store's replication.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReplicationSettings {
    /// Run as one of several orchestrators sharing the store's log: a
    /// standby until it holds the lease, then the leader (default false:
    /// the store is this process's alone).
    pub enabled: bool,
    /// The partition this process serves (0).
    pub partition: u32,
    /// How long a lease lasts past its last renewal: the longest a dead
    /// leader keeps the others waiting (default 5s).
    #[serde(with = "humantime_serde")]
    pub lease_ttl: Duration,
    /// How often the leader renews its lease, and a standby reads the log
    /// and tries to take the lease (default 1s).
    #[serde(with = "humantime_serde")]
    pub renew_every: Duration,
    /// This process's name in the lease (default: host name and process
    /// id).
    pub name: Option<String>,
    /// The base URL other nodes forward requests to while this one leads
    /// (default `http://<http_addr>`, the host's name for an unspecified
    /// address such as `0.0.0.0`).
    pub advertise_url: Option<String>,
    /// How often the leader writes a snapshot of its store, when it
    /// committed anything since the last (default 10m).
    #[serde(with = "humantime_serde")]
    pub snapshot_every: Duration,
    /// How many snapshots are kept; the log is trimmed below the oldest
    /// (default 2, at least 1).
    pub snapshots_kept: usize,
}

impl Default for ReplicationSettings {
    fn default() -> Self {
        ReplicationSettings {
            enabled: false,
            partition: 0,
            lease_ttl: Duration::from_secs(5),
            renew_every: Duration::from_secs(1),
            name: None,
            advertise_url: None,
            snapshot_every: Duration::from_secs(600),
            snapshots_kept: 2,
        }
    }
}
