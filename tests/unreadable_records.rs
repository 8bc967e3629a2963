//! A stored record the orchestrator cannot decode never stops it: it
//! starts, sets the task aside (quarantined, audited), lists the rest,
//! and `store verify` names the record before and after.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::system::{System, card};
use common::{eventually, with_raw_sled};
use orchestrator::TaskId;
use serde_json::{Value, json};

/// A value nested `levels` deep: past serde_json's limit of 128, what a
/// version without the depth bound could store.
fn too_deep(levels: usize) -> Value {
    let mut value = json!(1);
    for _ in 0..levels {
        value = json!([value]);
    }
    value
}

/// `orchestrator store verify --json` on `data`: its exit code and output.
fn verify(data: &std::path::Path) -> (i32, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_orchestrator"))
        .args(["store", "verify", "--json", "--data-dir"])
        .arg(data)
        .output()
        .unwrap();
    let report = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.code().unwrap_or(-1), report)
}

/// An operator whose store holds an envelope no decoder can read (one
/// task still queued, one long finished) restarts the orchestrator: it
/// starts, reports and quarantines both (audited), serves every other
/// task, answers 410 for the two, and `store verify` finds them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecodable_task_is_set_aside_and_the_orchestrator_keeps_serving() {
    let cards = vec![card("echo", &["echo"])];
    let mut sys = System::start(cards.clone(), common::system::fast_bus()).await;
    let finished = sys.submit("echo", "echo", json!({"n": 1})).await;
    let (status, _) = sys
        .post(&format!("/v1/tasks/{finished}/cancel"), json!({}))
        .await;
    assert_eq!(status, 200);
    let queued = sys.submit("echo", "echo", json!({"n": 2})).await;
    let healthy = sys.submit("echo", "echo", json!({"n": 3})).await;
    sys.stop_orchestrator().await;

    // Each envelope as stored, its params nested too deep to read back.
    let store = sys.data.path().join("store");
    with_raw_sled(&store, |db| {
        let envelopes = db.open_tree("envelopes").unwrap();
        for id in [&finished, &queued] {
            let id: TaskId = id.parse().unwrap();
            let stored = envelopes.get(id.as_bytes()).unwrap().unwrap();
            let mut envelope: Value = serde_json::from_slice(&stored).unwrap();
            envelope["payload"]["params"]["x"] = too_deep(130);
            let bytes = serde_json::to_vec(&envelope).unwrap();
            envelopes.insert(id.as_bytes(), bytes).unwrap();
        }
    });
    let (code, report) = verify(sys.data.path());
    assert_eq!(code, 1, "{report:#}");
    let problems = report["indexes"]["problems"].to_string();
    assert!(
        problems.contains(&finished) && problems.contains(&queued),
        "{report:#}"
    );
    assert!(problems.contains("recursion limit exceeded"), "{report:#}");

    sys.start_orchestrator(cards).await;
    common::process::wait_ready(&format!("{}/readyz", sys.http)).await;
    // The queued one was met by recovery and set aside at start.
    let (status, body) = sys.get(&format!("/v1/tasks/{queued}")).await;
    assert_eq!(status, 410, "{body:#}");
    assert_eq!(body["error"]["code"], "quarantined");
    // Listings skip the finished one, which recovery did not walk ...
    let (status, page) = sys.get("/v1/tasks?limit=100").await;
    assert_eq!(status, 200, "{page:#}");
    let listed = common::strings(&page, "tasks", "task_id");
    assert_eq!(listed, vec![healthy.clone()], "{page:#}");
    // ... and the reaper's next scan sets it aside too.
    eventually(
        "the finished task quarantined",
        Duration::from_secs(10),
        || async { sys.get(&format!("/v1/tasks/{finished}")).await.0 == 410 },
    )
    .await;
    for id in [&finished, &queued] {
        let (_, audit) = sys.get(&format!("/v1/audit?task_id={id}")).await;
        let kinds = common::strings(&audit, "records", "kind");
        assert_eq!(
            kinds.last().map(String::as_str),
            Some("task.quarantined"),
            "{audit:#}"
        );
    }
    // Everything else works as before.
    let (status, _) = sys.get(&format!("/v1/tasks/{healthy}")).await;
    assert_eq!(status, 200);
    sys.submit("echo", "echo", json!({"n": 4})).await;
    sys.stop_orchestrator().await;

    let (code, report) = verify(sys.data.path());
    assert_eq!(code, 0, "{report:#}");
    let set_aside = common::strings(&report, "quarantined", "task_id");
    assert_eq!(set_aside.len(), 2, "{report:#}");
    assert!(set_aside.contains(&finished) && set_aside.contains(&queued));
}

/// A maintenance command never creates a store: `store verify` on a
/// mistyped directory fails and leaves nothing behind.
#[test]
fn store_verify_never_creates_a_store() {
    let dir = tempfile::tempdir().unwrap();
    let typo = dir.path().join("dta");
    let (code, report) = verify(&typo);
    assert_eq!(code, 2, "{report:#}");
    assert_eq!(report["error"]["code"], "store_unavailable");
    assert!(!typo.exists(), "verify created {}", typo.display());
}
