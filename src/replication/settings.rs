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

impl ReplicationSettings {
    /// Refuses timings that cannot work: a lease renewed no more often
    /// than it lapses would pass from leader to leader, and snapshots need
    /// an interval and one kept.
    pub fn check(&self) -> Result<(), crate::codec::DecodeError> {
        use crate::codec::DecodeError;
        let positive = [
            ("replication.renew_every", self.renew_every),
            ("replication.snapshot_every", self.snapshot_every),
        ];
        if let Some((field, _)) = positive.iter().find(|(_, d)| d.is_zero()) {
            return Err(DecodeError::invalid(*field, "must be positive"));
        }
        if self.lease_ttl <= self.renew_every {
            return Err(DecodeError::invalid(
                "replication.lease_ttl",
                "must be longer than replication.renew_every (the leader renews its lease several times within it; 5s and 1s by default)",
            ));
        }
        if self.snapshots_kept == 0 {
            return Err(DecodeError::invalid(
                "replication.snapshots_kept",
                "must be at least 1 (the log is trimmed below the oldest kept)",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::server::Settings;

    /// Timings that cannot work are refused naming the member; the
    /// defaults pass.
    #[test]
    fn impossible_timings_are_refused_naming_the_member() {
        assert!(Settings::decode(br#"{"replication": {"enabled": true}}"#).is_ok());
        for (json, field) in [
            (
                r#"{"replication": {"lease_ttl": "1s", "renew_every": "1s"}}"#,
                "replication.lease_ttl",
            ),
            (
                r#"{"replication": {"renew_every": "0s"}}"#,
                "replication.renew_every",
            ),
            (
                r#"{"replication": {"snapshot_every": "0s"}}"#,
                "replication.snapshot_every",
            ),
            (
                r#"{"replication": {"snapshots_kept": 0}}"#,
                "replication.snapshots_kept",
            ),
        ] {
            let e = Settings::decode(json.as_bytes()).unwrap_err();
            assert_eq!(e.field(), Some(field), "{json}: {e}");
        }
    }
}
