//! Processes really killed: a worker after its side effect, the
//! orchestrator with tasks in flight, the orchestrator in the middle of
//! workflow runs.

use crate::common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::nats::NatsServer;
use common::process::{Proc, free_port, orchestrator, run_args, wait_ready};
use common::system::{System, card, fast_bus, in_process_worker};
use futures::future::BoxFuture;
use orchestrator::worker::{Handler, Outcome, Task};
use serde_json::json;

/// An agent whose side effect is a file per idempotency key (written once),
/// which logs every run, and which holds after the side effect while a
/// `hold` file exists, so the test can kill its worker at that point.
fn side_effect_agent(dir: &Path) {
    common::command_agent(
        dir,
        json!({
            "name": "fx", "version": "1.0.0", "description": "writes one file per task",
            "skills": [{"id": "write", "description": "write the file"}],
            "invocation": {"type": "command", "command": ["python3", "fx.py"], "timeout": "60s"},
            "delivery": {"ackWait": "2s"}
        }),
        "fx.py",
        r#"import json, os, sys, time
env = json.load(sys.stdin)
key = env["control"]["idempotency_key"]
os.makedirs("effects", exist_ok=True)
try:
    fd = os.open(f"effects/{key}", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    os.write(fd, b"done"); os.fsync(fd); os.close(fd)
    created = True
except FileExistsError:
    created = False
with open("runs.log", "a") as log:
    log.write(f"pid={os.getpid()} resumed={os.environ['ORCH_RESUMED']} created={created}\n")
while os.path.exists("hold"):
    time.sleep(0.05)
print(json.dumps({"created": created, "resumed": os.environ["ORCH_RESUMED"] == "1"}))
"#,
    );
    std::fs::write(dir.join("hold"), "").unwrap();
}

async fn wait_for_file(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A worker is SIGKILLed after its side effect and before its ack. The
/// task is redelivered to a second replica of the agent, which is told the
/// earlier run may have partly happened; the side effect happens exactly
/// once and the task completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_after_its_side_effect_does_not_repeat_it() {
    let agents = tempfile::tempdir().unwrap();
    let dir = agents.path().join("fx");
    side_effect_agent(&dir);
    let fx = orchestrator::agent::Catalog::one(&dir, None).unwrap();
    let sys = System::start(vec![fx], fast_bus()).await;
    let agent_arg = dir.to_str().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let mut first = orchestrator(
        &[
            "worker",
            "--agent",
            agent_arg,
            "--data-dir",
            sys.data.path().to_str().unwrap(),
        ],
        &sys.nats.url(),
        &logs.path().join("a.log"),
    );
    let (status, task) = sys
        .post(
            "/v1/tasks",
            json!({"to": "fx", "action": "write", "idempotency_key": "once"}),
        )
        .await;
    assert_eq!(status, 201);
    let id = task["task_id"].as_str().unwrap().to_string();
    wait_for_file(&dir.join("effects/once")).await;
    first.kill();
    std::fs::remove_file(dir.join("hold")).unwrap();
    let _second = orchestrator(
        &[
            "worker",
            "--agent",
            agent_arg,
            "--data-dir",
            sys.data.path().to_str().unwrap(),
        ],
        &sys.nats.url(),
        &logs.path().join("b.log"),
    );
    let done = sys.wait_terminal(&id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "completed", "{done:#}");
    assert_eq!(done["result"], json!({"created": false, "resumed": true}));
    let effects = std::fs::read_dir(dir.join("effects")).unwrap().count();
    assert_eq!(effects, 1);
    let runs = std::fs::read_to_string(dir.join("runs.log")).unwrap();
    let lines: Vec<&str> = runs.lines().collect();
    assert_eq!(lines.len(), 2, "{runs}");
    assert!(lines[0].ends_with("resumed=0 created=True"), "{runs}");
    assert!(lines[1].ends_with("resumed=1 created=False"), "{runs}");
}

/// An agents directory holding the card `slow` (skill `work`).
fn slow_agent() -> (tempfile::TempDir, orchestrator::agent::AgentCard) {
    let agents = tempfile::tempdir().unwrap();
    let slow = card("slow", &["work"]);
    std::fs::create_dir_all(agents.path().join("slow")).unwrap();
    std::fs::write(
        agents.path().join("slow/agent.json"),
        serde_json::to_string(&slow).unwrap(),
    )
    .unwrap();
    (agents, slow)
}

/// Takes a while, so that tasks are in flight when the orchestrator dies.
struct Slow;

impl Handler for Slow {
    fn handle(&self, task: Task) -> BoxFuture<'static, Outcome> {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            Outcome::completed(json!({"n": task.envelope.payload.params["n"]}))
        })
    }
}

/// The orchestrator is SIGKILLed with tasks in flight; restarted on the
/// same data directory, it applies every result published meanwhile and
/// every task ends completed with its result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orchestrator_killed_mid_run_loses_no_result() {
    let nats = NatsServer::start();
    let data = tempfile::tempdir().unwrap();
    let (agents, slow) = slow_agent();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let args = run_args(agents.path(), data.path(), port, &[]);
    let mut first = orchestrator(&args, &nats.url(), &data.path().join("first.log"));
    wait_ready(&format!("{base}/readyz")).await;

    let (stop, worker) = in_process_worker(&nats, data.path(), slow, Arc::new(Slow), 2).await;

    let http = common::process::admin_client(data.path());
    let mut ids = Vec::new();
    for n in 0..40 {
        let body = json!({"to": "slow", "action": "work", "params": {"n": n}});
        let t = common::post_json(&http, &format!("{base}/v1/tasks"), &body).await;
        ids.push(t["task_id"].as_str().unwrap().to_string());
    }
    tokio::time::sleep(Duration::from_millis(150)).await;
    first.kill();
    // Results keep arriving on the bus while the orchestrator is down.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _second: Proc = orchestrator(&args, &nats.url(), &data.path().join("second.log"));
    wait_ready(&format!("{base}/readyz")).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    for (n, id) in ids.iter().enumerate() {
        loop {
            let t = common::get_json(&http, &format!("{base}/v1/tasks/{id}")).await;
            if t["state"] == "completed" {
                assert_eq!(t["result"], json!({"n": n}));
                break;
            }
            assert!(Instant::now() < deadline, "task {n} stuck: {t:#}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let verify = common::get_json(&http, &format!("{base}/v1/audit/verify")).await;
    assert_eq!(verify["ok"], true, "{verify}");
    stop.cancel();
    let _ = worker.await;
}

/// Counts its runs by (run, step), sleeps a little, and returns `n + 1`.
#[derive(Clone, Default)]
struct Counting(Arc<Mutex<HashMap<(String, String), usize>>>);

impl Handler for Counting {
    fn handle(&self, task: Task) -> BoxFuture<'static, Outcome> {
        let counts = Arc::clone(&self.0);
        Box::pin(async move {
            let meta = &task.envelope.payload.meta;
            let key = (
                meta.run_id.clone().unwrap_or_default(),
                meta.step_id.clone().unwrap_or_default(),
            );
            *counts.lock().unwrap().entry(key).or_default() += 1;
            tokio::time::sleep(Duration::from_millis(250)).await;
            let n = task.envelope.payload.params["n"].as_i64().unwrap_or(-100);
            Outcome::completed(json!({ "n": n + 1 }))
        })
    }
}

/// The orchestrator is SIGKILLed again and again (at least four times)
/// while workflow runs go through their steps (so between steps and
/// during them); after each
/// restart every unfinished run goes on. Each run ends completed with
/// every step's handler run exactly once, none skipped (each step adds
/// one to what the one before returned).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orchestrator_killed_during_workflow_runs_repeats_and_skips_no_step() {
    let nats = NatsServer::start();
    let data = tempfile::tempdir().unwrap();
    let (agents, slow) = slow_agent();
    let triggers = tempfile::tempdir().unwrap();
    let steps = ["a", "b", "c", "d", "e", "f", "g", "h"];
    let mut yaml = String::from("id: chain\nsteps:\n");
    let mut from = "input.n".to_string();
    for step in steps {
        yaml.push_str(&format!(
            "  - {{ id: {step}, agent: slow, action: work, params: {{ n: \"{{{{ {from} }}}}\" }} }}\n"
        ));
        from = format!("steps.{step}.result.n");
    }
    std::fs::write(triggers.path().join("chain.yaml"), yaml).unwrap();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let triggers_arg = triggers.path().display().to_string();
    let args = run_args(
        agents.path(),
        data.path(),
        port,
        &["--triggers", &triggers_arg],
    );
    let mut proc = orchestrator(&args, &nats.url(), &data.path().join("0.log"));
    wait_ready(&format!("{base}/readyz")).await;

    let counting = Counting::default();
    let (stop, worker) =
        in_process_worker(&nats, data.path(), slow, Arc::new(counting.clone()), 8).await;

    let http = common::process::admin_client(data.path());
    let mut runs = Vec::new();
    for n in 0..8 {
        let body = json!({"input": {"n": n * 100}});
        let run = common::post_json(&http, &format!("{base}/v1/triggers/chain/runs"), &body).await;
        runs.push(run["run_id"].as_str().unwrap().to_string());
    }
    // Kills at uneven times: some land while a step's task runs, some
    // between one step's end and the next one's start.
    // Kills only while runs are unfinished; at least four must land.
    let mut kills = 0;
    for (i, pause) in [170u64, 330, 90, 410, 260, 520].iter().enumerate() {
        tokio::time::sleep(Duration::from_millis(*pause)).await;
        let working = common::get_json(&http, &format!("{base}/v1/runs?state=working")).await;
        if working["runs"].as_array().unwrap().is_empty() {
            break;
        }
        kills += 1;
        proc.kill();
        proc = orchestrator(
            &args,
            &nats.url(),
            &data.path().join(format!("{}.log", i + 1)),
        );
        wait_ready(&format!("{base}/readyz")).await;
    }
    assert!(
        kills >= 4,
        "only {kills} kills landed while runs were unfinished"
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    for (n, id) in runs.iter().enumerate() {
        loop {
            let run = common::get_json(&http, &format!("{base}/v1/runs/{id}?wait=1s")).await;
            if run["state"] == "completed" {
                let last = n as i64 * 100 + steps.len() as i64;
                assert_eq!(run["result"], json!({ "n": last }), "{run:#}");
                break;
            }
            assert!(
                run["state"] == "working" && Instant::now() < deadline,
                "run {n}: {run:#}"
            );
        }
    }
    let counts = counting.0.lock().unwrap().clone();
    for id in &runs {
        for step in steps {
            assert_eq!(
                counts.get(&(id.clone(), step.to_string())),
                Some(&1),
                "run {id} step {step}: {counts:?}"
            );
        }
    }
    assert_eq!(counts.len(), runs.len() * steps.len(), "{counts:?}");
    let verify = common::get_json(&http, &format!("{base}/v1/audit/verify")).await;
    assert_eq!(verify["ok"], true, "{verify}");
    stop.cancel();
    let _ = worker.await;
    drop(proc);
}
