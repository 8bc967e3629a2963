//! Push notifications and callbacks, against a receiver started by the
//! test: every event comes, once after dedupe, in order, signed (checked
//! by the Python code docs/a2a.md shows), through receiver failures and an
//! orchestrator SIGKILL; refused targets; give-ups; REST callbacks.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::a2a::{error_code, message, rpc, rpc_as, says};
use common::nats::NatsServer;
use common::process::{free_port, orchestrator, run_args, wait_ready};
use common::receiver::{Got, Receiver};
use common::system::{System, card, fast_bus};
use futures::future::BoxFuture;
use orchestrator::artifact::{Artifact, Part};
use orchestrator::service::ServiceSettings;
use orchestrator::target::Reach;
use orchestrator::trigger::Triggers;
use orchestrator::worker::{Handler, Outcome, Task};
use serde_json::{Value, json};

/// Reports a message and an artifact, then completes; asks for input when
/// the params say `ask` and none came.
struct Working;

impl Handler for Working {
    fn handle(&self, task: Task) -> BoxFuture<'static, Outcome> {
        let params = task.envelope.payload.params.clone();
        Box::pin(async move {
            if params.contains_key("ask") && task.envelope.payload.input.is_none() {
                return Outcome::InputRequired("which one?".into());
            }
            assert!(task.progress.message("halfway"));
            assert!(
                task.progress
                    .artifact(Artifact::new("notes", Part::text("a note")))
            );
            Outcome::completed(json!({"done": params}))
        })
    }
}

/// Deliveries go to loopback here, and are tried again quickly.
fn loopback(c: &mut ServiceSettings) {
    c.deliveries.allow_addresses = vec![Reach::Loopback];
    c.deliveries.backoff_first = Duration::from_millis(50);
    c.deliveries.backoff_max = Duration::from_millis(200);
}

async fn system(tweak: impl FnOnce(&mut ServiceSettings)) -> System {
    let cards = vec![card("helper", &["work"])];
    let mut sys = System::start_with(NatsServer::start(), cards.clone(), fast_bus(), tweak).await;
    sys.worker(cards[0].clone(), Arc::new(Working)).await;
    sys
}

/// Sends message `id` ("go", to `helper/work`) with `configuration`: the
/// task's id.
async fn go(sys: &System, id: &str, configuration: Value) -> String {
    let sent = rpc(
        sys,
        "SendMessage",
        json!({
            "message": message(id, json!([{"text": "go"}]), json!({"skillId": "helper/work"})),
            "configuration": configuration,
        }),
    )
    .await;
    sent["result"]["task"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{sent:#}"))
        .to_string()
}

/// Task (or run) `id`'s first delivery as `GET /v1/deliveries` shows it,
/// once `done` holds of it (within 30 s).
async fn delivery_when(sys: &System, id: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, d) = sys.get(&format!("/v1/deliveries?task_id={id}")).await;
        let d = &d["deliveries"][0];
        if done(d) {
            return d.clone();
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: {d:#}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether a delivery is a push's terminal status update.
fn ends(g: &Got) -> bool {
    let s = &g.json()["statusUpdate"]["status"]["state"];
    s == "TASK_STATE_COMPLETED" || s == "TASK_STATE_FAILED" || s == "TASK_STATE_CANCELED"
}

/// The events taken for task `id`, each once: numbered 1, 2, ... in the
/// order they came, the last one its end.
fn in_order(taken: &[Got], id: &str) -> Vec<Value> {
    let mine: Vec<&Got> = taken
        .iter()
        .filter(|g| g.id().starts_with(&format!("{id}:")))
        .collect();
    let numbers: Vec<u64> = mine.iter().map(|g| g.event()).collect();
    let expected: Vec<u64> = (1..=mine.len() as u64).collect();
    assert_eq!(numbers, expected, "task {id}: every event, in order, once");
    assert!(ends(mine.last().unwrap()), "task {id} ends last");
    mine.iter().map(|g| g.json()).collect()
}

/// Checks every taken delivery with the Python code docs/a2a.md shows,
/// then a forged body and a replay: the check must refuse both.
async fn python_checks(base: &str, taken: &[Got], url: &str) -> String {
    let python = std::env::var("A2A_SDK_PYTHON").unwrap_or_else(|_| {
        panic!("A2A_SDK_PYTHON is not set: run the tests with scripts/test (it makes a venv with PyJWT)")
    });
    let doc = include_str!("../docs/a2a.md");
    let code = doc
        .split("```python\n# check-delivery\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("docs/a2a.md shows the check")
        .replace("https://orchestrator.example.com", base);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("check.py"), code).unwrap();
    let deliveries: Vec<Value> = taken
        .iter()
        .map(|g| {
            json!({
                "headers": {"Orchestrator-Signature": g.header("orchestrator-signature")},
                "body": String::from_utf8(g.body.clone()).unwrap(),
                "url": url,
            })
        })
        .collect();
    std::fs::write(
        dir.path().join("deliveries.json"),
        serde_json::to_vec(&deliveries).unwrap(),
    )
    .unwrap();
    let driver = r#"
import json, sys
exec(open(sys.argv[1]).read())
deliveries = json.load(open(sys.argv[2]))
def body(d): return d["body"].encode()
for d in deliveries:
    check_delivery(d["headers"], body(d), d["url"])
print("genuine", len(deliveries))
d = deliveries[0]
forged = body(d).replace(b'"TASK_STATE_', b'"TASK_STATE_X')
try:
    check_delivery(d["headers"], forged, d["url"]); print("FORGED TAKEN")
except ValueError as e: print("REFUSED OTHER", e)
except Exception as e: print("forged refused:", type(e).__name__)
try:
    check_delivery(d["headers"], body(d), d["url"]); print("REPLAY TAKEN")
except ValueError as e: print("replay refused:", e)
try:
    check_delivery(d["headers"], body(d), "http://elsewhere/hook"); print("OTHER TAKEN")
except ValueError as e: print("elsewhere refused:", e)
"#;
    std::fs::write(dir.path().join("driver.py"), driver).unwrap();
    let out = tokio::process::Command::new(python)
        .arg(dir.path().join("driver.py"))
        .arg(dir.path().join("check.py"))
        .arg(dir.path().join("deliveries.json"))
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The user story: a client gives a webhook with its message; the
/// receiver fails the first two requests; it still gets every event of
/// the task once (after dedupe on the delivery id), in order, each with
/// the config's credentials and a signature that the documented check
/// accepts, while a forged body and a replay are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_comes_once_in_order_and_signed_though_the_receiver_fails_twice() {
    let sys = system(loopback).await;
    let receiver = Receiver::start(2).await;
    let config = json!({
        "url": receiver.url(), "token": "tok-1",
        "authentication": {"scheme": "Bearer", "credentials": "s3cret"}
    });
    let id = go(
        &sys,
        "m-1",
        json!({"returnImmediately": true, "taskPushNotificationConfig": config}),
    )
    .await;
    let taken = receiver
        .wait_for("the task's end", |got| got.iter().any(ends))
        .await;
    let bodies = in_order(&taken, &id);
    assert!(
        bodies.len() >= 4,
        "working, progress, artifacts, end: {bodies:#?}"
    );
    for b in &bodies {
        let one = b.as_object().unwrap();
        assert_eq!(one.len(), 1, "a StreamResponse holds one event: {b}");
        let event = one.values().next().unwrap();
        assert_eq!(event["taskId"], id.as_str());
    }
    let all = receiver.all();
    assert!(
        !all[0].taken && !all[1].taken && all[2].taken,
        "two failures first"
    );
    assert_eq!(all[0].id(), all[2].id(), "a retry is the same delivery");
    for g in &taken {
        assert_eq!(g.header("authorization"), "Bearer s3cret");
        assert_eq!(g.header("x-a2a-notification-token"), "tok-1");
    }
    let checked = python_checks(&sys.http, &taken, &receiver.url()).await;
    assert!(
        checked.contains(&format!("genuine {}", taken.len())),
        "{checked}"
    );
    assert!(checked.contains("forged refused"), "{checked}");
    assert!(checked.contains("replay refused"), "{checked}");
    assert!(checked.contains("elsewhere refused"), "{checked}");
    // The config says how it went.
    let d = delivery_when(&sys, &id, "the delivery is done", |d| d["done"] == true).await;
    assert_eq!(d["delivered"], bodies.len());
    assert_eq!(d["kind"], "a2a");
    assert!(d.get("credentials").is_none() && !d.to_string().contains("s3cret"));
}

/// Configs through the four methods, in 1.0's names and 0.3's: created
/// on a task the caller sees, got (credentials not shown again), listed,
/// deleted (twice: idempotent); a config that is not there is -32001.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configs_are_created_read_listed_and_deleted_in_both_versions() {
    let sys = system(loopback).await;
    let id = go(&sys, "m-2", json!({})).await;
    let url = "http://127.0.0.1:9/hook";
    let made = rpc(
        &sys,
        "CreateTaskPushNotificationConfig",
        json!({"task_id": id, "id": "c1", "url": url,
               "authentication": {"scheme": "Bearer", "credentials": "hidden"}}),
    )
    .await;
    assert_eq!(made["result"]["id"], "c1", "{made:#}");
    assert_eq!(made["result"]["authentication"]["scheme"], "Bearer");
    assert!(!made.to_string().contains("hidden"));
    let got = rpc(
        &sys,
        "GetTaskPushNotificationConfig",
        json!({"taskId": id, "id": "c1"}),
    )
    .await;
    assert_eq!(got["result"]["url"], url);
    let old = rpc_as(
        &sys,
        &sys.client,
        None,
        "tasks/pushNotificationConfig/set",
        json!({"taskId": id, "pushNotificationConfig": {"id": "c2", "url": url,
               "authentication": {"schemes": ["Basic"], "credentials": "x"}}}),
    )
    .await;
    assert_eq!(old["result"]["taskId"], id.as_str(), "{old:#}");
    assert_eq!(
        old["result"]["pushNotificationConfig"]["authentication"]["schemes"],
        json!(["Basic"])
    );
    let listed = rpc_as(
        &sys,
        &sys.client,
        None,
        "tasks/pushNotificationConfig/list",
        json!({"id": id}),
    )
    .await;
    assert_eq!(listed["result"].as_array().unwrap().len(), 2, "{listed:#}");
    let rest = format!("{}/a2a/rest/tasks/{id}/pushNotificationConfigs", sys.http);
    let via_rest: Value = sys
        .client
        .get(&rest)
        .header("A2A-Version", "1.0")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(via_rest["configs"].as_array().unwrap().len(), 2);
    for _ in 0..2 {
        let deleted = rpc_as(
            &sys,
            &sys.client,
            None,
            "tasks/pushNotificationConfig/delete",
            json!({"id": id, "pushNotificationConfigId": "c2"}),
        )
        .await;
        assert!(deleted.get("error").is_none(), "{deleted:#}");
    }
    let resp = sys
        .client
        .delete(format!("{rest}/c1"))
        .header("A2A-Version", "1.0")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let gone = rpc(
        &sys,
        "GetTaskPushNotificationConfig",
        json!({"taskId": id, "id": "c1"}),
    )
    .await;
    assert_eq!(error_code(&gone), -32001);
    // At most ten configs per task; a header that is no header is refused.
    for n in 0..10 {
        let r = rpc(
            &sys,
            "CreateTaskPushNotificationConfig",
            json!({"taskId": id, "id": format!("n{n}"), "url": url}),
        )
        .await;
        assert!(r.get("error").is_none(), "{r:#}");
    }
    let more = rpc(
        &sys,
        "CreateTaskPushNotificationConfig",
        json!({"taskId": id, "id": "n10", "url": url}),
    )
    .await;
    assert_eq!(error_code(&more), -32602);
    assert!(says(&more, "delete one first"), "{more:#}");
    let bad = rpc(
        &sys,
        "CreateTaskPushNotificationConfig",
        json!({"taskId": id, "id": "n0", "url": url, "token": "a\r\nX-Injected: 1"}),
    )
    .await;
    assert_eq!(error_code(&bad), -32602);
    let nowhere = rpc(
        &sys,
        "CreateTaskPushNotificationConfig",
        json!({"taskId": "0190a3c4-0000-7000-8000-000000000000", "url": url}),
    )
    .await;
    assert_eq!(error_code(&nowhere), -32001);
}

/// Targets inside the network are refused unless allowed: loopback,
/// private and link-local addresses, `localhost`, other schemes, for push
/// configs and for callbacks; a redirect is never followed (inward or
/// not), and a 3xx is no delivery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn targets_inside_the_network_are_refused() {
    let sys = system(|_| {}).await;
    let id = go(&sys, "m-3", json!({})).await;
    for (url, why) in [
        ("http://127.0.0.1:9/hook", "loopback"),
        ("http://[::1]:9/hook", "loopback"),
        ("http://localhost:9/hook", "loopback"),
        ("http://169.254.169.254/latest/meta-data", "link-local"),
        ("http://10.1.2.3/hook", "private"),
        ("http://192.168.0.10/hook", "private"),
        ("file:///etc/passwd", "scheme"),
    ] {
        let r = rpc(
            &sys,
            "CreateTaskPushNotificationConfig",
            json!({"taskId": id, "url": url}),
        )
        .await;
        assert_eq!(error_code(&r), -32602, "{url}: {r:#}");
        assert!(says(&r, why), "{url}: {r:#}");
    }
    let (status, body) = sys
        .post(
            "/v1/tasks",
            json!({"to": "helper", "action": "work", "response_mode": "callback",
                   "callback_url": "http://127.0.0.1:9/cb"}),
        )
        .await;
    assert_eq!(status, 422, "{body:#}");
    assert!(body.to_string().contains("callback_url"), "{body:#}");

    // Allowed to loopback, a receiver that redirects to the metadata
    // service: the redirect is not followed.
    drop(sys);
    let sys = system(|c| {
        loopback(c);
        c.deliveries.max_attempts = 2;
    })
    .await;
    let receiver = Receiver::start(0).await;
    let inward = format!(
        "http://127.0.0.1:{}/redirect?to=http://169.254.169.254/latest/meta-data",
        receiver.port
    );
    let id = go(
        &sys,
        "m-4",
        json!({"taskPushNotificationConfig": {"url": inward}}),
    )
    .await;
    let d = delivery_when(&sys, &id, "a give-up", |d| {
        !d["gave_up"].as_array().unwrap().is_empty()
    })
    .await;
    let error = d["gave_up"][0]["error"].as_str().unwrap();
    assert!(error.contains("redirect: not followed"), "{error}");
    // Nor to an allowed host: a 3xx is no delivery, and the signed
    // request goes nowhere else.
    let onward = format!(
        "http://127.0.0.1:{}/redirect?to={}",
        receiver.port,
        receiver.url()
    );
    let id = go(
        &sys,
        "m-5",
        json!({"taskPushNotificationConfig": {"url": onward}}),
    )
    .await;
    let d = delivery_when(&sys, &id, "a give-up", |d| {
        !d["gave_up"].as_array().unwrap().is_empty()
    })
    .await;
    assert!(
        d["gave_up"][0]["error"].as_str().unwrap().contains("307"),
        "{d:#}"
    );
    assert!(receiver.all().is_empty(), "delivered through a redirect");
}

/// A receiver that answers slowly, or with a body that never ends, holds
/// no sender: the slow one's attempts time out (and are given up on), the
/// endless one's events are all taken, each answer's body unread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_or_endless_answer_holds_no_sender() {
    let sys = system(|c| {
        loopback(c);
        c.deliveries.max_attempts = 2;
        c.deliveries.timeout = Duration::from_millis(300);
    })
    .await;
    let receiver = Receiver::start(0).await;
    let slow = format!("http://127.0.0.1:{}/slow", receiver.port);
    let endless = format!("http://127.0.0.1:{}/endless", receiver.port);
    let config = json!({"taskPushNotificationConfig": {"url": slow}});
    let held = go(&sys, "m-slow", config).await;
    let config = json!({"taskPushNotificationConfig": {"url": endless}});
    let flowing = go(&sys, "m-endless", config).await;
    let taken = receiver
        .wait_for("every event of the endless one", |g| g.iter().any(ends))
        .await;
    let events = in_order(&taken, &flowing).len();
    let d = delivery_when(&sys, &flowing, "the endless one done", |d| {
        d["done"] == true
    })
    .await;
    assert_eq!(d["delivered"], events, "each taken at once: {d:#}");
    assert_eq!(d["gave_up"], json!([]), "{d:#}");
    let d = delivery_when(&sys, &held, "the slow one given up", |d| d["done"] == true).await;
    let error = d["gave_up"][0]["error"].as_str().unwrap();
    assert!(error.contains("timed out"), "{error}");
}

/// A receiver that never takes anything: each event is given up after
/// the configured attempts, audited, and listed by `GET /v1/deliveries`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_given_up_on_are_audited_and_listed() {
    let sys = system(|c| {
        loopback(c);
        c.deliveries.max_attempts = 2;
    })
    .await;
    let receiver = Receiver::start(usize::MAX).await;
    let id = go(
        &sys,
        "m-5",
        json!({"taskPushNotificationConfig": {"url": receiver.url(), "id": "never"}}),
    )
    .await;
    let _ = delivery_when(&sys, &id, "every event given up", |d| d["done"] == true).await;
    let (_, listed) = sys.get("/v1/deliveries").await;
    let d = &listed["deliveries"][0];
    assert_eq!(d["task_id"], id.as_str());
    let gave_up = d["gave_up"].as_array().unwrap();
    assert!(gave_up.len() >= 3, "{d:#}");
    assert_eq!(gave_up[0]["attempts"], 2);
    assert!(
        gave_up[0]["error"].as_str().unwrap().contains("500"),
        "{d:#}"
    );
    assert_eq!(d["delivered"], 0);
    assert_eq!(receiver.all().len(), 2 * gave_up.len(), "two attempts each");
    let (_, audit) = sys.get(&format!("/v1/audit?task_id={id}")).await;
    let kinds = common::strings(&audit, "records", "kind");
    assert_eq!(
        kinds.iter().filter(|k| *k == "delivery.gave_up").count(),
        gave_up.len(),
        "{kinds:?}"
    );
}

const GATED: &str = r#"
id: gated
steps:
  - { id: draft, agent: helper, action: work, params: { text: "{{ input.text }}" } }
  - id: confirm
    approval: { prompt: Send it? }
  - { id: send, agent: helper, action: work, params: { sent: true } }
"#;

/// REST callbacks: a task's end, and a run's wait at its gate and its end,
/// are POSTed as the REST API shows them, signed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_callbacks_bring_a_task_end_and_a_run_gate_and_end() {
    let cards = vec![card("helper", &["work"])];
    let mut sys =
        System::start_with(NatsServer::start(), cards.clone(), fast_bus(), loopback).await;
    sys.stop_orchestrator().await;
    let dir = sys.data.path().join("triggers");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("gated.yaml"), GATED).unwrap();
    sys.triggers = Triggers::load(&dir, &Default::default());
    sys.start_orchestrator(cards.clone()).await;
    sys.worker(cards[0].clone(), Arc::new(Working)).await;
    let receiver = Receiver::start(1).await;

    let (status, task) = sys
        .post(
            "/v1/tasks",
            json!({"to": "helper", "action": "work", "params": {"n": 1},
                   "response_mode": "callback", "callback_url": receiver.url()}),
        )
        .await;
    assert_eq!(status, 201, "{task:#}");
    let id = task["task_id"].as_str().unwrap().to_string();
    let cb = receiver.first_for(&id).await;
    assert!(cb.id().starts_with(&format!("{id}:callback:")));
    assert_eq!(cb.json()["state"], "completed");
    assert_eq!(cb.json()["result"], json!({"done": {"n": 1}}));
    let checked = python_checks(&sys.http, std::slice::from_ref(&cb), &receiver.url()).await;
    assert!(
        checked.contains("genuine 1"),
        "a callback is signed: {checked}"
    );

    let (status, run) = sys
        .post(
            "/v1/triggers/gated/runs",
            json!({"input": {"text": "hi"}, "callback_url": receiver.url()}),
        )
        .await;
    assert_eq!(status, 201, "{run:#}");
    let run_id = run["run_id"].as_str().unwrap().to_string();
    let gate = receiver.first_for(&run_id).await;
    assert_eq!(gate.json()["state"], "input_required", "{:#}", gate.json());
    let (status, _) = sys
        .post(
            &format!("/v1/runs/{run_id}/approve"),
            json!({"reason": "fine"}),
        )
        .await;
    assert_eq!(status, 200);
    let all = receiver
        .wait_for("the run's end", |g| {
            g.iter()
                .filter(|g| g.id().starts_with(&run_id))
                .any(|g| g.json()["state"] == "completed")
        })
        .await;
    let mine: Vec<u64> = all
        .iter()
        .filter(|g| g.id().starts_with(&run_id))
        .map(Got::event)
        .collect();
    assert_eq!(mine, vec![1, 2], "the gate, then the end");

    // A run started over A2A with a push config: its events, the gate's
    // `input-required` among them, then its end.
    let pushes = Receiver::start(0).await;
    let started = rpc(
        &sys,
        "SendMessage",
        json!({
            "message": message("m-run", json!([{"data": {"text": "hi"}}]), json!({"skillId": "trigger:gated"})),
            "configuration": {"returnImmediately": true,
                              "taskPushNotificationConfig": {"url": pushes.url()}}
        }),
    )
    .await;
    let run_id = started["result"]["task"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let state = |g: &Got| g.json()["statusUpdate"]["status"]["state"].clone();
    pushes
        .wait_for("the run's gate, pushed", |g| {
            g.iter().any(|g| state(g) == "TASK_STATE_INPUT_REQUIRED")
        })
        .await;
    let (status, _) = sys
        .post(&format!("/v1/runs/{run_id}/approve"), json!({}))
        .await;
    assert_eq!(status, 200);
    let taken = pushes
        .wait_for("the run's end, pushed", |g| g.iter().any(ends))
        .await;
    in_order(&taken, &run_id);
}

/// The receiver is down while tasks end, and the orchestrator is killed
/// (SIGKILL) with their notifications owed: once both are back, every
/// event of every task comes, once after dedupe, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owed_notifications_survive_an_orchestrator_sigkill() {
    let nats = NatsServer::start();
    let data = tempfile::tempdir().unwrap();
    let agents = tempfile::tempdir().unwrap();
    common::command_agent(
        &agents.path().join("helper"),
        json!({
            "name": "helper", "version": "1.0.0", "description": "answers",
            "skills": [{"id": "work", "description": "works"}],
            "invocation": {"type": "command", "command": ["python3", "work.py"], "timeout": "30s"}
        }),
        "work.py",
        "import json, sys\nenv = json.load(sys.stdin)\nprint(json.dumps({\"n\": env[\"payload\"][\"params\"][\"n\"]}))\n",
    );
    let config = data.path().join("config.json");
    std::fs::write(
        &config,
        json!({"deliveries": {"allow_addresses": ["loopback"],
                              "backoff_first": "100ms", "backoff_max": "300ms"}})
        .to_string(),
    )
    .unwrap();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let config_arg = config.display().to_string();
    let args = run_args(agents.path(), data.path(), port, &["--config", &config_arg]);
    let mut first = orchestrator(&args, &nats.url(), &data.path().join("first.log"));
    wait_ready(&format!("{base}/readyz")).await;
    let _worker = orchestrator(
        &[
            "worker",
            "--agent",
            agents.path().join("helper").to_str().unwrap(),
            "--data-dir",
            data.path().to_str().unwrap(),
        ],
        &nats.url(),
        &data.path().join("worker.log"),
    );
    let http = common::process::admin_client(data.path());
    let mut receiver = Receiver::down();
    let mut ids = Vec::new();
    for n in 0..3 {
        let body = json!({
            "message": message(&format!("k-{n}"), json!([{"data": {"n": n}}]), json!({"skillId": "helper/work"})),
            "configuration": {"returnImmediately": true,
                              "taskPushNotificationConfig": {"url": receiver.url()}}
        });
        let sent: Value = http
            .post(format!("{base}/a2a/rest/message:send"))
            .header("A2A-Version", "1.0")
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        ids.push(sent["task"]["id"].as_str().unwrap().to_string());
    }
    // Every task ends, and every config has tried (and failed) at least
    // once: the owed events are in the store only.
    for id in &ids {
        let url = format!("{base}/v1/deliveries?task_id={id}");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let t = common::get_json(&http, &format!("{base}/v1/tasks/{id}")).await;
            let d = common::get_json(&http, &url).await;
            if t["state"] == "completed" && d["deliveries"][0]["attempts"].as_u64() >= Some(1) {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "{t:#} {d:#}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    first.kill();
    receiver.up().await;
    let _second = orchestrator(&args, &nats.url(), &data.path().join("second.log"));
    wait_ready(&format!("{base}/readyz")).await;
    let taken = receiver
        .wait_for("every task's end", |got| {
            ids.iter().all(|id| {
                got.iter()
                    .any(|g| g.id().starts_with(id.as_str()) && ends(g))
            })
        })
        .await;
    for id in &ids {
        in_order(&taken, id);
    }
    // Signed by the key the restarted orchestrator serves.
    let checked = python_checks(&base, &taken, &receiver.url()).await;
    assert!(
        checked.contains(&format!("genuine {}", taken.len())),
        "{checked}"
    );
}
