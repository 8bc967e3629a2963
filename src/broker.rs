//! A managed local broker: when `orchestrator run` finds no NATS at the
//! default URL, it starts `nats-server -js` itself, with its data under the
//! orchestrator's data directory, and stops it on exit.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

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
}

impl ManagedBroker {
    /// Starts `nats-server -js` on `127.0.0.1:port` with its store in
    /// `data_dir/nats`, and waits until it accepts connections.
    pub async fn start(data_dir: &Path, port: u16) -> Result<ManagedBroker, String> {
        let store = data_dir.join("nats");
        std::fs::create_dir_all(&store).map_err(|e| format!("{}: {e}", store.display()))?;
        let bin = server_bin();
        let log = std::fs::File::create(data_dir.join("nats-server.log"))
            .map_err(|e| format!("{}: {e}", data_dir.display()))?;
        let child = Command::new(&bin)
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(&store)
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                format!(
                    "cannot start {} ({e}): install nats-server (scripts/ensure-nats-server) or set NATS_SERVER_BIN",
                    bin.display()
                )
            })?;
        let deadline = Instant::now() + Duration::from_secs(20);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            if Instant::now() > deadline {
                return Err(format!(
                    "nats-server did not start on port {port}; see {}",
                    data_dir.join("nats-server.log").display()
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(ManagedBroker {
            child,
            url: format!("nats://127.0.0.1:{port}"),
        })
    }

    /// The client URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Stops the server.
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}
