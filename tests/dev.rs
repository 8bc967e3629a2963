//! `orchestrator dev` and `orchestrator new agent`, end to end: agents
//! scaffolded in Python and sh, run by `dev` with the orchestrator and its
//! managed broker, called from the CLI (which finds the API key `dev`
//! made), a retry through exit code 75, a trigger that uses an agent, and
//! Ctrl-C stopping every process `dev` started.

use crate::common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use common::dev::{BROKER_PORT, Dev, listening};
use serde_json::Value;

fn orchestrator(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_orchestrator"))
        .args(args)
        .current_dir(dir)
        .env_remove("ORCH_API_KEY")
        .env_remove("ORCH_SERVER")
        .output()
        .unwrap()
}

/// A client command against `dev`, from its directory: no key given.
fn client(dev: &Dev, dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_orchestrator"))
        .args(args)
        .current_dir(dir)
        .env_remove("ORCH_API_KEY")
        .env("ORCH_SERVER", &dev.url)
        .env("ORCH_CLIENT_CONFIG", dir.join("no-client-file.json"))
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn dev_runs_every_agent_and_ctrl_c_stops_everything_it_started() {
    let _one = BROKER_PORT.lock().unwrap_or_else(|e| e.into_inner());
    assert!(!listening(4222), "something listens on 4222 already");
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for args in [
        &["new", "agent", "greeter"][..],
        &["new", "agent", "shy", "--lang", "sh"],
    ] {
        let out = orchestrator(root, args);
        assert!(out.status.success(), "{}", text(&out));
    }
    std::fs::create_dir(root.join("triggers")).unwrap();
    std::fs::write(
        root.join("triggers/welcome.yaml"),
        "id: welcome\nname: Welcome\ndescription: Greets.\nrequired_scopes: []\nrun_mode: on_demand\n\
         input_schema: { type: object, required: [who], properties: { who: { type: string } } }\n\
         steps:\n  - id: greet\n    agent: greeter\n    action: greet\n    params: { name: \"{{ input.who }}\" }\n",
    )
    .unwrap();

    let mut dev = Dev::start(root, &[]);
    // Every process's lines, each after its name.
    for name in ["orchestrator |", "greeter |", "shy |"] {
        assert!(
            dev.running
                .lines
                .lock()
                .unwrap()
                .iter()
                .any(|l| l.trim_start().starts_with(name)),
            "no line of `{name}`"
        );
    }
    assert!(dev.running.printed(&format!("console:  {}/ui/", dev.url)));
    assert!(dev.running.printed("workers:  greeter, shy"));
    assert!(
        dev.running
            .printed("orchestrator dev is up: workers greeter, shy registered")
    );
    // The banner comes first, once the API answers: before any worker's
    // start-up line.
    {
        let lines = dev.running.lines.lock().unwrap();
        let at = |what: &str| lines.iter().position(|l| l.contains(what));
        let console = at("console:  ").unwrap();
        let worker = at("greeter |").unwrap();
        assert!(console < worker, "{lines:#?}");
    }
    let http_port: u16 = dev.url.rsplit(':').next().unwrap().parse().unwrap();

    // The CLI finds the key dev made in data/keys.
    let out = client(
        &dev,
        root,
        &[
            "tasks",
            "submit",
            "--to",
            "greeter",
            "--action",
            "greet",
            "--params",
            r#"{"name": "Ada"}"#,
            "--wait",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("Hello, Ada!"), "{}", text(&out));
    assert!(
        text(&out).contains("progress: greeting Ada"),
        "{}",
        text(&out)
    );

    // Exit 75 asks for a retry; the second attempt completes.
    let out = client(
        &dev,
        root,
        &[
            "--json",
            "tasks",
            "submit",
            "--to",
            "shy",
            "--action",
            "greet",
            "--params",
            r#"{"name": "Bo", "retry_once": true}"#,
            "--wait",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let task: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(task["attempt"], 2, "{task}");
    assert_eq!(task["result"]["greeting"], "Hello, Bo!");

    // A trigger that uses the scaffolded agent.
    let out = client(
        &dev,
        root,
        &[
            "trigger",
            "welcome",
            "--input",
            r#"{"who": "Grace"}"#,
            "--wait",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("completed"), "{}", text(&out));

    // Newest first, by agent.
    let out = client(
        &dev,
        root,
        &["--json", "tasks", "list", "--agent", "greeter"],
    );
    assert!(out.status.success(), "{}", text(&out));
    let page: Value = serde_json::from_slice(&out.stdout).unwrap();
    let tasks = page["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 2, "{page}");
    assert!(tasks.iter().all(|t| t["agent"] == "greeter"), "{page}");
    assert!(tasks[0]["created_at"].as_str() > tasks[1]["created_at"].as_str());

    // Ctrl-C: dev, the orchestrator, the workers and the broker all stop.
    let status = dev.running.interrupt(Duration::from_secs(30));
    assert!(
        status.is_some_and(|s| s.success()),
        "`orchestrator dev` did not stop cleanly on SIGINT: {status:?}"
    );
    assert!(!listening(http_port), "the API still answers");
    assert!(!listening(4222), "the managed broker still runs");
    let lines = dev.running.lines.lock().unwrap().join("\n");
    for name in ["greeter", "shy"] {
        assert!(
            lines.contains(&format!("worker stopped agent={name}")),
            "{name} did not stop cleanly:\n{lines}"
        );
    }
}

#[test]
fn new_agent_makes_agents_whose_own_tests_pass_and_whose_cards_are_valid() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for (name, lang) in [
        ("py-agent", "python"),
        ("sh-agent", "sh"),
        ("rs-agent", "rust"),
    ] {
        let out = orchestrator(root, &["new", "agent", name, "--lang", lang]);
        assert!(out.status.success(), "{}", text(&out));
        assert!(
            text(&out).contains("next (docs/first-agent.md):"),
            "{}",
            text(&out)
        );
    }
    let out = orchestrator(root, &["validate", "agents"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("3 agent(s) without problems"),
        "{}",
        text(&out)
    );

    let run = |dir: &str, program: &str, args: &[&str]| {
        let out = Command::new(program)
            .args(args)
            .current_dir(root.join("agents").join(dir))
            .env("CARGO_TARGET_DIR", root.join("cargo-target"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{dir}: {}", text(&out));
        out
    };
    run("py-agent", "python3", &["-m", "unittest"]);
    let out = run("sh-agent", "sh", &["test.sh"]);
    assert!(text(&out).contains("ok: 3 tests"), "{}", text(&out));
    let out = run("rs-agent", "cargo", &["test", "--quiet", "--offline"]);
    assert!(text(&out).contains("3 passed"), "{}", text(&out));
}

#[test]
fn new_agent_refuses_a_bad_name_and_an_existing_directory() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let out = orchestrator(root, &["new", "agent", "Not A Name"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("the name `Not A Name`"),
        "{}",
        text(&out)
    );
    assert!(
        !root.join("agents").exists(),
        "nothing is written for a bad name"
    );

    assert!(
        orchestrator(root, &["new", "agent", "greeter"])
            .status
            .success()
    );
    std::fs::write(root.join("agents/greeter/agent.py"), "# mine\n").unwrap();
    let out = orchestrator(root, &["new", "agent", "greeter", "--lang", "sh"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("exists already"), "{}", text(&out));
    let kept = std::fs::read_to_string(root.join("agents/greeter/agent.py")).unwrap();
    assert_eq!(kept, "# mine\n", "an existing agent is never overwritten");
}
