//! The client side of the command line, against a real orchestrator and
//! broker: where a command calls and with which key (flags, variables,
//! the client file's profiles, the local administrator key), global flags
//! anywhere, `tasks list` newest first with its filters, `tasks get
//! --wait`, `watch` on a task and on a run, `triggers list`, `version`,
//! `completions`.

use crate::common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

use common::system::{GATED, System, card, fast_bus};
use common::{Server, cli, json_out};
use orchestrator::worker::EchoHandler;
use serde_json::{Value, json};

/// `orchestrator ARGS` in `dir` with only these variables of ours set.
fn bare(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_orchestrator"));
    command.args(args).current_dir(dir);
    for var in [
        "ORCH_SERVER",
        "ORCH_API_KEY",
        "ORCH_BEARER_TOKEN",
        "ORCH_PROFILE",
    ] {
        command.env_remove(var);
    }
    command
        .env("ORCH_CLIENT_CONFIG", dir.join("client.json"))
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// What a `watch` printed, once it has ended with success.
async fn watched(watching: std::process::Child) -> String {
    let out = tokio::task::spawn_blocking(move || watching.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert!(out.status.success(), "{}", said(&out));
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn said(out: &Output) -> String {
    format!(
        "exit {:?}\n{}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_finds_its_server_and_key_by_the_documented_order() {
    let echo = card("echo", &["echo"]);
    let mut sys = System::start(vec![echo.clone()], fast_bus()).await;
    sys.worker(echo, Arc::new(EchoHandler)).await;
    let key = sys.admin_key.clone().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    std::fs::create_dir_all(root.join("keys")).unwrap();
    std::fs::write(root.join("keys/good.api-key"), format!("{key}\n")).unwrap();
    std::fs::write(
        root.join("client.json"),
        json!({"profiles": {
            "default": {"server": sys.http, "api_key_file": "keys/good.api-key"},
            "away": {"server": "http://127.0.0.1:1", "api_key": "orch_wrong"},
        }})
        .to_string(),
    )
    .unwrap();
    let run = move |args: &[&str], env: Vec<(&'static str, String)>| {
        let root = root.clone();
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        tokio::task::spawn_blocking(move || {
            let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            bare(&root, &args, &env)
        })
    };

    // The default profile: its server and its key file.
    let out = run(&["tasks", "list", "--json"], vec![]).await.unwrap();
    assert!(out.status.success(), "{}", said(&out));
    // --profile picks another; its server does not answer.
    let out = run(&["--profile", "away", "tasks", "list", "--json"], vec![])
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", said(&out));
    // A variable beats the profile, field by field: the server from
    // ORCH_SERVER, the key still the profile's (wrong) one.
    let out = run(
        &["--profile", "away", "tasks", "list", "--json"],
        vec![("ORCH_SERVER", sys.http.clone())],
    )
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    assert_eq!(
        json_out(&out)["error"]["code"],
        "invalid_credentials",
        "{}",
        said(&out)
    );
    // And a flag beats the variable.
    let out = run(
        &[
            "--profile",
            "away",
            "tasks",
            "list",
            "--json",
            "--api-key",
            &key,
        ],
        vec![("ORCH_SERVER", sys.http.clone())],
    )
    .await
    .unwrap();
    assert!(out.status.success(), "{}", said(&out));
    // A profile the file does not have.
    let out = run(&["--profile", "nope", "tasks", "list", "--json"], vec![])
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    let error = json_out(&out)["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        error.contains("no profile `nope`") && error.contains("away, default"),
        "{error}"
    );

    // A field the file may not have is named.
    let bad = tempfile::tempdir().unwrap();
    std::fs::write(
        bad.path().join("client.json"),
        r#"{"profiles": {"default": {"sever": "x"}}}"#,
    )
    .unwrap();
    let out = bare(bad.path(), &["tasks", "list", "--json"], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    assert!(
        said(&out).contains("unknown field `sever`"),
        "{}",
        said(&out)
    );

    // No file, no variable: the administrator key of ./data/keys, as
    // `orchestrator run` writes it; without it, refused with the hint.
    let local = tempfile::tempdir().unwrap();
    let env = [("ORCH_SERVER", sys.http.as_str())];
    let out = bare(local.path(), &["tasks", "list", "--json"], &env);
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    assert!(said(&out).contains("ORCH_API_KEY"), "{}", said(&out));
    std::fs::create_dir_all(local.path().join("data/keys")).unwrap();
    std::fs::write(local.path().join("data/keys/admin.api-key"), &key).unwrap();
    let out = bare(local.path(), &["tasks", "list", "--json"], &env);
    assert!(out.status.success(), "{}", said(&out));

    // Global flags go before or after the command.
    let server: Server = (sys.http.clone(), Some(key));
    let before = tokio::task::spawn_blocking({
        let server = server.clone();
        move || cli(&server, &["--json", "agents", "list"])
    });
    let after = tokio::task::spawn_blocking(move || cli(&server, &["agents", "list", "--json"]));
    let (before, after) = (before.await.unwrap(), after.await.unwrap());
    // The two reads are moments apart: a heartbeat's age is of its moment.
    let agents = |out| {
        let mut agents = json_out(out)["agents"].clone();
        for agent in agents.as_array_mut().into_iter().flatten() {
            for instance in agent["instances"].as_array_mut().into_iter().flatten() {
                instance
                    .as_object_mut()
                    .map(|i| i.remove("heartbeat_age_seconds"));
            }
        }
        agents
    };
    assert_eq!(agents(&before), agents(&after));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_list_is_newest_first_and_filters_by_agent_action_run_and_time() {
    let echo = card("echo", &["echo", "shout"]);
    let files = [
        (
            "say.yaml",
            "id: say\nsteps:\n  - {id: s, agent: echo, action: shout}\n",
        ),
        (
            "broken.yaml",
            "id: broken\nsteps:\n  - {id: s, agnet: echo}\n",
        ),
    ];
    let mut sys = System::start_with_triggers(vec![echo.clone()], &files).await;
    sys.worker(echo, Arc::new(EchoHandler)).await;
    let first = sys.submit("echo", "echo", json!({"n": 1})).await;
    let second = sys.submit("echo", "echo", json!({"n": 2})).await;
    let (_, run) = sys
        .post("/v1/triggers/say/runs", json!({"input": {}}))
        .await;
    let run_id = run["run_id"].as_str().unwrap().to_string();
    let server: Server = (sys.http.clone(), sys.admin_key.clone());
    let list = |args: Vec<String>| {
        let server = server.clone();
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            cli(&server, &args)
        })
    };
    let ids = |out: &Output| -> Vec<String> {
        json_out(out)["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["task_id"].as_str().unwrap().to_string())
            .collect()
    };
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();

    // Wait for the run's step to exist.
    let mut step = Vec::new();
    for _ in 0..100 {
        step = ids(&list(args(&["tasks", "list", "--json", "--run", &run_id]))
            .await
            .unwrap());
        if !step.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(step.len(), 1, "the run's one step");
    let all = ids(&list(args(&["tasks", "list", "--json"])).await.unwrap());
    assert_eq!(
        all,
        [step[0].clone(), second.clone(), first.clone()],
        "newest first"
    );
    let oldest = ids(&list(args(&["tasks", "list", "--json", "--oldest"]))
        .await
        .unwrap());
    assert_eq!(oldest, [first.clone(), second.clone(), step[0].clone()]);
    let shouts = ids(
        &list(args(&["tasks", "list", "--json", "--action", "shout"]))
            .await
            .unwrap(),
    );
    assert_eq!(shouts, step);
    let echoes = ids(&list(args(&[
        "tasks", "list", "--json", "--agent", "echo", "--action", "echo",
    ]))
    .await
    .unwrap());
    assert_eq!(echoes, [second.clone(), first.clone()]);
    let none = ids(
        &list(args(&["tasks", "list", "--json", "--agent", "other"]))
            .await
            .unwrap(),
    );
    assert!(none.is_empty());
    let future = ids(&list(args(&[
        "tasks",
        "list",
        "--json",
        "--since",
        "2999-01-01T00:00:00Z",
    ]))
    .await
    .unwrap());
    assert!(future.is_empty(), "nothing created since a time to come");
    let recent = ids(&list(args(&["tasks", "list", "--json", "--since", "10m"]))
        .await
        .unwrap());
    assert_eq!(recent.len(), 3);
    let out = list(args(&["tasks", "list", "--since", "yesterday-ish"]))
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    let out = list(args(&["tasks", "list", "--oldest", "--agent", "echo"]))
        .await
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "--oldest with a newest-only filter is refused: {}",
        said(&out)
    );

    // A table shows times as how long ago; --json the times themselves.
    let table = list(args(&["tasks", "list"])).await.unwrap();
    let text = String::from_utf8_lossy(&table.stdout).to_string();
    assert!(
        text.lines().nth(1).is_some_and(|l| l.contains("s ago")),
        "{text}"
    );
    let json = json_out(&list(args(&["tasks", "list", "--json"])).await.unwrap());
    assert!(
        json["tasks"][0]["created_at"]
            .as_str()
            .unwrap()
            .ends_with('Z')
    );

    // triggers list: the loaded ones, then the broken files on stderr.
    let out = list(args(&["triggers", "list"])).await.unwrap();
    assert!(out.status.success(), "{}", said(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("say"),
        "{}",
        said(&out)
    );
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        stderr.contains("not loaded") && stderr.contains("broken.yaml:3"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_get_wait_and_watch_follow_a_task_and_a_run_to_their_end() {
    let echo = card("echo", &["echo"]);
    let late = card("late", &["echo"]);
    let cards = vec![echo.clone(), late.clone()];
    let mut sys = System::start_with_triggers(cards, &[("gated.yaml", GATED)]).await;
    sys.worker(echo, Arc::new(EchoHandler)).await;
    let server: Server = (sys.http.clone(), sys.admin_key.clone());

    // A task nobody runs yet: `tasks get --wait` runs out (exit 4).
    let task = sys.submit("late", "echo", json!({"x": 1})).await;
    let out = tokio::task::spawn_blocking({
        let (server, task) = (server.clone(), task.clone());
        move || {
            cli(
                &server,
                &["tasks", "get", &task, "--wait", "--timeout", "1s", "--json"],
            )
        }
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(4), "{}", said(&out));

    // `watch` follows it while a worker appears and runs it.
    let spawn_watch = |id: &str| {
        Command::new(env!("CARGO_BIN_EXE_orchestrator"))
            .args(["watch", id])
            .env("ORCH_SERVER", &server.0)
            .env("ORCH_API_KEY", server.1.clone().unwrap())
            .env("ORCH_CLIENT_CONFIG", "/nonexistent/client.json")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let watching = spawn_watch(&task);
    tokio::time::sleep(Duration::from_millis(500)).await;
    sys.worker(late, Arc::new(EchoHandler)).await;
    let text = watched(watching).await;
    let order: Vec<usize> = ["submitted", "completed"]
        .iter()
        .map(|s| text.find(s).unwrap_or_else(|| panic!("no `{s}`: {text}")))
        .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{text}");
    // Now it has ended, `tasks get --wait` answers at once.
    let out = tokio::task::spawn_blocking({
        let (server, task) = (server.clone(), task.clone());
        move || cli(&server, &["tasks", "get", &task, "--wait", "--json"])
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", said(&out));
    assert_eq!(json_out(&out)["state"], "completed");

    // A run: watch says where it waits and goes on once it is approved.
    let (_, run) = sys
        .post("/v1/triggers/gated/runs", json!({"input": {}}))
        .await;
    let run_id = run["run_id"].as_str().unwrap().to_string();
    let watching = spawn_watch(&run_id);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (status, _) = sys
        .post(
            &format!("/v1/runs/{run_id}/approve"),
            json!({"reason": "ok"}),
        )
        .await;
    assert_eq!(status, 200);
    let text = watched(watching).await;
    assert!(text.contains("waiting at `ask`: Go?"), "{text}");
    assert!(
        text.contains("step s ") && text.contains("completed"),
        "{text}"
    );

    // A watch of something that is neither.
    let out = tokio::task::spawn_blocking(move || {
        cli(
            &server,
            &["watch", "01a21c14-0704-74c1-b2b5-54c6f9530ba1", "--json"],
        )
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
}

#[test]
fn version_and_completions_answer_offline() {
    let dir = tempfile::tempdir().unwrap();
    let out = bare(dir.path(), &["version", "--json"], &[]);
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(v["wire_format"], 1);
    assert!(v["store_format"].as_str().unwrap().starts_with('v'), "{v}");
    let out = bare(dir.path(), &["completions", "bash"], &[]);
    assert!(out.status.success());
    let script = String::from_utf8_lossy(&out.stdout);
    assert!(
        script.contains("complete -F _orchestrator")
            && script.contains("orchestrator__subcmd__tasks"),
        "{script}"
    );
}
