//! What the console reads beyond the resources' own routes, over real
//! HTTP: `GET /v1/changes` (each caller hears only its own tasks' changes),
//! `GET /v1/tasks?order=newest` with its filters and paging, `GET
//! /v1/overview` (system figures only for a caller who may read every
//! task), `GET /v1/me`, and a task's envelope with its secrets redacted.

use crate::common;

use std::time::Duration;

use common::system::{System, card, fast_bus};
use reqwest::Method;
use serde_json::{Value, json};

/// An open `/v1/changes` stream, read event by event.
struct Changes {
    response: reqwest::Response,
    buffer: String,
}

impl Changes {
    async fn open(http: &str, key: &str) -> Changes {
        let response = reqwest::Client::new()
            .get(format!("{http}/v1/changes"))
            .bearer_auth(key)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert!(
            response.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/event-stream")
        );
        let mut changes = Changes {
            response,
            buffer: String::new(),
        };
        let (event, _) = changes.next().await;
        assert_eq!(event, "ready");
        changes
    }

    /// The next event: its name and data.
    async fn next(&mut self) -> (String, Value) {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut event = String::new();
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(e) = line.strip_prefix("event:") {
                        event = e.trim().to_string();
                    } else if let Some(d) = line.strip_prefix("data:") {
                        data.push_str(d.trim_start());
                    }
                }
                if event.is_empty() {
                    continue; // a keep-alive comment
                }
                return (event, serde_json::from_str(&data).unwrap_or(Value::Null));
            }
            let chunk = tokio::time::timeout(Duration::from_secs(10), self.response.chunk())
                .await
                .expect("an event within 10 s")
                .unwrap()
                .expect("the stream is open");
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}

async fn submit_as(sys: &System, key: &str, params: Value) -> String {
    let (status, task, _) = sys
        .call_as(
            Some(key),
            Method::POST,
            "/v1/tasks",
            Some(json!({"to": "echo", "action": "echo", "params": params})),
        )
        .await;
    assert_eq!(status, 201, "{task:#}");
    task["task_id"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_caller_hears_only_the_changes_it_may_see() {
    let (alice, alice_entry) = common::system::key_for("alice", &[]);
    let (bob, bob_entry) = common::system::key_for("bob", &[]);
    let (carol, carol_entry) = common::system::key_for("carol", &["orch:tasks:read_all"]);
    let sys = System::start_with(
        common::nats::NatsServer::start(),
        vec![card("echo", &["echo"])],
        fast_bus(),
        |c| c.api_auth.api_keys = vec![alice_entry, bob_entry, carol_entry],
    )
    .await;
    let (status, _, _) = sys.call_as(None, Method::GET, "/v1/changes", None).await;
    assert_eq!(status, 401, "the stream needs credentials");
    let mut alices = Changes::open(&sys.http, &alice).await;
    let mut bobs = Changes::open(&sys.http, &bob).await;
    let mut carols = Changes::open(&sys.http, &carol).await;

    let hers = submit_as(&sys, &alice, json!({})).await;
    let (event, batch) = alices.next().await;
    assert_eq!(event, "changes");
    assert_eq!(batch["tasks"][&hers], "submitted", "{batch:#}");
    let (_, batch) = carols.next().await;
    assert_eq!(batch["tasks"][&hers], "submitted", "{batch:#}");
    // Bob's first event is about his own task, made after hers: hers was
    // never sent to him.
    let his = submit_as(&sys, &bob, json!({})).await;
    let (_, batch) = bobs.next().await;
    let named: Vec<&String> = batch["tasks"].as_object().unwrap().keys().collect();
    assert_eq!(named, vec![&his], "{batch:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_list_newest_first_filtered_and_paged() {
    let (alice, alice_entry) = common::system::key_for("alice", &[]);
    let sys = System::start_with(
        common::nats::NatsServer::start(),
        vec![card("echo", &["echo"]), card("other", &["echo"])],
        fast_bus(),
        |c| c.api_auth.api_keys = vec![alice_entry],
    )
    .await;
    // No worker: every task stays submitted, in the order made.
    let mut made = Vec::new();
    for i in 0..5 {
        made.push(sys.submit("echo", "echo", json!({"i": i})).await);
    }
    let other = sys.submit("other", "echo", json!({})).await;
    let alices = submit_as(&sys, &alice, json!({})).await;

    let ids = |page: &Value| -> Vec<String> {
        page["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["task_id"].as_str().unwrap().to_string())
            .collect()
    };
    let (status, page) = sys.get("/v1/tasks?order=newest&limit=2").await;
    assert_eq!(status, 200, "{page:#}");
    assert_eq!(ids(&page), vec![alices.clone(), other.clone()]);
    let cursor = page["next_cursor"].as_str().unwrap();
    let (_, page) = sys
        .get(&format!("/v1/tasks?order=newest&limit=2&cursor={cursor}"))
        .await;
    assert_eq!(ids(&page), vec![made[4].clone(), made[3].clone()]);

    let (_, page) = sys.get("/v1/tasks?order=newest&agent=echo").await;
    let mut expected: Vec<String> = made.iter().rev().cloned().collect();
    expected.insert(0, alices.clone());
    assert_eq!(ids(&page), expected);
    let (_, page) = sys
        .get("/v1/tasks?order=newest&agent=other&state=submitted")
        .await;
    assert_eq!(ids(&page), vec![other.clone()]);
    let (_, page) = sys.get("/v1/tasks?order=newest&since=1h").await;
    assert_eq!(ids(&page).len(), 7);
    let (_, page) = sys
        .get("/v1/tasks?order=newest&since=2999-01-01T00:00:00Z")
        .await;
    assert!(ids(&page).is_empty(), "{page:#}");
    let (_, page) = sys.get("/v1/tasks?order=newest&trigger_id=nothing").await;
    assert!(ids(&page).is_empty(), "{page:#}");

    // A caller who may not read every task gets its own.
    let (_, page, _) = sys
        .call_as(Some(&alice), Method::GET, "/v1/tasks?order=newest", None)
        .await;
    assert_eq!(ids(&page), vec![alices.clone()]);

    // What is asked wrongly says which parameter.
    for (query, field) in [
        ("agent=echo", "order"),
        ("order=sideways", "order"),
        ("order=newest&since=soon", "since"),
    ] {
        let (status, body) = sys.get(&format!("/v1/tasks?{query}")).await;
        assert_eq!(status, 400, "{query}: {body:#}");
        assert_eq!(body["error"]["field"], field, "{query}: {body:#}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_shows_the_system_only_to_who_may_read_it() {
    let (alice, alice_entry) = common::system::key_for("alice", &[]);
    let sys = System::start_with(
        common::nats::NatsServer::start(),
        vec![card("echo", &["echo"])],
        fast_bus(),
        |c| c.api_auth.api_keys = vec![alice_entry],
    )
    .await;
    for _ in 0..3 {
        sys.submit("echo", "echo", json!({"password": "hunter2"}))
            .await;
    }
    let hers = submit_as(&sys, &alice, json!({"password": "hunter2"})).await;

    let (status, all) = sys.get("/v1/overview").await;
    assert_eq!(status, 200, "{all:#}");
    assert_eq!(all["tasks_by_state"]["submitted"], 4, "{all:#}");
    assert!(all["completed_per_second"].is_number(), "{all:#}");
    assert_eq!(all["agents"][0]["name"], "echo");
    // Each task is published just after it is stored: the broker holds
    // all four shortly.
    common::eventually(
        "the four tasks are on the broker",
        Duration::from_secs(10),
        || async { sys.get("/v1/overview").await.1["queue_depth"] == 4 },
    )
    .await;

    let (_, own, _) = sys
        .call_as(Some(&alice), Method::GET, "/v1/overview", None)
        .await;
    assert_eq!(own["tasks_by_state"]["submitted"], 1, "{own:#}");
    assert!(own["completed_per_second"].is_null(), "{own:#}");
    assert!(own["queue_depth"].is_null(), "{own:#}");
    assert!(own["dead_letters"].is_null(), "{own:#}");

    let (_, me, _) = sys.call_as(Some(&alice), Method::GET, "/v1/me", None).await;
    assert_eq!(me, json!({"principal": "alice", "scopes": []}));

    // A task's own view carries its envelope, secrets redacted and no
    // token; a list does not.
    let (_, task, _) = sys
        .call_as(
            Some(&alice),
            Method::GET,
            &format!("/v1/tasks/{hers}"),
            None,
        )
        .await;
    let envelope = &task["envelope"];
    assert_eq!(envelope["payload"]["params"]["password"], "[redacted]");
    assert!(envelope["header"]["token"].is_null(), "{envelope:#}");
    assert!(!task.to_string().contains("hunter2"));
    let (_, page) = sys.get("/v1/tasks").await;
    assert!(page["tasks"][0].get("envelope").is_none());
}
