//! Failure paths against a real broker: retries, bad messages published
//! straight onto the bus, a broker restart, cancel.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::envelope;
use common::system::{System, card, fast_bus};
use futures::future::BoxFuture;
use orchestrator::worker::{EchoHandler, Handler, Outcome, Task};
use serde_json::json;

/// Fails every run, retryably, and counts the runs.
struct AlwaysRetry(Arc<AtomicU32>);

impl Handler for AlwaysRetry {
    fn handle(&self, _task: Task) -> BoxFuture<'static, Outcome> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Outcome::retryable("upstream_timeout", "the upstream did not answer") })
    }
}

/// A handler that always fails retryably is run max_attempts times; then
/// the task fails, with each retry in its history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retryable_failures_are_retried_up_to_max_attempts_then_fail() {
    let flaky = card("flaky", &["work"]);
    let mut sys = System::start(vec![flaky.clone()], fast_bus()).await;
    let runs = Arc::new(AtomicU32::new(0));
    sys.worker(flaky, Arc::new(AlwaysRetry(Arc::clone(&runs))))
        .await;
    let (status, task) = sys
        .post(
            "/v1/tasks",
            json!({"to": "flaky", "action": "work", "max_attempts": 3}),
        )
        .await;
    assert_eq!(status, 201);
    let id = task["task_id"].as_str().unwrap();
    let done = sys.wait_terminal(id, Duration::from_secs(30)).await;
    assert_eq!(done["state"], "failed", "{done:#}");
    assert_eq!(done["attempt"], 3);
    assert_eq!(done["error"]["code"], "upstream_timeout");
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    let states: Vec<&str> = done["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["to"].as_str().unwrap())
        .collect();
    // Each retry is a new attempt, scheduled by the orchestrator; the
    // handler fails faster than the `working` threshold.
    assert_eq!(states, ["submitted", "submitted", "submitted", "failed"]);
    let attempts: Vec<u64> = done["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["attempt"].as_u64().unwrap())
        .collect();
    assert_eq!(attempts, [1, 2, 3, 3]);
}

/// Malformed JSON, an oversized envelope and an unknown action published
/// straight onto the agent's subject end in the DLQ or a rejected report,
/// and the worker goes on serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_messages_on_the_subject_do_not_stop_the_worker() {
    let echo = card("echo", &["echo"]);
    let mut sys = System::start(vec![echo.clone()], fast_bus()).await;
    sys.worker(echo, Arc::new(EchoHandler)).await;
    let bus = sys.bus().await;
    let js = bus.jetstream();
    js.publish("orch.tasks.echo.normal", "{ not json".into())
        .await
        .unwrap()
        .await
        .unwrap();
    let mut big = envelope(
        "echo",
        "echo",
        json!({"blob": "x".repeat(2 * 1024 * 1024)}),
        "big",
    );
    big.control.attempt = std::num::NonZeroU32::MIN;
    let big_bytes = big.to_vec();
    // The broker's own limit (1 MiB by default) may refuse it first; either
    // way it must not reach a handler.
    let big_published = match js.publish("orch.tasks.echo.normal", big_bytes.into()).await {
        Ok(ack) => ack.await.is_ok(),
        Err(_) => false,
    };
    let unknown = envelope("echo", "fly", json!({}), "unknown-action");
    bus.publish_envelope(&unknown, &tracing::Span::none(), false)
        .await
        .unwrap();
    let (status, task) = sys
        .post(
            "/v1/tasks",
            json!({"to": "echo", "action": "echo", "params": {"ok": true}}),
        )
        .await;
    assert_eq!(status, 201);
    let done = sys
        .wait_terminal(task["task_id"].as_str().unwrap(), Duration::from_secs(20))
        .await;
    assert_eq!(done["state"], "completed");
    let mut dlq = js.get_stream("ORCH_DLQ").await.unwrap();
    let expected = if big_published { 2 } else { 1 };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while dlq.info().await.unwrap().state.messages < expected {
        assert!(
            std::time::Instant::now() < deadline,
            "bad messages did not reach the DLQ"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let first = dlq.get_raw_message(1).await.unwrap();
    let reason = first.headers.get("Orch-Dlq-Code").map(|v| v.to_string());
    assert_eq!(reason.as_deref(), Some("malformed_json"));
    // The unknown action was reported as rejected; the orchestrator, which
    // never stored that task, audits the report.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, audit) = sys
            .get(&format!("/v1/audit?task_id={}", unknown.header.task_id))
            .await;
        let records = audit["records"].as_array().cloned().unwrap_or_default();
        if let Some(r) = records.first() {
            assert_eq!(r["kind"], "task.unknown_event");
            assert_eq!(r["detail"]["state"], "rejected");
            assert_eq!(r["detail"]["error"]["code"], "unknown_action");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the rejection was not audited"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Counts runs per task and completes once the gate is open.
struct Gated {
    runs: Arc<std::sync::Mutex<std::collections::HashMap<String, u32>>>,
    gate: tokio::sync::watch::Receiver<bool>,
}

impl Handler for Gated {
    fn handle(&self, task: Task) -> BoxFuture<'static, Outcome> {
        let id = task.envelope.header.task_id.to_string();
        *self.runs.lock().unwrap().entry(id).or_default() += 1;
        let mut gate = self.gate.clone();
        Box::pin(async move {
            let _ = gate.wait_for(|open| *open).await;
            Outcome::completed(json!({"i": task.envelope.payload.params["i"]}))
        })
    }
}

/// The broker is killed and restarted while tasks are queued and running
/// (held running until after the restart): clients reconnect, every task
/// submitted before and after completes with its own result, and each ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_restart_loses_nothing() {
    let echo = card("echo", &["echo"]);
    let mut sys = System::start(vec![echo.clone()], fast_bus()).await;
    let runs = Arc::new(std::sync::Mutex::new(std::collections::HashMap::new()));
    let (gate, closed) = tokio::sync::watch::channel(false);
    let handler = Gated {
        runs: Arc::clone(&runs),
        gate: closed,
    };
    sys.worker(echo, Arc::new(handler)).await;
    let mut ids = Vec::new();
    for i in 0..40 {
        let (_, t) = sys
            .post(
                "/v1/tasks",
                json!({"to": "echo", "action": "echo", "params": {"i": i}}),
            )
            .await;
        ids.push(t["task_id"].as_str().unwrap().to_string());
    }
    common::eventually("some task runs", Duration::from_secs(30), || async {
        !runs.lock().unwrap().is_empty()
    })
    .await;
    let mut running = 0;
    for id in &ids {
        let (_, t) = sys.get(&format!("/v1/tasks/{id}")).await;
        assert_ne!(t["state"], "completed");
        running += usize::from(runs.lock().unwrap().contains_key(id));
    }
    assert!(running > 0, "no task running at the restart");
    sys.nats.restart();
    gate.send_replace(true);
    for i in 40..50 {
        let (status, t) = sys
            .post(
                "/v1/tasks",
                json!({"to": "echo", "action": "echo", "params": {"i": i}}),
            )
            .await;
        assert!(status == 201, "{status}: {t}");
        ids.push(t["task_id"].as_str().unwrap().to_string());
    }
    for (i, id) in ids.iter().enumerate() {
        let done = sys.wait_terminal(id, Duration::from_secs(60)).await;
        assert_eq!(done["state"], "completed", "{done:#}");
        assert_eq!(done["result"], json!({"i": i}));
    }
    let runs = runs.lock().unwrap();
    assert!(
        ids.iter().all(|id| runs.contains_key(id)),
        "a task never ran"
    );
}

/// Blocks until canceled; says when it started and when it stopped.
struct UntilCanceled {
    started: Arc<AtomicU32>,
    stopped: Arc<AtomicU32>,
}

impl Handler for UntilCanceled {
    fn handle(&self, task: Task) -> BoxFuture<'static, Outcome> {
        self.started.fetch_add(1, Ordering::SeqCst);
        let stopped = Arc::clone(&self.stopped);
        Box::pin(async move {
            task.cancel.cancelled().await;
            stopped.fetch_add(1, Ordering::SeqCst);
            Outcome::Canceled
        })
    }
}

/// Cancel stops a running task's handler on its worker, keeps a queued
/// task's handler from ever starting (the worker comes up after the
/// cancel), is idempotent, and is refused for a completed task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_running_and_queued_tasks() {
    let slow = card("slow", &["wait"]);
    let mut sys = System::start(
        vec![
            slow.clone(),
            card("idle", &["wait"]),
            card("echo", &["echo"]),
        ],
        fast_bus(),
    )
    .await;
    let (started, stopped) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let handler = UntilCanceled {
        started: Arc::clone(&started),
        stopped: Arc::clone(&stopped),
    };
    sys.worker(slow, Arc::new(handler)).await;
    let (_, running) = sys
        .post("/v1/tasks", json!({"to": "slow", "action": "wait"}))
        .await;
    let id = running["task_id"].as_str().unwrap().to_string();
    common::eventually("the handler starts", Duration::from_secs(10), || async {
        started.load(Ordering::SeqCst) == 1
    })
    .await;
    let (status, canceled) = sys
        .post(&format!("/v1/tasks/{id}/cancel"), json!(null))
        .await;
    assert_eq!(
        (status, canceled["state"].as_str()),
        (200, Some("canceled"))
    );
    common::eventually(
        "the running handler is stopped",
        Duration::from_secs(10),
        || async { stopped.load(Ordering::SeqCst) == 1 },
    )
    .await;
    let (status, again) = sys
        .post(&format!("/v1/tasks/{id}/cancel"), json!(null))
        .await;
    assert_eq!((status, again["state"].as_str()), (200, Some("canceled")));

    // Queued for an agent with no worker yet: canceled before it runs.
    let (_, queued) = sys
        .post("/v1/tasks", json!({"to": "idle", "action": "wait"}))
        .await;
    let qid = queued["task_id"].as_str().unwrap().to_string();
    let bus = sys.bus().await;
    common::eventually("the task is queued", Duration::from_secs(10), || async {
        common::queued(&bus).await == 1
    })
    .await;
    let (status, _) = sys
        .post(&format!("/v1/tasks/{qid}/cancel"), json!(null))
        .await;
    assert_eq!(status, 200);
    let idle_started = Arc::new(AtomicU32::new(0));
    let handler = UntilCanceled {
        started: Arc::clone(&idle_started),
        stopped: Arc::new(AtomicU32::new(0)),
    };
    sys.worker(card("idle", &["wait"]), Arc::new(handler)).await;
    // The worker takes the message, finds the cancel mark, and settles it
    // without starting the handler.
    common::eventually(
        "the worker settles the canceled message",
        Duration::from_secs(10),
        || async { common::queued(&bus).await == 0 },
    )
    .await;
    assert_eq!(
        idle_started.load(Ordering::SeqCst),
        0,
        "a canceled task must not run"
    );
    let (_, after) = sys.get(&format!("/v1/tasks/{qid}")).await;
    assert_eq!(after["state"], "canceled");
    assert!(after["result"].is_null(), "{after:#}");

    sys.worker(card("echo", &["echo"]), Arc::new(EchoHandler))
        .await;
    let (_, done) = sys
        .post("/v1/tasks", json!({"to": "echo", "action": "echo"}))
        .await;
    let did = done["task_id"].as_str().unwrap().to_string();
    sys.wait_terminal(&did, Duration::from_secs(10)).await;
    let (status, err) = sys
        .post(&format!("/v1/tasks/{did}/cancel"), json!(null))
        .await;
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (409, Some("not_cancelable"))
    );
}

/// Crashes (panics, so the delivery is never settled) while `failing` is
/// set: a crash loop, as a handler that takes its worker down would cause.
struct CrashWhile(Arc<std::sync::atomic::AtomicBool>);

impl Handler for CrashWhile {
    fn handle(&self, task: Task) -> BoxFuture<'static, Outcome> {
        let failing = self.0.load(Ordering::SeqCst);
        Box::pin(async move {
            assert!(!failing, "the handler crashed");
            Outcome::completed(json!({"attempt": task.attempt}))
        })
    }
}

/// A message whose every delivery crashes exhausts the broker's delivery
/// limit: it is a poison message, copied to the DLQ, removed from the
/// queue, and its task marked failed; `dlq replay` runs it again as a new
/// task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_tasks_go_to_the_dlq_and_can_be_replayed() {
    let mut poison = card("poison", &["work"]);
    poison.delivery = Some(orchestrator::agent::Delivery {
        max_deliver: Some(2),
        ..Default::default()
    });
    let mut sys = System::start(vec![poison.clone()], fast_bus()).await;
    let failing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    sys.worker(poison, Arc::new(CrashWhile(Arc::clone(&failing))))
        .await;
    let (_, task) = sys
        .post(
            "/v1/tasks",
            json!({"to": "poison", "action": "work", "max_attempts": 10, "params": {"n": 1}}),
        )
        .await;
    let id = task["task_id"].as_str().unwrap().to_string();
    let done = sys.wait_terminal(&id, Duration::from_secs(30)).await;
    assert_eq!(done["state"], "failed", "{done:#}");
    assert_eq!(done["error"]["code"], "dead_lettered");
    let (_, dlq) = sys.get("/v1/dlq").await;
    let letters = dlq["dead_letters"].as_array().unwrap();
    assert_eq!(letters.len(), 1, "{dlq:#}");
    assert_eq!(letters[0]["task_id"], id.as_str());
    assert_eq!(letters[0]["code"], "max_deliveries");
    assert_eq!(letters[0]["message"]["payload"]["params"]["n"], 1);
    let bus = sys.bus().await;
    let mut tasks = bus.jetstream().get_stream("ORCH_TASKS").await.unwrap();
    assert_eq!(
        tasks.info().await.unwrap().state.messages,
        0,
        "the poison message is still queued"
    );

    failing.store(false, Ordering::SeqCst);
    let (status, replayed) = sys.post(&format!("/v1/dlq/{id}/replay"), json!(null)).await;
    assert_eq!(status, 201, "{replayed}");
    let new_id = replayed["task_id"].as_str().unwrap().to_string();
    assert_ne!(new_id, id);
    let again = sys.wait_terminal(&new_id, Duration::from_secs(30)).await;
    assert_eq!(again["state"], "completed", "{again:#}");
    let (_, dlq) = sys.get("/v1/dlq").await;
    assert!(dlq["dead_letters"].as_array().unwrap().is_empty());
    let (status, _) = sys.post(&format!("/v1/dlq/{id}/replay"), json!(null)).await;
    assert_eq!(status, 404);
    let (_, audit) = sys.get(&format!("/v1/audit?task_id={new_id}")).await;
    let kinds = common::strings(&audit, "records", "kind");
    assert!(kinds.iter().any(|k| k == "dlq.replay"), "{kinds:?}");
}

/// An envelope published straight onto the subject of an agent nobody
/// knows is moved to the DLQ as `unknown_agent` instead of waiting forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envelopes_for_unknown_agents_are_dead_lettered() {
    let sys = System::start(vec![card("echo", &["echo"])], fast_bus()).await;
    let bus = sys.bus().await;
    let ghost = envelope("ghost", "haunt", json!({}), "boo");
    bus.publish_envelope(&ghost, &tracing::Span::none(), false)
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let (_, dlq) = sys.get("/v1/dlq").await;
        let letters = dlq["dead_letters"].as_array().cloned().unwrap_or_default();
        if let Some(l) = letters.first() {
            assert_eq!(l["code"], "unknown_agent");
            assert_eq!(l["agent"], "ghost");
            assert_eq!(l["task_id"], ghost.header.task_id.to_string());
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the orphan was never dead-lettered"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut tasks = bus.jetstream().get_stream("ORCH_TASKS").await.unwrap();
    assert_eq!(tasks.info().await.unwrap().state.messages, 0);
}

/// Takes a fixed time.
struct Sleepy(Duration);

impl Handler for Sleepy {
    fn handle(&self, _task: Task) -> BoxFuture<'static, Outcome> {
        let d = self.0;
        Box::pin(async move {
            tokio::time::sleep(d).await;
            Outcome::completed(json!("slept"))
        })
    }
}

/// A worker is listed in the live registry while it runs; on shutdown it
/// finishes the task it is running, then leaves the registry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_register_and_finish_running_work_on_shutdown() {
    let sleepy = card("sleepy", &["nap"]);
    let mut sys = System::start(vec![sleepy.clone()], fast_bus()).await;
    let (stop, index) = sys
        .worker_with_stop(sleepy, Arc::new(Sleepy(Duration::from_millis(800))))
        .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, agents) = sys.get("/v1/agents").await;
        if agents["agents"][0]["instances"]
            .as_array()
            .is_some_and(|i| i.len() == 1)
        {
            assert_eq!(agents["agents"][0]["card"]["name"], "sleepy");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the worker never registered: {agents:#}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, task) = sys
        .post("/v1/tasks", json!({"to": "sleepy", "action": "nap"}))
        .await;
    let id = task["task_id"].as_str().unwrap().to_string();
    while sys.get(&format!("/v1/tasks/{id}")).await.1["state"] != "working" {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    sys.join_worker(index).await;
    // The worker is gone: the result it published is all that completes it.
    let done = sys.wait_terminal(&id, Duration::from_secs(10)).await;
    assert_eq!(
        done["state"], "completed",
        "the running task was not finished: {done:#}"
    );
    let (_, agents) = sys.get("/v1/agents").await;
    assert_eq!(
        agents["agents"][0]["instances"].as_array().unwrap().len(),
        0,
        "{agents:#}"
    );
}
