//! The command line as scripts use it: exit codes and `--json` output.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{envelope, new_task, with_raw_sled};
use orchestrator::{Store, StoreConfig};
use serde_json::{Value, json};

fn orchestrator(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_orchestrator"))
        .args(args)
        .output()
        .unwrap()
}

fn stdout_json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

fn docs_example(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("docs/examples")
        .join(name)
        .display()
        .to_string()
}

/// The shipped examples pass `envelope check`; a broken envelope fails with
/// exit code 1 and names the field; a missing file is exit code 2.
#[test]
fn envelope_check_reports_the_bad_field() {
    let ok = orchestrator(&["envelope", "check", &docs_example("envelope.json")]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let ok = orchestrator(&[
        "envelope",
        "check",
        "--event",
        "--json",
        &docs_example("worker-event.json"),
    ]);
    assert_eq!(stdout_json(&ok)["ok"], true);

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.json");
    let mut v: Value =
        serde_json::from_str(&std::fs::read_to_string(docs_example("envelope.json")).unwrap())
            .unwrap();
    v["control"]
        .as_object_mut()
        .unwrap()
        .remove("idempotency_key");
    std::fs::write(&file, v.to_string()).unwrap();
    let bad = orchestrator(&["envelope", "check", "--json", file.to_str().unwrap()]);
    assert_eq!(bad.status.code(), Some(1));
    let out = stdout_json(&bad);
    assert_eq!(out["error"]["code"], "missing_field");
    assert_eq!(out["error"]["field"], "control.idempotency_key");
    let human = orchestrator(&["envelope", "check", file.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&human.stderr).contains("control.idempotency_key"));

    let big = orchestrator(&[
        "envelope",
        "check",
        "--json",
        "--max-bytes",
        "100",
        &docs_example("envelope.json"),
    ]);
    assert_eq!(stdout_json(&big)["error"]["code"], "payload_too_large");

    std::fs::write(&file, "{\n  \"v\": 1,\n  \"header\": {").unwrap();
    let truncated = stdout_json(&orchestrator(&[
        "envelope",
        "check",
        "--json",
        file.to_str().unwrap(),
    ]));
    assert_eq!(truncated["error"]["code"], "malformed_json");
    assert_eq!(truncated["error"]["line"], 3);

    let missing = orchestrator(&["envelope", "check", "/nonexistent/envelope.json"]);
    assert_eq!(missing.status.code(), Some(2));
}

/// `store verify` passes a healthy store, finds a tampered audit record
/// (exit 1), and refuses a damaged store with its path (exit 2).
#[tokio::test]
async fn store_verify_checks_the_chain_and_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    {
        let store = Store::open(&StoreConfig::in_data_dir(&data)).unwrap();
        for i in 0..3 {
            store
                .submit(new_task(envelope(
                    "echo",
                    "echo",
                    json!({"i": i}),
                    &format!("k{i}"),
                )))
                .await
                .unwrap();
        }
    }
    let data_arg = data.to_str().unwrap();
    let ok = orchestrator(&["store", "verify", "--json", "--data-dir", data_arg]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stdout)
    );
    let out = stdout_json(&ok);
    assert_eq!(
        (
            out["audit"]["records"].clone(),
            out["indexes"]["tasks"].clone()
        ),
        (json!(3), json!(3))
    );

    let store_path = data.join("store");
    with_raw_sled(&store_path, |db| {
        db.open_tree("audit")
            .unwrap()
            .remove(2u64.to_be_bytes())
            .unwrap();
    });
    let broken = orchestrator(&["store", "verify", "--data-dir", data_arg]);
    assert_eq!(broken.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&broken.stdout).contains("BROKEN at record 2"));

    let db_file = store_path.join("db");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&db_file)
        .unwrap()
        .set_len(200)
        .unwrap();
    let damaged = orchestrator(&["store", "verify", "--data-dir", data_arg]);
    assert_eq!(damaged.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&damaged.stderr).contains(&store_path.display().to_string()));
}
