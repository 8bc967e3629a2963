//! The `command` invocation: a subprocess per task.
//!
//! The envelope (token removed) is written to the process's stdin; its
//! stdout is the result JSON. Exit 0 = completed, 75 (EX_TEMPFAIL) =
//! retryable failure, anything else = failed, with the last line of stderr
//! as the message. The process runs in the agent's directory with
//! `ORCH_TASK_ID`, `ORCH_ATTEMPT`, `ORCH_IDEMPOTENCY_KEY` and, when an
//! earlier run may have partly happened, `ORCH_RESUMED=1`. It is killed on
//! timeout (a retryable failure) and on cancel.

use std::process::Stdio;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use super::{Handler, Outcome, Task};

/// Exit code for "try again later".
pub const EXIT_RETRY: i32 = 75;

/// Runs a command per task.
#[derive(Debug, Clone)]
pub struct CommandHandler {
    /// Program and arguments.
    command: Vec<String>,
    /// Longest run before the process is killed.
    timeout: Duration,
}

impl CommandHandler {
    /// A handler running `command` with `timeout`.
    pub fn new(command: Vec<String>, timeout: Duration) -> Self {
        CommandHandler { command, timeout }
    }
}

impl Handler for CommandHandler {
    fn handle(&self, task: Task) -> BoxFuture<'static, Outcome> {
        let command = self.command.clone();
        let timeout = self.timeout;
        Box::pin(async move { run(command, timeout, task).await })
    }
}

async fn run(command: Vec<String>, timeout: Duration, task: Task) -> Outcome {
    let Some((program, args)) = command.split_first() else {
        return Outcome::permanent("bad_invocation", "the command is empty");
    };
    let env = &task.envelope;
    let mut child = match Command::new(program)
        .args(args)
        .current_dir(&task.agent_dir)
        .env("ORCH_TASK_ID", env.header.task_id.to_string())
        .env("ORCH_ATTEMPT", task.attempt.to_string())
        .env("ORCH_IDEMPOTENCY_KEY", env.control.idempotency_key.as_str())
        .env("ORCH_RESUMED", if task.resumed { "1" } else { "0" })
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
    {
        Ok(child) => child,
        Err(e) => {
            return Outcome::permanent("spawn_failed", format!("cannot start `{program}`: {e}"));
        }
    };
    let input = env.without_token().to_vec();
    let stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let io = async {
        let write = async move {
            if let Some(mut stdin) = stdin {
                // A process that ignores its input may close stdin early.
                let _ = stdin.write_all(&input).await;
            }
        };
        let (_, out, err) = tokio::join!(write, read_all(stdout), read_all(stderr));
        (child.wait().await, out, err)
    };
    let (status, out, err) = tokio::select! {
        done = io => done,
        () = tokio::time::sleep(timeout) => {
            return Outcome::retryable("timeout", format!("`{program}` ran longer than {timeout:?}"));
        }
        () = task.cancel.cancelled() => return Outcome::Canceled,
    };
    let status = match status {
        Ok(status) => status,
        Err(e) => return Outcome::retryable("wait_failed", e.to_string()),
    };
    let last_err = String::from_utf8_lossy(&err)
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .to_string();
    match status.code() {
        Some(0) => match serde_json::from_slice(&out) {
            Ok(result) => Outcome::completed(result),
            Err(e) => Outcome::permanent("bad_output", format!("stdout is not JSON: {e}")),
        },
        Some(EXIT_RETRY) => Outcome::retryable("agent_retry", or_default(last_err, "exit 75")),
        Some(code) => Outcome::permanent(
            "agent_failed",
            or_default(last_err, &format!("exit {code}")),
        ),
        None => Outcome::retryable("killed", or_default(last_err, "killed by a signal")),
    }
}

async fn read_all(pipe: Option<impl tokio::io::AsyncRead + Unpin>) -> Vec<u8> {
    let mut out = Vec::new();
    if let Some(mut pipe) = pipe {
        let _ = pipe.read_to_end(&mut out).await;
    }
    out
}

fn or_default(message: String, default: &str) -> String {
    if message.is_empty() {
        default.to_string()
    } else {
        message
    }
}
