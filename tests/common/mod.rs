//! Helpers shared by the integration tests.
#![allow(dead_code)]

use orchestrator::envelope::{Action, AgentName, Envelope, IdempotencyKey, Sender};
use orchestrator::store::{Fingerprint, NewTask};
use orchestrator::{Store, StoreSettings};
use serde_json::{Map, Value, json};

/// Installs the services' subscriber in this test process (no log lines
/// unless `RUST_LOG` asks, no export): spans then carry trace context, as
/// in `orchestrator run` and `orchestrator worker`.
pub fn traced() {
    let telemetry = orchestrator::telemetry::init(
        "tests",
        orchestrator::telemetry::LogFormat::Human,
        "off",
        None,
    )
    .unwrap();
    drop(telemetry);
}

/// A `command` agent in `dir`: its card, and the Python script the card's
/// `invocation` runs (`python3 <script>`), with `script_text` in it.
pub fn command_agent(dir: &std::path::Path, card: Value, script: &str, script_text: &str) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("agent.json"), card.to_string()).unwrap();
    std::fs::write(dir.join(script), script_text).unwrap();
}

/// An envelope for `to`/`action` with `params`, idempotency key `key`.
pub fn envelope(to: &str, action: &str, params: Value, key: &str) -> Envelope {
    let params: Map<String, Value> = match params {
        Value::Object(map) => map,
        other => panic!("params must be an object, got {other}"),
    };
    let mut env = Envelope::new(
        "orchestrator".parse::<Sender>().unwrap(),
        to.parse::<AgentName>().unwrap(),
        action.parse::<Action>().unwrap(),
        params,
    );
    env.control.idempotency_key = key.parse::<IdempotencyKey>().unwrap();
    env
}

/// A task to submit: fingerprinted over agent, action and params.
/// A run of a one-step trigger `trigger` started by alice, with `key` in
/// alice's scope when given; its fingerprint is `input`'s.
pub fn new_run(trigger: &str, key: Option<&str>, input: Value) -> orchestrator::store::NewRun {
    use orchestrator::run::{Origin, RunId, RunRecord};
    let yaml = format!("id: {trigger}\nsteps: [{{id: a, agent: x, action: y}}]");
    let definition: orchestrator::trigger::Trigger = serde_norway::from_str(&yaml).unwrap();
    let fingerprint = Fingerprint::of(&input);
    let record = RunRecord::new(
        RunId::new(),
        &definition,
        input,
        Origin::Request,
        "alice".into(),
        orchestrator::access::Grants::all(),
    );
    orchestrator::store::NewRun {
        record,
        key: key.map(|k| ("alice".to_string(), k.to_string())),
        fingerprint,
        schedule: None,
    }
}

pub fn new_task(env: Envelope) -> NewTask {
    let fingerprint = Fingerprint::of(&json!({
        "to": env.header.to,
        "action": env.payload.action,
        "params": env.payload.params,
    }));
    NewTask {
        envelope: env,
        scope: "test-principal".into(),
        fingerprint: Some(fingerprint),
        actor: "test-principal".into(),
        trace: Some(orchestrator::telemetry::context::StoredTrace {
            traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
            tracestate: None,
        }),
        step: None,
        conversation: false,
    }
}

/// A store in a fresh temporary directory (kept alive by the returned guard).
pub fn temp_store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&StoreSettings::new(dir.path().join("store"))).unwrap();
    (dir, store)
}

/// A store at `dir/s` holding `n` acknowledged tasks; returns its path and ids.
pub async fn filled_store(
    dir: &std::path::Path,
    n: usize,
) -> (std::path::PathBuf, Vec<orchestrator::TaskId>) {
    let path = dir.join("s");
    let store = Store::open(&StoreSettings::new(&path)).unwrap();
    let mut ids = Vec::new();
    for i in 0..n {
        let env = envelope(
            "echo",
            "echo",
            json!({"i": i, "pad": "x".repeat(2000)}),
            &format!("k{i}"),
        );
        ids.push(env.header.task_id);
        store.submit(new_task(env)).await.unwrap();
    }
    (path, ids)
}

/// Submits a task for each key `k{n}`, `n` in `numbers`, all with
/// correlation id `correlation`; their ids, oldest first.
pub async fn submit_correlated(
    store: &Store,
    correlation: &orchestrator::envelope::CorrelationId,
    numbers: std::ops::Range<usize>,
) -> Vec<orchestrator::TaskId> {
    let mut ids = Vec::new();
    for n in numbers {
        let mut env = envelope("echo", "echo", json!({ "n": n }), &format!("k{n}"));
        env.header.correlation_id = correlation.clone();
        ids.push(env.header.task_id);
        store.submit(new_task(env)).await.unwrap();
    }
    ids
}

/// The ids of every task listed under `correlation`, read `page` at a
/// time through the cursor.
pub fn list_correlated(
    store: &Store,
    correlation: &orchestrator::envelope::CorrelationId,
    page: usize,
) -> Vec<orchestrator::TaskId> {
    let mut ids = Vec::new();
    loop {
        let after = ids.last().copied();
        let records = store.list_by_correlation(correlation, after, page).unwrap();
        assert!(records.len() <= page, "a page longer than asked for");
        if records.is_empty() {
            return ids;
        }
        ids.extend(records.iter().map(|r| r.task_id()));
    }
}

/// Edits a closed store's sled files directly, as damage or tampering would.
/// sled releases a dropped store's lock from background threads, so this
/// waits for the lock a moment.
pub fn with_raw_sled(path: &std::path::Path, edit: impl FnOnce(&sled::Db)) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let db = loop {
        match sled::open(path) {
            Ok(db) => break db,
            Err(e) if std::time::Instant::now() >= deadline => {
                panic!("cannot open {}: {e}", path.display())
            }
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(25)),
        }
    };
    edit(&db);
    db.flush().unwrap();
}

/// A tree's name and its pairs, in key order.
pub type Dumped = (Vec<u8>, Vec<(Vec<u8>, Vec<u8>)>);

/// Every tree of the sled database at `path`.
pub fn sled_trees(path: &std::path::Path) -> Vec<Dumped> {
    let db = sled::open(path).unwrap();
    let mut names = db.tree_names();
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let tree = db.open_tree(&name).unwrap();
            let pairs = tree
                .iter()
                .map(|kv| {
                    let (k, v) = kv.unwrap();
                    (k.to_vec(), v.to_vec())
                })
                .collect();
            (name.to_vec(), pairs)
        })
        .collect()
}

pub mod a2a;
pub mod browser;
pub mod cluster;
pub mod dev;
pub mod llm;
pub mod nats;
pub mod netns;
pub mod pair;
pub mod process;
pub mod receiver;
pub mod system;

/// The string `field` of every item of the array `list` in `value`.
pub fn strings(value: &Value, list: &str, field: &str) -> Vec<String> {
    value[list]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|i| i[field].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// GETs `url` and decodes its JSON body.
pub async fn get_json(http: &reqwest::Client, url: &str) -> Value {
    http.get(url).send().await.unwrap().json().await.unwrap()
}

/// GETs `url` and returns its body as text.
pub async fn get_text(http: &reqwest::Client, url: &str) -> String {
    http.get(url).send().await.unwrap().text().await.unwrap()
}

/// POSTs `body` as JSON to `url` and decodes the JSON answer.
pub async fn post_json(http: &reqwest::Client, url: &str, body: &Value) -> Value {
    http.post(url)
        .json(body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Polls `check` every 50 ms until it holds; fails naming `what` after
/// `timeout`. Every polling loop in the tests goes through here, so none
/// can wait forever.
pub async fn eventually<F, Fut>(what: &str, timeout: std::time::Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + timeout;
    while !check().await {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for: {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// How many messages the task stream still holds (not yet acked).
pub async fn queued(bus: &orchestrator::bus::Bus) -> u64 {
    let mut tasks = bus
        .jetstream()
        .get_stream(bus.names().tasks_stream())
        .await
        .unwrap();
    tasks.info().await.unwrap().state.messages
}

/// An orchestrator's URL and the API key to call it with.
pub type Server = (String, Option<String>);

/// Runs the `orchestrator` client with `args` against `server`.
pub fn cli(server: &Server, args: &[&str]) -> std::process::Output {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_orchestrator"));
    command
        .args(args)
        .env("ORCH_SERVER", &server.0)
        .env_remove("ORCH_API_KEY")
        .env_remove("ORCH_PROFILE")
        // No client file of the machine's user.
        .env(
            "ORCH_CLIENT_CONFIG",
            "/nonexistent/orchestrator-client.json",
        );
    if let Some(key) = &server.1 {
        command.env("ORCH_API_KEY", key);
    }
    command.output().unwrap()
}

/// A command's standard output as JSON.
pub fn json_out(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {} / {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// A JSON string's text (anything else as JSON).
pub fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}
