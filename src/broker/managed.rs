//! One `nats-server` the orchestrator starts and stops itself, and how
//! any local server is found and spawned.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

use super::BrokerError;

/// The server binary: `NATS_SERVER_BIN`, or `nats-server` on PATH.
pub fn server_bin() -> PathBuf {
    std::env::var_os("NATS_SERVER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("nats-server"))
}

/// A `nats-server` this process started; killed when dropped.
pub struct ManagedBroker {
    /// The server process.
    child: Child,
    /// Its client URL.
    url: String,
    /// Its users' files (`None`: it runs without authentication).
    users: Option<crate::bus::permissions::BusFiles>,
}

/// Where a managed broker's users' files are, in a data directory.
pub fn users_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("nats-auth")
}

/// When a managed broker's JetStream store writes reach its disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DiskSync {
    /// The server's default: written at once, synced every two minutes
    /// (an acknowledged message survives a process crash, not a power
    /// loss).
    #[default]
    Interval,
    /// `sync_interval: always`: synced before each acknowledgement.
    Always,
}

impl ManagedBroker {
    /// Starts `nats-server -js` on `127.0.0.1:port` with its store in
    /// `data_dir/nats`, and waits until it accepts connections. With
    /// `users` (the subject names and the agents), it has a user for the
    /// orchestrator and one for each agent; without, anyone may connect
    /// (`orchestrator bench`'s private broker).
    pub async fn start(
        data_dir: &Path,
        port: u16,
        users: Option<(&crate::bus::Names, &[crate::envelope::AgentName])>,
    ) -> Result<ManagedBroker, BrokerError> {
        ManagedBroker::start_syncing(data_dir, port, users, DiskSync::Interval).await
    }

    /// [`ManagedBroker::start`], its store synced to disk as `sync` says.
    pub async fn start_syncing(
        data_dir: &Path,
        port: u16,
        users: Option<(&crate::bus::Names, &[crate::envelope::AgentName])>,
        sync: DiskSync,
    ) -> Result<ManagedBroker, BrokerError> {
        let store = data_dir.join("nats");
        crate::files::private_dir(&store).map_err(BrokerError::io(&store))?;
        let users = users
            .map(|(names, agents)| {
                crate::bus::permissions::write(&users_dir(data_dir), names, agents)
            })
            .transpose()?;
        let conf = data_dir.join("nats-server.conf");
        let quoted = |p: &Path| serde_json::to_string(&p.to_string_lossy()).unwrap_or_default();
        let text = format!(
            "# Written by `orchestrator run` for its managed broker.\nlisten: \"127.0.0.1:{port}\"\njetstream {{ store_dir: {}{} }}\n{}",
            quoted(&store),
            match sync {
                DiskSync::Interval => "",
                DiskSync::Always => ", sync_interval: always",
            },
            if users.is_some() {
                // Relative to this file.
                "include \"nats-auth/auth.conf\"\n"
            } else {
                ""
            },
        );
        crate::files::write_file(&conf, text.as_bytes(), crate::files::PRIVATE)
            .map_err(BrokerError::io(&conf))?;
        let bin = server_bin();
        let log_path = data_dir.join("nats-server.log");
        let log = std::fs::File::create(&log_path).map_err(BrokerError::io(&log_path))?;
        let child = spawn_server(&bin, &conf, log)?;
        let deadline = Instant::now() + Duration::from_secs(20);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            if Instant::now() > deadline {
                return Err(BrokerError::NotListening {
                    server: "nats-server".into(),
                    port,
                    log: log_path,
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(ManagedBroker {
            child,
            url: format!("nats://127.0.0.1:{port}"),
            users,
        })
    }

    /// Its users' files: the seed the orchestrator logs in with, and the
    /// agents'.
    pub fn users(&self) -> Option<&crate::bus::permissions::BusFiles> {
        self.users.as_ref()
    }

    /// The client URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Stops the server.
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// Starts `bin -c conf`, its log to `log`, killed when dropped.
pub(super) fn spawn_server(
    bin: &Path,
    conf: &Path,
    log: std::fs::File,
) -> Result<Child, BrokerError> {
    Command::new(bin)
        .arg("-c")
        .arg(conf)
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| BrokerError::Spawn {
            bin: bin.to_path_buf(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_that_cannot_start_is_named_with_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let log = std::fs::File::create(dir.path().join("log")).unwrap();
        let bin = dir.path().join("no-such-nats-server");
        let conf = dir.path().join("conf");
        match spawn_server(&bin, &conf, log) {
            Err(e @ BrokerError::Spawn { .. }) => {
                assert!(e.to_string().contains("NATS_SERVER_BIN"), "{e}");
            }
            other => panic!("{:?}", other.map(|_| ())),
        }
    }
}
