//! The `orchestrator` binary as a child process, killed on drop.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child process that is SIGKILLed when dropped.
pub struct Proc(pub Child);

impl Proc {
    /// Kills it with SIGKILL, as a crash would.
    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The arguments of `orchestrator run` with the agents in `agents`, the
/// data in `data` and the API on `port`, then `extra`.
pub fn run_args(agents: &Path, data: &Path, port: u16, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "run",
        "--agents",
        &agents.display().to_string(),
        "--data-dir",
        &data.display().to_string(),
        "--http-addr",
        &format!("127.0.0.1:{port}"),
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

/// Runs `orchestrator ARGS` with `NATS_URL` set, logging to `log`.
pub fn orchestrator(args: &[impl AsRef<std::ffi::OsStr>], nats_url: &str, log: &Path) -> Proc {
    orchestrator_with_env(args, nats_url, log, &[])
}

/// [`orchestrator`], with these variables in its environment too.
pub fn orchestrator_with_env(
    args: &[impl AsRef<std::ffi::OsStr>],
    nats_url: &str,
    log: &Path,
    env: &[(&str, &str)],
) -> Proc {
    let log = std::fs::File::create(log).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_orchestrator"))
        .args(args)
        .envs(env.iter().copied())
        .env("NATS_URL", nats_url)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    Proc(child)
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits until `url` answers 200.
pub async fn wait_ready(url: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(r) = reqwest::get(url).await
            && r.status().is_success()
        {
            return;
        }
        assert!(Instant::now() < deadline, "{url} never became ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A client sending the administrator API key an `orchestrator run` with
/// no credentials configured generated in `data_dir`.
pub fn admin_client(data_dir: &Path) -> reqwest::Client {
    let path = data_dir.join("keys/admin.api-key");
    let key = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    super::system::client_with(Some(key.trim()))
}
