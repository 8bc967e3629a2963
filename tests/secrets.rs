//! Secrets stay secret: a planted password, given as a sensitive param to a
//! command agent that prints it in its failure message and refused by a
//! skill's inputSchema, appears in no log line of the orchestrator or the
//! worker (at the level they run with, info), in no API answer and in no
//! audit record.

mod common;

use std::time::{Duration, Instant};

use common::nats::NatsServer;
use common::process::{free_port, orchestrator, run_args, wait_ready};
use serde_json::{Value, json};

const PLANTED: &str = "hunter2-planted-7f3a9c";

/// An agent that fails with the password from its params in its last
/// stderr line, and a skill whose schema refuses a short password.
fn leaky_agent(dir: &std::path::Path) {
    common::command_agent(
        dir,
        json!({
            "name": "leaky", "version": "1.0.0", "description": "prints what it should not",
            "skills": [
                {"id": "login", "description": "log in"},
                {"id": "strict", "description": "log in, strictly",
                 "inputSchema": {"type": "object", "properties": {"password": {"type": "string", "maxLength": 4}}}}
            ],
            "invocation": {"type": "command", "command": ["python3", "leak.py"], "timeout": "30s"}
        }),
        "leak.py",
        "import json, sys\n\
         env = json.load(sys.stdin)\n\
         print('login failed for alice with password', env['payload']['params']['password'], file=sys.stderr)\n\
         sys.exit(1)\n",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planted_secret_is_in_no_log_line_answer_or_audit_record() {
    let nats = NatsServer::start();
    let agents = tempfile::tempdir().unwrap();
    leaky_agent(&agents.path().join("leaky"));
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let data_arg = data.path().to_str().unwrap();
    let mut run = orchestrator(
        &run_args(agents.path(), data.path(), port, &[]),
        &nats.url(),
        &logs.path().join("run.log"),
    );
    wait_ready(&format!("{base}/readyz")).await;
    let leaky_dir = agents.path().join("leaky");
    let mut worker = orchestrator(
        &[
            "worker",
            "--agent",
            leaky_dir.to_str().unwrap(),
            "--data-dir",
            data_arg,
        ],
        &nats.url(),
        &logs.path().join("worker.log"),
    );
    let http = common::process::admin_client(data.path());
    let mut answers = Vec::new();

    let refused = http
        .post(format!("{base}/v1/tasks"))
        .json(&json!({"to": "leaky", "action": "strict", "params": {"user": "alice", "password": PLANTED}}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 422);
    answers.push(refused.text().await.unwrap());

    let task = common::post_json(
        &http,
        &format!("{base}/v1/tasks"),
        &json!({"to": "leaky", "action": "login", "params": {"user": "alice", "password": PLANTED}, "max_attempts": 1}),
    )
    .await;
    let id = task["task_id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    let done: Value = loop {
        let t = common::get_json(&http, &format!("{base}/v1/tasks/{id}?wait=5s")).await;
        if t["state"] == "failed" {
            break t;
        }
        assert!(Instant::now() < deadline, "the task never failed: {t:#}");
    };
    let message = done["error"]["message"].as_str().unwrap();
    assert!(message.contains("[redacted]"), "{message}");
    answers.push(done.to_string());
    let audit = format!("{base}/v1/audit?task_id={id}&limit=100");
    answers.push(common::get_text(&http, &audit).await);
    // A refused credential is logged, never the credential itself.
    let wrong_key = format!("orch_{}", "W".repeat(43));
    let refused = reqwest::Client::new()
        .get(format!("{base}/v1/tasks"))
        .bearer_auth(&wrong_key)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 401);
    let admin_key = std::fs::read_to_string(data.path().join("keys/admin.api-key")).unwrap();
    run.kill();
    worker.kill();
    for answer in &answers {
        assert!(
            !answer.contains(PLANTED),
            "an API answer holds the secret: {answer}"
        );
    }
    let run_log = std::fs::read_to_string(logs.path().join("run.log")).unwrap();
    assert!(
        run_log.contains("API call refused"),
        "the refusal must be logged for the check below to mean anything"
    );
    for log in ["run.log", "worker.log"] {
        let text = std::fs::read_to_string(logs.path().join(log)).unwrap();
        assert!(
            !text.is_empty(),
            "{log} is empty: the test captured nothing"
        );
        for line in text.lines() {
            assert!(!line.contains(PLANTED), "{log} holds the secret: {line}");
            assert!(
                !line.contains(admin_key.trim()),
                "{log} holds the API key: {line}"
            );
            assert!(
                !line.contains(&wrong_key),
                "{log} holds a presented key: {line}"
            );
        }
    }
}
