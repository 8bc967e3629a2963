//! Secrets stay secret: a planted password, given as a sensitive param to a
//! command agent that prints it in its failure message and refused by a
//! skill's inputSchema, appears in no log line of the orchestrator or the
//! worker (at the level they run with, info), in no API answer and in no
//! audit record. A worker's own credentials (a model's API key, a
//! configured secret, the task's token) that a service quotes back are
//! scrubbed the same way.

use crate::common;

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

/// Submits `task` at `base` and waits until it failed (a minute at most):
/// the task as it ended.
async fn failed(http: &reqwest::Client, base: &str, task: Value) -> Value {
    let task = common::post_json(http, &format!("{base}/v1/tasks"), &task).await;
    let id = task["task_id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let t = common::get_json(http, &format!("{base}/v1/tasks/{id}?wait=5s")).await;
        if t["state"] == "failed" {
            return t;
        }
        assert!(Instant::now() < deadline, "the task never failed: {t:#}");
    }
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

    let done = failed(
        &http,
        &base,
        json!({"to": "leaky", "action": "login", "params": {"user": "alice", "password": PLANTED}, "max_attempts": 1}),
    )
    .await;
    let id = done["task_id"].as_str().unwrap().to_string();
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

/// The model's key, and a configured secret of an HTTP agent's worker.
const MODEL_KEY: &str = "sk-planted-0123456789abcdef";
const DB_SECRET: &str = "db-planted-secret-42a7";

/// A provider that quotes the key it was given (in a 401's body, a 500's
/// body, and a redirect's `Location` header the client follows to a port
/// nothing answers, which names the key in no error), and an HTTP agent's service that quotes a configured
/// secret (500) and the task token it was sent (401): the worker
/// processes report each failure with `[redacted]` in its place, and no
/// API answer, audit record or log line holds any of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_services_words_never_carry_the_workers_credentials() {
    use common::llm::{Model, Reply};
    let model = Model::serve(|r| {
        let text = r["messages"].as_array().unwrap().last().unwrap()["content"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let quote = json!({"error": {"message": format!("Incorrect API key provided: {MODEL_KEY}"), "type": "invalid_request_error"}});
        match text.as_str() {
            "401" => Reply::Status(401, quote, None),
            "500" => Reply::Status(500, json!({"error": {"message": format!("upstream saw Authorization: Bearer {MODEL_KEY}")}}), None),
            _ => Reply::Redirect(format!("http://127.0.0.1:1/v1/chat?api_key={MODEL_KEY}")),
        }
    })
    .await;
    // The HTTP agent's service: 500 quoting the secret, 401 quoting the
    // token it got.
    let service = axum::Router::new().route(
        "/",
        axum::routing::post(|headers: axum::http::HeaderMap, body: String| async move {
            use axum::response::IntoResponse;
            let token = headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string();
            if body.contains("secret") {
                (axum::http::StatusCode::INTERNAL_SERVER_ERROR, format!("{{\"error\": {{\"message\": \"the database refused password {DB_SECRET}\"}}}}")).into_response()
            } else {
                (axum::http::StatusCode::UNAUTHORIZED, format!("{{\"error\": {{\"message\": \"refused {token}\"}}}}")).into_response()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let service_url = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, service).await.unwrap() });

    let nats = NatsServer::start();
    let agents = tempfile::tempdir().unwrap();
    let write = |name: &str, card: Value| {
        std::fs::create_dir_all(agents.path().join(name)).unwrap();
        std::fs::write(
            agents.path().join(name).join("agent.json"),
            card.to_string(),
        )
        .unwrap();
    };
    write(
        "writer",
        json!({
            "name": "writer", "version": "1.0.0", "description": "writes",
            "skills": [{"id": "write", "description": "write"}],
            "invocation": {"type": "llm", "model": "stub-model", "baseUrl": model.url,
                           "apiKeyEnv": "ORCH_TEST_MODEL_KEY", "timeout": "10s"}
        }),
    );
    write(
        "store",
        json!({
            "name": "store", "version": "1.0.0", "description": "stores",
            "skills": [{"id": "put", "description": "put"}],
            "invocation": {"type": "http", "url": service_url, "poll": "100ms", "timeout": "5s"}
        }),
    );
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let config = logs.path().join("worker.json");
    std::fs::write(
        &config,
        json!({"secret_env": ["ORCH_TEST_DB_SECRET"]}).to_string(),
    )
    .unwrap();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let mut run = orchestrator(
        &run_args(agents.path(), data.path(), port, &[]),
        &nats.url(),
        &logs.path().join("run.log"),
    );
    wait_ready(&format!("{base}/readyz")).await;
    let env = [
        ("ORCH_TEST_MODEL_KEY", MODEL_KEY),
        ("ORCH_TEST_DB_SECRET", DB_SECRET),
    ];
    let mut workers = Vec::new();
    for name in ["writer", "store"] {
        let dir = agents.path().join(name);
        workers.push(common::process::orchestrator_with_env(
            &[
                "worker",
                "--agent",
                dir.to_str().unwrap(),
                "--data-dir",
                data.path().to_str().unwrap(),
                "--config",
                config.to_str().unwrap(),
            ],
            &nats.url(),
            &logs.path().join(format!("{name}.log")),
            &env,
        ));
    }
    let http = common::process::admin_client(data.path());
    let mut answers = Vec::new();
    let cases = [
        ("writer", "write", json!({"text": "401"})),
        ("writer", "write", json!({"text": "500"})),
        ("writer", "write", json!({"text": "redirect"})),
        ("store", "put", json!({"what": "secret"})),
        ("store", "put", json!({"what": "token"})),
    ];
    for (to, action, params) in cases {
        let done = failed(
            &http,
            &base,
            json!({"to": to, "action": action, "params": params, "max_attempts": 1}),
        )
        .await;
        let message = done["error"]["message"].as_str().unwrap();
        // A header never reaches a reported text (reqwest names the URL
        // asked, not the one it was sent to): nothing to scrub there, and
        // the checks below hold that.
        if params["text"] != "redirect" {
            assert!(message.contains("[redacted]"), "{params}: {done:#}");
        }
        answers.push(done.to_string());
        let correlation = done["correlation_id"].as_str().unwrap();
        answers.push(
            common::get_text(
                &http,
                &format!("{base}/v1/tasks?correlation_id={correlation}&limit=100"),
            )
            .await,
        );
        answers.push(
            common::get_text(
                &http,
                &format!("{base}/v1/audit?correlation_id={correlation}&limit=100"),
            )
            .await,
        );
    }
    run.kill();
    for w in &mut workers {
        w.kill();
    }
    for answer in &answers {
        for secret in [MODEL_KEY, DB_SECRET, "eyJ"] {
            assert!(
                !answer.contains(secret),
                "an answer holds {secret}: {answer}"
            );
        }
    }
    for log in ["run.log", "writer.log", "store.log"] {
        let text = std::fs::read_to_string(logs.path().join(log)).unwrap();
        assert!(
            !text.is_empty(),
            "{log} is empty: the test captured nothing"
        );
        for secret in [MODEL_KEY, DB_SECRET] {
            assert!(!text.contains(secret), "{log} holds {secret}");
        }
    }
}
