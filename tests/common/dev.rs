//! `orchestrator dev` as a child process: its lines collected as they
//! come, stopped with SIGINT (Ctrl-C) and killed on drop.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The managed broker listens on 4222: one `dev` at a time per test
/// binary.
pub static BROKER_PORT: Mutex<()> = Mutex::new(());

/// A running `orchestrator dev`.
pub struct Dev {
    child: Child,
    /// Every line it printed so far.
    pub lines: Arc<Mutex<Vec<String>>>,
    /// Its API's address.
    pub url: String,
}

impl Dev {
    /// Starts `orchestrator dev ARGS` in `dir` with its API on a free port,
    /// and waits until it says it is up.
    pub fn start(dir: &Path, args: &[&str]) -> Dev {
        let port = super::process::free_port();
        let mut child = Command::new(env!("CARGO_BIN_EXE_orchestrator"))
            .arg("dev")
            .args(args)
            .current_dir(dir)
            .env("ORCH_HTTP_ADDR", format!("127.0.0.1:{port}"))
            .env_remove("NATS_URL")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        for out in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let lines = Arc::clone(&lines);
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    lines.lock().unwrap().push(line);
                }
            });
        }
        let dev = Dev {
            child,
            lines,
            url: format!("http://127.0.0.1:{port}"),
        };
        dev.wait_for("orchestrator dev is up", Duration::from_secs(90));
        dev
    }

    /// Waits until a line contains `text`.
    pub fn wait_for(&self, text: &str, patience: Duration) {
        let deadline = Instant::now() + patience;
        while !self.printed(text) {
            assert!(
                Instant::now() < deadline,
                "`orchestrator dev` never printed `{text}`:\n{}",
                self.lines.lock().unwrap().join("\n")
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Whether a line contains `text`.
    pub fn printed(&self, text: &str) -> bool {
        self.lines.lock().unwrap().iter().any(|l| l.contains(text))
    }

    /// Sends SIGINT, as Ctrl-C does, and waits (30 s at most) for its exit
    /// status.
    pub fn interrupt(&mut self) -> std::process::ExitStatus {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "`orchestrator dev` did not stop on SIGINT"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Dev {
    /// Stops it as Ctrl-C would (so it stops what it started), and kills
    /// it when that takes longer than 20 seconds.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether something listens on `127.0.0.1:port`.
pub fn listening(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
}
