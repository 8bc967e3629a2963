//! The client commands and `run` as scripts use them, against a real
//! orchestrator and broker: exit codes, `--json`, `--wait`.

use crate::common;

use std::process::Command;
use std::sync::Arc;

use common::system::{GATED, System, card, fast_bus};
use orchestrator::worker::EchoHandler;
use serde_json::Value;

use common::{Server, cli, json_out};

/// `trigger --wait --json` runs a trigger to completion and exits 0; `tasks
/// get`, `tasks list`, `audit verify` and `agents list` answer; a bad input
/// exits 2; an unreachable server exits 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_commands_work_against_a_running_orchestrator() {
    let echo = card("echo", &["echo"]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("say.yaml"),
        "id: say\ndefault_system_prompt: Be brief.\ninput_schema: {type: object, required: [text]}\nsteps:\n  - {id: s, agent: echo, action: echo, params: {said: \"{{ input.text }}\"}}\n",
    )
    .unwrap();
    let triggers = orchestrator::trigger::Triggers::load(dir.path(), &Default::default());
    assert!(triggers.errors.is_empty(), "{:?}", triggers.errors);
    let mut sys = System::start(vec![echo.clone()], fast_bus()).await;
    sys.stop_orchestrator().await;
    sys.triggers = triggers;
    sys.start_orchestrator(vec![echo.clone()]).await;
    sys.worker(echo, Arc::new(EchoHandler)).await;
    let server: Server = (sys.http.clone(), sys.admin_key.clone());

    let run = tokio::task::spawn_blocking({
        let server = server.clone();
        move || {
            cli(
                &server,
                &[
                    "trigger",
                    "say",
                    "--input",
                    r#"{"text": "hi"}"#,
                    "--wait",
                    "--json",
                ],
            )
        }
    })
    .await
    .unwrap();
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let run = json_out(&run);
    assert_eq!(run["state"], "completed", "{run:#}");
    assert_eq!(run["result"]["echo"]["said"], "hi");
    let id = run["steps"][0]["task_id"].as_str().unwrap().to_string();
    let (_, stored) = sys.get(&format!("/v1/tasks/{id}")).await;
    assert_eq!(stored["history"][0]["to"], "submitted");

    let server2 = server.clone();
    let outs = tokio::task::spawn_blocking(move || {
        (
            cli(&server2, &["tasks", "get", &id]),
            cli(
                &server2,
                &["tasks", "list", "--state", "completed", "--json"],
            ),
            cli(&server2, &["audit", "verify"]),
            cli(&server2, &["agents", "list"]),
            cli(&server2, &["tasks", "list", "--limit", "1"]),
            cli(&server2, &["audit", "list", "--limit", "1"]),
            cli(&server2, &["trigger", "say", "--input", "{}"]),
            cli(
                &server2,
                &[
                    "tasks", "submit", "--to", "echo", "--action", "echo", "--params", "not json",
                ],
            ),
            cli(&("http://127.0.0.1:1".into(), None), &["tasks", "list"]),
            cli(&(server2.0.clone(), None), &["tasks", "list"]),
        )
    })
    .await
    .unwrap();
    let (
        get,
        list,
        verify,
        agents,
        tasks_table,
        audit_table,
        bad_input,
        bad_params,
        unreachable,
        no_key,
    ) = outs;
    assert_eq!(get.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&get.stdout).contains("completed"));
    assert_eq!(json_out(&list)["tasks"].as_array().unwrap().len(), 1);
    assert_eq!(verify.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&verify.stdout).contains("audit chain ok"));
    assert!(String::from_utf8_lossy(&agents.stdout).contains("echo"));
    let tasks_table = String::from_utf8_lossy(&tasks_table.stdout).to_string();
    assert!(
        tasks_table.starts_with("TASK") && tasks_table.contains("completed"),
        "{tasks_table}"
    );
    let (audit_rows, audit_notes) = (
        String::from_utf8_lossy(&audit_table.stdout).to_string(),
        String::from_utf8_lossy(&audit_table.stderr).to_string(),
    );
    assert!(audit_rows.contains("run.started"), "{audit_rows}");
    assert!(
        audit_notes.contains("more: --cursor 1") && !audit_rows.contains("more:"),
        "a further page is offered on stderr, out of a pipe's way: {audit_rows} / {audit_notes}"
    );
    assert_eq!(bad_input.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&bad_input.stderr).contains("\"text\" is a required property"),
        "{}",
        String::from_utf8_lossy(&bad_input.stderr)
    );
    assert_eq!(bad_params.status.code(), Some(2));
    assert_eq!(unreachable.status.code(), Some(3));
    assert_eq!(no_key.status.code(), Some(2));
    let no_key = String::from_utf8_lossy(&no_key.stderr);
    assert!(
        no_key.contains("unauthenticated") && no_key.contains("ORCH_API_KEY"),
        "{no_key}"
    );
}

/// `run` with an explicit broker URL that does not answer fails, once
/// `bus.connect_wait` has passed, with a message naming it, instead of
/// starting a broker of its own.
#[test]
fn run_with_an_unreachable_explicit_broker_fails_clearly() {
    let dir = tempfile::tempdir().unwrap();
    // It waits `bus.connect_wait` (a minute by default) before it gives up.
    let config = dir.path().join("config.json");
    std::fs::write(&config, r#"{"bus": {"connect_wait": "2s"}}"#).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_orchestrator"))
        .args([
            "run",
            "--config",
            config.to_str().unwrap(),
            "--data-dir",
            dir.path().to_str().unwrap(),
            "--http-addr",
            "127.0.0.1:0",
        ])
        .env("NATS_URL", "nats://127.0.0.1:1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nats://127.0.0.1:1"), "{err}");
    assert!(
        !dir.path().join("nats").exists(),
        "no managed broker may be started"
    );
}

/// The managed broker starts a JetStream server with authentication: the
/// orchestrator's user can provision it, a client without credentials is
/// refused.
#[tokio::test]
async fn a_managed_broker_serves_jetstream_to_its_users_only() {
    use orchestrator::bus::{Bus, BusSettings, Names};
    let dir = tempfile::tempdir().unwrap();
    let port = common::process::free_port();
    let agents = vec!["echo".parse().unwrap()];
    let broker = orchestrator::broker::ManagedBroker::start(
        dir.path(),
        port,
        Some((&Names::new("orch"), &agents)),
    )
    .await
    .unwrap();
    assert!(
        Bus::connect_now(broker.url(), BusSettings::default())
            .await
            .is_err()
    );
    let users = broker.users().unwrap();
    assert_eq!(users.users.len(), 2);
    let mut config = BusSettings::default();
    config.auth.nkey_seed_file = Some(users.users[0].seed_file.clone());
    let bus = Bus::connect_now(broker.url(), config).await.unwrap();
    bus.provision().await.unwrap();
    assert!(dir.path().join("nats").is_dir());
    broker.stop().await;
}

/// `--log-format json`: every line a worker logs is one JSON object, and
/// the lines about a task carry its ids in the task's span.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_json_log_lines_carry_the_tasks_ids() {
    let echo = card("echo", &["echo"]);
    let sys = System::start(vec![echo.clone()], fast_bus()).await;
    let dir = tempfile::tempdir().unwrap();
    // A card's directory is named after the agent.
    let agent = dir.path().join("echo");
    std::fs::create_dir(&agent).unwrap();
    std::fs::write(
        agent.join("agent.json"),
        serde_json::to_string(&echo).unwrap(),
    )
    .unwrap();
    let log = dir.path().join("worker.log");
    let mut worker = common::process::Proc(
        Command::new(env!("CARGO_BIN_EXE_orchestrator"))
            .args(["worker", "--log-format", "json", "--agent"])
            .arg(&agent)
            .env("NATS_URL", sys.nats.url())
            .env("ORCH_VERIFY_KEY", sys.data.path().join("keys/verify.pem"))
            .env("RUST_LOG", "info")
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let id = sys
        .submit("echo", "echo", serde_json::json!({"n": 1}))
        .await;
    let done = sys
        .wait_terminal(&id, std::time::Duration::from_secs(30))
        .await;
    assert_eq!(done["state"], "completed", "{done:#}");
    worker.kill();
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let ran = lines
        .iter()
        .find(|l| l["message"] == "task ran")
        .unwrap_or_else(|| panic!("no `task ran` line:\n{text}"));
    let span = &ran["span"];
    assert_eq!(span["task_id"], id.as_str(), "{ran:#}");
    assert_eq!(span["agent"], "echo", "{ran:#}");
    assert_eq!(span["action"], "echo", "{ran:#}");
    assert_eq!(span["attempt"], 1, "{ran:#}");
    assert_eq!(span["correlation_id"], done["correlation_id"], "{ran:#}");
    assert!(
        lines
            .iter()
            .all(|l| l["level"].is_string() && l["timestamp"].is_string())
    );
}

/// What a script meets, as found by a new user: a closed pipe ends a
/// command quietly; `--server` without a scheme works; every `--json`
/// error has the API's shape; `trigger --wait` stops at an approval gate
/// like `runs get --wait`; a `--wait` that runs out has its own exit code
/// (4); `runs approve` and `runs cancel` show the run as the answer left
/// it, not as it was before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_commands_as_scripts_use_them() {
    let echo = card("echo", &["echo"]);
    let files = [
        ("gated.yaml", GATED),
        (
            "slow.yaml",
            "id: slow\nsteps:\n  - {id: s, agent: nobody-runs-it, action: echo}\n",
        ),
    ];
    let cards = vec![echo.clone(), card("nobody-runs-it", &["echo"])];
    let mut sys = System::start_with_triggers(cards, &files).await;
    assert!(sys.triggers.errors.is_empty(), "{:?}", sys.triggers.errors);
    sys.worker(echo, Arc::new(EchoHandler)).await;
    let server: Server = (sys.http.clone(), sys.admin_key.clone());
    let schemeless: Server = (
        sys.http.trim_start_matches("http://").to_string(),
        sys.admin_key.clone(),
    );
    let run = |server: Server, args: Vec<&'static str>| {
        tokio::task::spawn_blocking(move || cli(&server, &args))
    };

    // A gate stops `trigger --wait`, exit 0, the run waiting.
    let gated = run(
        schemeless.clone(),
        vec!["trigger", "gated", "--wait", "--json"],
    )
    .await
    .unwrap();
    assert_eq!(
        gated.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&gated.stderr)
    );
    let gated = json_out(&gated);
    assert_eq!(gated["state"], "input_required", "{gated:#}");
    let id = gated["run_id"].as_str().unwrap().to_string();
    // Approving shows the run moved on.
    let approve_id = id.clone();
    let approved = tokio::task::spawn_blocking({
        let server = server.clone();
        move || cli(&server, &["runs", "approve", &approve_id, "--json"])
    })
    .await
    .unwrap();
    let approved = json_out(&approved);
    assert_ne!(approved["state"], "input_required", "{approved:#}");

    // A wait that runs out exits 4; canceling shows the run canceled.
    let slow = run(
        server.clone(),
        vec!["trigger", "slow", "--wait", "--timeout", "1s", "--json"],
    )
    .await
    .unwrap();
    assert_eq!(
        slow.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&slow.stdout)
    );
    let timed_out = json_out(&slow);
    assert_eq!(timed_out["error"]["code"], "wait_timeout", "{timed_out:#}");
    let (_, runs) = sys.get("/v1/runs?trigger_id=slow").await;
    let slow_id = runs["runs"][0]["run_id"].as_str().unwrap().to_string();
    let canceled = tokio::task::spawn_blocking({
        let server = server.clone();
        move || cli(&server, &["runs", "cancel", &slow_id, "--json"])
    })
    .await
    .unwrap();
    assert_eq!(json_out(&canceled)["state"], "canceled");

    // Errors: one shape, code apart from the message.
    let refused = run(server.clone(), vec!["tasks", "get", "not-an-id", "--json"])
        .await
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    let refused = json_out(&refused);
    assert_eq!(refused["error"]["code"], "invalid_field", "{refused:#}");
    assert_eq!(refused["error"]["field"], "id", "{refused:#}");
    assert!(
        !refused["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("invalid_field")
    );
    let bad_server = run(("ftp://x".into(), None), vec!["tasks", "list", "--json"])
        .await
        .unwrap();
    assert_eq!(bad_server.status.code(), Some(2));
    assert_eq!(json_out(&bad_server)["error"]["code"], "invalid_server");

    // A reader that stops early: `audit list | head -1`.
    let mut audit = Command::new(env!("CARGO_BIN_EXE_orchestrator"))
        .args(["audit", "list", "--limit", "1000"])
        .env("ORCH_SERVER", &server.0)
        .env("ORCH_API_KEY", server.1.clone().unwrap())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(audit.stdout.take());
    let out = audit.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
}

/// A second `run` on a data directory in use says so plainly and stops
/// before starting anything; a log written to a file has no terminal
/// colours and says each start-up notice once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_run_on_one_data_directory_is_refused_plainly() {
    use common::process::{free_port, orchestrator, run_args, wait_ready};
    let nats = common::nats::NatsServer::start();
    let (agents, data, logs) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let port = free_port();
    let log = logs.path().join("first.log");
    let first = orchestrator(
        &run_args(agents.path(), data.path(), port, &[]),
        &nats.url(),
        &log,
    );
    wait_ready(&format!("http://127.0.0.1:{port}/readyz")).await;
    let second = Command::new(env!("CARGO_BIN_EXE_orchestrator"))
        .args(run_args(agents.path(), data.path(), free_port(), &[]))
        .env("NATS_URL", nats.url())
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(2));
    let said = String::from_utf8_lossy(&second.stderr);
    let pid = first.0.id().to_string();
    assert!(
        said.contains("in use by another `orchestrator run`") && said.contains(&pid),
        "{said}"
    );
    assert!(
        !said.contains("nats-server") && !said.contains("authoriz"),
        "{said}"
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains('\u{1b}'), "colours in a log file: {text}");
    assert_eq!(
        text.matches("generated an administrator API key").count(),
        1,
        "{text}"
    );
}
