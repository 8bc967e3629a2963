//! Agents of every format served by a running orchestrator: card
//! workflows run end to end on real workers, an edited card is picked up
//! while a broken edit keeps the last good one serving, a result is
//! checked against its skill's `outputSchema`, listings filter by context
//! and show where each agent came from, and a PromptPack alone is served
//! with its entry as the A2A default.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::system::{System, fast_bus};
use common::{Server, cli, json_out};
use orchestrator::agent::Catalog;
use orchestrator::worker::handler_for;
use serde_json::{Value, json};

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    path
}

/// An echo agent `name` (its skill is `name` too) in `dir/<name>`.
fn echo_agent(dir: &Path, name: &str, context: &str) {
    write(
        dir,
        &format!("{name}/agent.json"),
        &json!({
            "name": name, "version": "1.0.0", "description": format!("echoes, as {name}"),
            "context": context,
            "skills": [{"id": name, "description": "echo"}],
            "invocation": {"type": "builtin", "handler": "echo"}
        })
        .to_string(),
    );
}

/// Starts a worker for each agent directory of `dir` named in `names`.
async fn workers(sys: &mut System, dir: &Path, names: &[&str]) {
    for name in names {
        let card = Catalog::one(&dir.join(name), None).unwrap();
        let handler = handler_for(&card, &Default::default(), &Default::default()).unwrap();
        sys.worker(card, handler).await;
    }
}

async fn wait_run(sys: &System, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, run) = sys.get(&format!("/v1/runs/{id}?wait=1s")).await;
        assert_eq!(status, 200, "{run:#}");
        if ["completed", "failed", "canceled"].contains(&run["state"].as_str().unwrap_or_default())
        {
            return run;
        }
        assert!(Instant::now() < deadline, "run {id} never ended: {run:#}");
    }
}

/// A `chain` card and a `parallel` card, among `agent.json` folders in one
/// directory, run as workflows on real workers: started over REST and by
/// `orchestrator trigger <card name>`, listed as A2A skills.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chain_and_parallel_cards_run_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["upper", "lower", "merge"] {
        echo_agent(dir.path(), name, "work");
    }
    write(
        dir.path(),
        "pipeline.md",
        "---\ntype: chain\nsequence: [upper, lower]\ndescription: upper then lower\n---\n",
    );
    write(
        dir.path(),
        "fan.yaml",
        "type: parallel\nfan_out: [upper, lower]\nfan_in: merge\n",
    );
    let mut sys = System::start_reading(vec![dir.path().to_path_buf()], fast_bus()).await;
    workers(&mut sys, dir.path(), &["upper", "lower", "merge"]).await;

    let (status, run) = sys
        .post(
            "/v1/triggers/pipeline/runs",
            json!({"input": {"message": "hi"}}),
        )
        .await;
    assert_eq!(status, 201, "{run:#}");
    let run = wait_run(&sys, run["run_id"].as_str().unwrap()).await;
    assert_eq!(run["state"], "completed", "{run:#}");
    let steps = run["steps"].as_array().unwrap();
    assert_eq!(
        steps[0]["result"],
        json!({"echo": {"message": "hi"}}),
        "{run:#}"
    );
    // The second is given the first's result.
    assert_eq!(
        steps[1]["result"],
        json!({"echo": {"message": {"echo": {"message": "hi"}}}}),
        "{run:#}"
    );

    let server: Server = (sys.http.clone(), sys.admin_key.clone());
    let out = tokio::task::spawn_blocking(move || {
        cli(
            &server,
            &[
                "trigger",
                "fan",
                "--input",
                r#"{"message": "both"}"#,
                "--wait",
                "--json",
            ],
        )
    })
    .await
    .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{} {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let run = json_out(&out);
    assert_eq!(run["state"], "completed", "{run:#}");
    let merged = &run["steps"].as_array().unwrap().last().unwrap()["result"]["echo"];
    assert_eq!(merged["request"], "both", "{run:#}");
    assert_eq!(
        merged["message"]["upper"],
        json!({"echo": {"message": "both"}}),
        "{run:#}"
    );
    assert_eq!(
        merged["message"]["lower"],
        json!({"echo": {"message": "both"}}),
        "{run:#}"
    );

    let card = common::get_json(
        &sys.client,
        &format!("{}/.well-known/agent-card.json", sys.http),
    )
    .await;
    let skills = common::strings(&card, "skills", "id");
    assert!(
        skills.contains(&"trigger:pipeline".to_string())
            && skills.contains(&"trigger:fan".to_string()),
        "{skills:?}"
    );
    // The topology holds the cards' workflows.
    let (_, agents) = sys.get("/v1/agents").await;
    let edges: Vec<(String, String, String)> = agents["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                common::text(&e["from"]),
                common::text(&e["to"]),
                common::text(&e["kind"]),
            )
        })
        .collect();
    assert!(
        edges.contains(&("pipeline".into(), "lower".into(), "chain".into())),
        "{edges:?}"
    );
    assert!(
        edges.contains(&("fan".into(), "merge".into(), "parallel".into())),
        "{edges:?}"
    );
}

async fn description_of(sys: &System, name: &str) -> Option<String> {
    let (_, list) = sys.get("/v1/agents").await;
    list["agents"]
        .as_array()?
        .iter()
        .find(|a| a["card"]["name"] == name)
        .map(|a| common::text(&a["card"]["description"]))
}

/// An agent file edited while the orchestrator runs is picked up; a
/// broken edit is refused (listed with its line) and the last good
/// version keeps serving; a new file's agent is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_card_is_picked_up_and_a_broken_edit_keeps_the_old_one() {
    let dir = tempfile::tempdir().unwrap();
    let card = write(
        dir.path(),
        "helper.md",
        "---\ndescription: first\n---\nYou help.\n",
    );
    let sys = System::start_reading(vec![dir.path().to_path_buf()], fast_bus()).await;
    assert_eq!(
        description_of(&sys, "helper").await.as_deref(),
        Some("first")
    );
    std::fs::write(&card, "---\ndescription: second\n---\nYou help.\n").unwrap();
    common::eventually("the edit is read", Duration::from_secs(20), || async {
        description_of(&sys, "helper").await.as_deref() == Some("second")
    })
    .await;
    std::fs::write(&card, "---\ndescription: third\nmodle: x\n---\nYou help.\n").unwrap();
    common::eventually(
        "the broken edit is refused",
        Duration::from_secs(20),
        || async {
            let (_, list) = sys.get("/v1/agents").await;
            list["problems"].as_array().is_some_and(|p| !p.is_empty())
        },
    )
    .await;
    let (_, list) = sys.get("/v1/agents").await;
    let problem = &list["problems"][0];
    assert_eq!(problem["field"], "modle", "{list:#}");
    assert_eq!(problem["line"], 3, "{list:#}");
    assert!(
        common::text(&problem["message"]).contains("did you mean `model`?"),
        "{list:#}"
    );
    assert_eq!(
        description_of(&sys, "helper").await.as_deref(),
        Some("second")
    );
    // A task for it is still accepted (it waits for a worker).
    let (status, _) = sys
        .post(
            "/v1/tasks",
            json!({"to": "helper", "action": "helper", "params": {"text": "x"}}),
        )
        .await;
    assert_eq!(status, 201);
    write(
        dir.path(),
        "newcomer.md",
        "---\ndescription: new\n---\nYou are new.\n",
    );
    common::eventually("a new file is read", Duration::from_secs(20), || async {
        description_of(&sys, "newcomer").await.is_some()
    })
    .await;
}

/// A skill's `outputSchema` is checked on the result before the task
/// completes: a result that does not fit fails the task (not retried)
/// naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_is_checked_against_its_output_schema() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "shaped/agent.json",
        &json!({
            "name": "shaped", "version": "1.0.0", "description": "echoes, with a shape",
            "skills": [{"id": "count", "description": "c", "outputSchema": {
                "type": "object", "required": ["echo"],
                "properties": {"echo": {"type": "object", "properties": {"n": {"type": "integer"}}}}}}],
            "invocation": {"type": "builtin", "handler": "echo"}
        })
        .to_string(),
    );
    let mut sys = System::start_reading(vec![dir.path().to_path_buf()], fast_bus()).await;
    workers(&mut sys, dir.path(), &["shaped"]).await;
    let submit = |n: Value| {
        let sys = &sys;
        async move {
            let (status, task) = sys
                .post(
                    "/v1/tasks",
                    json!({"to": "shaped", "action": "count", "params": {"n": n}}),
                )
                .await;
            assert_eq!(status, 201, "{task:#}");
            let id = common::text(&task["task_id"]);
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                let (_, t) = sys.get(&format!("/v1/tasks/{id}?wait=1s")).await;
                if ["completed", "failed"].contains(&t["state"].as_str().unwrap_or_default()) {
                    return t;
                }
                assert!(Instant::now() < deadline, "{t:#}");
            }
        }
    };
    let good = submit(json!(3)).await;
    assert_eq!(good["state"], "completed", "{good:#}");
    let bad = submit(json!("three")).await;
    assert_eq!(bad["state"], "failed", "{bad:#}");
    assert_eq!(bad["error"]["code"], "invalid_output", "{bad:#}");
    assert!(
        common::text(&bad["error"]["message"]).contains("result.echo.n"),
        "{bad:#}"
    );
    assert_eq!(bad["error"]["retryable"], false);
    assert_eq!(bad["attempt"], 1);
}

/// `GET /v1/agents` filters by context and leaves tool-only agents out
/// (unless asked), each with its format and file; `/v1/agents/{name}`
/// shows one (a tool-only one too), 404 for none; the CLI's `agents
/// list|show|graph --json` say the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_filter_and_say_where_each_agent_came_from() {
    let dir = tempfile::tempdir().unwrap();
    echo_agent(dir.path(), "teamwork", "work");
    echo_agent(dir.path(), "mine", "personal");
    write(
        dir.path(),
        "fmt.md",
        "---\ntool_only: true\ndescription: formats\n---\nFormat it.\n",
    );
    write(
        dir.path(),
        "boss.md",
        "---\nagents: [fmt, teamwork]\n---\nDelegate.\n",
    );
    let sys = System::start_reading(vec![dir.path().to_path_buf()], fast_bus()).await;
    let names = |list: &Value| -> Vec<String> {
        list["agents"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| common::text(&a["card"]["name"]))
            .collect()
    };
    let (_, all) = sys.get("/v1/agents").await;
    assert_eq!(names(&all), ["boss", "mine", "teamwork"]);
    let (_, work) = sys.get("/v1/agents?context=work,shared").await;
    assert_eq!(names(&work), ["teamwork"]);
    let (_, with_tools) = sys.get("/v1/agents?tool_only=true").await;
    assert_eq!(names(&with_tools), ["boss", "fmt", "mine", "teamwork"]);
    let (status, bad) = sys.get("/v1/agents?context=team").await;
    assert_eq!(
        (status, bad["error"]["field"].clone()),
        (400, json!("context"))
    );
    let (status, fmt) = sys.get("/v1/agents/fmt").await;
    assert_eq!(status, 200);
    assert_eq!(
        fmt["card"]["origin"]["format"], "agent_card_markdown",
        "{fmt:#}"
    );
    assert_eq!(fmt["card"]["toolOnly"], true);
    assert_eq!(sys.get("/v1/agents/ghost").await.0, 404);
    let card = common::get_json(
        &sys.client,
        &format!("{}/.well-known/agent-card.json", sys.http),
    )
    .await;
    let skills = common::strings(&card, "skills", "id");
    assert!(!skills.iter().any(|s| s.starts_with("fmt/")), "{skills:?}");
    assert!(skills.contains(&"boss/boss".to_string()), "{skills:?}");

    let server: Server = (sys.http.clone(), sys.admin_key.clone());
    let (list, show, graph) = tokio::task::spawn_blocking(move || {
        (
            cli(&server, &["agents", "list", "--context", "work", "--json"]),
            cli(&server, &["agents", "show", "teamwork"]),
            cli(&server, &["agents", "graph", "--json"]),
        )
    })
    .await
    .unwrap();
    assert_eq!(names(&json_out(&list)), ["teamwork"]);
    let shown = String::from_utf8_lossy(&show.stdout);
    assert!(
        shown.contains("teamwork 1.0.0 (agent_json)") && shown.contains("teamwork/agent.json"),
        "{shown}"
    );
    let graph = json_out(&graph);
    let chart = common::text(&graph["mermaid"]);
    assert!(chart.starts_with("flowchart LR"), "{chart}");
    assert!(chart.contains("n_boss -->|calls| n_fmt"), "{chart}");
}

/// `orchestrator run --agents pack.yaml` alone serves a PromptPack: its
/// members are the agents, and a message that names no skill goes to the
/// pack's entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pack_alone_is_served_with_its_entry_as_the_default() {
    let pack = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/seeds/promptpack/research-team.yaml");
    let sys = System::start_reading(vec![pack], fast_bus()).await;
    let (_, list) = sys.get("/v1/agents").await;
    assert_eq!(list["entry"], "coordinator", "{list:#}");
    assert_eq!(list["agents"].as_array().unwrap().len(), 3);
    let sent = common::post_json(
        &sys.client,
        &format!("{}/a2a", sys.http),
        &json!({"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {
            "message": {"role": "user", "messageId": "m-1", "kind": "message",
                        "parts": [{"kind": "text", "text": "What is known about quasars?"}]},
            "configuration": {"blocking": false}}}),
    )
    .await;
    let task = &sent["result"];
    assert_eq!(task["kind"], "task", "{sent:#}");
    let (_, ours) = sys
        .get(&format!("/v1/tasks/{}", common::text(&task["id"])))
        .await;
    assert_eq!(
        (ours["agent"].clone(), ours["action"].clone()),
        (json!("coordinator"), json!("coordinator")),
        "{ours:#}"
    );
}

/// A registry's routing, used by a router card's runs: a multi-agent
/// phrase splits the request and each part runs on its own agent (the
/// result is their list, in order); a switch command picks the agent it
/// names; the default agent gets what nothing matches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_registry_routing_rules_route_a_router_cards_runs() {
    let dir = tempfile::tempdir().unwrap();
    for (name, phrase) in [("notes", "find notes"), ("mail", "send the draft")] {
        write(
            dir.path(),
            &format!("{name}/agent.json"),
            &json!({"name": name, "version": "1.0.0", "description": name,
                    "skills": [{"id": name, "description": name, "triggers": [phrase]}],
                    "invocation": {"type": "builtin", "handler": "echo"}})
            .to_string(),
        );
    }
    write(
        dir.path(),
        "registry.json",
        &json!({"version": "3.0", "agents": {
                    "notes": {"location": {"type": "local", "path": "./notes"}},
                    "mail": {"location": {"type": "local", "path": "./mail"}}},
                "routing": {"defaultAgent": "notes", "switchCommands": ["talk to"],
                            "multiAgentTriggers": ["and also", "then"]}})
        .to_string(),
    );
    write(
        dir.path(),
        "desk.yaml",
        "type: router\nagents: [notes, mail]\n",
    );
    let mut sys = System::start_reading(vec![dir.path().to_path_buf()], fast_bus()).await;
    workers(&mut sys, dir.path(), &["notes", "mail"]).await;
    let run = |message: &str| {
        let sys = &sys;
        let body = json!({"input": {"message": message}});
        async move {
            let (status, run) = sys.post("/v1/triggers/desk/runs", body).await;
            assert_eq!(status, 201, "{run:#}");
            wait_run(sys, run["run_id"].as_str().unwrap()).await
        }
    };
    let split = run("find notes about the launch, and also send the draft to Ann").await;
    assert_eq!(split["state"], "completed", "{split:#}");
    assert_eq!(
        split["result"],
        json!([{"echo": {"message": "find notes about the launch"}},
               {"echo": {"message": "send the draft to Ann"}}]),
        "{split:#}"
    );
    let named = run("talk to mail: find notes about the launch").await;
    assert_eq!(named["steps"][0]["route"]["agent"], "mail", "{named:#}");
    let fallback = run("order a pizza").await;
    assert_eq!(
        fallback["steps"][0]["route"]["agent"], "notes",
        "{fallback:#}"
    );
    assert_eq!(fallback["state"], "completed");
}
