//! Task tokens through the whole system, on a real broker: a task runs only
//! with a token the worker accepts; a refused one never reaches the handler
//! and ends `rejected` or `auth_required` with the reason in the audit trail.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::eventually;
use common::nats::NatsServer;
use common::system::{System, card, fast_bus};
use futures::future::BoxFuture;
use orchestrator::Envelope;
use orchestrator::envelope::{AgentName, Priority};
use orchestrator::task_token::keys::{self, KeyKind};
use orchestrator::task_token::{Verifier, VerifyKey};
use orchestrator::worker::{Handler, Outcome, Task};
use serde_json::{Value, json};

/// Counts the tasks that reached it.
#[derive(Clone, Default)]
struct Counted(Arc<AtomicUsize>);

impl Handler for Counted {
    fn handle(&self, task: Task) -> BoxFuture<'static, Outcome> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move { Outcome::completed(Value::Object(task.envelope.payload.params)) })
    }
}

async fn submit(sys: &System, params: Value) -> String {
    let (status, task) = sys
        .post(
            "/v1/tasks",
            json!({"to": "echo", "action": "echo", "params": params}),
        )
        .await;
    assert_eq!(status, 201, "{task:#}");
    task["task_id"].as_str().unwrap().to_string()
}

/// The reasons the audit trail gives for this task's transitions.
async fn audit_reasons(sys: &System, id: &str) -> String {
    let (status, audit) = sys.get(&format!("/v1/audit?task_id={id}")).await;
    assert_eq!(status, 200, "{audit:#}");
    audit.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_token_runs_and_a_worker_with_another_key_runs_nothing() {
    let echo = card("echo", &["echo"]);
    let mut sys = System::start(vec![echo.clone()], fast_bus()).await;
    let runs = Counted::default();
    // Another key: the worker cannot verify the orchestrator's signature.
    let other = tempfile::tempdir().unwrap();
    let files = keys::generate(other.path(), KeyKind::EdDsa, false).unwrap();
    let stranger = Verifier::new(
        VerifyKey::load(files.verify.to_str().unwrap()).unwrap(),
        "orchestrator",
        "echo",
        Duration::from_secs(5),
    );
    let (stop, index) = sys
        .worker_checking_with(
            echo.clone(),
            Arc::new(runs.clone()),
            Some(Arc::new(stranger)),
        )
        .await;
    let id = submit(&sys, json!({"n": 1})).await;
    let task = sys.wait_terminal(&id, Duration::from_secs(20)).await;
    assert_eq!(task["state"], "rejected", "{task:#}");
    assert_eq!(task["error"]["code"], "token_signature", "{task:#}");
    assert_eq!(runs.0.load(Ordering::SeqCst), 0, "the handler ran");
    assert!(audit_reasons(&sys, &id).await.contains("token_signature"));
    stop.cancel();
    sys.join_worker(index).await;

    // The orchestrator's own key: the same kind of task runs.
    sys.worker(echo, Arc::new(runs.clone())).await;
    let id = submit(&sys, json!({"n": 2})).await;
    let task = sys.wait_terminal(&id, Duration::from_secs(20)).await;
    assert_eq!(task["state"], "completed", "{task:#}");
    assert_eq!(runs.0.load(Ordering::SeqCst), 1);
}

/// A token that expired while the task waited in the queue: the task asks
/// for authorization instead of running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_expired_in_the_queue_ends_auth_required() {
    let echo = card("echo", &["echo"]);
    let mut sys = System::start_with(NatsServer::start(), vec![echo.clone()], fast_bus(), |c| {
        c.tokens.ttl = Duration::from_secs(1);
        c.tokens.leeway = Duration::ZERO;
    })
    .await;
    let id = submit(&sys, json!({"n": 1})).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let runs = Counted::default();
    sys.worker(echo, Arc::new(runs.clone())).await;
    eventually(
        "the task asks for authorization",
        Duration::from_secs(20),
        || async {
            let (_, task) = sys.get(&format!("/v1/tasks/{id}")).await;
            task["state"] == "auth_required"
        },
    )
    .await;
    let (_, task) = sys.get(&format!("/v1/tasks/{id}")).await;
    assert_eq!(task["error"]["code"], "token_expired", "{task:#}");
    assert_eq!(runs.0.load(Ordering::SeqCst), 0, "the handler ran");
    assert!(audit_reasons(&sys, &id).await.contains("token_expired"));
}

/// An envelope changed on the bus after the orchestrator signed it (the
/// original removed, a copy with other params published in its place) is
/// refused as tampered; the changed params never reach the handler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_envelope_changed_on_the_bus_is_rejected() {
    let echo = card("echo", &["echo"]);
    let mut sys = System::start(vec![echo.clone()], fast_bus()).await;
    let id = submit(&sys, json!({"amount": 10})).await;
    let bus = sys.bus().await;
    let stream = bus
        .jetstream()
        .get_stream(bus.names().tasks_stream())
        .await
        .unwrap();
    let subject = bus
        .names()
        .task_subject(&"echo".parse::<AgentName>().unwrap(), Priority::Normal);
    eventually(
        "the envelope is published",
        Duration::from_secs(10),
        || async {
            stream
                .get_last_raw_message_by_subject(&subject)
                .await
                .is_ok()
        },
    )
    .await;
    let original = stream
        .get_last_raw_message_by_subject(&subject)
        .await
        .unwrap();
    let mut envelope = Envelope::from_wire(&original.payload, 1 << 20).unwrap();
    assert!(envelope.header.token.is_some(), "published without a token");
    envelope
        .payload
        .params
        .insert("amount".into(), json!(1_000_000));
    stream.delete_message(original.sequence).await.unwrap();
    bus.jetstream()
        .publish(subject.clone(), envelope.to_vec().into())
        .await
        .unwrap()
        .await
        .unwrap();
    let runs = Counted::default();
    sys.worker(echo, Arc::new(runs.clone())).await;
    let task = sys.wait_terminal(&id, Duration::from_secs(20)).await;
    assert_eq!(task["state"], "rejected", "{task:#}");
    assert_eq!(task["error"]["code"], "envelope_tampered", "{task:#}");
    assert_eq!(runs.0.load(Ordering::SeqCst), 0, "the handler ran");
}

/// The token carries the scopes the action declares: a task for a skill
/// that needs `Files.Read` runs although the request named no scope.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_grants_the_scopes_the_skill_declares() {
    let mut reader: Value = serde_json::to_value(card("reader", &["read"])).unwrap();
    reader["skills"][0]["scopes"] = json!(["Files.Read"]);
    let reader: orchestrator::agent::AgentCard = serde_json::from_value(reader).unwrap();
    let mut sys = System::start(vec![reader.clone()], fast_bus()).await;
    sys.worker(reader, Arc::new(Counted::default())).await;
    let (status, task) = sys
        .post("/v1/tasks", json!({"to": "reader", "action": "read"}))
        .await;
    assert_eq!(status, 201, "{task:#}");
    let id = task["task_id"].as_str().unwrap();
    let task = sys.wait_terminal(id, Duration::from_secs(20)).await;
    // The worker checks the card's scopes: a token without them is refused.
    assert_eq!(task["state"], "completed", "{task:#}");
}

/// A task whose envelope has no canonical form (an integer beyond 2^53)
/// could not be bound to its token: it is refused at submit, with the field
/// named, and nothing is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn params_that_cannot_be_signed_are_refused_at_submit() {
    let sys = System::start(vec![card("echo", &["echo"])], fast_bus()).await;
    let (status, body) = sys
        .post(
            "/v1/tasks",
            json!({"to": "echo", "action": "echo", "params": {"ids": [1, 9007199254740993u64]}}),
        )
        .await;
    assert_eq!(status, 422, "{body:#}");
    assert_eq!(body["error"]["field"], "params.ids[1]", "{body:#}");
    let (_, listed) = sys.get("/v1/tasks?limit=10").await;
    assert_eq!(listed["tasks"], json!([]), "{listed:#}");
}

/// A result published by another agent than the one the task was sent to
/// (on its own subject, as the bus's permissions will bind it) is audited
/// and ignored: the task does not move.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_from_another_agent_is_ignored() {
    let sys = System::start(
        vec![card("echo", &["echo"]), card("other", &["echo"])],
        fast_bus(),
    )
    .await;
    let id = submit(&sys, json!({"n": 1})).await;
    let (_, task) = sys.get(&format!("/v1/tasks/{id}")).await;
    let forged: orchestrator::WorkerEvent = serde_json::from_value(json!({
        "v": 1,
        "task_id": id,
        "correlation_id": task["correlation_id"],
        "agent": "other",
        "attempt": 1,
        "state": "completed",
        "result": {"forged": true},
        "at": orchestrator::envelope::Timestamp::now(),
    }))
    .unwrap();
    sys.bus()
        .await
        .publish_event(&forged, &tracing::Span::none())
        .await
        .unwrap();
    eventually(
        "the forged result is audited",
        Duration::from_secs(10),
        || async {
            audit_reasons(&sys, &id)
                .await
                .contains("reported by agent `other`")
        },
    )
    .await;
    let (_, task) = sys.get(&format!("/v1/tasks/{id}")).await;
    assert_eq!(task["state"], "submitted", "{task:#}");
    assert!(task["result"].is_null(), "{task:#}");
}

/// A skill's `inputSchema` is enforced on the params before anything is
/// stored: a wrong type or a missing field is refused with the field named,
/// valid params are accepted; a card whose schema does not compile stops
/// the orchestrator at start, naming the agent and skill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn params_are_checked_against_the_skills_input_schema() {
    let mut search: Value = serde_json::to_value(card("search", &["find"])).unwrap();
    search["skills"][0]["inputSchema"] = json!({
        "type": "object",
        "required": ["query"],
        "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "maximum": 50}}
    });
    let search: orchestrator::agent::AgentCard = serde_json::from_value(search).unwrap();
    let sys = System::start(vec![search.clone()], fast_bus()).await;
    let submit = |params: Value| {
        let sys = &sys;
        async move {
            sys.post(
                "/v1/tasks",
                json!({"to": "search", "action": "find", "params": params}),
            )
            .await
        }
    };
    let (status, body) = submit(json!({"query": 5})).await;
    assert_eq!(status, 422, "{body:#}");
    assert_eq!(body["error"]["field"], "params.query", "{body:#}");
    let (status, body) = submit(json!({"query": "x", "limit": 500})).await;
    assert_eq!(status, 422, "{body:#}");
    assert_eq!(body["error"]["field"], "params.limit", "{body:#}");
    let (status, body) = submit(json!({"limit": 5})).await;
    assert_eq!(status, 422, "{body:#}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("query"),
        "{body:#}"
    );
    let (_, listed) = sys.get("/v1/tasks?limit=10").await;
    assert_eq!(listed["tasks"], json!([]), "refused requests were stored");
    let (status, body) = submit(json!({"query": "architecture", "limit": 5})).await;
    assert_eq!(status, 201, "{body:#}");

    let mut broken: Value = serde_json::to_value(&search).unwrap();
    broken["skills"][0]["inputSchema"] = json!({"type": "no-such-type"});
    let broken: orchestrator::agent::AgentCard = serde_json::from_value(broken).unwrap();
    let bus = orchestrator::bus::Bus::connect_now(&sys.nats.url(), fast_bus())
        .await
        .unwrap();
    let data = tempfile::tempdir().unwrap();
    let config = orchestrator::service::ServiceSettings {
        data_dir: data.path().to_path_buf(),
        ..Default::default()
    };
    let err = orchestrator::service::Orchestrator::open(
        config,
        bus,
        orchestrator::agent::Catalog::of([broken]),
        Default::default(),
    )
    .await
    .err()
    .expect("a card whose schema does not compile must be refused");
    let message = err.to_string();
    assert!(
        message.contains("`search`") && message.contains("`find`"),
        "{message}"
    );
}

/// The mode bits of `path` (`0o7777` of them).
fn mode_of(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

/// Runs the orchestrator binary with `args` under `umask 000` (the
/// loosest a user may have), as `sh` would start it.
fn under_umask_000(args: &[&str]) -> std::process::Command {
    let mut command = std::process::Command::new("sh");
    command
        .arg("-c")
        .arg("umask 000; exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_orchestrator"))
        .args(args);
    command
}

/// Whatever the umask, what `run` writes is its owner's: the data
/// directory and the store 0700 with every store file 0600, the signing
/// key and the API key 0600, the verify key 0644 (readable, never
/// writable by others); `keys generate` the same; the managed broker's
/// settings and users 0600. `store verify` warns about a store others
/// could read, names each file, and it is private afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_are_written_with_their_modes_whatever_the_umask() {
    use common::process::{Proc, free_port, run_args, wait_ready};
    let nats = NatsServer::start();
    let (agents, data, keys_dir) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let dir = data.path().join("d");
    let port = free_port();
    let args = run_args(agents.path(), &dir, port, &[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let child = under_umask_000(&args)
        .env("NATS_URL", nats.url())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut run = Proc(child);
    wait_ready(&format!("http://127.0.0.1:{port}/readyz")).await;
    run.kill();
    assert_eq!(mode_of(&dir), 0o700);
    let store = dir.join("store");
    let exposed = orchestrator::files::exposed(&store);
    assert!(exposed.is_empty(), "{exposed:?}");
    assert_eq!(mode_of(&dir.join("keys/signing.pem")), 0o600);
    assert_eq!(mode_of(&dir.join("keys/verify.pem")), 0o644);
    assert_eq!(mode_of(&dir.join("keys/admin.api-key")), 0o600);

    let generated = keys_dir.path().join("k");
    let status = under_umask_000(&["keys", "generate", "--dir", generated.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(mode_of(&generated), 0o700);
    assert_eq!(mode_of(&generated.join("signing.pem")), 0o600);
    assert_eq!(mode_of(&generated.join("verify.pem")), 0o644);

    let broker_dir = keys_dir.path().join("broker");
    let names = orchestrator::bus::Names::new("orch");
    let agent: orchestrator::envelope::AgentName = "a".parse().unwrap();
    let broker = orchestrator::broker::ManagedBroker::start(
        &broker_dir,
        free_port(),
        Some((&names, std::slice::from_ref(&agent))),
    )
    .await
    .unwrap();
    drop(broker);
    assert_eq!(mode_of(&broker_dir.join("nats-server.conf")), 0o600);
    let users = orchestrator::broker::users_dir(&broker_dir);
    assert_eq!(mode_of(&users), 0o700);
    assert_eq!(mode_of(&users.join("auth.conf")), 0o600);

    // A store others can read: said, then mended.
    for entry in std::fs::read_dir(&store).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
    }
    let verify = |json: bool| {
        let mut args = vec!["store", "verify", "--data-dir", dir.to_str().unwrap()];
        if json {
            args.push("--json");
        }
        std::process::Command::new(env!("CARGO_BIN_EXE_orchestrator"))
            .args(&args)
            .output()
            .unwrap()
    };
    let said = verify(false);
    let text = String::from_utf8_lossy(&said.stdout);
    assert!(said.status.success(), "{text}");
    assert!(text.contains("warning: others could read"), "{text}");
    assert!(text.contains("(group/others: 044)"), "{text}");
    let again: serde_json::Value = serde_json::from_slice(&verify(true).stdout).unwrap();
    assert_eq!(again["exposed"], serde_json::json!([]), "{again:#}");
}
