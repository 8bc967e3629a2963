//! Triggers through the A2A face, over real HTTP on a real broker with an
//! in-process worker: a trigger is a skill on the card, a message starts
//! a run, the run is an A2A task (get, list, cancel, subscribe, resume),
//! and an approval gate is `input-required`, answered by a message.

use crate::common;

use std::sync::Arc;

use common::a2a::{error_code, kind, message, open_stream, read_events, rpc, rpc_as};
use common::system::{System, card, client_with, fast_bus, key_for};
use futures::future::BoxFuture;
use orchestrator::trigger::Triggers;
use orchestrator::worker::{Handler, Outcome, Task};
use serde_json::{Value, json};

/// Completes with its params echoed.
struct Echo;

impl Handler for Echo {
    fn handle(&self, task: Task) -> BoxFuture<'static, Outcome> {
        let params = Value::Object(task.envelope.payload.params.clone());
        Box::pin(async move { Outcome::completed(json!({ "echo": params })) })
    }
}

/// One step, a string input: text fills it.
const SIMPLE: &str = r#"
id: simple
name: Simple
description: Echoes its text.
examples: ["say hello"]
input_schema: { type: object, required: [text], properties: { text: { type: string } } }
steps:
  - { id: only, agent: work, action: do, params: { said: "{{ input.text }}" } }
"#;

/// A step, a gate (with input), a step.
const GATED: &str = r#"
id: gated
required_scopes: [Mail.Send]
steps:
  - { id: draft, agent: work, action: do, params: { text: "{{ input.text }}" } }
  - id: confirm
    approval:
      prompt: Send it?
      input_schema: { type: object, required: [note] }
  - { id: send, agent: work, action: do, params: { note: "{{ steps.confirm.result.input.note if steps.confirm.result.input else 'none' }}" } }
"#;

/// A system with the two triggers and a worker for their agent; also the
/// key of `limited`, who may submit tasks but holds no trigger's scopes.
async fn system() -> (System, String) {
    let cards = vec![card("work", &["do"])];
    let mut sys = System::start(cards.clone(), fast_bus()).await;
    sys.stop_orchestrator().await;
    let (limited, entry) = key_for("limited", &["orch:tasks:submit"]);
    sys.service.api_auth.api_keys.push(entry);
    let dir = sys.data.path().join("triggers");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("simple.yaml"), SIMPLE).unwrap();
    std::fs::write(dir.join("gated.yaml"), GATED).unwrap();
    let triggers = Triggers::load(&dir, &Default::default());
    assert!(triggers.errors.is_empty(), "{:#?}", triggers.errors);
    sys.triggers = triggers;
    sys.start_orchestrator(cards.clone()).await;
    sys.worker(cards[0].clone(), Arc::new(Echo)).await;
    (sys, limited)
}

/// `SendMessage` with `msg`: the JSON-RPC response.
async fn say(sys: &System, msg: Value) -> Value {
    rpc(sys, "SendMessage", json!({ "message": msg })).await
}

/// A message that answers task (or run) `task`.
fn answer(id: &str, task: &str, parts: Value) -> Value {
    json!({"messageId": id, "role": "ROLE_USER", "taskId": task, "parts": parts})
}

fn state(task: &Value) -> &str {
    task["status"]["state"].as_str().unwrap_or_default()
}

/// The status message's text.
fn status_text(task: &Value) -> &str {
    task["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default()
}

/// Starts a run of `gated` and waits until it asks; its task.
async fn gated_waiting(sys: &System, id: &str) -> Value {
    let r = say(
        sys,
        message(id, json!([{"text": "hello"}]), json!({"trigger": "gated"})),
    )
    .await;
    let task = r["result"]["task"].clone();
    assert_eq!(state(&task), "TASK_STATE_INPUT_REQUIRED", "{r:#}");
    task
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_is_a_skill_and_its_run_is_a_task() {
    let (sys, _) = system().await;
    let card: Value = sys
        .client
        .get(format!("{}/.well-known/agent-card.json", sys.http))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let skill = card["skills"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "trigger:simple")
        .unwrap_or_else(|| panic!("the trigger is a skill: {card:#}"));
    assert_eq!(skill["name"], "Simple");
    assert_eq!(skill["description"], "Echoes its text.");
    assert_eq!(skill["examples"], json!(["say hello"]));

    // By its skill id, a text filling its one string input.
    let r = say(
        &sys,
        message(
            "m-simple",
            json!([{"text": "hi there"}]),
            json!({"skillId": "trigger:simple"}),
        ),
    )
    .await;
    let task = &r["result"]["task"];
    assert_eq!(state(task), "TASK_STATE_COMPLETED", "{r:#}");
    assert_eq!(task["metadata"]["trigger"], "simple");
    assert_eq!(
        task["artifacts"][0]["parts"][0]["data"],
        json!({"echo": {"said": "hi there"}}),
        "the run's result is its artifact: {r:#}"
    );
    assert_eq!(
        task["history"][0]["parts"][0]["data"],
        json!({"text": "hi there"})
    );
    let id = task["id"].as_str().unwrap();
    let context = task["contextId"].as_str().unwrap();

    // One model: the same run through REST.
    let (status, run) = sys.get(&format!("/v1/runs/{id}")).await;
    assert_eq!(status, 200, "{run:#}");
    assert_eq!(run["state"], "completed");
    assert_eq!(run["correlation_id"], context);

    let got = rpc(&sys, "GetTask", json!({"id": id})).await;
    assert_eq!(got["result"], *task, "GetTask shows the run as sent");

    // Its context lists the run and its step's task.
    let listed = rpc(&sys, "ListTasks", json!({"contextId": context})).await;
    let tasks = listed["result"]["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 2, "{listed:#}");
    assert!(tasks.iter().any(|t| t["id"] == id));
    assert!(
        tasks
            .iter()
            .any(|t| t["id"] != id && t["metadata"]["skill"] == "do")
    );
    let completed = rpc(&sys, "ListTasks", json!({"status": "TASK_STATE_SUBMITTED"})).await;
    assert!(
        !completed["result"]["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["id"] == id),
        "a run is never submitted: {completed:#}"
    );

    // The same message again is the same run.
    let again = say(
        &sys,
        message(
            "m-simple",
            json!([{"text": "hi there"}]),
            json!({"skillId": "trigger:simple"}),
        ),
    )
    .await;
    assert_eq!(again["result"]["task"]["id"], id, "{again:#}");

    // A message joins the context it names.
    let joined = say(
        &sys,
        json!({"messageId": "m-join", "role": "ROLE_USER", "contextId": context,
                    "parts": [{"data": {"text": "again"}}], "metadata": {"trigger": "simple"}}),
    )
    .await;
    assert_eq!(joined["result"]["task"]["contextId"], context, "{joined:#}");
    assert_ne!(joined["result"]["task"]["id"], id);

    // What is refused.
    let unknown = say(
        &sys,
        message("m-u", json!([{"text": "x"}]), json!({"trigger": "nope"})),
    )
    .await;
    assert_eq!(error_code(&unknown), -32602, "{unknown:#}");
    assert!(
        unknown["error"]["message"]
            .as_str()
            .unwrap()
            .contains("nope")
    );
    let bad = say(
        &sys,
        message(
            "m-b",
            json!([{"data": {"text": 5}}]),
            json!({"trigger": "simple"}),
        ),
    )
    .await;
    assert_eq!(error_code(&bad), -32602, "the input schema holds: {bad:#}");
    let ended = say(&sys, answer("m-late", id, json!([{"text": "approve"}]))).await;
    assert_eq!(
        error_code(&ended),
        -32004,
        "an ended run takes no message: {ended:#}"
    );
    let cancel = rpc(&sys, "CancelTask", json!({"id": id})).await;
    assert_eq!(error_code(&cancel), -32002, "{cancel:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_gate_is_input_required_and_a_message_answers_it() {
    let (sys, limited) = system().await;
    let task = gated_waiting(&sys, "g-1").await;
    let id = task["id"].as_str().unwrap();
    assert_eq!(status_text(&task), "Send it?", "{task:#}");

    // An answer without a decision or input says what it takes.
    let vague = say(&sys, answer("a-0", id, json!([{"text": "hmm"}]))).await;
    assert_eq!(error_code(&vague), -32602, "{vague:#}");
    // Input against the gate's schema.
    let wrong = say(&sys, answer("a-1", id, json!([{"data": {"other": 1}}]))).await;
    assert_eq!(error_code(&wrong), -32602, "{wrong:#}");

    let reply = answer(
        "a-2",
        id,
        json!([{"text": "ship it"}, {"data": {"note": "fine"}}]),
    );
    let r = say(&sys, reply.clone()).await;
    let done = &r["result"]["task"];
    assert_eq!(state(done), "TASK_STATE_COMPLETED", "{r:#}");
    assert_eq!(
        done["artifacts"][0]["parts"][0]["data"],
        json!({"echo": {"note": "fine"}}),
        "the gate's input reached the next step: {r:#}"
    );
    let history = done["history"].as_array().unwrap();
    assert!(
        history.iter().any(|m| m["role"] == "ROLE_USER"
            && m["metadata"]["decision"] == "approve"
            && m["parts"][1]["data"] == json!({"note": "fine"})),
        "the answer is in the history: {r:#}"
    );
    let (_, run) = sys.get(&format!("/v1/runs/{id}")).await;
    let confirm = run["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "confirm")
        .unwrap();
    assert_eq!(
        confirm["decision"]["by"], "test-admin",
        "audited with the caller: {run:#}"
    );

    // The same answer again is answered once.
    let again = say(&sys, reply).await;
    assert_eq!(again["result"]["task"]["id"], id, "{again:#}");
    assert_eq!(state(&again["result"]["task"]), "TASK_STATE_COMPLETED");

    // A rejection ends it, with the words given.
    let task = gated_waiting(&sys, "g-2").await;
    let id = task["id"].as_str().unwrap();
    let r = say(
        &sys,
        answer("a-3", id, json!([{"text": "reject: not now"}])),
    )
    .await;
    let rejected = &r["result"]["task"];
    assert_eq!(state(rejected), "TASK_STATE_REJECTED", "{r:#}");
    assert_eq!(status_text(rejected), "reject: not now");

    // Over 0.3, in its spellings: the gate is `input-required`, and an
    // answer in 0.3's parts runs it to the end.
    let old = rpc_as(
        &sys,
        &sys.client,
        None,
        "message/send",
        json!({"message": {"kind": "message", "messageId": "g-old", "role": "user",
            "parts": [{"kind": "text", "text": "hello"}], "metadata": {"trigger": "gated"}}}),
    )
    .await;
    assert_eq!(old["result"]["kind"], "task", "{old:#}");
    assert_eq!(
        old["result"]["status"]["state"], "input-required",
        "{old:#}"
    );
    let id = old["result"]["id"].as_str().unwrap();
    let done = rpc_as(
        &sys,
        &sys.client,
        None,
        "message/send",
        json!({"message": {"kind": "message", "messageId": "g-old-a", "role": "user", "taskId": id,
            "parts": [{"kind": "text", "text": "approve"}, {"kind": "data", "data": {"note": "old"}}]}}),
    )
    .await;
    assert_eq!(done["result"]["status"]["state"], "completed", "{done:#}");

    // A caller without the trigger's scopes may not start it.
    let limited = client_with(Some(&limited));
    let refused = rpc_as(
        &sys,
        &limited,
        Some("1.0"),
        "SendMessage",
        json!({"message": message(
            "g-3",
            json!([{"text": "x"}]),
            json!({"trigger": "gated"}),
        )}),
    )
    .await;
    assert_eq!(error_code(&refused), -32000, "{refused:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_streams_resumes_and_cancels() {
    let (sys, _) = system().await;
    // Streamed until it waits.
    let mut resp = open_stream(
        &sys,
        "SendStreamingMessage",
        json!({"message": message(
            "s-1",
            json!([{"text": "hello"}]),
            json!({"trigger": "gated"}),
        )}),
        None,
    )
    .await;
    let seen = read_events(&mut resp, 10).await;
    let kinds: Vec<String> = seen.iter().map(|(_, e)| kind(e)).collect();
    assert_eq!(kinds.last().unwrap(), "input_required", "{kinds:?}");
    let id = seen[0].1["result"]["task"]["id"]
        .as_str()
        .or_else(|| seen[0].1["result"]["statusUpdate"]["taskId"].as_str())
        .unwrap()
        .to_string();
    let waiting_at = seen.last().unwrap().0;

    // A subscriber that saw the wait resumes after it; the answer comes
    // through, then the end, each event once.
    let mut sub = open_stream(&sys, "SubscribeToTask", json!({"id": id}), Some(waiting_at)).await;
    let r = say(
        &sys,
        json!({"messageId": "s-a", "role": "ROLE_USER", "taskId": id,
                    "parts": [{"text": "approve"}], "metadata": {"decision": "approve"}}),
    )
    .await;
    assert_eq!(state(&r["result"]["task"]), "TASK_STATE_COMPLETED", "{r:#}");
    let rest = read_events(&mut sub, 10).await;
    let kinds: Vec<String> = rest.iter().map(|(_, e)| kind(e)).collect();
    assert_eq!(kinds, ["working", "artifact", "completed"], "{rest:#?}");
    let ids: Vec<u64> = rest.iter().map(|(i, _)| *i).collect();
    assert_eq!(ids, [waiting_at + 1, waiting_at + 2, waiting_at + 3]);
    // An ended run takes no new subscription, but a resume reads the end.
    let ended = rpc(&sys, "SubscribeToTask", json!({"id": id})).await;
    assert_eq!(error_code(&ended), -32004, "{ended:#}");
    let mut again = open_stream(&sys, "SubscribeToTask", json!({"id": id}), Some(waiting_at)).await;
    let replay = read_events(&mut again, 10).await;
    assert_eq!(
        replay.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        ids,
        "the same events, the same numbers, read again"
    );

    // A waiting run is canceled; canceled once.
    let task = gated_waiting(&sys, "s-2").await;
    let id = task["id"].as_str().unwrap();
    let c = rpc(&sys, "CancelTask", json!({"id": id})).await;
    assert_eq!(state(&c["result"]), "TASK_STATE_CANCELED", "{c:#}");
    let twice = rpc(&sys, "CancelTask", json!({"id": id})).await;
    assert_eq!(error_code(&twice), -32002, "{twice:#}");
    let mut after = open_stream(&sys, "SubscribeToTask", json!({"id": id}), Some(1)).await;
    let tail = read_events(&mut after, 10).await;
    let kinds: Vec<String> = tail.iter().map(|(_, e)| kind(e)).collect();
    assert_eq!(
        kinds,
        ["input_required", "canceled"],
        "the wait stays, the end follows: {tail:#?}"
    );
}

/// The official `a2a-sdk` client (1.x, from PyPI) finds the trigger on the
/// card, streams a run to its gate, answers it and reads the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_client_runs_a_workflow_through_its_gate() {
    let (sys, _) = system().await;
    let key = sys.admin_key.clone().unwrap();
    let names = common::a2a::sdk_checks("sdk_runs.py", &sys, &key).await;
    assert_eq!(names.len(), 5, "{names:?}");
}

/// A trigger added to the watched directory shows on the card, with a new
/// `ETag` and `Last-Modified`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_trigger_changes_the_card() {
    let (sys, _) = system().await;
    let url = format!("{}/.well-known/agent-card.json", sys.http);
    let read = || async {
        let resp = sys.client.get(&url).send().await.unwrap();
        let header = |name: &str| resp.headers()[name].to_str().unwrap().to_string();
        let (etag, modified) = (header("etag"), header("last-modified"));
        let card: Value = resp.json().await.unwrap();
        (card, etag, modified)
    };
    let (_, etag, modified) = read().await;
    // HTTP dates count seconds.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let added = SIMPLE.replace("id: simple", "id: added");
    std::fs::write(sys.data.path().join("triggers/added.yaml"), added).unwrap();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (card, new_etag, new_modified) = read().await;
        let listed = card["skills"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["id"] == "trigger:added");
        if listed {
            assert_ne!(new_etag, etag);
            let parse = |d: &str| chrono::DateTime::parse_from_rfc2822(d).unwrap();
            assert!(
                parse(&new_modified) > parse(&modified),
                "{modified} → {new_modified}"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the card never listed it: {card:#}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Asks for input on its first attempt, then completes with the answer.
struct Asker;

impl Handler for Asker {
    fn handle(&self, task: Task) -> BoxFuture<'static, Outcome> {
        let input = task.envelope.payload.input.clone();
        Box::pin(async move {
            match input {
                None => Outcome::InputRequired("which one?".into()),
                Some(given) => Outcome::completed(json!({ "given": given })),
            }
        })
    }
}

/// One `messageId` names one thing for the key's retention (docs/a2a.md,
/// "Idempotent sends"): the id of a message that started a run cannot
/// make a task, nor the other way; an answer's id sent again with another
/// answer, and a gate decision's id with the other decision, are refused
/// with -32100 (naming the message), where each used to return the first
/// silently; every refusal is audited; the same message again is still
/// the same thing; and a refused message gives its id back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_id_names_one_thing() {
    let (mut sys, _) = system().await;
    let asker = card("ask", &["q"]);
    sys.stop_orchestrator().await;
    let mut cards = vec![card("work", &["do"]), asker.clone()];
    sys.start_orchestrator(cards.clone()).await;
    sys.worker(asker, Arc::new(Asker)).await;
    cards.pop();

    // A run, then a task, under one id; and a task, then a run.
    let run = message(
        "one-1",
        json!([{"text": "hi"}]),
        json!({"trigger": "simple"}),
    );
    let r = say(&sys, run.clone()).await;
    assert!(r["result"]["task"]["id"].is_string(), "{r:#}");
    let task = message(
        "one-1",
        json!([{"data": {"x": 1}}]),
        json!({"skillId": "work/do"}),
    );
    let refused = say(&sys, task.clone()).await;
    assert_eq!(error_code(&refused), -32100, "{refused:#}");
    assert_eq!(
        refused["error"]["data"][0]["metadata"]["messageId"], "one-1",
        "{refused:#}"
    );
    let again = say(&sys, run).await;
    assert_eq!(again["result"]["task"]["id"], r["result"]["task"]["id"]);
    let t = say(
        &sys,
        message(
            "one-2",
            json!([{"data": {"x": 1}}]),
            json!({"skillId": "work/do"}),
        ),
    )
    .await;
    assert!(t["result"]["task"]["id"].is_string(), "{t:#}");
    let refused = say(
        &sys,
        message(
            "one-2",
            json!([{"text": "hi"}]),
            json!({"trigger": "simple"}),
        ),
    )
    .await;
    assert_eq!(error_code(&refused), -32100, "{refused:#}");

    // An answer's id with another answer.
    let asked = say(
        &sys,
        message("ask-1", json!([{"data": {}}]), json!({"skillId": "ask/q"})),
    )
    .await;
    let asked_id = asked["result"]["task"]["id"].as_str().unwrap().to_string();
    assert_eq!(
        state(&asked["result"]["task"]),
        "TASK_STATE_INPUT_REQUIRED",
        "{asked:#}"
    );
    let first = answer("ans-1", &asked_id, json!([{"data": {"pick": "a"}}]));
    let r = say(&sys, first.clone()).await;
    assert_eq!(state(&r["result"]["task"]), "TASK_STATE_COMPLETED", "{r:#}");
    let other = say(
        &sys,
        answer("ans-1", &asked_id, json!([{"data": {"pick": "b"}}])),
    )
    .await;
    assert_eq!(error_code(&other), -32100, "{other:#}");
    let resent = say(&sys, first).await;
    assert_eq!(
        resent["result"]["task"]["id"],
        asked_id.as_str(),
        "{resent:#}"
    );
    // The answer's id cannot start anything else either.
    let refused = say(
        &sys,
        message(
            "ans-1",
            json!([{"text": "hi"}]),
            json!({"trigger": "simple"}),
        ),
    )
    .await;
    assert_eq!(error_code(&refused), -32100, "{refused:#}");

    // A gate approved with an id, then rejected with it.
    let gate = gated_waiting(&sys, "gate-1").await;
    let gate_id = gate["id"].as_str().unwrap();
    let approve = answer(
        "dec-1",
        gate_id,
        json!([{"text": "approve"}, {"data": {"note": "ok"}}]),
    );
    let r = say(&sys, approve.clone()).await;
    assert_eq!(state(&r["result"]["task"]), "TASK_STATE_COMPLETED", "{r:#}");
    let reject = say(
        &sys,
        answer("dec-1", gate_id, json!([{"text": "reject: no"}])),
    )
    .await;
    assert_eq!(error_code(&reject), -32100, "{reject:#}");
    assert_eq!(
        state(&say(&sys, approve).await["result"]["task"]),
        "TASK_STATE_COMPLETED"
    );

    // A refused message gives its id back: corrected, it goes through.
    let bad = say(
        &sys,
        message(
            "fix-1",
            json!([{"text": "x"}]),
            json!({"skillId": "nobody/nothing"}),
        ),
    )
    .await;
    assert_eq!(error_code(&bad), -32602, "{bad:#}");
    let fixed = say(
        &sys,
        message(
            "fix-1",
            json!([{"data": {"x": 2}}]),
            json!({"skillId": "work/do"}),
        ),
    )
    .await;
    assert!(fixed["result"]["task"]["id"].is_string(), "{fixed:#}");

    // Each refusal is in the audit trail.
    let (_, audit) = sys.get("/v1/audit?limit=1000").await;
    let conflicts = audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "message.conflict")
        .count();
    assert_eq!(conflicts, 5, "{audit:#}");
}
