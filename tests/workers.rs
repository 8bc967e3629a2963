//! The worker protocol's scenarios, each run against two implementations
//! as separate processes: the Rust worker (`orchestrator worker`, running
//! the agent's `handler.py` as a command) and the Python worker in
//! `examples/python-worker/` (nats-py, written from docs/worker-protocol.md).
//! Both serve the agent `py-echo`, whose handler journals every start and
//! end, so the tests count real handler runs.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::eventually;
use common::nats::NatsServer;
use common::process::Proc;
use common::system::{System, fast_bus};
use orchestrator::bus::{Names, permissions};
use serde_json::{Value, json};

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Rust,
    Python,
}

impl Kind {
    /// The `via` its handler runs write into the journal.
    fn via(self) -> &'static str {
        match self {
            Kind::Rust => "command",
            Kind::Python => "python",
        }
    }
}

fn example_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/python-worker")
}

fn agent_dir() -> PathBuf {
    example_dir().join("py-echo")
}

/// A system with the py-echo card and a journal for its handler runs, on a
/// least-privilege bus: the orchestrator and each worker log in as their
/// own users (`orchestrator nats config`), so both workers are shown to
/// work with only the permissions docs/worker-protocol.md §12 lists.
struct Bench {
    sys: System,
    dir: tempfile::TempDir,
    /// The bus users' seed files.
    seeds: tempfile::TempDir,
    workers: usize,
}

impl Bench {
    async fn start() -> Bench {
        Bench::start_with("").await
    }

    /// A bench whose broker's configuration also holds `config`.
    async fn start_with(config: &str) -> Bench {
        let card = orchestrator::agent::Catalog::one(&agent_dir(), None).unwrap();
        let seeds = tempfile::tempdir().unwrap();
        let files = permissions::write(
            seeds.path(),
            &Names::new("orch"),
            std::slice::from_ref(&card.name),
        )
        .unwrap();
        let auth = std::fs::read_to_string(files.auth_conf).unwrap();
        let nats = NatsServer::start_with(&format!("{config}\n{auth}"));
        let mut bus = fast_bus();
        bus.auth.nkey_seed_file = Some(permissions::orchestrator_seed(seeds.path()));
        let sys = System::start_with(nats, vec![card], bus, |_| {}).await;
        Bench {
            sys,
            dir: tempfile::tempdir().unwrap(),
            seeds,
            workers: 0,
        }
    }

    fn journal(&self) -> PathBuf {
        self.dir.path().join("journal")
    }

    /// Starts a worker of `kind` and waits until it is registered.
    async fn worker(&mut self, kind: Kind) -> Proc {
        self.workers += 1;
        let before = self.instances().await;
        let log =
            std::fs::File::create(self.dir.path().join(format!("worker-{}.log", self.workers)))
                .unwrap();
        let agent = agent_dir();
        let mut command = match kind {
            Kind::Rust => {
                let mut c = Command::new(env!("CARGO_BIN_EXE_orchestrator"));
                c.arg("worker").arg("--agent").arg(&agent);
                c
            }
            Kind::Python => {
                python_worker_runs();
                let mut c = Command::new("python3");
                c.arg(example_dir().join("worker.py"))
                    .arg("--agent")
                    .arg(&agent);
                c
            }
        };
        let child = command
            .env("NATS_URL", self.sys.nats.url())
            .env(
                "NATS_NKEY",
                permissions::agent_seed(self.seeds.path(), &"py-echo".parse().unwrap()),
            )
            .env("PY_ECHO_JOURNAL", self.journal())
            // Both workers check task tokens with the orchestrator's key.
            .env(
                "ORCH_VERIFY_KEY",
                self.sys.data.path().join("keys").join("verify.pem"),
            )
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let proc = Proc(child);
        eventually("the worker registers", Duration::from_secs(30), || async {
            self.instances().await.iter().any(|i| !before.contains(i))
        })
        .await;
        proc
    }

    /// The live instances' ids (a killed one lingers until its entry expires).
    async fn instances(&self) -> Vec<String> {
        let (_, agents) = self.sys.get("/v1/agents").await;
        common::strings(&agents["agents"][0], "instances", "instance")
    }

    async fn submit(&self, action: &str, params: Value, max_attempts: u32) -> String {
        let (status, task) = self
            .sys
            .post(
                "/v1/tasks",
                json!({"to": "py-echo", "action": action, "params": params, "max_attempts": max_attempts}),
            )
            .await;
        assert_eq!(status, 201, "{task:#}");
        task["task_id"].as_str().unwrap().to_string()
    }

    async fn finished(&self, id: &str) -> Value {
        self.sys.wait_terminal(id, Duration::from_secs(60)).await
    }

    /// The journal lines of task `id` with `event` ("start" or "end").
    fn runs(&self, id: &str, event: &str) -> Vec<Value> {
        let text = std::fs::read_to_string(self.journal()).unwrap_or_default();
        text.lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|l| l["task"] == id && l["event"] == event)
            .collect()
    }

    async fn started(&self, id: &str) {
        eventually("the handler starts", Duration::from_secs(30), || async {
            !self.runs(id, "start").is_empty()
        })
        .await;
    }

    async fn dead_letters(&self) -> usize {
        let (_, dlq) = self.sys.get("/v1/dlq").await;
        dlq["dead_letters"].as_array().unwrap().len()
    }
}

impl Drop for Bench {
    /// A failed scenario shows what its workers logged, and the journal.
    fn drop(&mut self) {
        if std::thread::panicking() {
            for n in 1..=self.workers {
                let log = self.dir.path().join(format!("worker-{n}.log"));
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                eprintln!("--- worker {n} ---\n{text}");
            }
            let journal = std::fs::read_to_string(self.journal()).unwrap_or_default();
            eprintln!("--- journal ---\n{journal}");
        }
    }
}

/// Fails clearly when the Python worker's one dependency is missing.
fn python_worker_runs() {
    let found = Command::new("python3")
        .args(["-c", "import nats, jwt, rfc8785, cryptography"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "python3 with nats-py, pyjwt[crypto] and rfc8785 is needed: pip install -r examples/python-worker/requirements.txt \
         (scripts/test does it)"
    );
}

/// Runs `script` with python3 in the example's directory (so it can import
/// `tokens`), `stdin` on its standard input; returns its standard output.
fn python_with_stdin(script: &str, args: &[&str], stdin: &[u8]) -> String {
    use std::io::Write;
    let out = Command::new("python3")
        .current_dir(example_dir())
        .arg("-c")
        .arg(script)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            child.stdin.take().unwrap().write_all(stdin)?;
            child.wait_with_output()
        })
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn attempts(runs: &[Value]) -> Vec<u64> {
    runs.iter()
        .map(|r| r["attempt"].as_u64().unwrap())
        .collect()
}

fn signal(proc: &Proc, sig: &str) {
    let status = Command::new("kill")
        .args([sig, &proc.0.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

async fn completes(kind: Kind) {
    let mut b = Bench::start().await;
    let _w = b.worker(kind).await;
    let id = b.submit("echo", json!({"day": 1}), 3).await;
    let task = b.finished(&id).await;
    assert_eq!(task["state"], "completed", "{task:#}");
    assert_eq!(task["result"], json!({"echo": {"day": 1}}));
    let starts = b.runs(&id, "start");
    assert_eq!(attempts(&starts), [1]);
    assert_eq!(starts[0]["via"], kind.via());
}

/// Progress a handler reports reaches the task's history in order, once
/// each: through ctx["progress"] on the Python worker, through the command
/// channel (fd 3) on the Rust worker.
async fn reports_progress_in_order(kind: Kind) {
    let mut b = Bench::start().await;
    let _w = b.worker(kind).await;
    let id = b.submit("progress", json!({}), 3).await;
    let task = b.finished(&id).await;
    assert_eq!(task["state"], "completed", "{task:#}");
    let reports: Vec<&Value> = task["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|h| h.get("progress"))
        .collect();
    let seqs: Vec<u64> = reports.iter().map(|p| p["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [1, 2, 3], "{task:#}");
    assert_eq!(reports[0]["message"], "step 1");
    assert_eq!(reports[1]["artifact"]["parts"][0]["text"], "chunk-1 ");
    assert_eq!(reports[2]["artifact"]["append"], true);
    let completed = task["history"].as_array().unwrap().last().unwrap();
    assert_eq!(
        completed["to"], "completed",
        "every report before the result"
    );
}

async fn retries_then_succeeds(kind: Kind) {
    let mut b = Bench::start().await;
    let _w = b.worker(kind).await;
    let id = b.submit("flaky", json!({"succeed_on_attempt": 3}), 5).await;
    let task = b.finished(&id).await;
    assert_eq!(task["state"], "completed", "{task:#}");
    assert_eq!(task["attempt"], 3);
    assert_eq!(task["result"], json!({"attempt": 3}));
    assert_eq!(attempts(&b.runs(&id, "start")), [1, 2, 3]);
}

async fn always_failing_fails_after_max_attempts(kind: Kind) {
    let mut b = Bench::start().await;
    let _w = b.worker(kind).await;
    let id = b.submit("fail", json!({"retryable": true}), 3).await;
    let task = b.finished(&id).await;
    assert_eq!(task["state"], "failed", "{task:#}");
    assert_eq!(task["attempt"], 3);
    assert_eq!(task["error"]["retryable"], true, "{task:#}");
    assert_eq!(attempts(&b.runs(&id, "start")), [1, 2, 3]);
    assert_eq!(b.dead_letters().await, 0, "a failing task is not poison");
}

async fn a_permanent_failure_is_not_retried(kind: Kind) {
    let mut b = Bench::start().await;
    let _w = b.worker(kind).await;
    let id = b
        .submit("fail", json!({"retryable": false, "code": "bad_input"}), 3)
        .await;
    let task = b.finished(&id).await;
    assert_eq!(task["state"], "failed", "{task:#}");
    assert_eq!(task["attempt"], 1);
    assert_eq!(task["error"]["retryable"], false, "{task:#}");
    assert_eq!(attempts(&b.runs(&id, "start")), [1]);
}

/// A failure whose message quotes a sensitive param: the worker itself
/// reports it scrubbed (the event on the bus, before the orchestrator's own
/// scrubbing), and the task's error says so.
async fn a_failure_never_reports_a_secret(kind: Kind) {
    let mut b = Bench::start().await;
    let _w = b.worker(kind).await;
    let params = json!({
        "retryable": false,
        "message": "login refused for password hunter2-xyz",
        "password": "hunter2-xyz"
    });
    let id = b.submit("fail", params, 3).await;
    let task = b.finished(&id).await;
    assert_eq!(task["state"], "failed", "{task:#}");
    let bus = b.sys.bus().await;
    let stream = bus
        .jetstream()
        .get_stream(bus.names().events_stream())
        .await
        .unwrap();
    let subject = bus
        .names()
        .event_subject(&"py-echo".parse().unwrap(), id.parse().unwrap());
    let event = stream
        .get_last_raw_message_by_subject(&subject)
        .await
        .unwrap();
    let event: Value = serde_json::from_slice(&event.payload).unwrap();
    let message = event["error"]["message"].as_str().unwrap();
    assert!(
        !message.contains("hunter2-xyz"),
        "the worker reported: {message}"
    );
    assert!(message.contains("[redacted]"), "{message}");
}

/// SIGKILLed while its handler runs: another worker of the same kind runs
/// the same attempt again, told that the first run may have partly happened.
async fn killed_mid_task_runs_again_resumed(kind: Kind) {
    let mut b = Bench::start().await;
    let mut first = b.worker(kind).await;
    let id = b.submit("sleep", json!({"seconds": 1.5}), 3).await;
    b.started(&id).await;
    first.kill();
    let _second = b.worker(kind).await;
    let task = b.finished(&id).await;
    assert_eq!(task["state"], "completed", "{task:#}");
    let starts = b.runs(&id, "start");
    assert_eq!(attempts(&starts), [1, 1], "the same attempt, not a new one");
    assert_eq!(starts[0]["resumed"], false);
    assert_eq!(starts[1]["resumed"], true);
    assert_eq!(task["result"]["pid"], starts[1]["pid"]);
}

/// A run that takes an attempt over numbers its progress from 1 again:
/// its reports reach the task's history beside the first run's, not
/// dropped by the broker as copies of them (the instance is in their
/// message ids).
async fn a_run_taken_over_reports_its_own_progress(kind: Kind) {
    let mut b = Bench::start().await;
    let mut first = b.worker(kind).await;
    let id = b
        .submit("report_then_sleep", json!({"seconds": 1.5}), 3)
        .await;
    let reports = |task: &Value| -> Vec<(u64, String)> {
        task["history"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|h| h.get("progress"))
            .map(|p| {
                (
                    p["seq"].as_u64().unwrap(),
                    p["message"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect()
    };
    eventually("the first run reports", Duration::from_secs(30), || async {
        let (_, task) = b.sys.get(&format!("/v1/tasks/{id}")).await;
        !reports(&task).is_empty()
    })
    .await;
    first.kill();
    let _second = b.worker(kind).await;
    let task = b.finished(&id).await;
    assert_eq!(task["state"], "completed", "{task:#}");
    let starts = b.runs(&id, "start");
    assert_eq!(attempts(&starts), [1, 1], "the same attempt, run twice");
    let said = reports(&task);
    let expected: Vec<(u64, String)> = starts
        .iter()
        .map(|s| (1, format!("run {} started", s["pid"])))
        .collect();
    assert_eq!(said, expected, "{task:#}");
}

/// Canceled while its handler runs: the handler stops (it never reaches
/// its end) and the worker goes on serving.
async fn canceled_while_running_stops_the_handler(kind: Kind) {
    let mut b = Bench::start().await;
    let _w = b.worker(kind).await;
    let id = b.submit("sleep", json!({"seconds": 3}), 3).await;
    b.started(&id).await;
    let (status, _) = b
        .sys
        .post(&format!("/v1/tasks/{id}/cancel"), json!({}))
        .await;
    assert_eq!(status, 200);
    let next = b.submit("echo", json!({}), 3).await;
    assert_eq!(b.finished(&next).await["state"], "completed");
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(b.runs(&id, "end").is_empty(), "the handler ran to its end");
    assert_eq!(b.finished(&id).await["state"], "canceled");
}

/// Canceled while no worker runs: the worker started later never starts
/// the handler (the cancel mark in the claim tells it).
async fn canceled_before_pick_up_never_starts(kind: Kind) {
    let mut b = Bench::start().await;
    let id = b.submit("echo", json!({"n": 1}), 3).await;
    let (status, _) = b
        .sys
        .post(&format!("/v1/tasks/{id}/cancel"), json!({}))
        .await;
    assert_eq!(status, 200);
    let _w = b.worker(kind).await;
    let next = b.submit("echo", json!({"n": 2}), 3).await;
    assert_eq!(b.finished(&next).await["state"], "completed");
    assert!(b.runs(&id, "start").is_empty(), "a canceled task ran");
    assert_eq!(b.finished(&id).await["state"], "canceled");
}

/// The broker drops a worker that stops answering pings; the cancel's
/// broadcast is sent meanwhile and never reaches it. Resumed, the worker
/// learns of the cancel from its claim and stops the handler.
async fn canceled_while_disconnected_stops_the_handler(kind: Kind) {
    let mut b = Bench::start_with("ping_interval: \"500ms\"\nping_max: 1\n").await;
    let w = b.worker(kind).await;
    let id = b.submit("sleep", json!({"seconds": 6}), 3).await;
    b.started(&id).await;
    signal(&w, "-STOP");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (status, _) = b
        .sys
        .post(&format!("/v1/tasks/{id}/cancel"), json!({}))
        .await;
    signal(&w, "-CONT");
    assert_eq!(status, 200);
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert!(b.runs(&id, "end").is_empty(), "the handler ran to its end");
    assert_eq!(attempts(&b.runs(&id, "start")), [1]);
    assert_eq!(b.finished(&id).await["state"], "canceled");
}

/// A worker paused (SIGSTOP) past its lease while a second replica takes
/// the attempt over: the second run is told the first may have partly run.
/// The first, resumed while the second still runs, finds its handler done
/// but its claim lost, and reports nothing: the second's result is the
/// task's, and it never changes.
async fn a_paused_worker_is_fenced_out(kind: Kind) {
    let mut b = Bench::start().await;
    let first = b.worker(kind).await;
    let id = b.submit("sleep", json!({"seconds": 1.5}), 3).await;
    b.started(&id).await;
    signal(&first, "-STOP");
    let _second = b.worker(kind).await;
    eventually("a second run starts", Duration::from_secs(30), || async {
        b.runs(&id, "start").len() == 2
    })
    .await;
    signal(&first, "-CONT");
    let task = b.finished(&id).await;
    let starts = b.runs(&id, "start");
    assert_eq!(starts[1]["resumed"], true);
    assert_eq!(task["result"]["pid"], starts[1]["pid"], "{task:#}");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (_, after) = b.sys.get(&format!("/v1/tasks/{id}")).await;
    assert_eq!(after["result"], task["result"], "the late result was taken");
    assert_eq!(after["updated_at"], task["updated_at"]);
}

/// The exact bytes of a finished attempt's envelope (its token still
/// valid), published again after its claim's lease ended and with no
/// header saying it is a copy: the worker finds the attempt's final event
/// and settles the copy without running the handler again.
async fn a_copy_of_a_finished_attempt_never_runs(kind: Kind) {
    use futures::StreamExt;
    let mut b = Bench::start().await;
    let _w = b.worker(kind).await;
    let bus = b.sys.bus().await;
    let mut sniffed = bus
        .client()
        .subscribe("orch.tasks.py-echo.>")
        .await
        .unwrap();
    let id = b.submit("echo", json!({"n": 1}), 3).await;
    let original = tokio::time::timeout(Duration::from_secs(10), sniffed.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(b.finished(&id).await["state"], "completed");
    // Past the claim's lease (the bench's ack wait, 2 s).
    tokio::time::sleep(Duration::from_secs(3)).await;
    bus.jetstream()
        .publish(original.subject.clone(), original.payload.clone())
        .await
        .unwrap()
        .await
        .unwrap();
    eventually("the copy is settled", Duration::from_secs(20), || async {
        common::queued(&bus).await == 0
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(attempts(&b.runs(&id, "start")), [1], "the copy ran");
}

/// Generates one test per scenario and kind: `rust_worker::<scenario>`
/// and `python_worker::<scenario>`.
macro_rules! for_both_workers {
    ($($scenario:ident),* $(,)?) => {
        mod rust_worker {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    super::$scenario(super::Kind::Rust).await
                }
            )*
        }
        mod python_worker {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    super::$scenario(super::Kind::Python).await
                }
            )*
        }
    };
}

for_both_workers!(
    completes,
    reports_progress_in_order,
    a_failure_never_reports_a_secret,
    retries_then_succeeds,
    always_failing_fails_after_max_attempts,
    a_permanent_failure_is_not_retried,
    killed_mid_task_runs_again_resumed,
    a_run_taken_over_reports_its_own_progress,
    canceled_while_running_stops_the_handler,
    canceled_before_pick_up_never_starts,
    canceled_while_disconnected_stops_the_handler,
    a_paused_worker_is_fenced_out,
    a_copy_of_a_finished_attempt_never_runs,
);

/// A Python and a Rust replica of one agent share its work: every task
/// runs once, and both take some.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_and_rust_replicas_share_work() {
    let mut b = Bench::start().await;
    let _rust = b.worker(Kind::Rust).await;
    let _python = b.worker(Kind::Python).await;
    let mut ids = Vec::new();
    for n in 0..24 {
        ids.push(b.submit("sleep", json!({"seconds": 0.3, "n": n}), 3).await);
    }
    let mut vias = std::collections::BTreeSet::new();
    for id in &ids {
        let task = b.finished(id).await;
        assert_eq!(task["state"], "completed", "{task:#}");
        let starts = b.runs(id, "start");
        assert_eq!(starts.len(), 1, "task {id} ran {} times", starts.len());
        vias.insert(starts[0]["via"].as_str().unwrap().to_string());
    }
    assert_eq!(vias.len(), 2, "only {vias:?} took work");
}

/// Workers of both kinds are SIGKILLed at random points over many rounds,
/// while tasks fail retryably, fail for good and complete, so kills land
/// around failure reports. Every task still ends in the state its params
/// call for, at the attempt the store records, and every attempt the
/// store counted ran (no attempt skipped, none invented by a crash).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_killed_at_random_points_agree_with_the_store() {
    let mut b = Bench::start().await;
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("seed {seed}");
    let mut rng = seed;
    let mut next = move |n: u64| {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (rng >> 33) % n
    };
    // (task, expected state, expected attempt)
    let mut expected = Vec::new();
    for round in 0..12 {
        for n in 0..6 {
            let (action, params, state, attempt) = match n % 3 {
                0 => (
                    "flaky",
                    json!({"succeed_on_attempt": 2, "n": n}),
                    "completed",
                    2,
                ),
                1 => ("fail", json!({"retryable": true, "n": n}), "failed", 3),
                _ => ("fail", json!({"retryable": false, "n": n}), "failed", 1),
            };
            let id = b.submit(action, params, 3).await;
            expected.push((id, state, attempt));
        }
        let kind = if round % 2 == 0 {
            Kind::Rust
        } else {
            Kind::Python
        };
        let mut worker = b.worker(kind).await;
        tokio::time::sleep(Duration::from_millis(next(400))).await;
        worker.kill();
    }
    let _rust = b.worker(Kind::Rust).await;
    let _python = b.worker(Kind::Python).await;
    for (id, state, attempt) in &expected {
        let task = b.sys.wait_terminal(id, Duration::from_secs(120)).await;
        assert_eq!(task["state"], *state, "{task:#}");
        assert_eq!(task["attempt"], *attempt, "{task:#}");
        let mut ran = attempts(&b.runs(id, "start"));
        ran.dedup();
        let all: Vec<u64> = (1..=*attempt).collect();
        assert_eq!(ran, all, "attempts that ran for {id}: {task:#}");
    }
    assert_eq!(b.dead_letters().await, 0);
}

/// The envelope hash a token binds is the same in Rust (the orchestrator's
/// `envelope_hash`) and in the Python worker (`tokens.wire_hash`, on the
/// message as received), for params that stress RFC 8785: floats in every
/// notation, escapes, non-ASCII and astral characters, nesting, key order.
#[test]
fn python_and_rust_agree_on_the_envelope_hash() {
    python_worker_runs();
    let tricky = [
        json!({}),
        json!({"n": 1, "big": 9007199254740991u64, "neg": -42}),
        json!({"f": [0.1, 1e21, 1e20, 1e-7, 1e-6, 4.5e-7, 5e-324, 1.7976931348623157e308, 333333333.3333333, -0.0]}),
        json!({"s": "quote \" backslash \\ newline \n tab \t nul \u{0} bell \u{7} del \u{7f} é € 😀 \u{2028}"}),
        json!({"z": 1, "a": {"\u{1F600}": 1, "\u{E000}": 2, "b": [null, true, false, {"y": [], "x": {}}]}}),
    ];
    for params in tricky {
        let map = params.as_object().unwrap().clone();
        let mut env = orchestrator::Envelope::new(
            "orchestrator".parse().unwrap(),
            "py-echo".parse().unwrap(),
            "echo".parse().unwrap(),
            map,
        );
        env.control.required_scopes = vec!["Files.Read".parse().unwrap()];
        env.payload.meta.system_prompt = Some("Be brief.\r\n".into());
        let rust = orchestrator::task_token::envelope_hash(&env).unwrap();
        let python = python_with_stdin(
            "import json, sys, tokens; print(tokens.wire_hash(json.loads(sys.stdin.buffer.read())))",
            &[],
            &env.to_vec(),
        );
        assert_eq!(python.trim(), rust, "params {params}");
    }
}

/// The Python worker's token check refuses what the Rust one refuses, with
/// the same codes: tokens minted by the orchestrator's code, envelopes
/// spoiled in the ways tests/tokens.rs tries on the Rust verifier.
#[test]
fn the_python_token_check_refuses_what_the_rust_one_refuses() {
    use orchestrator::task_token::keys::{self, KeyKind};
    use orchestrator::task_token::{Minter, SigningKey};
    python_worker_runs();
    let dir = tempfile::tempdir().unwrap();
    let files = keys::generate(dir.path(), KeyKind::EdDsa, false).unwrap();
    let other = keys::generate(&dir.path().join("other"), KeyKind::EdDsa, false).unwrap();
    let minter_with = |path: &Path, ttl: u64| {
        Minter::new(
            SigningKey::load(path.to_str().unwrap()).unwrap(),
            "orchestrator",
            Duration::from_secs(ttl),
        )
    };
    let minter = minter_with(&files.signing, 300);
    let task = |agent: &str| {
        let mut params = serde_json::Map::new();
        params.insert("q".into(), json!("x"));
        let mut env = orchestrator::Envelope::new(
            "orchestrator".parse().unwrap(),
            agent.parse().unwrap(),
            "echo".parse().unwrap(),
            params,
        );
        env.control.required_scopes = vec!["Files.Read".parse().unwrap()];
        env
    };
    let signed = |minter: &Minter, env: orchestrator::Envelope| {
        let mut env = env;
        env.header.token = Some(minter.mint(&env, "alice").unwrap());
        serde_json::to_value(&env).unwrap()
    };
    let good = signed(&minter, task("py-echo"));
    let mut tampered = good.clone();
    tampered["payload"]["params"]["q"] = json!("y");
    let mut added = good.clone();
    added["control"]["extra"] = json!(true);
    let mut missing = good.clone();
    missing["header"].as_object_mut().unwrap().remove("token");
    let mut no_scope = task("py-echo");
    no_scope.control.required_scopes.clear();
    let mut moved = signed(&minter, task("py-echo"));
    moved["header"]["task_id"] = good["header"]["task_id"].clone();
    // The good envelope with its token's claims changed, signed again.
    let resigned = |change: &dyn Fn(&mut serde_json::Map<String, Value>)| {
        use base64::Engine;
        let token = good["header"]["token"].as_str().unwrap();
        let payload = token.split('.').nth(1).unwrap();
        let mut claims: serde_json::Map<String, Value> = serde_json::from_slice(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(payload)
                .unwrap(),
        )
        .unwrap();
        change(&mut claims);
        let key = jsonwebtoken::EncodingKey::from_ed_pem(&std::fs::read(&files.signing).unwrap())
            .unwrap();
        let header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA);
        let mut env = good.clone();
        env["header"]["token"] = json!(jsonwebtoken::encode(&header, &claims, &key).unwrap());
        env
    };
    let cases = [
        (
            resigned(&|c| {
                c.remove("scope");
            }),
            "token_claim_missing",
        ),
        (
            resigned(&|c| {
                c.remove("env_sha256");
            }),
            "token_claim_missing",
        ),
        (
            resigned(&|c| {
                c.insert("iss".into(), json!(7));
            }),
            "token_claim_invalid",
        ),
        (
            resigned(&|c| {
                c.insert("sub".into(), json!(7));
            }),
            "token_claim_invalid",
        ),
        (
            resigned(&|c| {
                c.insert("jti".into(), json!(7));
            }),
            "token_claim_invalid",
        ),
        (
            resigned(&|c| {
                c.insert("aud".into(), json!(["py-echo"]));
            }),
            "token_claim_invalid",
        ),
        (good.clone(), "ok"),
        (good, "ok"),
        (tampered, "envelope_tampered"),
        (added, "envelope_tampered"),
        (missing, "token_missing"),
        (signed(&minter, task("other-agent")), "token_audience"),
        (
            signed(&minter_with(&other.signing, 300), task("py-echo")),
            "token_signature",
        ),
        (signed(&minter, no_scope), "scope_missing"),
        (moved, "token_task_mismatch"),
    ];
    let script = r#"
import json, sys, tokens
check = tokens.TokenCheck(sys.argv[1], "py-echo", leeway=0)
for env in json.loads(sys.stdin.read()):
    try:
        check.check(env, ["Files.Read"])
        print("ok")
    except tokens.Refused as r:
        print(r.code)
"#;
    let envelopes: Vec<&Value> = cases.iter().map(|(e, _)| e).collect();
    let out = python_with_stdin(
        script,
        &[files.verify.to_str().unwrap()],
        &serde_json::to_vec(&envelopes).unwrap(),
    );
    let got: Vec<String> = out.lines().map(str::to_string).collect();
    let want: Vec<&str> = cases.iter().map(|(_, code)| *code).collect();
    assert_eq!(got, want);
}

/// The Python worker scrubs the same secret values from a failure's message
/// as the Rust one (`orchestrator::redact`), for params that nest secrets
/// in objects, arrays and numbers.
#[test]
fn python_and_rust_scrub_the_same_secrets() {
    python_worker_runs();
    let params = json!({
        "user": "alice",
        "Password": "hunter2",
        "db": {"url": "pg://x", "api_key": "k-123", "nested": {"secret": ["s1", 42]}},
        "token": {"value": "tok-999"},
        "count": 7
    });
    let message = "login alice/hunter2 failed: k-123 s1 42 tok-999 pg://x count 7";
    let rust = orchestrator::redact::SensitiveFields::default()
        .secrets(params.as_object().unwrap())
        .scrub(message);
    let python = python_with_stdin(
        "import json, sys, redact; p, m = json.loads(sys.stdin.read()); print(redact.scrub(m, redact.secrets(p)))",
        &[],
        &serde_json::to_vec(&json!([params, message])).unwrap(),
    );
    assert_eq!(python.trim_end(), rust);
    assert!(
        !rust.contains("hunter2") && rust.contains("count 7"),
        "{rust}"
    );
}
