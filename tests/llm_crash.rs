//! Conversations with a model survive SIGKILLs (`docs/llm.md`): the
//! orchestrator killed while a tool call runs, the agent's worker killed
//! during a model call. The test's model server counts the calls it gets
//! and the tool counts its runs: no model call that returned and no tool
//! call that ran is made twice. The API key reaches the model and nothing
//! else.

use crate::common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::llm::{Model, Reply, last_role, tool_results};
use common::nats::NatsServer;
use common::process::{free_port, orchestrator, orchestrator_with_env, run_args, wait_ready};
use common::system::{System, card, fast_bus, in_process_worker};
use futures::future::BoxFuture;
use orchestrator::worker::{Handler, Outcome, Task};
use serde_json::{Value, json};

/// The variable the model's key is in, and the key.
const KEY_VAR: &str = "ORCH_TEST_LLM_KEY";
const KEY: &str = "sk-test-0123456789abcdef";

/// Writes `planner` (a prompt calling `tool`) and `tool` into `dir`.
fn agents(dir: &Path, model: &Model) {
    let planner = json!({
        "name": "planner", "version": "1.0.0", "description": "plans",
        "skills": [{"id": "plan", "description": "plan"}],
        "invocation": {"type": "llm", "systemPrompt": "prompt.md", "model": "stub-model",
                       "baseUrl": model.url, "apiKeyEnv": KEY_VAR, "timeout": "60s"},
        "dependencies": {"agents": ["tool"]}
    });
    std::fs::create_dir_all(dir.join("planner")).unwrap();
    std::fs::write(dir.join("planner/agent.json"), planner.to_string()).unwrap();
    std::fs::write(dir.join("planner/prompt.md"), "You plan, and use the tool.").unwrap();
    std::fs::create_dir_all(dir.join("tool")).unwrap();
    std::fs::write(
        dir.join("tool/agent.json"),
        serde_json::to_string(&card("tool", &["use"])).unwrap(),
    )
    .unwrap();
}

/// The model: a tool call first, then the tool's result as the answer;
/// the second answer held until the gate opens when `hold`.
async fn model(hold: bool) -> Model {
    Model::serve(move |r| match last_role(r).as_str() {
        "user" => Reply::Calls(vec![("tool".into(), json!({"n": 1}))]),
        _ => {
            let answer = Reply::Text(format!("done: {}", tool_results(r)[0].1));
            if hold {
                Reply::Held(Box::new(answer))
            } else {
                answer
            }
        }
    })
    .await
}

/// The tool: counts its runs, and finishes only once `go` is set.
#[derive(Clone, Default)]
struct Tool {
    runs: Arc<AtomicUsize>,
    go: Arc<AtomicBool>,
}

impl Handler for Tool {
    fn handle(&self, task: Task) -> BoxFuture<'static, Outcome> {
        let t = self.clone();
        Box::pin(async move {
            t.runs.fetch_add(1, Ordering::SeqCst);
            while !t.go.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Outcome::completed(json!({"used": task.envelope.payload.params["n"]}))
        })
    }
}

async fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !check() {
        assert!(std::time::Instant::now() < deadline, "{what}: not in time");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orchestrator_killed_while_a_tool_runs_repeats_no_model_call_and_no_tool_call() {
    let nats = NatsServer::start();
    let data = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let model = model(false).await;
    agents(dir.path(), &model);
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let args = run_args(dir.path(), data.path(), port, &[]);
    let mut first = orchestrator(&args, &nats.url(), &data.path().join("first.log"));
    wait_ready(&format!("{base}/readyz")).await;
    // The agents' workers outlive the orchestrator: the planner's as a
    // process (with the key), the tool's here.
    let mut planner = orchestrator_with_env(
        &[
            "worker",
            "--agent",
            dir.path().join("planner").to_str().unwrap(),
            "--data-dir",
            data.path().to_str().unwrap(),
        ],
        &nats.url(),
        &data.path().join("planner.log"),
        &[(KEY_VAR, KEY)],
    );
    let tool = Tool::default();
    let (stop, worker) = in_process_worker(
        &nats,
        data.path(),
        card("tool", &["use"]),
        Arc::new(tool.clone()),
        16,
    )
    .await;

    let http = common::process::admin_client(data.path());
    let body = json!({"to": "planner", "action": "plan", "params": {"text": "go"}});
    let t = common::post_json(&http, &format!("{base}/v1/tasks"), &body).await;
    let id = t["task_id"].as_str().unwrap().to_string();
    wait_for("the tool runs", || tool.runs.load(Ordering::SeqCst) == 1).await;
    first.kill();
    // The tool's result comes while the orchestrator is down.
    tool.go.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _second = orchestrator(&args, &nats.url(), &data.path().join("second.log"));
    wait_ready(&format!("{base}/readyz")).await;
    let done = wait_done(&http, &base, &id).await;
    assert_eq!(done["state"], "completed", "{done:#}");
    assert_eq!(done["result"], r#"done: {"used":1}"#);
    assert_eq!(model.calls(), 2, "{:#?}", model.requests());
    assert_eq!(tool.runs.load(Ordering::SeqCst), 1);
    // The key went to the model, and nowhere else.
    assert!(
        model
            .auth()
            .iter()
            .all(|a| a.as_deref() == Some(&format!("Bearer {KEY}") as &str))
    );
    let tasks = common::get_json(
        &http,
        &format!(
            "{base}/v1/tasks?correlation_id={}&limit=50",
            done["correlation_id"].as_str().unwrap()
        ),
    )
    .await;
    let audit = common::get_json(&http, &format!("{base}/v1/audit?limit=1000")).await;
    for (what, text) in [
        ("the tasks", tasks.to_string()),
        ("the audit", audit.to_string()),
        (
            "the first log",
            std::fs::read_to_string(data.path().join("first.log")).unwrap(),
        ),
        (
            "the second log",
            std::fs::read_to_string(data.path().join("second.log")).unwrap(),
        ),
        (
            "the worker's log",
            std::fs::read_to_string(data.path().join("planner.log")).unwrap(),
        ),
    ] {
        assert!(!text.contains(KEY), "the key is in {what}");
    }
    planner.kill();
    stop.cancel();
    let _ = worker.await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_during_a_model_call_repeats_that_call_only() {
    let model = model(true).await;
    let dir = tempfile::tempdir().unwrap();
    agents(dir.path(), &model);
    let mut sys = System::start_reading(vec![dir.path().to_path_buf()], fast_bus()).await;
    let tool = Tool {
        go: Arc::new(AtomicBool::new(true)),
        ..Tool::default()
    };
    let tool_card = card("tool", &["use"]);
    sys.worker(tool_card, Arc::new(tool.clone())).await;
    let worker = |log: &str| {
        orchestrator_with_env(
            &[
                "worker",
                "--agent",
                dir.path().join("planner").to_str().unwrap(),
                "--data-dir",
                sys.data.path().to_str().unwrap(),
            ],
            &sys.nats.url(),
            &dir.path().join(log),
            &[(KEY_VAR, KEY)],
        )
    };
    let mut first = worker("first.log");
    let id = sys.submit("planner", "plan", json!({"text": "go"})).await;
    // The second model call is held: the worker dies while it waits.
    wait_for("the second model call", || model.calls() == 2).await;
    first.kill();
    model.open();
    let _second = worker("second.log");
    let done = sys.wait_terminal(&id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "completed", "{done:#}");
    let requests = model.requests();
    let firsts = requests.iter().filter(|r| last_role(r) == "user").count();
    let seconds = requests.iter().filter(|r| last_role(r) == "tool").count();
    assert_eq!(
        firsts, 1,
        "the first model call, which returned, was made again"
    );
    assert_eq!(seconds, 2, "the interrupted call is made once more");
    assert_eq!(tool.runs.load(Ordering::SeqCst), 1);
    drop(sys);
}

async fn wait_done(http: &reqwest::Client, base: &str, id: &str) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let t = common::get_json(http, &format!("{base}/v1/tasks/{id}")).await;
        if matches!(
            t["state"].as_str(),
            Some("completed" | "failed" | "canceled" | "rejected")
        ) {
            return t;
        }
        assert!(std::time::Instant::now() < deadline, "not done: {t:#}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
