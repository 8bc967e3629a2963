//! The authenticated HTTP API on a real broker: callers authenticate with
//! an API key or an issuer's bearer JWT and become a principal with scopes;
//! the principal is who the task's token names and who the audit records;
//! scopes are checked before anything is queued; a caller sees and cancels
//! only its own tasks unless granted more; `mode: none` says so on every
//! response.

use crate::common;

use std::time::Duration;

use base64::Engine;
use common::process::{free_port, orchestrator, wait_ready};
use common::system::{System, card, fast_bus};
use orchestrator::access::{IssuerSettings, Mode, api_keys};
use orchestrator::agent::AgentCard;
use reqwest::Method;
use serde_json::{Value, json};

/// An agent `mail` with a `read` skill needing `Files.Read` and a `send`
/// skill needing `Mail.Send`.
fn mail_card() -> AgentCard {
    let mut c: Value = serde_json::to_value(card("mail", &["read", "send"])).unwrap();
    c["skills"][0]["scopes"] = json!(["Files.Read"]);
    c["skills"][1]["scopes"] = json!(["Mail.Send"]);
    serde_json::from_value(c).unwrap()
}

/// Asserts a 403 `insufficient_scope` whose message names `scope`.
fn refused_for(status: u16, body: &Value, scope: &str) {
    assert_eq!(status, 403, "{body:#}");
    assert_eq!(body["error"]["code"], "insufficient_scope", "{body:#}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(scope), "{body:#}");
}

/// The claims of the task token of the first envelope in the task stream.
async fn first_token_claims(sys: &System) -> Value {
    let bus = sys.bus().await;
    let mut stream = bus
        .jetstream()
        .get_stream(bus.names().tasks_stream())
        .await
        .unwrap();
    let first = stream.info().await.unwrap().state.first_sequence;
    let message = stream.get_raw_message(first).await.unwrap();
    let envelope: Value = serde_json::from_slice(&message.payload).unwrap();
    let token = envelope["header"]["token"].as_str().unwrap();
    let claims = token.split('.').nth(1).unwrap();
    let claims = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(claims)
        .unwrap();
    serde_json::from_slice(&claims).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_are_authenticated_scoped_and_see_only_their_own_tasks() {
    let (alice, alice_entry) = common::system::key_for("alice", &["Files.Read"]);
    let (bob, bob_entry) = common::system::key_for("bob", &["Files.*"]);
    let (carol, carol_entry) = common::system::key_for("carol", &["orch:tasks:read_all"]);
    let sys = System::start_with(
        common::nats::NatsServer::start(),
        vec![mail_card()],
        fast_bus(),
        |c| c.api_auth.api_keys = vec![alice_entry, bob_entry, carol_entry],
    )
    .await;
    let (alice, bob, carol) = (
        Some(alice.as_str()),
        Some(bob.as_str()),
        Some(carol.as_str()),
    );
    let read = |key: &str| json!({"to": "mail", "action": "read", "params": {"q": 1}, "idempotency_key": key});

    // No credentials, a bad key, a malformed header: 401, nothing stored.
    let (status, body, headers) = sys
        .call_as(None, Method::POST, "/v1/tasks", Some(read("k0")))
        .await;
    assert_eq!(status, 401, "{body:#}");
    assert_eq!(body["error"]["code"], "unauthenticated");
    assert!(
        headers["www-authenticate"]
            .to_str()
            .unwrap()
            .starts_with("Bearer")
    );
    let (status, body, _) = sys.call_as(None, Method::GET, "/v1/tasks", None).await;
    assert_eq!(status, 401, "{body:#}");
    let wrong = api_keys::generate();
    let (status, body, _) = sys
        .call_as(Some(&wrong), Method::POST, "/v1/tasks", Some(read("k0")))
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (401, Some("invalid_credentials"))
    );
    let basic = reqwest::Client::new()
        .get(format!("{}/v1/tasks", sys.http))
        .header("authorization", "Basic YWxpY2U6cHc=")
        .send()
        .await
        .unwrap();
    assert_eq!(basic.status().as_u16(), 401);
    // Health checks need nothing.
    let (status, _, _) = sys.call_as(None, Method::GET, "/healthz", None).await;
    assert_eq!(status, 200);

    // Too few scopes: refused before anything is queued, naming the scope.
    let send = json!({"to": "mail", "action": "send", "params": {}});
    let (status, body, _) = sys
        .call_as(alice, Method::POST, "/v1/tasks", Some(send))
        .await;
    refused_for(status, &body, "Mail.Send");
    let more = json!({"to": "mail", "action": "read", "required_scopes": ["Admin.All"]});
    let (status, body, _) = sys
        .call_as(alice, Method::POST, "/v1/tasks", Some(more))
        .await;
    refused_for(status, &body, "Admin.All");
    assert_eq!(
        common::queued(&sys.bus().await).await,
        0,
        "nothing was queued"
    );
    let (_, all) = sys.get("/v1/tasks").await;
    assert_eq!(
        all["tasks"].as_array().unwrap().len(),
        0,
        "nothing was stored: {all:#}"
    );

    // Alice's task: its token names her, narrowed to what the task needs.
    let (status, task, _) = sys
        .call_as(alice, Method::POST, "/v1/tasks", Some(read("daily")))
        .await;
    assert_eq!(status, 201, "{task:#}");
    let id = task["task_id"].as_str().unwrap().to_string();
    common::eventually(
        "the envelope is queued",
        Duration::from_secs(10),
        || async { common::queued(&sys.bus().await).await == 1 },
    )
    .await;
    let claims = first_token_claims(&sys).await;
    assert_eq!(claims["sub"], "alice", "{claims:#}");
    assert_eq!(claims["scope"], "Files.Read", "{claims:#}");
    assert_eq!(claims["aud"], "mail");
    let (_, audit) = sys.get(&format!("/v1/audit?task_id={id}")).await;
    assert_eq!(audit["records"][0]["actor"], "alice", "{audit:#}");

    // The audit trail and the DLQ need their scopes.
    for path in ["/v1/audit", "/v1/audit/verify", "/v1/dlq"] {
        let (status, body, _) = sys.call_as(alice, Method::GET, path, None).await;
        assert_eq!(status, 403, "{path}: {body:#}");
    }
    let replay = format!("/v1/dlq/{id}/replay");
    let (status, body, _) = sys.call_as(alice, Method::POST, &replay, None).await;
    refused_for(status, &body, "orch:dlq:manage");
    let task_path = format!("/v1/tasks/{id}");
    let cancel_path = format!("/v1/tasks/{id}/cancel");

    // Bob cannot see Alice's task, nor learn it exists.
    let (status, _, _) = sys.call_as(bob, Method::GET, &task_path, None).await;
    assert_eq!(status, 404);
    let (status, _, _) = sys
        .call_as(bob, Method::GET, &format!("{task_path}?wait=1s"), None)
        .await;
    assert_eq!(status, 404);
    let (status, _, _) = sys.call_as(bob, Method::POST, &cancel_path, None).await;
    assert_eq!(status, 404);
    let (_, page, _) = sys.call_as(bob, Method::GET, "/v1/tasks", None).await;
    assert_eq!(page["tasks"].as_array().unwrap().len(), 0, "{page:#}");
    // The same idempotency key is Bob's own: a new task, no conflict, and
    // nothing of Alice's in the answer.
    let mut bobs = read("daily");
    bobs["params"] = json!({"q": 2});
    let (status, bob_task, _) = sys
        .call_as(bob, Method::POST, "/v1/tasks", Some(bobs.clone()))
        .await;
    assert_eq!(status, 201, "{bob_task:#}");
    assert_ne!(bob_task["task_id"], task["task_id"]);
    let (status, conflict, _) = sys
        .call_as(alice, Method::POST, "/v1/tasks", Some(bobs))
        .await;
    assert_eq!(status, 409, "{conflict:#}");
    assert!(
        !conflict
            .to_string()
            .contains(bob_task["task_id"].as_str().unwrap())
    );

    // Carol may read everyone's tasks, but not cancel them.
    let (status, seen, _) = sys.call_as(carol, Method::GET, &task_path, None).await;
    assert_eq!((status, &seen["task_id"]), (200, &task["task_id"]));
    let (_, page, _) = sys.call_as(carol, Method::GET, "/v1/tasks", None).await;
    assert_eq!(page["tasks"].as_array().unwrap().len(), 2, "{page:#}");
    let (status, body, _) = sys.call_as(carol, Method::POST, &cancel_path, None).await;
    refused_for(status, &body, "orch:tasks:cancel_all");

    // Alice sees and cancels her own.
    let (_, page, _) = sys
        .call_as(alice, Method::GET, "/v1/tasks?state=submitted", None)
        .await;
    assert_eq!(page["tasks"].as_array().unwrap().len(), 1, "{page:#}");
    assert_eq!(page["tasks"][0]["task_id"], task["task_id"]);
    let (status, canceled, _) = sys.call_as(alice, Method::POST, &cancel_path, None).await;
    assert_eq!(
        (status, canceled["state"].as_str()),
        (200, Some("canceled")),
        "{canceled:#}"
    );
    let (_, audit) = sys.get(&format!("/v1/audit?task_id={id}")).await;
    let actors: Vec<&str> = audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["actor"].as_str())
        .collect();
    assert!(actors.iter().all(|a| *a == "alice"), "{audit:#}");
}

/// A trigger's required scopes are checked before its run starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_needs_its_scopes() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("mail.yaml"),
        "id: mail\nrequired_scopes: [Mail.Send]\nsteps:\n  - {id: s, agent: mail, action: read, params: {}}\n",
    )
    .unwrap();
    let triggers = orchestrator::trigger::Triggers::load(dir.path(), &Default::default());
    assert!(triggers.errors.is_empty(), "{:?}", triggers.errors);
    let (alice, alice_entry) = common::system::key_for("alice", &["Files.Read"]);
    let (dora, dora_entry) = common::system::key_for("dora", &["Files.Read", "Mail.Send"]);
    let mut sys = System::start_with(
        common::nats::NatsServer::start(),
        vec![mail_card()],
        fast_bus(),
        |c| c.api_auth.api_keys = vec![alice_entry, dora_entry],
    )
    .await;
    sys.stop_orchestrator().await;
    sys.triggers = triggers;
    sys.start_orchestrator(vec![mail_card()]).await;
    let run = Some(json!({"input": {}}));
    let (status, body, _) = sys
        .call_as(
            Some(&alice),
            Method::POST,
            "/v1/triggers/mail/runs",
            run.clone(),
        )
        .await;
    refused_for(status, &body, "Mail.Send");
    assert_eq!(common::queued(&sys.bus().await).await, 0);
    let (status, body, _) = sys
        .call_as(Some(&dora), Method::POST, "/v1/triggers/mail/runs", run)
        .await;
    assert_eq!(status, 201, "{body:#}");
}

/// With `mode: none` every caller is `anonymous`, and every response says
/// that nobody authenticated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_authentication_every_response_says_so() {
    let sys = System::start_with(
        common::nats::NatsServer::start(),
        vec![card("echo", &["echo"])],
        fast_bus(),
        |c| c.api_auth.mode = Mode::None,
    )
    .await;
    assert!(sys.admin_key.is_none());
    let body = json!({"to": "echo", "action": "echo", "params": {}});
    let (status, task, headers) = sys
        .call_as(None, Method::POST, "/v1/tasks", Some(body))
        .await;
    assert_eq!(status, 201, "{task:#}");
    assert_eq!(headers["orch-auth"], "none");
    let (_, _, headers) = sys.call_as(None, Method::GET, "/healthz", None).await;
    assert_eq!(headers["orch-auth"], "none");
    let (_, _, headers) = sys
        .call_as(None, Method::GET, "/v1/nothing-here", None)
        .await;
    assert_eq!(headers["orch-auth"], "none");
    let id = task["task_id"].as_str().unwrap();
    let (_, audit, _) = sys
        .call_as(None, Method::GET, &format!("/v1/audit?task_id={id}"), None)
        .await;
    assert_eq!(audit["records"][0]["actor"], "anonymous", "{audit:#}");
}

/// A bearer JWT from the configured issuer makes `<issuer>#<sub>` the
/// principal, with the token's scopes; an expired one is refused. Its
/// principals are apart from the API keys': a token whose `sub` is an API
/// key's principal (`alice`) neither sees nor owns that key's tasks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_issuers_bearer_jwt_is_a_principal() {
    let idp = tempfile::tempdir().unwrap();
    let files = orchestrator::task_token::keys::generate(
        idp.path(),
        orchestrator::task_token::KeyKind::EdDsa,
        false,
    )
    .unwrap();
    let signing =
        jsonwebtoken::EncodingKey::from_ed_pem(&std::fs::read(&files.signing).unwrap()).unwrap();
    let public = files.verify.clone();
    let (alice_key, alice_entry) = common::system::key_for("alice", &["Files.Read"]);
    let sys = System::start_with(
        common::nats::NatsServer::start(),
        vec![mail_card()],
        fast_bus(),
        move |c| {
            c.api_auth.api_keys.push(alice_entry);
            c.api_auth.jwt = Some(IssuerSettings {
                issuer: "https://idp.test".into(),
                audience: "orchestrator-api".into(),
                public_key: Some(public),
                jwks_file: None,
                leeway: Duration::from_secs(5),
            })
        },
    )
    .await;
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let token_for = |sub: &str, exp: i64| {
        jsonwebtoken::encode(
            &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA),
            &json!({"iss": "https://idp.test", "aud": "orchestrator-api", "sub": sub,
                    "exp": exp, "scope": "Files.Read"}),
            &signing,
        )
        .unwrap()
    };
    let token = |exp: i64| token_for("dave@example.com", exp);
    let body = json!({"to": "mail", "action": "read", "params": {}});
    let good = token(now + 300);
    let (status, task, _) = sys
        .call_as(Some(&good), Method::POST, "/v1/tasks", Some(body.clone()))
        .await;
    assert_eq!(status, 201, "{task:#}");
    let id = task["task_id"].as_str().unwrap();
    let (_, audit) = sys.get(&format!("/v1/audit?task_id={id}")).await;
    assert_eq!(
        audit["records"][0]["actor"], "https://idp.test#dave@example.com",
        "{audit:#}"
    );
    // `alice` the API key and `alice` the token's subject are two callers.
    let body_for_alice = json!({"to": "mail", "action": "read", "params": {},
                                "idempotency_key": "same-key"});
    let (status, keys_task, _) = sys
        .call_as(
            Some(&alice_key),
            Method::POST,
            "/v1/tasks",
            Some(body_for_alice.clone()),
        )
        .await;
    assert_eq!(status, 201, "{keys_task:#}");
    let keys_id = keys_task["task_id"].as_str().unwrap();
    let token_alice = token_for("alice", now + 300);
    let (status, _, _) = sys
        .call_as(
            Some(&token_alice),
            Method::GET,
            &format!("/v1/tasks/{keys_id}"),
            None,
        )
        .await;
    assert_eq!(
        status, 404,
        "a token's `alice` saw the key's `alice`'s task"
    );
    let (status, tokens_task, _) = sys
        .call_as(
            Some(&token_alice),
            Method::POST,
            "/v1/tasks",
            Some(body_for_alice),
        )
        .await;
    assert_eq!(
        status, 201,
        "the same idempotency key is another caller's: {tokens_task:#}"
    );
    assert_ne!(tokens_task["task_id"], keys_task["task_id"]);
    let send = json!({"to": "mail", "action": "send", "params": {}});
    let (status, _, _) = sys
        .call_as(Some(&good), Method::POST, "/v1/tasks", Some(send))
        .await;
    assert_eq!(status, 403);
    let (status, body, _) = sys
        .call_as(
            Some(&token(now - 120)),
            Method::POST,
            "/v1/tasks",
            Some(body),
        )
        .await;
    assert_eq!(status, 401, "{body:#}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("expired")
    );
}

/// `run` with no credentials configured generates an administrator key and
/// says where; without it every call is refused. With `mode: none` it warns
/// at start-up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_makes_an_admin_key_or_warns_loudly() {
    let nats = common::nats::NatsServer::start();
    let data = tempfile::tempdir().unwrap();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let log = data.path().join("run.log");
    let data_arg = data.path().join("store");
    let addr = format!("127.0.0.1:{port}");
    let args = [
        "run",
        "--data-dir",
        data_arg.to_str().unwrap(),
        "--http-addr",
        &addr,
    ];
    let mut run = orchestrator(&args, &nats.url(), &log);
    wait_ready(&format!("{base}/readyz")).await;
    let said = std::fs::read_to_string(&log).unwrap();
    let key_file = data_arg.join("keys/admin.api-key");
    assert!(said.contains(&key_file.display().to_string()), "{said}");
    let anonymous = reqwest::get(format!("{base}/v1/agents")).await.unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);
    let admin = common::process::admin_client(&data_arg);
    let agents = admin.get(format!("{base}/v1/agents")).send().await.unwrap();
    assert_eq!(agents.status().as_u16(), 200);
    run.kill();

    let config = data.path().join("open.json");
    std::fs::write(&config, r#"{"api_auth": {"mode": "none"}}"#).unwrap();
    let open_log = data.path().join("open.log");
    let mut args = args.to_vec();
    args.extend(["--config", config.to_str().unwrap()]);
    let _open = orchestrator(&args, &nats.url(), &open_log);
    wait_ready(&format!("{base}/readyz")).await;
    let said = std::fs::read_to_string(&open_log).unwrap();
    assert!(said.contains("API AUTHENTICATION IS OFF"), "{said}");
    let anonymous = reqwest::get(format!("{base}/v1/agents")).await.unwrap();
    assert_eq!(anonymous.status().as_u16(), 200);
    assert_eq!(anonymous.headers()["orch-auth"], "none");

    // Contradictory settings are refused at start, naming the setting.
    std::fs::write(
        &config,
        json!({"api_auth": {"mode": "none", "api_keys": [common::system::key_for("x", &[]).1]}})
            .to_string(),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_orchestrator"))
        .args(&args)
        .env("NATS_URL", nats.url())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("api_auth.mode"));
}
