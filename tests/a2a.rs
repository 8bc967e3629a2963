//! The A2A face over real HTTP, on a real broker with in-process workers:
//! the card, every operation on JSON-RPC (1.0 and 0.3) and HTTP+JSON,
//! errors with the spec's codes, idempotent sends, and streams that
//! resume from `Last-Event-ID`, across an orchestrator restart too.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::a2a::{
    error_code, kind, message, open_stream, read_events, reason, rpc, rpc_as, says, sdk_checks,
};
use common::system::{System, card, client_with, fast_bus, key_for};
use futures::future::BoxFuture;
use orchestrator::agent::AgentCard;
use orchestrator::artifact::{Artifact, Part};
use orchestrator::worker::{Handler, Outcome, Reporter, Task};
use serde_json::{Value, json};

/// Completes with the params echoed; `{"fail": ...}` fails for good;
/// `{"hold": ...}` waits for the gate first; `{"progress": ...}` reports a
/// message and an artifact in two chunks, then completes with a message.
struct Scripted {
    gate: tokio::sync::watch::Receiver<bool>,
}

impl Handler for Scripted {
    fn handle(&self, task: Task) -> BoxFuture<'static, Outcome> {
        let params = task.envelope.payload.params.clone();
        let mut gate = self.gate.clone();
        Box::pin(async move {
            if let Some(why) = params.get("fail").and_then(Value::as_str) {
                return Outcome::permanent("refused", why.to_string());
            }
            if params.contains_key("hold") {
                let _ = gate.wait_for(|open| *open).await;
            }
            if params.contains_key("progress") {
                return progress(&task.progress);
            }
            if params.contains_key("ask") {
                return match &task.envelope.payload.input {
                    None => Outcome::InputRequired("which account?".into()),
                    Some(input) => Outcome::completed(json!({"answered": input})),
                };
            }
            if let Some(text) = params.get("text").and_then(Value::as_str) {
                return Outcome::completed(json!(format!("echo: {text}")));
            }
            Outcome::completed(json!({ "echo": params }))
        })
    }
}

fn progress(reporter: &Reporter) -> Outcome {
    assert!(reporter.message("step 1"));
    assert!(reporter.artifact(Artifact::new("doc", Part::text("chunk-1 "))));
    assert!(reporter.artifact(Artifact {
        append: true,
        last_chunk: true,
        ..Artifact::new("doc", Part::text("chunk-2"))
    }));
    Outcome::Completed {
        result: json!("done"),
        artifacts: Vec::new(),
        message: Some("all done".into()),
    }
}

fn scripted_card() -> AgentCard {
    serde_json::from_value(json!({
        "name": "helper", "version": "1.0.0", "description": "answers",
        "skills": [
            {"id": "answer", "name": "Answer", "description": "answers a question",
             "tags": ["question"], "triggers": ["please answer"],
             "inputModes": ["application/json", "text/plain"], "outputModes": ["application/json"]},
            {"id": "files", "description": "takes only images", "inputModes": ["image/png"]},
            {"id": "secret", "description": "needs a scope", "scopes": ["Vault.Read"]}
        ],
        "invocation": {"type": "builtin", "handler": "echo"}
    }))
    .unwrap()
}

/// A system with the scripted agent's worker; the gate it holds tasks at.
async fn system() -> (System, tokio::sync::watch::Sender<bool>) {
    system_with(|_, _| {}).await
}

async fn system_with(
    tweak: impl FnOnce(
        &mut orchestrator::service::ServiceSettings,
        &mut orchestrator::http::HttpSettings,
    ),
) -> (System, tokio::sync::watch::Sender<bool>) {
    let (open, gate) = tokio::sync::watch::channel(false);
    let cards = vec![scripted_card(), card("other", &["other"])];
    let nats = common::nats::NatsServer::start();
    let mut sys = System::start_with_settings(nats, cards, fast_bus(), tweak).await;
    sys.worker(scripted_card(), Arc::new(Scripted { gate }))
        .await;
    (sys, open)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_card_says_where_and_how_and_lists_the_skills() {
    let (sys, _gate) = system().await;
    let anonymous = reqwest::Client::new();
    let url = format!("{}/.well-known/agent-card.json", sys.http);
    let resp = anonymous.get(&url).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let etag = resp.headers()["etag"].to_str().unwrap().to_string();
    assert!(resp.headers().contains_key("last-modified"));
    assert!(
        resp.headers()["cache-control"]
            .to_str()
            .unwrap()
            .contains("max-age")
    );
    let card: Value = resp.json().await.unwrap();
    // The older path (A2A before 0.3) serves the same card, also without
    // credentials.
    let older = anonymous
        .get(format!("{}/.well-known/agent.json", sys.http))
        .send()
        .await
        .unwrap();
    assert_eq!(older.status(), 200);
    assert_eq!(older.json::<Value>().await.unwrap(), card);
    for field in [
        "name",
        "description",
        "version",
        "supportedInterfaces",
        "capabilities",
        "defaultInputModes",
        "defaultOutputModes",
        "skills",
    ] {
        assert!(card.get(field).is_some(), "no {field}: {card:#}");
    }
    let interfaces = card["supportedInterfaces"].as_array().unwrap();
    let has = |binding: &str, version: &str, path: &str| {
        interfaces.iter().any(|i| {
            i["protocolBinding"] == binding
                && i["protocolVersion"] == version
                && i["url"] == format!("{}{path}", sys.http)
        })
    };
    assert!(has("JSONRPC", "1.0", "/a2a"), "{card:#}");
    assert!(has("HTTP+JSON", "1.0", "/a2a/rest"), "{card:#}");
    assert!(has("JSONRPC", "0.3", "/a2a"), "{card:#}");
    assert_eq!(card["url"], format!("{}/a2a", sys.http));
    assert_eq!(card["preferredTransport"], "JSONRPC");
    assert_eq!(card["capabilities"]["streaming"], true);
    assert_eq!(card["capabilities"]["extendedAgentCard"], true);
    assert!(card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"].is_object());
    let ids: Vec<&str> = card["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&"helper/answer")
            && ids.contains(&"helper/secret")
            && ids.contains(&"other/other"),
        "{ids:?}"
    );
    let answer = card["skills"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "helper/answer")
        .unwrap();
    assert_eq!(answer["tags"], json!(["question"]));
    assert_eq!(
        answer["inputModes"],
        json!(["application/json", "text/plain"])
    );

    // A revalidation with the validator is answered 304.
    let again = anonymous
        .get(&url)
        .header("If-None-Match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 304);

    // The extended card lists every skill for the administrator.
    let extended = rpc(&sys, "GetExtendedAgentCard", json!({})).await;
    let all: Vec<&str> = extended["result"]["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert!(
        all.contains(&"helper/secret"),
        "the administrator holds every scope: {all:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_is_a_task_of_ours_through_every_operation() {
    let (sys, gate) = system().await;
    // Blocking send: the answer is the completed task, its result an artifact.
    let sent = rpc(
        &sys,
        "SendMessage",
        json!({"message": message("m-1",
        json!([{"data": {"q": 1}}]), json!({"skillId": "helper/answer"}))}),
    )
    .await;
    let task = &sent["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{sent:#}");
    assert_eq!(
        task["artifacts"][0]["parts"][0]["data"],
        json!({"echo": {"q": 1}})
    );
    let id = task["id"].as_str().unwrap().to_string();
    let context = task["contextId"].as_str().unwrap().to_string();

    // The same record through REST.
    let (status, ours) = sys.get(&format!("/v1/tasks/{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(ours["correlation_id"], context.as_str());
    assert_eq!(ours["agent"], "helper");
    assert_eq!(ours["action"], "answer");

    // GetTask, with its history cut.
    let got = rpc(&sys, "GetTask", json!({"id": id, "historyLength": 1})).await;
    assert_eq!(got["result"]["id"], id.as_str());
    assert!(got["result"]["history"].as_array().unwrap().len() <= 1);
    let none = rpc(&sys, "GetTask", json!({"id": id, "historyLength": 0})).await;
    assert!(none["result"].get("history").is_none(), "{none:#}");
    // The proto's own field names are taken too (ProtoJSON).
    let snake = rpc(&sys, "GetTask", json!({"id": id, "history_length": 0})).await;
    assert!(snake["result"].get("history").is_none(), "{snake:#}");

    // A text part routed by the skill's trigger phrase fills `text`.
    let routed = rpc(
        &sys,
        "SendMessage",
        json!({"message": {"messageId": "m-2", "role": "ROLE_USER",
        "contextId": context, "parts": [{"text": "please answer this"}]}}),
    )
    .await;
    let routed = &routed["result"]["task"];
    assert_eq!(
        routed["artifacts"][0]["parts"][0]["text"], "echo: please answer this",
        "{routed:#}"
    );
    assert_eq!(
        routed["contextId"],
        context.as_str(),
        "the message's context is the task's"
    );

    // Non-blocking: answered at once, still running; canceled; canceled again.
    let held = rpc(
        &sys,
        "SendMessage",
        json!({"message": message("m-3",
        json!([{"data": {"hold": true}}]), json!({"skillId": "helper/answer"})),
        "configuration": {"returnImmediately": true}}),
    )
    .await;
    let held_id = held["result"]["task"]["id"].as_str().unwrap().to_string();
    assert!(
        matches!(
            held["result"]["task"]["status"]["state"].as_str(),
            Some("TASK_STATE_SUBMITTED" | "TASK_STATE_WORKING")
        ),
        "{held:#}"
    );
    let canceled = rpc(&sys, "CancelTask", json!({"id": held_id})).await;
    assert_eq!(
        canceled["result"]["status"]["state"], "TASK_STATE_CANCELED",
        "{canceled:#}"
    );
    let again = rpc(&sys, "CancelTask", json!({"id": held_id})).await;
    assert_eq!(error_code(&again), -32002);
    assert_eq!(reason(&again), "TASK_NOT_CANCELABLE");
    gate.send_replace(true);

    // ListTasks by context: newest first, artifacts only when asked.
    let listed = rpc(&sys, "ListTasks", json!({"contextId": context})).await;
    let tasks = listed["result"]["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 2, "{listed:#}");
    assert_eq!(listed["result"]["totalSize"], 2);
    assert_eq!(listed["result"]["nextPageToken"], "");
    assert!(tasks.iter().all(|t| t.get("artifacts").is_none()));
    assert_eq!(tasks[0]["id"], routed["id"], "newest first");
    let stamps: Vec<&str> = tasks
        .iter()
        .map(|t| t["status"]["timestamp"].as_str().unwrap())
        .collect();
    assert!(stamps[0] >= stamps[1], "{stamps:?}");
    let paged = rpc(
        &sys,
        "ListTasks",
        json!({"contextId": context, "pageSize": 1, "includeArtifacts": true}),
    )
    .await;
    assert_eq!(paged["result"]["tasks"].as_array().unwrap().len(), 1);
    assert!(paged["result"]["tasks"][0]["artifacts"].is_array());
    let token = paged["result"]["nextPageToken"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!token.is_empty());
    let next = rpc(
        &sys,
        "ListTasks",
        json!({"contextId": context, "pageSize": 1, "pageToken": token}),
    )
    .await;
    assert_eq!(next["result"]["tasks"][0]["id"], id.as_str());
    assert_eq!(next["result"]["nextPageToken"], "");
    let failed_filter = rpc(&sys, "ListTasks", json!({"status": "TASK_STATE_CANCELED"})).await;
    assert_eq!(failed_filter["result"]["tasks"][0]["id"], held_id.as_str());

    // A message to an ended task is refused; unknown tasks are not found.
    let ended = rpc(
        &sys,
        "SendMessage",
        json!({"message": {"messageId": "m-4", "role": "ROLE_USER",
        "taskId": id, "parts": [{"text": "more"}]}}),
    )
    .await;
    assert_eq!(error_code(&ended), -32004, "{ended:#}");
    let unknown = rpc(&sys, "GetTask", json!({"id": "not-a-task"})).await;
    assert_eq!(error_code(&unknown), -32001);
    let unknown = rpc(
        &sys,
        "CancelTask",
        json!({"id": uuid::Uuid::now_v7().to_string()}),
    )
    .await;
    assert_eq!(error_code(&unknown), -32001);

    // A failure's words are the status message.
    let failed = rpc(
        &sys,
        "SendMessage",
        json!({"message": message("m-5",
        json!([{"data": {"fail": "no such thing"}}]), json!({"skillId": "answer"}))}),
    )
    .await;
    let status = &failed["result"]["task"]["status"];
    assert_eq!(status["state"], "TASK_STATE_FAILED", "{failed:#}");
    assert!(
        status["message"]["parts"][0]["text"]
            .as_str()
            .unwrap()
            .contains("no such thing"),
        "{status:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_message_is_the_same_task_for_its_sender_only() {
    let (sys, _gate) = system().await;
    let params = |data: Value| {
        json!({"message": message("dup-1", json!([{"data": data}]),
        json!({"skillId": "helper/answer"}))})
    };
    let first = rpc(&sys, "SendMessage", params(json!({"n": 1}))).await;
    let again = rpc(&sys, "SendMessage", params(json!({"n": 1}))).await;
    assert_eq!(first["result"]["task"]["id"], again["result"]["task"]["id"]);
    let (_, listed) = sys.get("/v1/tasks").await;
    assert_eq!(
        listed["tasks"].as_array().unwrap().len(),
        1,
        "a resend made no second task"
    );

    let changed = rpc(&sys, "SendMessage", params(json!({"n": 2}))).await;
    assert_eq!(reason(&changed), "IDEMPOTENCY_CONFLICT", "{changed:#}");
    assert!(says(&changed, "different"), "{changed:#}");

    // Another principal's same message id is its own task.
    let (key, entry) = key_for("bob", &["orch:tasks:submit"]);
    let mut sys = sys;
    sys.service.api_auth.api_keys.push(entry);
    sys.stop_orchestrator().await;
    sys.start_orchestrator(vec![scripted_card(), card("other", &["other"])])
        .await;
    let bob = client_with(Some(&key));
    let theirs = rpc_as(
        &sys,
        &bob,
        Some("1.0"),
        "SendMessage",
        params(json!({"n": 1})),
    )
    .await;
    assert_ne!(
        theirs["result"]["task"]["id"], first["result"]["task"]["id"],
        "{theirs:#}"
    );
    // A skill whose scope bob lacks is refused before anything is stored.
    let denied = rpc_as(
        &sys,
        &bob,
        Some("1.0"),
        "SendMessage",
        json!({"message": message("dup-2",
        json!([{"data": {}}]), json!({"skillId": "helper/secret"}))}),
    )
    .await;
    assert_eq!(reason(&denied), "PERMISSION_DENIED", "{denied:#}");
    assert!(says(&denied, "Vault.Read"), "{denied:#}");
    // And bob cannot see the administrator's task.
    let peek = rpc_as(
        &sys,
        &bob,
        Some("1.0"),
        "GetTask",
        json!({"id": first["result"]["task"]["id"]}),
    )
    .await;
    assert_eq!(error_code(&peek), -32001);
    let list = rpc_as(&sys, &bob, Some("1.0"), "ListTasks", json!({})).await;
    assert_eq!(list["result"]["totalSize"], 1, "{list:#}");
    // The extended card shows bob only what his scopes allow.
    let card = rpc_as(&sys, &bob, Some("1.0"), "GetExtendedAgentCard", json!({})).await;
    let ids: Vec<&str> = card["result"]["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert!(
        !ids.contains(&"helper/secret") && ids.contains(&"helper/answer"),
        "{ids:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_the_specs_codes_and_nothing_is_stored() {
    let (sys, _gate) = system_with(|c, _| c.max_envelope_bytes = 4096).await;
    let raw = |body: String, version: Option<&'static str>| {
        let mut req = sys
            .client
            .post(format!("{}/a2a", sys.http))
            .header("content-type", "application/json")
            .body(body);
        if let Some(v) = version {
            req = req.header("A2A-Version", v);
        }
        async move {
            let resp = req.send().await.unwrap();
            (
                resp.status().as_u16(),
                resp.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };
    let (_, parse) = raw("{not json".into(), Some("1.0")).await;
    assert_eq!(error_code(&parse), -32700);
    let (_, invalid) = raw(
        json!({"jsonrpc": "1.0", "id": 1, "method": "GetTask"}).to_string(),
        Some("1.0"),
    )
    .await;
    assert_eq!(error_code(&invalid), -32600);
    assert_eq!(invalid["id"], 1);
    let (_, method) = raw(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {}}).to_string(),
        Some("1.0"),
    )
    .await;
    assert_eq!(error_code(&method), -32601, "0.3's names are not 1.0's");
    let (_, params) = raw(
        json!({"jsonrpc": "2.0", "id": 3, "method": "SendMessage",
        "params": {"message": {"messageId": "x", "role": "ROLE_USER", "parts": "nope"}}})
        .to_string(),
        Some("1.0"),
    )
    .await;
    assert_eq!(error_code(&params), -32602);
    assert!(
        params["error"]["data"][0]["metadata"]["field"]
            .as_str()
            .unwrap()
            .contains("parts"),
        "{params:#}"
    );
    let (_, version) = raw(
        json!({"jsonrpc": "2.0", "id": 4, "method": "GetTask", "params": {"id": "x"}}).to_string(),
        Some("2.0"),
    )
    .await;
    assert_eq!(error_code(&version), -32009);
    assert_eq!(reason(&version), "VERSION_NOT_SUPPORTED");
    assert_eq!(version["error"]["data"][0]["domain"], "a2a-protocol.org");
    let (_, slash) = {
        let resp = sys
            .client
            .post(format!("{}/a2a/", sys.http))
            .header("A2A-Version", "1.0")
            .json(&json!({"jsonrpc": "2.0", "id": 6, "method": "GetTask", "params": {"id": "x"}}))
            .send()
            .await
            .unwrap();
        (
            resp.status(),
            resp.json::<Value>().await.unwrap_or(Value::Null),
        )
    };
    assert_eq!(error_code(&slash), -32001, "`/a2a/` is `/a2a`");
    let patch = rpc_as(
        &sys,
        &sys.client,
        Some("1.0.1"),
        "GetTask",
        json!({"id": "x"}),
    )
    .await;
    assert_eq!(
        error_code(&patch),
        -32001,
        "a patch number does not change the version"
    );
    let big = "x".repeat(8192);
    let (status, large) = raw(
        json!({"jsonrpc": "2.0", "id": 5, "method": "SendMessage", "params": {"message":
        message("big", json!([{"text": big}]), json!({"skillId": "helper/answer"}))}})
        .to_string(),
        Some("1.0"),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(reason(&large), "REQUEST_TOO_LARGE", "{large:#}");
    let media = rpc(
        &sys,
        "SendMessage",
        json!({"message": message("m", json!([{"text": "hi"}]),
        json!({"skillId": "helper/files"}))}),
    )
    .await;
    assert_eq!(error_code(&media), -32005);
    let no_skill = rpc(
        &sys,
        "SendMessage",
        json!({"message": message("m2", json!([{"text": "nothing matches"}]), json!({}))}),
    )
    .await;
    assert_eq!(error_code(&no_skill), -32602);
    assert!(says(&no_skill, "no a2a.default_skill"), "{no_skill:#}");
    let resp = reqwest::Client::new()
        .post(format!("{}/a2a", sys.http))
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401, "an unauthenticated call");
    let push = rpc(
        &sys,
        "CreateTaskPushNotificationConfig",
        json!({"taskId": "x", "url": "https://x"}),
    )
    .await;
    assert_eq!(error_code(&push), -32001, "a task that is not there");
    let (_, listed) = sys.get("/v1/tasks").await;
    assert_eq!(
        listed["tasks"],
        json!([]),
        "no refused request stored anything"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_0_3_and_the_rest_binding_serve_the_same_tasks() {
    let (sys, _gate) = system().await;
    // 0.3: no header, 0.3's names and spellings.
    let old = rpc_as(
        &sys,
        &sys.client,
        None,
        "message/send",
        json!({"message": {"kind": "message",
        "messageId": "old-1", "role": "user", "parts": [{"kind": "data", "data": {"v": 3}}],
        "metadata": {"skillId": "helper/answer"}}, "configuration": {"blocking": true}}),
    )
    .await;
    let task = &old["result"];
    assert_eq!(task["kind"], "task", "{old:#}");
    assert_eq!(task["status"]["state"], "completed");
    assert_eq!(task["artifacts"][0]["parts"][0]["kind"], "data");
    let id = task["id"].as_str().unwrap().to_string();
    let got = rpc_as(&sys, &sys.client, None, "tasks/get", json!({"id": id})).await;
    assert_eq!(got["result"]["status"]["state"], "completed");
    let cancel = rpc_as(&sys, &sys.client, None, "tasks/cancel", json!({"id": id})).await;
    assert_eq!(error_code(&cancel), -32002);
    let list = rpc_as(
        &sys,
        &sys.client,
        None,
        "tasks/list",
        json!({"status": "completed"}),
    )
    .await;
    assert_eq!(list["result"]["tasks"][0]["kind"], "task", "{list:#}");

    // HTTP+JSON, 1.0.
    let rest = |method: reqwest::Method, path: &str| {
        sys.client
            .request(method, format!("{}/a2a/rest{path}", sys.http))
            .header("A2A-Version", "1.0")
    };
    let resp = rest(reqwest::Method::POST, "/message:send")
        .json(&json!({"message": message("rest-1",
        json!([{"data": {"r": 1}}]), json!({"skillId": "helper/answer"}))}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let sent: Value = resp.json().await.unwrap();
    let rid = sent["task"]["id"].as_str().unwrap().to_string();
    assert_eq!(sent["task"]["status"]["state"], "TASK_STATE_COMPLETED");
    let got: Value = rest(reqwest::Method::GET, &format!("/tasks/{rid}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(got["id"], rid.as_str());
    let listed: Value = rest(
        reqwest::Method::GET,
        "/tasks?pageSize=1&includeArtifacts=true",
    )
    .send()
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(listed["tasks"].as_array().unwrap().len(), 1, "{listed:#}");
    let resp = rest(reqwest::Method::POST, &format!("/tasks/{rid}:cancel"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 409);
    let status: Value = resp.json().await.unwrap();
    assert_eq!(status["error"]["code"], 409);
    assert_eq!(
        status["error"]["details"][0]["@type"],
        "type.googleapis.com/google.rpc.ErrorInfo"
    );
    assert_eq!(
        status["error"]["details"][0]["reason"],
        "TASK_NOT_CANCELABLE"
    );
    let resp = rest(reqwest::Method::GET, "/tasks/nope")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    let resp = rest(reqwest::Method::GET, "/tasks?pageSize=500")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
}

/// Checks that the events a stream sent before it was cut (`seen`, from
/// the snapshot on) and after it resumed (`rest`) are every event of the
/// task exactly once: ids rising without a gap after the snapshot, one
/// artifact, one completion, and the completion last. Returns the ids.
fn every_event_once(seen: &[(u64, Value)], rest: &[(u64, Value)]) -> Vec<u64> {
    let ids: Vec<u64> = seen.iter().chain(rest).map(|(i, _)| *i).collect();
    let kinds: Vec<String> = seen.iter().chain(rest).map(|(_, e)| kind(e)).collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "ids rise, none repeats: {ids:?} {kinds:?}"
    );
    assert_eq!(
        kinds.iter().filter(|k| *k == "completed").count(),
        1,
        "{kinds:?}"
    );
    assert_eq!(
        kinds.iter().filter(|k| *k == "artifact").count(),
        1,
        "{kinds:?}"
    );
    assert_eq!(
        kinds.last().unwrap(),
        "completed",
        "the stream closes at the end: {kinds:?}"
    );
    let after: Vec<u64> = ids[1..].to_vec();
    let expected: Vec<u64> = (ids[0] + 1..=*ids.last().unwrap()).collect();
    assert_eq!(
        after, expected,
        "every event after the snapshot, once: {kinds:?}"
    );
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_and_resumed_sees_every_event_once_across_a_restart() {
    let (mut sys, gate) = system().await;
    let send = json!({"message": message("stream-1", json!([{"data": {"hold": true}}]),
        json!({"skillId": "helper/answer"}))});
    let mut first = open_stream(&sys, "SendStreamingMessage", send.clone(), None).await;
    let got = read_events(&mut first, 1).await;
    assert_eq!(kind(&got[0].1), "task", "the snapshot comes first");
    let task_id = got[0].1["result"]["task"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    // A second subscriber, from the start.
    let mut other = open_stream(&sys, "SubscribeToTask", json!({"id": task_id}), None).await;
    let mut seen = got.clone();
    // Wait for `working`, then cut the stream.
    if seen.iter().all(|(_, e)| {
        kind(e) != "working" && e["result"]["task"]["status"]["state"] != "TASK_STATE_WORKING"
    }) {
        // The snapshot was `submitted`: `working` follows.
        seen.extend(read_events(&mut first, 1).await);
    }
    drop(first);
    let last = seen.last().unwrap().0;

    // The orchestrator restarts; the task ends while nobody listens.
    sys.stop_orchestrator().await;
    sys.start_orchestrator(vec![scripted_card(), card("other", &["other"])])
        .await;
    gate.send_replace(true);
    sys.wait_terminal(&task_id, Duration::from_secs(20)).await;

    // Resumed by the same message (a reconnect) after the last id seen.
    let mut resumed = open_stream(&sys, "SendStreamingMessage", send, Some(last)).await;
    let rest = read_events(&mut resumed, 100).await;
    assert!(!rest.is_empty());
    let ids = every_event_once(&seen, &rest);

    // The other subscriber was cut by the restart; it resumes by subscribing.
    let theirs = read_events(&mut other, 100).await;
    let their_last = theirs.last().map_or(0, |(i, _)| *i);
    let mut back = open_stream(
        &sys,
        "SubscribeToTask",
        json!({"id": task_id}),
        Some(their_last),
    )
    .await;
    let tail = read_events(&mut back, 100).await;
    let mut all: Vec<u64> = theirs.iter().map(|(i, _)| *i).collect();
    all.extend(tail.iter().map(|(i, _)| *i));
    assert!(all.windows(2).all(|w| w[0] < w[1]), "{all:?}");
    assert_eq!(all.last(), ids.last(), "both end at the same last event");

    // Subscribing to an ended task (without a resume) is refused.
    let resp = sys.client.post(format!("{}/a2a", sys.http)).header("A2A-Version", "1.0")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": task_id}}))
        .send().await.unwrap();
    let body: Value = resp.json().await.unwrap();
    assert_eq!(error_code(&body), -32004);
}

/// The official `a2a-sdk` client (1.x, from PyPI) resolves the card and
/// makes every core call, over 1.0 and over 0.3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_client_does_every_core_call() {
    let (sys, gate) = system().await;
    let key = sys.admin_key.clone().unwrap();
    let names = sdk_checks("sdk_client.py", &sys, &key).await;
    drop(gate);
    for expected in [
        "card resolved",
        "blocking send completes",
        "streaming send ends completed",
        "get",
        "list by context",
        "cancel",
        "subscribe to a running task sees its end",
        "cancel again is -32002",
        "unknown task is -32001",
        "0.3 send completes",
        "0.3 get",
        "0.3 cancel of an ended task is -32002",
        "0.3 unknown task is -32001",
        "0.3 streaming send",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "no check `{expected}`: {names:?}"
        );
    }
}

/// The orchestrator is SIGKILLed while a client streams a task; after the
/// restart the client resumes with `Last-Event-ID` and sees every event
/// exactly once, read from what the killed process had stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_resumes_after_the_orchestrator_is_killed() {
    use common::process::{admin_client, free_port, orchestrator, run_args, wait_ready};
    let nats = common::nats::NatsServer::start();
    let agents = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(agents.path().join("helper")).unwrap();
    std::fs::write(
        agents.path().join("helper/agent.json"),
        serde_json::to_string(&scripted_card()).unwrap(),
    )
    .unwrap();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let args = run_args(agents.path(), data.path(), port, &[]);
    let log = |name: &str| data.path().join(name);
    let mut first = orchestrator(&args, &nats.url(), &log("first.log"));
    wait_ready(&format!("{base}/readyz")).await;
    let (open, gate) = tokio::sync::watch::channel(false);
    let bus = orchestrator::bus::Bus::connect_now(&nats.url(), fast_bus())
        .await
        .unwrap();
    let verifier = orchestrator::task_token::TokenSettings::default()
        .verifier(data.path(), "helper")
        .unwrap()
        .map(Arc::new);
    let config = orchestrator::worker::WorkerSettings {
        verifier,
        ..Default::default()
    };
    let worker = orchestrator::worker::Worker::start(
        bus,
        scripted_card(),
        ".".into(),
        Arc::new(Scripted { gate }),
        config,
    )
    .await
    .unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let worker = tokio::spawn(worker.run(stop.clone()));

    let client = admin_client(data.path());
    let stream = |last: Option<u64>| {
        let mut req = client.post(format!("{base}/a2a")).header("A2A-Version", "1.0").json(&json!({
            "jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
            "params": {"message": message("killed-1", json!([{"data": {"hold": true}}]), json!({"skillId": "helper/answer"}))}}));
        if let Some(l) = last {
            req = req.header("Last-Event-ID", l.to_string());
        }
        req.send()
    };
    let mut resp = stream(None).await.unwrap();
    let mut seen = read_events(&mut resp, 2).await;
    assert_eq!(kind(&seen[0].1), "task");
    if kind(&seen[1].1) != "working" {
        seen.extend(read_events(&mut resp, 1).await);
    }
    let task_id = seen[0].1["result"]["task"]["id"]
        .as_str()
        .unwrap()
        .to_string();

    first.kill();
    drop(resp);
    let mut second = orchestrator(&args, &nats.url(), &log("second.log"));
    wait_ready(&format!("{base}/readyz")).await;
    open.send_replace(true);

    let last = seen.last().unwrap().0;
    let mut resumed = stream(Some(last)).await.unwrap();
    let rest = read_events(&mut resumed, 100).await;
    every_event_once(&seen, &rest);
    let got: Value = client
        .get(format!("{base}/v1/tasks/{task_id}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(got["state"], "completed");
    stop.cancel();
    let _ = worker.await;
    second.kill();
}

/// A handler's progress (a message, an artifact in two chunks) reaches an
/// A2A stream in order, before the result and the completion with its
/// message; GetTask shows the chunks put together, and REST the reports
/// in the task's history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_reaches_streams_and_rest_in_order() {
    let (sys, gate) = system().await;
    let params = json!({"message": message("m-progress",
        json!([{"data": {"progress": true, "hold": true}}]), json!({"skillId": "helper/answer"}))});
    let mut resp = open_stream(&sys, "SendStreamingMessage", params, None).await;
    let first = read_events(&mut resp, 1).await;
    let id = first[0].1["result"]["task"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    gate.send(true).unwrap();
    let events = read_events(&mut resp, 50).await;
    let tail: Vec<Value> = events
        .iter()
        .rev()
        .take(5)
        .rev()
        .map(|(_, e)| e["result"].clone())
        .collect();
    assert_eq!(
        tail.iter()
            .map(|e| kind(&json!({"result": e})))
            .collect::<Vec<_>>(),
        ["working", "artifact", "artifact", "artifact", "completed"],
        "{events:#?}"
    );
    let text = |e: &Value| e["statusUpdate"]["status"]["message"]["parts"][0]["text"].clone();
    assert_eq!(text(&tail[0]), "step 1");
    let chunk = |e: &Value| e["artifactUpdate"].clone();
    assert_eq!(chunk(&tail[1])["artifact"]["artifactId"], "doc");
    assert_eq!(chunk(&tail[1])["artifact"]["parts"][0]["text"], "chunk-1 ");
    assert!(chunk(&tail[1]).get("append").is_none());
    assert_eq!(chunk(&tail[2])["artifact"]["parts"][0]["text"], "chunk-2");
    assert_eq!(chunk(&tail[2])["append"], true);
    assert_eq!(chunk(&tail[2])["lastChunk"], true);
    assert_eq!(chunk(&tail[3])["artifact"]["artifactId"], "result");
    assert_eq!(text(&tail[4]), "all done");

    let got = rpc(&sys, "GetTask", json!({"id": id})).await;
    let artifacts = &got["result"]["artifacts"];
    assert_eq!(artifacts[0]["artifactId"], "doc", "{got:#}");
    assert_eq!(
        artifacts[0]["parts"],
        json!([{"text": "chunk-1 "}, {"text": "chunk-2"}])
    );
    assert_eq!(artifacts[1]["parts"][0]["text"], "done");
    let said: Vec<&str> = got["result"]["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["parts"][0]["text"].as_str())
        .collect();
    assert_eq!(said, ["step 1", "all done"]);

    let (status, ours) = sys.get(&format!("/v1/tasks/{id}")).await;
    assert_eq!(status, 200);
    let reports: Vec<&Value> = ours["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|h| h.get("progress"))
        .collect();
    assert_eq!(reports.len(), 3, "{ours:#}");
    assert_eq!(reports[0]["message"], "step 1");
    assert_eq!(reports[0]["seq"], 1);
    assert_eq!(reports[2]["artifact"]["append"], true);
    assert_eq!(reports[2]["seq"], 3);
}

/// A task that asks for input waits in `input-required`; a message naming
/// it answers (its parts the input of the next attempt, audited with the
/// caller); a subscription stays open across the wait and ends at the
/// completion; the same answer again is the same task; another message to
/// a task that no longer waits is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_answers_a_task_that_waits_for_input() {
    let (sys, _gate) = system().await;
    let asked = rpc(
        &sys,
        "SendMessage",
        json!({"message": message("m-ask", json!([{"data": {"ask": true}}]), json!({"skillId": "helper/answer"}))}),
    )
    .await;
    let task = &asked["result"]["task"];
    assert_eq!(
        task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{asked:#}"
    );
    assert_eq!(
        task["status"]["message"]["parts"][0]["text"],
        "which account?"
    );
    let id = task["id"].as_str().unwrap().to_string();
    let context = task["contextId"].as_str().unwrap().to_string();

    let mut sub = open_stream(&sys, "SubscribeToTask", json!({"id": id}), None).await;
    let snapshot = read_events(&mut sub, 1).await;
    assert_eq!(kind(&snapshot[0].1), "task");

    let answer = json!({"message": {"messageId": "m-answer", "role": "ROLE_USER", "taskId": id,
        "contextId": context, "parts": [{"data": {"account": "a-1"}}]}});
    let answered = rpc(&sys, "SendMessage", answer.clone()).await;
    let task = &answered["result"]["task"];
    assert_eq!(task["id"], id.as_str(), "{answered:#}");
    assert_eq!(
        task["status"]["state"], "TASK_STATE_COMPLETED",
        "{answered:#}"
    );
    assert_eq!(
        task["artifacts"][0]["parts"][0]["data"],
        json!({"answered": {"account": "a-1"}})
    );
    assert_eq!(
        task["metadata"]["attempt"], 2,
        "the answer ran as the next attempt"
    );
    let history = task["history"].as_array().unwrap();
    let turns: Vec<(&str, &Value)> = history
        .iter()
        .map(|m| (m["role"].as_str().unwrap(), &m["parts"][0]))
        .collect();
    assert_eq!(
        turns[1],
        ("ROLE_AGENT", &json!({"text": "which account?"})),
        "{turns:?}"
    );
    assert_eq!(
        turns[2],
        ("ROLE_USER", &json!({"data": {"account": "a-1"}})),
        "{turns:?}"
    );

    // The subscription saw the answer's attempt through to the end.
    let events = read_events(&mut sub, 50).await;
    let kinds: Vec<String> = events.iter().map(|(_, e)| kind(e)).collect();
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("completed"),
        "{kinds:?}"
    );
    assert!(kinds.contains(&"submitted".to_string()), "{kinds:?}");

    // The answer is in the task's history, with who gave it.
    let (_, ours) = sys.get(&format!("/v1/tasks/{id}")).await;
    let given = ours["history"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["event"] == "answer")
        .unwrap_or_else(|| panic!("no answer in {ours:#}"));
    assert_eq!(given["input"], json!({"account": "a-1"}));
    assert_eq!(given["actor"], "test-admin");
    assert_eq!(given["from"], "input_required");

    // The same answer again is the same task, answered once; another
    // message to a task that no longer waits is refused.
    let again = rpc(&sys, "SendMessage", answer).await;
    assert_eq!(again["result"]["task"]["id"], id.as_str(), "{again:#}");
    assert_eq!(
        again["result"]["task"]["metadata"]["attempt"], 2,
        "{again:#}"
    );
    let other = json!({"message": {"messageId": "m-answer-2", "role": "ROLE_USER", "taskId": id,
        "parts": [{"data": {"account": "a-2"}}]}});
    let refused = rpc(&sys, "SendMessage", other).await;
    assert_eq!(error_code(&refused), -32004, "{refused:#}");
}

/// An idle stream carries an SSE comment every `a2a.keepalive`, so
/// proxies and clients keep it open while the task waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_stream_carries_keep_alive_comments() {
    let (sys, gate) = system_with(|_, h| h.a2a.keepalive = Duration::from_millis(200)).await;
    let params = json!({"message": message("m-idle",
        json!([{"data": {"hold": true}}]), json!({"skillId": "helper/answer"}))});
    let mut resp = open_stream(&sys, "SendStreamingMessage", params, None).await;
    let mut raw = String::new();
    let until = tokio::time::Instant::now() + Duration::from_millis(1500);
    while let Ok(Ok(Some(chunk))) = tokio::time::timeout_at(until, resp.chunk()).await {
        raw.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    let comments = raw
        .split("\n\n")
        .filter(|block| block.lines().all(|l| l.starts_with(':')) && !block.is_empty())
        .count();
    assert!(
        comments >= 3,
        "keep-alive comments in 1.5 s at 200 ms: {comments}\n{raw}"
    );
    gate.send(true).unwrap();
}
