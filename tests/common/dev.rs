//! Long-running commands as a person starts them in a terminal
//! (`orchestrator dev`, `orchestrator worker`): their lines collected as
//! they come, stopped with SIGINT (Ctrl-C), killed on drop when that does
//! not stop them.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The managed broker listens on 4222: one `dev` at a time per test
/// binary.
pub static BROKER_PORT: Mutex<()> = Mutex::new(());

/// A running command.
pub struct Running {
    child: Child,
    /// Every line it printed so far, stdout and stderr.
    pub lines: Arc<Mutex<Vec<String>>>,
}

impl Running {
    /// Starts `command` with its stdout and stderr collected.
    pub fn start(mut command: Command) -> Running {
        let mut child = command
            .stdin(Stdio::null())
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
        Running { child, lines }
    }

    /// Waits until a line contains `text`; `what` names the command in the
    /// failure.
    pub fn wait_for(&self, text: &str, what: &str, patience: Duration) {
        let deadline = Instant::now() + patience;
        while !self.printed(text) {
            assert!(
                Instant::now() < deadline,
                "{what} never printed `{text}`:\n{}",
                self.lines.lock().unwrap().join("\n")
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Whether a line contains `text`.
    pub fn printed(&self, text: &str) -> bool {
        self.lines.lock().unwrap().iter().any(|l| l.contains(text))
    }

    /// Sends SIGINT, as Ctrl-C does, and waits up to `patience` for its
    /// exit status (`None`: it did not stop).
    pub fn interrupt(&mut self, patience: Duration) -> Option<ExitStatus> {
        if let Ok(Some(status)) = self.child.try_wait() {
            return Some(status);
        }
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
        let deadline = Instant::now() + patience;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        None
    }
}

impl Drop for Running {
    /// Stops it as Ctrl-C would (so it stops what it started), and kills
    /// it when that takes longer than 20 seconds.
    fn drop(&mut self) {
        self.interrupt(Duration::from_secs(20));
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running `orchestrator dev`.
pub struct Dev {
    pub running: Running,
    /// Its API's address.
    pub url: String,
}

impl Dev {
    /// Starts `orchestrator dev ARGS` in `dir` with its API on a free port,
    /// and waits until it says it is up.
    pub fn start(dir: &Path, args: &[&str]) -> Dev {
        let port = super::process::free_port();
        let mut command = Command::new(env!("CARGO_BIN_EXE_orchestrator"));
        command
            .arg("dev")
            .args(args)
            .current_dir(dir)
            .env("ORCH_HTTP_ADDR", format!("127.0.0.1:{port}"))
            .env_remove("NATS_URL");
        let running = Running::start(command);
        running.wait_for(
            "orchestrator dev is up",
            "`orchestrator dev`",
            Duration::from_secs(90),
        );
        Dev {
            running,
            url: format!("http://127.0.0.1:{port}"),
        }
    }
}

/// Whether something listens on `127.0.0.1:port`.
pub fn listening(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
}
