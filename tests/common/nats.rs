//! A real `nats-server -js` per test: dynamic port, temporary store, killed
//! on drop, restartable on the same port.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running NATS server with JetStream.
pub struct NatsServer {
    child: Option<Child>,
    port: u16,
    store: tempfile::TempDir,
}

use orchestrator::broker::server_bin;

impl NatsServer {
    /// Starts a server on a free port with a fresh JetStream store.
    pub fn start() -> NatsServer {
        NatsServer::start_with("")
    }

    /// Starts a server whose configuration file also holds `config` (such
    /// as `max_payload: 262144`).
    pub fn start_with(config: &str) -> NatsServer {
        let store = tempfile::tempdir().unwrap();
        std::fs::write(store.path().join("nats.conf"), config).unwrap();
        let (child, port) = spawn(store.path(), None);
        NatsServer {
            child: Some(child),
            port,
            store,
        }
    }

    /// The client URL.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Kills the server (SIGKILL) and leaves it down.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port with the same store.
    pub fn restart(&mut self) {
        self.kill();
        let (child, _) = spawn(self.store.path(), Some(self.port));
        self.child = Some(child);
    }
}

fn spawn(store: &std::path::Path, port: Option<u16>) -> (Child, u16) {
    let port_arg = port.map(|p| p.to_string()).unwrap_or_else(|| "-1".into());
    let mut child = Command::new(server_bin())
        .arg("-c")
        .arg(store.join("nats.conf"))
        .args(["-js", "-a", "127.0.0.1", "-p", &port_arg, "-sd"])
        .arg(store.join("js"))
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot start {} ({e}): install nats-server or set NATS_SERVER_BIN",
                server_bin().display()
            )
        });
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if !sent && let Some(rest) = line.split("Listening for client connections on ").nth(1) {
                let port = rest
                    .trim()
                    .rsplit(':')
                    .next()
                    .and_then(|p| p.parse::<u16>().ok());
                let _ = tx.send(port);
                sent = true;
            }
            // Keep draining so the server never blocks on a full pipe.
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let found = rx.recv_timeout(deadline - Instant::now()).ok().flatten();
    let port = found.unwrap_or_else(|| panic!("nats-server did not report its port"));
    // "Listening" comes before JetStream is ready; wait for the server to
    // accept a connection, which follows.
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "nats-server never accepted connections"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    (child, port)
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}
