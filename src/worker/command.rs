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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::{BearerToken, Envelope, Sender};
    use tokio_util::sync::CancellationToken;

    fn task(dir: &std::path::Path) -> Task {
        let mut envelope = Envelope::new(
            Sender::orchestrator(),
            "echo".parse().unwrap(),
            "echo".parse().unwrap(),
            serde_json::Map::new(),
        );
        envelope.header.token = Some(BearerToken::new("secret-token"));
        Task {
            envelope,
            attempt: 2,
            resumed: true,
            agent_dir: dir.to_path_buf(),
            cancel: CancellationToken::new(),
        }
    }

    async fn run_sh(script: &str, timeout: Duration) -> Outcome {
        let dir = tempfile::tempdir().unwrap();
        let handler = CommandHandler::new(vec!["sh".into(), "-c".into(), script.into()], timeout);
        handler.handle(task(dir.path())).await
    }

    #[tokio::test]
    async fn exit_zero_with_json_completes_and_sees_the_envelope_without_its_token() {
        let script = r#"input=$(cat); case "$input" in *secret-token*) exit 9;; esac
            printf '{"attempt": %s, "resumed": %s}' "$ORCH_ATTEMPT" "$ORCH_RESUMED""#;
        let outcome = run_sh(script, Duration::from_secs(10)).await;
        assert_eq!(
            outcome,
            Outcome::completed(serde_json::json!({"attempt": 2, "resumed": 1}))
        );
    }

    #[tokio::test]
    async fn exit_codes_map_to_retryable_and_permanent_failures() {
        let retry = run_sh(
            "echo warming up >&2; echo 'index busy' >&2; exit 75",
            Duration::from_secs(10),
        )
        .await;
        let Outcome::Failed { error, .. } = retry else {
            panic!("{retry:?}")
        };
        assert!(error.retryable);
        assert_eq!(error.message, "index busy");
        let failed = run_sh("echo 'bad query' >&2; exit 3", Duration::from_secs(10)).await;
        let Outcome::Failed { error, .. } = failed else {
            panic!("{failed:?}")
        };
        assert!(!error.retryable);
        assert_eq!(
            (error.code.as_str(), error.message.as_str()),
            ("agent_failed", "bad query")
        );
        let garbage = run_sh("echo not-json", Duration::from_secs(10)).await;
        let Outcome::Failed { error, .. } = garbage else {
            panic!("{garbage:?}")
        };
        assert_eq!(error.code.as_str(), "bad_output");
    }

    #[tokio::test]
    async fn a_slow_command_times_out_retryably_and_a_cancel_stops_it() {
        let slow = run_sh("sleep 5", Duration::from_millis(200)).await;
        let Outcome::Failed { error, .. } = slow else {
            panic!("{slow:?}")
        };
        assert_eq!((error.code.as_str(), error.retryable), ("timeout", true));

        let dir = tempfile::tempdir().unwrap();
        let handler = CommandHandler::new(
            vec!["sh".into(), "-c".into(), "sleep 5".into()],
            Duration::from_secs(30),
        );
        let t = task(dir.path());
        let cancel = t.cancel.clone();
        let running = tokio::spawn(handler.handle(t));
        tokio::time::sleep(Duration::from_millis(100)).await;
        cancel.cancel();
        assert_eq!(running.await.unwrap(), Outcome::Canceled);
    }

    #[tokio::test]
    async fn a_missing_program_is_a_permanent_failure() {
        let dir = tempfile::tempdir().unwrap();
        let handler =
            CommandHandler::new(vec!["/nonexistent/agent".into()], Duration::from_secs(1));
        let outcome = handler.handle(task(dir.path())).await;
        let Outcome::Failed { error, .. } = outcome else {
            panic!("{outcome:?}")
        };
        assert_eq!(error.code.as_str(), "spawn_failed");
    }
}
