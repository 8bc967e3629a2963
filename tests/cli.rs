//! The command line as scripts use it: exit codes and `--json` output.

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

use common::{envelope, new_task, with_raw_sled};
use orchestrator::{Store, StoreSettings};
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
        let store = Store::open(&StoreSettings::in_data_dir(&data)).unwrap();
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

/// `validate` passes what ships, and lists each kind of mistake with its
/// file, line and field, exiting 1; a path that is not there is a problem
/// too.
#[test]
fn validate_lists_every_mistake_with_file_and_line() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let shipped: Vec<String> = ["triggers", "agents", "docs/examples/triggers"]
        .iter()
        .map(|d| root.join(d).display().to_string())
        .collect();
    let mut args = vec!["validate", "--json"];
    args.extend(shipped.iter().map(String::as_str));
    let ok = orchestrator(&args);
    let report = stdout_json(&ok);
    assert_eq!(report["ok"], true, "{report:#}");
    assert_eq!(ok.status.code(), Some(0));
    assert!(
        report["triggers"].as_array().unwrap().len() >= 4,
        "{report}"
    );
    assert_eq!(
        report["agents"],
        json!(["knowledge-agent", "outlook-agent"]),
        "{report}"
    );

    let dir = tempfile::tempdir().unwrap();
    let agents = dir.path().join("agents");
    for name in ["knowledge-agent", "outlook-agent"] {
        std::fs::create_dir_all(agents.join(name)).unwrap();
        std::fs::copy(
            root.join("agents").join(name).join("agent.json"),
            agents.join(name).join("agent.json"),
        )
        .unwrap();
    }
    // A card broken on a known line: the first skill's id emptied.
    let card = agents.join("outlook-agent/agent.json");
    let text = std::fs::read_to_string(&card).unwrap();
    let mut value: Value = serde_json::from_str(&text).unwrap();
    value["skills"][0]["id"] = json!("");
    let text = serde_json::to_string_pretty(&value).unwrap();
    let card_line = text
        .lines()
        .position(|l| l.trim() == r#""id": "","#)
        .unwrap()
        + 1;
    std::fs::write(&card, text).unwrap();
    let triggers = dir.path().join("triggers");
    std::fs::create_dir(&triggers).unwrap();
    std::fs::write(
        triggers.join("broken.yaml"),
        "\
id: broken
required_scopes: []
steps:
  - id: search
    agent: knowledge-agent
    action: search:kb
    params: { query: \"{{ input.query }}\" }
  - id: draft
    agent: nobody
    action: draft:email
  - id: summary
    agent: knowledge-agent
    action: summarize:nothing
  - id: early
    agent: knowledge-agent
    action: search:kb
    params:
      query: \"{{ steps.late.result }}\"
      typo: \"{{ steps.missing.result }}\"
  - id: late
    agent: knowledge-agent
    action: search:kb
  - id: search
    agent: knowledge-agent
    action: search:kb
",
    )
    .unwrap();
    std::fs::write(triggers.join("syntax.yaml"), "id: [unclosed\n").unwrap();
    let missing = dir.path().join("nowhere");
    let out = orchestrator(&[
        "validate",
        "--json",
        &triggers.display().to_string(),
        &agents.display().to_string(),
        &missing.display().to_string(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let report = stdout_json(&out);
    assert_eq!(report["ok"], false);
    let found: Vec<(String, Value, Value, String)> = report["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let file = Path::new(p["file"].as_str().unwrap());
            (
                file.file_name().unwrap().to_string_lossy().into_owned(),
                p["line"].clone(),
                p["field"].clone(),
                p["message"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let expected: [(&str, Value, &str, &str); 10] = [
        ("nowhere", Value::Null, "", "no such file"),
        ("agent.json", json!(card_line), "skills[0].id", "non-empty"),
        ("broken.yaml", json!(6), "steps[0].action", "Files.Read"),
        (
            "broken.yaml",
            json!(9),
            "steps[1].agent",
            "no agent `nobody`",
        ),
        (
            "broken.yaml",
            json!(13),
            "steps[2].action",
            "has no skill `summarize:nothing`",
        ),
        ("broken.yaml", json!(16), "steps[3].action", "Files.Read"),
        ("broken.yaml", json!(18), "steps[3].params.query", "a cycle"),
        (
            "broken.yaml",
            json!(19),
            "steps[3].params.typo",
            "no step has the id `missing`",
        ),
        (
            "broken.yaml",
            json!(23),
            "steps[5].id",
            "also the id of steps[0]",
        ),
        ("syntax.yaml", json!(1), "", ""),
    ];
    let mut rest = found.clone();
    for (file, line, field, words) in expected {
        let at = rest.iter().position(|(f, l, fd, m)| {
            f == file && *l == line && (field.is_empty() || fd == field) && m.contains(words)
        });
        let Some(at) = at else {
            panic!("no problem {file}:{line}: {field}: {words} in {found:#?}");
        };
        rest.remove(at);
    }
    // What is left are the scope problems of the other search steps.
    assert!(
        rest.iter().all(|(_, _, _, m)| m.contains("Files.Read")),
        "{rest:#?}"
    );

    // Without --json: one `file:line: field: message` line each.
    let broken = triggers.join("broken.yaml").display().to_string();
    let out = orchestrator(&["validate", &broken, &agents.display().to_string()]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("broken.yaml:9: steps[1].agent: no agent `nobody` is known\n"),
        "{text}"
    );
    assert!(text.contains("broken.yaml:23: steps[5].id:"), "{text}");
    // Without cards, what needs them is not checked, and that is said.
    let out = orchestrator(&["validate", &broken]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("no agent `nobody`"), "{text}");
    assert!(text.contains("were not checked"), "{text}");
}

/// `validate` says what `orchestrator worker` refuses, in the same words:
/// a card that names a built-in handler there is not is a problem naming
/// the field; one that does not say how to run its agent (a worker of
/// one's own may serve it) a warning naming the field. The worker fails
/// to start on either.
#[test]
fn validate_and_the_worker_agree_on_what_a_card_needs_to_run() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("nothing", json!(null), "invocation", "warnings", 0),
        (
            "ghost",
            json!({"type": "builtin", "handler": "ghost"}),
            "invocation.handler",
            "problems",
            1,
        ),
    ];
    for (name, invocation, field, list, code) in cases {
        let agent = dir.path().join(name);
        std::fs::create_dir_all(&agent).unwrap();
        let mut card = json!({"name": name, "version": "1.0.0", "description": "d",
                              "skills": [{"id": "do", "description": "d"}]});
        if !invocation.is_null() {
            card["invocation"] = invocation;
        }
        std::fs::write(agent.join("agent.json"), card.to_string()).unwrap();
        let out = orchestrator(&["validate", "--json", agent.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(code));
        let report = stdout_json(&out);
        assert_eq!(report[list][0]["field"], field, "{report:#}");
        let said = report[list][0]["message"].as_str().unwrap().to_string();
        let worker = orchestrator(&["worker", "--agent", agent.to_str().unwrap()]);
        assert_ne!(worker.status.code(), Some(0));
        let stderr = String::from_utf8_lossy(&worker.stderr);
        assert!(stderr.contains(&said), "{said} / {stderr}");
    }
}
