//! `invocation.type: a2a`: an agent whose work is done by a remote A2A
//! agent, here one built from the official a2a-sdk server classes
//! (`tests/a2a/remote_agent.py`), which logs every message, cancel and call
//! it gets. The worker sends one message per attempt, streams the remote's
//! progress into ours, surfaces its questions, cancels it with ours, and
//! resumes it after a SIGKILL without a second message.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::a2a::{message, rpc};
use common::system::{System, fast_bus};
use orchestrator::agent::AgentCard;
use serde_json::{Value, json};

/// The remote agent, a Python process killed on drop.
struct Remote {
    child: Child,
    port: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Remote {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Remote {
    async fn start() -> Remote {
        let python = std::env::var("A2A_SDK_PYTHON").unwrap_or_else(|_| {
            panic!("A2A_SDK_PYTHON is not set: run the tests with scripts/test, or set it to the output of scripts/ensure-a2a-sdk")
        });
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("remote.log");
        let port = common::process::free_port();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/a2a/remote_agent.py");
        let child = Command::new(python)
            .arg(script)
            .arg(port.to_string())
            .arg(&log)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let remote = Remote {
            child,
            port,
            log,
            _dir: dir,
        };
        common::process::wait_ready(&remote.card_url()).await;
        remote
    }

    fn card_url(&self) -> String {
        format!("http://127.0.0.1:{}/.well-known/agent-card.json", self.port)
    }

    /// What it logged, by kind.
    fn logged(&self, event: &str) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|v| v["event"] == event)
            .collect()
    }

    /// Lets a `wait` task go on.
    fn go(&self) {
        std::fs::write(self.log.with_extension("log.go"), "").unwrap();
    }
}

/// The card of agent `remote`, delegating to `card_url` with `HOME` as
/// its credential (so the test knows the value the remote must see).
fn card_for(card_url: &str) -> Value {
    json!({
        "name": "remote", "version": "1.0.0", "description": "paints, remotely",
        "skills": [{"id": "paint", "description": "paints"}],
        "invocation": {"type": "a2a", "card": card_url, "poll": "100ms",
                       "auth": {"env": "HOME", "scheme": "Token"}, "forward": ["context"]},
        "delivery": {"ackWait": "2s"}
    })
}

async fn system(remote: &Remote) -> (System, AgentCard) {
    let card: AgentCard = serde_json::from_value(card_for(&remote.card_url())).unwrap();
    let mut sys = System::start(vec![card.clone()], fast_bus()).await;
    let handler =
        orchestrator::worker::handler_for(&card, &Default::default(), &Default::default()).unwrap();
    sys.worker(card.clone(), handler).await;
    (sys, card)
}

async fn wait_state(sys: &System, id: &str, state: &str) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, t) = sys.get(&format!("/v1/tasks/{id}")).await;
        if t["state"] == state {
            return t;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never {state}: {t:#}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A task done remotely: one message reached the remote (its id our task
/// id and attempt, with the credential from the worker's environment and
/// nothing of ours), its steps came back as progress, its artifacts as
/// the result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_agent_does_the_task_and_its_progress_comes_back() {
    let remote = Remote::start().await;
    let (sys, _) = system(&remote).await;
    let id = sys
        .submit("remote", "paint", json!({"text": "steps 3"}))
        .await;
    let t = wait_state(&sys, &id, "completed").await;
    assert_eq!(t["result"]["notes"], "notes", "{t:#}");
    assert_eq!(t["result"]["result"]["steps"].as_f64(), Some(3.0), "{t:#}");
    let said: Vec<&str> = t["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|h| h["progress"]["message"].as_str())
        .collect();
    assert_eq!(said, ["step 1", "step 2", "step 3"], "{t:#}");
    let messages = remote.logged("message");
    assert_eq!(messages.len(), 1, "{messages:#?}");
    assert_eq!(messages[0]["message_id"], format!("{id}-1"));
    assert_eq!(
        messages[0]["context_id"], t["correlation_id"],
        "`forward: [context]`: our correlation id is its context"
    );
    let home = std::env::var("HOME").unwrap();
    let calls = remote.logged("call");
    assert!(calls.len() >= 2, "a send and reads: {calls:#?}");
    for call in calls {
        assert_eq!(call["authorization"], format!("Token {home}"));
    }
}

/// The remote asks for input: our task asks the same (over A2A here),
/// and the answer goes to the remote task as its next message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_question_is_ours_and_our_answer_is_its() {
    let remote = Remote::start().await;
    let (sys, _) = system(&remote).await;
    let asked = rpc(
        &sys,
        "SendMessage",
        json!({"message": message("m-ask", json!([{"text": "ask"}]), json!({"skillId": "remote/paint"}))}),
    )
    .await;
    let task = &asked["result"]["task"];
    assert_eq!(
        task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{asked:#}"
    );
    assert_eq!(
        task["status"]["message"]["parts"][0]["text"],
        "which colour?"
    );
    let id = task["id"].as_str().unwrap().to_string();
    let answered = rpc(
        &sys,
        "SendMessage",
        json!({"message": {"messageId": "m-blue", "role": "ROLE_USER", "taskId": id,
                           "parts": [{"text": "blue"}]}}),
    )
    .await;
    assert_eq!(
        answered["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{answered:#}"
    );
    let (_, t) = sys.get(&format!("/v1/tasks/{id}")).await;
    assert_eq!(t["result"], json!({"paint": "painted blue"}));
    let messages = remote.logged("message");
    let ids: Vec<&str> = messages
        .iter()
        .map(|m| m["message_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [format!("{id}-1"), format!("{id}-2")]);
    assert_eq!(
        messages[0]["task_id"], messages[1]["task_id"],
        "one remote task"
    );
    assert_eq!(messages[1]["text"], "blue");

    // `auth-required` is ours too.
    let auth = sys.submit("remote", "paint", json!({"text": "auth"})).await;
    let t = wait_state(&sys, &auth, "auth_required").await;
    assert_eq!(t["error"]["code"], "remote_auth_required", "{t:#}");
    assert_eq!(t["error"]["message"], "sign in first");
}

/// Canceling ours cancels the remote task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canceling_the_task_cancels_the_remote_task() {
    let remote = Remote::start().await;
    let (sys, _) = system(&remote).await;
    let id = sys.submit("remote", "paint", json!({"text": "hold"})).await;
    common::eventually("the remote has it", Duration::from_secs(20), || async {
        !remote.logged("message").is_empty()
    })
    .await;
    let (status, _) = sys.post(&format!("/v1/tasks/{id}/cancel"), json!({})).await;
    assert_eq!(status, 200);
    wait_state(&sys, &id, "canceled").await;
    common::eventually(
        "the remote is canceled",
        Duration::from_secs(20),
        || async { !remote.logged("cancel").is_empty() },
    )
    .await;
    let message = &remote.logged("message")[0];
    assert_eq!(remote.logged("cancel")[0]["task_id"], message["task_id"]);
}

/// A remote that is down: a retryable failure, so the task is tried
/// again, then fails with why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_that_is_down_is_a_retryable_failure() {
    let nowhere = format!(
        "http://127.0.0.1:{}/.well-known/agent-card.json",
        common::process::free_port()
    );
    let card: AgentCard = serde_json::from_value(card_for(&nowhere)).unwrap();
    let mut sys = System::start(vec![card.clone()], fast_bus()).await;
    sys.worker(
        card.clone(),
        orchestrator::worker::handler_for(&card, &Default::default(), &Default::default()).unwrap(),
    )
    .await;
    let (status, t) = sys
        .post(
            "/v1/tasks",
            json!({"to": "remote", "action": "paint", "params": {"text": "x"}, "max_attempts": 2}),
        )
        .await;
    assert_eq!(status, 201, "{t:#}");
    let id = t["task_id"].as_str().unwrap();
    let t = wait_state(&sys, id, "failed").await;
    assert_eq!(t["attempt"], 2, "tried again: {t:#}");
    assert_eq!(t["error"]["code"], "remote_unavailable", "{t:#}");
    assert_eq!(t["error"]["retryable"], true);
}

/// The worker is SIGKILLed while the remote works: the next worker
/// follows the same remote task (its id was left in the task's note), so
/// the remote got one message in all, and the task completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_resumes_the_remote_task_without_a_second_message() {
    let remote = Remote::start().await;
    let card_json = card_for(&remote.card_url());
    let card: AgentCard = serde_json::from_value(card_json.clone()).unwrap();
    let sys = System::start(vec![card], fast_bus()).await;
    let agents = tempfile::tempdir().unwrap();
    let worker = |log: &str| sys.worker_process(agents.path(), &card_json, log);
    let mut first = worker("first.log");
    let id = sys
        .submit("remote", "paint", json!({"text": "steps 2 wait"}))
        .await;
    common::eventually("the remote has it", Duration::from_secs(30), || async {
        !remote.logged("message").is_empty()
    })
    .await;
    // Past the send, and the note (it is left before anything waits).
    tokio::time::sleep(Duration::from_millis(300)).await;
    first.kill();
    let _second = worker("second.log");
    remote.go();
    let t = wait_state(&sys, &id, "completed").await;
    assert_eq!(t["result"]["result"]["steps"].as_f64(), Some(2.0), "{t:#}");
    let messages = remote.logged("message");
    assert_eq!(messages.len(), 1, "one message in all: {messages:#?}");
}
