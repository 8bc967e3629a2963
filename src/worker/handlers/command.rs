//! The `command` invocation: a subprocess per task.
//!
//! The envelope (token removed) is written to the process's stdin; its
//! stdout is the result JSON. Exit 0 = completed, 75 (EX_TEMPFAIL) =
//! retryable failure, anything else = failed, with the last line of stderr
//! as the message. The process runs in the agent's directory, in a process
//! group of its own, with a scrubbed environment: `ORCH_TASK_ID`,
//! `ORCH_ATTEMPT`, `ORCH_IDEMPOTENCY_KEY`, `ORCH_RESUMED` (`1` when an
//! earlier run may have partly happened), `TRACEPARENT` and `TRACESTATE`
//! (the handler span's W3C trace context, so the command's own spans join
//! the task's trace), the few variables every process needs
//! ([`BASE_ENV`]) and those its card lists in `invocation.env`; none of the
//! worker's other variables (its keys, credentials). On timeout (a
//! retryable failure), cancel or an output limit, the whole group is
//! killed, so a child it started does not outlive the task.

use std::process::Stdio;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use command_fds::{CommandFdExt, FdMapping};

use super::command_progress::{Ending, PROGRESS_FD};
use crate::worker::{Handler, Outcome, Task};

/// Exit code for "try again later".
pub const EXIT_RETRY: i32 = 75;

/// The most a command may write to stdout: its result travels in one event,
/// which the broker's default `max_payload` (1 MiB) bounds anyway. More is a
/// failure (`output_too_large`) and the process is killed.
pub const MAX_STDOUT_BYTES: usize = 1024 * 1024;

/// How much of stderr is kept: its last line is the failure message, so a
/// chatty process keeps only its tail in memory and is not failed for it.
pub const STDERR_TAIL_BYTES: usize = 64 * 1024;

/// Variables of the worker's environment every command gets.
pub const BASE_ENV: &[&str] = &["PATH", "LANG", "LC_ALL", "TZ", "TMPDIR", "HOME"];

/// stdout went past [`MAX_STDOUT_BYTES`].
struct TooLarge;

/// Runs a command per task.
#[derive(Debug, Clone)]
pub struct CommandHandler {
    /// Program and arguments.
    command: Vec<String>,
    /// Longest run before the process is killed.
    timeout: Duration,
    /// The variables passed on from the worker's environment.
    environment: Vec<(String, String)>,
}

impl CommandHandler {
    /// A handler running `command` with `timeout`, in `environment` (see
    /// [`CommandHandler::environment`]) plus the task's variables.
    pub fn new(
        command: Vec<String>,
        timeout: Duration,
        environment: Vec<(String, String)>,
    ) -> Self {
        CommandHandler {
            command,
            timeout,
            environment,
        }
    }

    /// What a command sees of `vars` (the worker's environment): the
    /// [`BASE_ENV`] variables and those named in `allowed`.
    pub fn environment(
        allowed: &[String],
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Vec<(String, String)> {
        vars.into_iter()
            .filter(|(name, _)| {
                BASE_ENV.contains(&name.as_str()) || allowed.iter().any(|a| a == name)
            })
            .collect()
    }
}

impl Handler for CommandHandler {
    fn handle(&self, task: Task) -> BoxFuture<'static, Outcome> {
        let this = self.clone();
        Box::pin(async move { this.run(task).await })
    }
}

/// Kills a command's process group when dropped: whatever ends the run
/// (timeout, cancel, an output limit, the worker stopping), nothing the
/// command started outlives it.
struct Group(Option<nix::unistd::Pid>);

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(group) = self.0 {
            // The group may be gone already: nothing to do then.
            let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        }
    }
}

impl CommandHandler {
    async fn run(self, task: Task) -> Outcome {
        let (command, timeout) = (self.command, self.timeout);
        let Some((program, args)) = command.split_first() else {
            return Outcome::permanent("bad_invocation", "the command is empty");
        };
        run(program, args, timeout, &self.environment, task).await
    }
}

async fn run(
    program: &str,
    args: &[String],
    timeout: Duration,
    environment: &[(String, String)],
    task: Task,
) -> Outcome {
    let env = &task.envelope;
    let (progress_end, progress_pipe) = match super::command_progress::pipe() {
        Ok(pipe) => pipe,
        Err(e) => return Outcome::retryable("spawn_failed", format!("cannot make a pipe: {e}")),
    };
    let mut command = Command::new(program);
    if let Err(e) = command.fd_mappings(vec![FdMapping {
        parent_fd: progress_end,
        child_fd: PROGRESS_FD,
    }]) {
        return Outcome::permanent(
            "spawn_failed",
            format!("cannot pass the progress channel: {e}"),
        );
    }
    let mut child = match command
        .args(args)
        .current_dir(&task.agent_dir)
        .env_clear()
        .envs(environment.iter().map(|(k, v)| (k, v)))
        .process_group(0)
        .env("ORCH_TASK_ID", env.header.task_id.to_string())
        .env("ORCH_ATTEMPT", task.attempt.to_string())
        .env("ORCH_IDEMPOTENCY_KEY", env.control.idempotency_key.as_str())
        .env("ORCH_RESUMED", if task.resumed { "1" } else { "0" })
        .env("ORCH_PROGRESS_FD", PROGRESS_FD.to_string())
        .envs(task.trace.iter().map(|(k, v)| (*k, v)))
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
    // The command holds our end of the progress pipe: closed here, the
    // channel ends when the process (and what it started) closes its own.
    drop(command);
    // The child leads its own group (process_group(0)): its pid is the
    // group's id.
    let _group = Group(
        child
            .id()
            .and_then(|pid| i32::try_from(pid).ok())
            .map(nix::unistd::Pid::from_raw),
    );
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
        let write = async move {
            write.await;
            Ok(())
        };
        let tail = async move { Ok(read_tail(stderr, STDERR_TAIL_BYTES).await) };
        let progress = async {
            Ok(
                super::command_progress::forward(progress_pipe, &task.progress, env.header.task_id)
                    .await,
            )
        };
        // The first error (stdout too large) ends the others at once; the
        // child is then killed on drop.
        let (_, out, err, ending) = tokio::try_join!(
            write,
            read_limited(stdout, MAX_STDOUT_BYTES),
            tail,
            progress
        )?;
        Ok((child.wait().await, out, err, ending))
    };
    let (status, out, err, ending) = tokio::select! {
        done = io => match done {
            Ok(done) => done,
            Err(TooLarge) => return Outcome::permanent(
                "output_too_large",
                format!("`{program}` wrote more than {MAX_STDOUT_BYTES} bytes to stdout"),
            ),
        },
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
    match (status.code(), ending) {
        (Some(0), Some(Ending::InputRequired(m))) => Outcome::InputRequired(m),
        (Some(0), Some(Ending::Reply(m))) => Outcome::Replied(m),
        (Some(0), None) => match serde_json::from_slice(&out) {
            Ok(result) => Outcome::completed(result),
            Err(e) => Outcome::permanent("bad_output", format!("stdout is not JSON: {e}")),
        },
        (Some(EXIT_RETRY), _) => Outcome::retryable("agent_retry", or_default(last_err, "exit 75")),
        (Some(code), _) => Outcome::permanent(
            "agent_failed",
            or_default(last_err, &format!("exit {code}")),
        ),
        (None, _) => Outcome::retryable("killed", or_default(last_err, "killed by a signal")),
    }
}

/// All of `pipe`, or `TooLarge` as soon as it passes `limit` bytes.
async fn read_limited(
    pipe: Option<impl tokio::io::AsyncRead + Unpin>,
    limit: usize,
) -> Result<Vec<u8>, TooLarge> {
    let mut out = Vec::new();
    if let Some(pipe) = pipe {
        // One byte past the limit tells "exactly the limit" from "more".
        let mut bounded = pipe.take(limit as u64 + 1);
        let _ = bounded.read_to_end(&mut out).await;
    }
    if out.len() > limit {
        return Err(TooLarge);
    }
    Ok(out)
}

/// The last `keep` bytes of `pipe`, read to its end.
async fn read_tail(pipe: Option<impl tokio::io::AsyncRead + Unpin>, keep: usize) -> Vec<u8> {
    let mut tail = Vec::new();
    let Some(mut pipe) = pipe else {
        return tail;
    };
    let mut chunk = vec![0u8; 8192];
    while let Ok(n @ 1..) = pipe.read(&mut chunk).await {
        tail.extend_from_slice(&chunk[..n]);
        if tail.len() > 2 * keep {
            tail.drain(..tail.len() - keep);
        }
    }
    if tail.len() > keep {
        tail.drain(..tail.len() - keep);
    }
    tail
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
            token: envelope.header.token.clone(),
            envelope,
            attempt: 2,
            resumed: true,
            agent_dir: dir.to_path_buf(),
            cancel: CancellationToken::new(),
            progress: crate::worker::Reporter::detached(),
            notes: crate::worker::Notes::none(),
            trace: vec![(
                "TRACEPARENT",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
            )],
        }
    }

    async fn run_sh(script: &str, timeout: Duration) -> Outcome {
        let dir = tempfile::tempdir().unwrap();
        let handler = CommandHandler::new(
            vec!["sh".into(), "-c".into(), script.into()],
            timeout,
            CommandHandler::environment(&[], std::env::vars()),
        );
        handler.handle(task(dir.path())).await
    }

    /// Lines on the progress channel (fd 3) become progress reports, in
    /// order; a line that is not a report is skipped and the task goes on.
    #[tokio::test]
    async fn lines_on_fd_3_are_progress_reports_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let handler = CommandHandler::new(
            vec![
                "sh".into(),
                "-c".into(),
                r#"echo "{\"message\": \"step 1 of $ORCH_PROGRESS_FD\"}" >&3
                   echo 'not json' >&3
                   echo '{"message": "x", "unknown": 1}' >&3
                   printf '{"artifact": {"artifact_id": "doc", "parts": [{"text": "a"}], "last_chunk": true}}' >&3
                   echo '{"done": true}'"#
                    .into(),
            ],
            Duration::from_secs(10),
            CommandHandler::environment(&[], std::env::vars()),
        );
        let (reporter, mut updates) = crate::worker::Reporter::channel();
        let mut task = task(dir.path());
        task.progress = reporter;
        let outcome = handler.handle(task).await;
        assert_eq!(
            outcome,
            Outcome::completed(serde_json::json!({"done": true}))
        );
        let mut got = Vec::new();
        while let Ok(update) = updates.try_recv() {
            got.push(update);
        }
        let chunk = crate::artifact::Artifact {
            last_chunk: true,
            ..crate::artifact::Artifact::new("doc", crate::artifact::Part::text("a"))
        };
        assert_eq!(
            got,
            vec![
                crate::worker::Update {
                    message: Some("step 1 of 3".into()),
                    artifact: None
                },
                crate::worker::Update {
                    message: None,
                    artifact: Some(chunk)
                },
            ]
        );
    }

    /// A line `{"input_required": ...}` or `{"reply": ...}` on fd 3 says how
    /// a run that exits 0 ends, instead of its stdout; a failing exit
    /// still fails; a line mixing an ending with a report is skipped.
    #[tokio::test]
    async fn a_command_can_ask_for_input_or_reply_on_fd_3() {
        let asks = run_sh(
            r#"echo '{"input_required": "which account?"}' >&3"#,
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(asks, Outcome::InputRequired("which account?".into()));
        let replies = run_sh(
            r#"echo '{"reply": "yes"}' >&3; echo '{"ignored": true}'"#,
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(replies, Outcome::Replied("yes".into()));
        let fails = run_sh(
            r#"echo '{"reply": "yes"}' >&3; echo boom >&2; exit 3"#,
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(fails, Outcome::permanent("agent_failed", "boom"));
        let mixed = run_sh(
            r#"echo '{"reply": "yes", "message": "m"}' >&3; echo '{"done": 1}'"#,
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(mixed, Outcome::completed(serde_json::json!({"done": 1})));
    }

    /// Whether process `pid` still runs (a zombie counts as gone).
    fn alive(pid: &str) -> bool {
        std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()))
            .is_ok_and(|stat| !stat.contains(") Z "))
    }

    /// The command sees the base variables, the task's and the card's list;
    /// not the rest of the worker's environment.
    #[tokio::test]
    async fn the_environment_is_the_base_the_task_and_the_cards_list() {
        // cargo sets this for the test process: a worker's variable the
        // command must not see.
        assert!(std::env::var("CARGO_MANIFEST_DIR").is_ok());
        let dir = tempfile::tempdir().unwrap();
        let mut vars: Vec<(String, String)> = std::env::vars().collect();
        vars.push(("ALLOWED_VAR".into(), "yes".into()));
        vars.push((
            "ORCH_SIGNING_KEY".into(),
            "-----BEGIN PRIVATE KEY-----".into(),
        ));
        let script = r#"printf '{"allowed":"%s","key":"%s","cargo":"%s","task":"%s","path":"%s"}' \
            "$ALLOWED_VAR" "$ORCH_SIGNING_KEY" "$CARGO_MANIFEST_DIR" "$ORCH_ATTEMPT" "${PATH:+set}""#;
        let handler = CommandHandler::new(
            vec!["sh".into(), "-c".into(), script.into()],
            Duration::from_secs(10),
            CommandHandler::environment(&["ALLOWED_VAR".into()], vars),
        );
        let outcome = handler.handle(task(dir.path())).await;
        assert_eq!(
            outcome,
            Outcome::completed(serde_json::json!({
                "allowed": "yes", "key": "", "cargo": "", "task": "2", "path": "set"
            }))
        );
    }

    /// A timeout or a cancel kills the command's whole process group: a
    /// child it started in the background does not outlive the task.
    #[tokio::test]
    async fn what_a_command_started_dies_with_it() {
        for cancel_it in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let pid_file = dir.path().join("child.pid");
            let script = format!("sleep 300 & echo $! > {}; wait", pid_file.display());
            let handler = CommandHandler::new(
                vec!["sh".into(), "-c".into(), script],
                Duration::from_millis(if cancel_it { 30_000 } else { 300 }),
                CommandHandler::environment(&[], std::env::vars()),
            );
            let t = task(dir.path());
            let cancel = t.cancel.clone();
            let running = tokio::spawn(handler.handle(t));
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while !pid_file.exists() {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the command never started"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            let child = std::fs::read_to_string(&pid_file).unwrap();
            assert!(alive(&child));
            if cancel_it {
                cancel.cancel();
            }
            let outcome = running.await.unwrap();
            assert!(
                matches!(&outcome, Outcome::Canceled | Outcome::Failed { .. }),
                "{outcome:?}"
            );
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while alive(&child) {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the background child {} outlived the task (cancel: {cancel_it})",
                    child.trim()
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
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
    async fn endless_stdout_fails_at_the_limit_and_the_process_is_killed() {
        // `yes` writes forever: without the limit this ends by timeout.
        let pid_file = tempfile::NamedTempFile::new().unwrap();
        let script = format!("echo $$ > {}; exec yes", pid_file.path().display());
        let flood = run_sh(&script, Duration::from_secs(20)).await;
        let Outcome::Failed { error, .. } = flood else {
            panic!("{flood:?}")
        };
        assert_eq!(error.code.as_str(), "output_too_large", "{error:?}");
        assert!(!error.retryable);
        let pid = std::fs::read_to_string(pid_file.path()).unwrap();
        let alive = || {
            std::process::Command::new("kill")
                .args(["-0", pid.trim()])
                .stderr(std::process::Stdio::null())
                .status()
                .unwrap()
                .success()
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while alive() {
            assert!(
                std::time::Instant::now() < deadline,
                "the flooding process lives"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // Exactly the limit is still a result (a JSON string that long).
        let body = MAX_STDOUT_BYTES - 2;
        let exact = run_sh(
            &format!("printf '\"'; head -c {body} /dev/zero | tr '\\0' x; printf '\"'"),
            Duration::from_secs(20),
        )
        .await;
        let Outcome::Completed { result, .. } = exact else {
            panic!("{exact:?}")
        };
        assert_eq!(result.as_str().map(str::len), Some(body));
    }

    #[tokio::test]
    async fn a_chatty_stderr_keeps_only_its_tail() {
        let script = "head -c 500000 /dev/zero | tr '\\0' x >&2; echo >&2; \
                      echo 'the real reason' >&2; exit 3";
        let failed = run_sh(script, Duration::from_secs(20)).await;
        let Outcome::Failed { error, .. } = failed else {
            panic!("{failed:?}")
        };
        assert_eq!(error.message, "the real reason");
    }

    #[tokio::test]
    async fn read_tail_keeps_at_most_its_bound() {
        let mut flood = vec![b'x'; 500_000];
        flood.extend_from_slice(b"\nthe end\n");
        let tail = read_tail(Some(&flood[..]), 1000).await;
        assert_eq!(tail.len(), 1000);
        assert!(tail.ends_with(b"\nthe end\n"));
        let short = read_tail(Some(&b"short\n"[..]), 1000).await;
        assert_eq!(short, b"short\n");
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
            CommandHandler::environment(&[], std::env::vars()),
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
        let handler = CommandHandler::new(
            vec!["/nonexistent/agent".into()],
            Duration::from_secs(1),
            Vec::new(),
        );
        let outcome = handler.handle(task(dir.path())).await;
        let Outcome::Failed { error, .. } = outcome else {
            panic!("{outcome:?}")
        };
        assert_eq!(error.code.as_str(), "spawn_failed");
    }
}
