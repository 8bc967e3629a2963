//! Tasks flow end to end: HTTP → store → JetStream → worker → events →
//! store, against a real nats-server.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::system::{System, card, fast_bus};
use orchestrator::worker::EchoHandler;
use serde_json::json;

/// A submitted task runs on a worker and completes; its history and the
/// audit trail show every transition, and the chain verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_is_submitted_run_and_completed() {
    let echo = card("echo", &["echo"]);
    let mut sys = System::start(vec![echo.clone()], fast_bus()).await;
    sys.worker(echo, Arc::new(EchoHandler)).await;
    let (status, task) = sys
        .post(
            "/v1/tasks",
            json!({"to": "echo", "action": "echo", "params": {"hello": "world"}}),
        )
        .await;
    assert_eq!(status, 201, "{task}");
    let id = task["task_id"].as_str().unwrap().to_string();
    let done = sys.wait_terminal(&id, Duration::from_secs(20)).await;
    assert_eq!(done["state"], "completed", "{done:#}");
    assert_eq!(done["result"], json!({"echo": {"hello": "world"}}));
    // The echo handler is quicker than the `working` threshold: only its
    // result is reported.
    let states = common::strings(&done, "history", "to");
    assert_eq!(states, ["submitted", "completed"]);
    let (_, audit) = sys.get(&format!("/v1/audit?task_id={id}")).await;
    let kinds = common::strings(&audit, "records", "kind");
    assert_eq!(kinds, ["task.submitted", "task.transition"]);
    let (_, verify) = sys.get("/v1/audit/verify").await;
    assert_eq!(verify["ok"], true, "{verify}");
    // The worker's report travels in the task's trace.
    let bus = sys.bus().await;
    let events = bus.jetstream().get_stream("ORCH_EVENTS").await.unwrap();
    let m = events.get_raw_message(1).await.unwrap();
    let tp = m.headers.get("traceparent").unwrap().to_string();
    assert_eq!(tp.split('-').nth(1), done["trace_id"].as_str());
}

/// The same idempotency key twice is one task; with other params it is a
/// 409 idempotency_conflict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_keys_dedupe_and_conflict_over_http() {
    let sys = System::start(vec![card("echo", &["echo"])], fast_bus()).await;
    let body =
        json!({"to": "echo", "action": "echo", "params": {"n": 1}, "idempotency_key": "order-1"});
    let (first, a) = sys.post("/v1/tasks", body.clone()).await;
    let (second, b) = sys.post("/v1/tasks", body).await;
    assert_eq!((first, second), (201, 200));
    assert_eq!(a["task_id"], b["task_id"]);
    let other =
        json!({"to": "echo", "action": "echo", "params": {"n": 2}, "idempotency_key": "order-1"});
    let (status, err) = sys.post("/v1/tasks", other).await;
    assert_eq!(status, 409);
    assert_eq!(err["error"]["code"], "idempotency_conflict");
    assert_eq!(err["error"]["field"], "idempotency_key");
}

/// Bad submissions are refused with the field named: unknown field,
/// unknown agent, unknown action, malformed JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_submissions_are_refused_with_the_field_named() {
    let sys = System::start(vec![card("echo", &["echo"])], fast_bus()).await;
    let (status, err) = sys
        .post(
            "/v1/tasks",
            json!({"to": "echo", "action": "echo", "colour": 1}),
        )
        .await;
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (400, Some("unknown_field"))
    );
    assert_eq!(err["error"]["field"], "colour");
    let (status, err) = sys
        .post("/v1/tasks", json!({"to": "nobody", "action": "echo"}))
        .await;
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (404, Some("unknown_agent"))
    );
    let (status, err) = sys
        .post("/v1/tasks", json!({"to": "echo", "action": "fly"}))
        .await;
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (422, Some("unknown_action"))
    );
    let resp = sys
        .client
        .post(format!("{}/v1/tasks", sys.http))
        .body("{\"to\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    let err: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(err["error"]["code"], "malformed_json");
    let (status, _) = sys.get("/v1/tasks/not-a-uuid").await;
    assert_eq!(status, 400);
    let (status, _) = sys
        .get(&format!("/v1/tasks/{}", orchestrator::TaskId::new()))
        .await;
    assert_eq!(status, 404);
}

/// A caller's `traceparent` puts the task in the caller's trace: its id is
/// on the task; without one the task gets a trace of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_join_the_callers_trace() {
    let sys = System::start(vec![card("echo", &["echo"])], fast_bus()).await;
    let traced: serde_json::Value = sys
        .client
        .post(format!("{}/v1/tasks", sys.http))
        .header(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        )
        .json(&json!({"to": "echo", "action": "echo"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(traced["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
    let (_, untraced) = sys
        .post("/v1/tasks", json!({"to": "echo", "action": "echo"}))
        .await;
    let own = untraced["trace_id"].as_str().unwrap();
    assert_eq!(own.len(), 32);
    assert_ne!(own, "4bf92f3577b34da6a3ce929d0e0e4736");
}

/// Listing one request's tasks in one state pages through all of them,
/// however few match among the request's tasks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_by_request_and_state_finds_sparse_matches() {
    let echo = card("echo", &["echo"]);
    let mut sys = System::start(vec![echo.clone(), card("idle", &["echo"])], fast_bus()).await;
    sys.worker(echo, Arc::new(EchoHandler)).await;
    let mut done = Vec::new();
    for i in 0..6 {
        // Four tasks nobody runs, then two that complete.
        let to = if i < 4 { "idle" } else { "echo" };
        let (_, t) = sys
            .post(
                "/v1/tasks",
                json!({"to": to, "action": "echo", "correlation_id": "run-1"}),
            )
            .await;
        if to == "echo" {
            done.push(t["task_id"].as_str().unwrap().to_string());
        }
    }
    for id in &done {
        sys.wait_terminal(id, Duration::from_secs(20)).await;
    }
    let (_, first) = sys
        .get("/v1/tasks?correlation_id=run-1&state=completed&limit=1")
        .await;
    assert_eq!(
        common::strings(&first, "tasks", "task_id"),
        [done[0].clone()]
    );
    let cursor = first["next_cursor"].as_str().expect("a second page");
    let (_, second) = sys
        .get(&format!(
            "/v1/tasks?correlation_id=run-1&state=completed&limit=1&cursor={cursor}"
        ))
        .await;
    assert_eq!(
        common::strings(&second, "tasks", "task_id"),
        [done[1].clone()]
    );
    assert!(second["next_cursor"].is_null());
}

/// Completes after half a second.
struct HalfSecond;

impl orchestrator::worker::Handler for HalfSecond {
    fn handle(
        &self,
        _task: orchestrator::worker::Task,
    ) -> futures::future::BoxFuture<'static, orchestrator::worker::Outcome> {
        Box::pin(async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            orchestrator::worker::Outcome::completed(json!({"slow": true}))
        })
    }
}

/// A submit with `response_mode: sync` answers with the task's end; with
/// `?wait=` it answers when the wait passes if the task is still live; an
/// async submit answers at once; a bad wait is refused before anything is
/// stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_submit_answers_with_the_tasks_end() {
    let slow = card("slow", &["work"]);
    let mut sys = System::start(vec![slow.clone(), card("idle", &["work"])], fast_bus()).await;
    sys.worker(slow, Arc::new(HalfSecond)).await;
    let body = |to: &str, mode: &str| json!({"to": to, "action": "work", "response_mode": mode});

    let (status, task) = sys.post("/v1/tasks", body("slow", "sync")).await;
    assert_eq!(status, 201, "{task:#}");
    assert_eq!(task["state"], "completed", "{task:#}");
    assert_eq!(task["result"], json!({"slow": true}), "{task:#}");

    let (status, task) = sys.post("/v1/tasks", body("slow", "async")).await;
    assert_eq!((status, task["state"].as_str()), (201, Some("submitted")));

    let asked = std::time::Instant::now();
    let (status, task) = sys.post("/v1/tasks?wait=300ms", body("idle", "sync")).await;
    assert_eq!((status, task["state"].as_str()), (201, Some("submitted")));
    assert!(
        asked.elapsed() >= Duration::from_millis(300),
        "{:?}",
        asked.elapsed()
    );

    let (status, err) = sys.post("/v1/tasks?wait=soon", body("idle", "sync")).await;
    assert_eq!(
        (status, err["error"]["field"].as_str()),
        (400, Some("wait"))
    );
    let (_, listed) = sys.get("/v1/tasks?limit=100").await;
    let idle = listed["tasks"]
        .as_array()
        .expect("a page of tasks")
        .iter()
        .filter(|t| t["agent"] == "idle")
        .count();
    assert_eq!(idle, 1, "the refused submit stored nothing: {listed:#}");
}

/// `GET /v1/tasks/{id}?wait=` answers as soon as the task ends, whoever
/// ended it (a worker's result, a cancel), and when the wait passes with
/// the task still live; a bad wait or an unknown task is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_answers_when_the_task_ends() {
    let slow = card("slow", &["work"]);
    let mut sys = System::start(vec![slow.clone(), card("idle", &["work"])], fast_bus()).await;
    sys.worker(slow, Arc::new(HalfSecond)).await;
    let submit = |to: &'static str| {
        let sys = &sys;
        async move {
            let (status, t) = sys
                .post("/v1/tasks", json!({"to": to, "action": "work"}))
                .await;
            assert_eq!(status, 201);
            t["task_id"].as_str().unwrap().to_string()
        }
    };
    // Ended by the worker: answered long before the 20 s wait.
    let id = submit("slow").await;
    let asked = std::time::Instant::now();
    let (status, task) = sys.get(&format!("/v1/tasks/{id}?wait=20s")).await;
    assert_eq!(
        (status, task["state"].as_str()),
        (200, Some("completed")),
        "{task:#}"
    );
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "{:?}",
        asked.elapsed()
    );
    // Ended by a cancel (no worker runs `idle`).
    let id = submit("idle").await;
    let waiting = {
        let (client, url) = (
            sys.client.clone(),
            format!("{}/v1/tasks/{id}?wait=20s", sys.http),
        );
        tokio::spawn(async move { common::get_json(&client, &url).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, _) = sys.post(&format!("/v1/tasks/{id}/cancel"), json!({})).await;
    assert_eq!(status, 200);
    let asked = std::time::Instant::now();
    let task = waiting.await.unwrap();
    assert_eq!(task["state"], "canceled", "{task:#}");
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "{:?}",
        asked.elapsed()
    );
    // Still live when the wait passes: its current state.
    let id = submit("idle").await;
    let (status, task) = sys.get(&format!("/v1/tasks/{id}?wait=300ms")).await;
    assert_eq!((status, task["state"].as_str()), (200, Some("submitted")));
    let (status, body) = sys.get(&format!("/v1/tasks/{id}?wait=soon")).await;
    assert_eq!(
        (status, body["error"]["field"].as_str()),
        (400, Some("wait"))
    );
    let unknown = orchestrator::TaskId::new();
    let (status, _) = sys.get(&format!("/v1/tasks/{unknown}?wait=1s")).await;
    assert_eq!(status, 404);
}
