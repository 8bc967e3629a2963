//! MCP servers as a model's tools (`docs/llm.md`, "MCP tools"), against
//! a server made with the official MCP Python SDK (tests/mcp/server.py),
//! started by the test over stdio and over streamable HTTP, which writes
//! a line per tool call it runs: the card's servers' tools are offered
//! through its filters, a call is a task of the agent that the worker
//! runs through its MCP client, audited with its server and tool, a
//! filtered-out tool runs nothing, a tool's error goes back to the model,
//! and the server sees none of the worker's variables it was not given.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::llm::{Model, Reply, last_role, offered, tool_results};
use common::process::free_port;
use common::system::{System, card, fast_bus};
use orchestrator::agent::{AgentCard, Dependencies, McpDependency, Prompt};
use orchestrator::llm::LlmSettings;
use orchestrator::llm::mcp::{McpServer, McpSettings};
use orchestrator::worker::handler_for;
use serde_json::{Value, json};

/// The Python that has the official MCP SDK: `MCP_SDK_PYTHON`, as
/// `scripts/test` sets it from `scripts/ensure-mcp-sdk`.
fn python() -> String {
    std::env::var("MCP_SDK_PYTHON").unwrap_or_else(|_| {
        panic!("MCP_SDK_PYTHON is not set: run the tests with scripts/test, or set it to the output of scripts/ensure-mcp-sdk")
    })
}

fn server_script() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/mcp/server.py")
        .display()
        .to_string()
}

/// The tool calls the server ran, as it wrote them.
fn ran(calls: &Path) -> Vec<Value> {
    std::fs::read_to_string(calls)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A prompt agent `name` (skill `ask`) whose model may use the MCP
/// servers `servers`, filtered by `tools`.
fn mcp_card(name: &str, servers: &[&str], tools: &[(&str, &[&str])]) -> AgentCard {
    let mut c = card(name, &["ask"]);
    c.invocation = None;
    c.prompt = Some(Prompt {
        instruction: "Use your tools.".into(),
        model: Some("stub-model".into()),
        servers: servers.iter().map(|s| s.to_string()).collect(),
        tools: tools
            .iter()
            .map(|(s, t)| (s.to_string(), t.iter().map(|x| x.to_string()).collect()))
            .collect(),
        ..Prompt::default()
    });
    c
}

/// Settings with the test server as `notes` over stdio, writing its calls
/// to `calls`, its environment also `env`.
fn stdio_notes(calls: &Path, env: &[(&str, &str)]) -> McpSettings {
    let mut vars = BTreeMap::from([("MCP_CALLS".to_string(), calls.display().to_string())]);
    vars.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    McpSettings {
        servers: BTreeMap::from([(
            "notes".to_string(),
            McpServer {
                command: Some(python()),
                args: vec![server_script(), "stdio".into()],
                env: vars,
                ..McpServer::default()
            },
        )]),
    }
}

fn llm(model: &Model) -> LlmSettings {
    LlmSettings {
        base_url: model.url.clone(),
        api_key_env: "ORCH_TEST_NO_SUCH_KEY".into(),
        stream: false,
        ..LlmSettings::default()
    }
}

/// Each tool result of a request, by call id.
fn results(request: &Value) -> BTreeMap<String, String> {
    tool_results(request).into_iter().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_servers_tools_run_as_audited_tasks_through_the_cards_filter() {
    let dir = tempfile::tempdir().unwrap();
    let calls = dir.path().join("calls.jsonl");
    let model = Model::serve(|r| match last_role(r).as_str() {
        "user" => Reply::Calls(vec![
            ("mcp__notes__add".into(), json!({"a": 2, "b": 3})),
            ("mcp__notes__search_notes".into(), json!({"query": "rust"})),
            ("mcp__notes__delete_notes".into(), json!({})),
            (
                "mcp__notes__environment".into(),
                json!({"name": "CARGO_PKG_NAME"}),
            ),
            (
                "mcp__notes__environment".into(),
                json!({"name": "FROM_WORKER"}),
            ),
        ]),
        _ => Reply::Text("done".into()),
    })
    .await;
    let keeper = mcp_card(
        "keeper",
        &["notes"],
        &[("notes", &["add", "search_*", "environment"])],
    );
    // The worker's variable, given by name.
    let mcp = stdio_notes(&calls, &[("FROM_WORKER", "${CARGO_MANIFEST_DIR}")]);
    let mut sys = System::start(vec![keeper.clone()], fast_bus()).await;
    let handler = handler_for(&keeper, &llm(&model), &mcp).unwrap();
    sys.worker(keeper, handler).await;
    let id = sys
        .submit("keeper", "ask", json!({"text": "what about rust?"}))
        .await;
    let done = sys.wait_terminal(&id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "completed", "{done:#}");
    assert_eq!(done["result"], "done");
    assert_eq!(model.calls(), 2);

    // Offered: the server's tools the filter lets through, with their
    // schemas; not `delete_notes` nor `broken`.
    let first = &model.requests()[0];
    let mut names = offered(first);
    names.sort();
    assert_eq!(
        names,
        [
            "mcp__notes__add",
            "mcp__notes__environment",
            "mcp__notes__search_notes"
        ]
    );
    let add = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "mcp__notes__add")
        .unwrap();
    assert_eq!(add["function"]["description"], "Adds two integers.");
    assert_eq!(
        add["function"]["parameters"]["properties"]["a"]["type"],
        "integer"
    );

    // What the model was told of each call.
    let told = results(&model.requests()[1]);
    // A tool's structured content (the SDK wraps a plain return value in
    // `result`).
    let add: Value = serde_json::from_str(&told["call_0_mcp__notes__add"]).unwrap();
    assert_eq!(add, json!({"result": 5}));
    let search: Value = serde_json::from_str(&told["call_1_mcp__notes__search_notes"]).unwrap();
    assert_eq!(search, json!({"result": "3 notes about rust"}));
    assert!(
        told["call_2_mcp__notes__delete_notes"].contains("filter leaves it out"),
        "{told:#?}"
    );
    // The server has what its settings give it, none of the worker's
    // other variables.
    assert_eq!(
        told["call_3_mcp__notes__environment"],
        r#"{"result":"unset"}"#
    );
    assert_eq!(
        told["call_4_mcp__notes__environment"],
        r#"{"result":"set"}"#
    );

    // The server ran the four calls let through, once each.
    let ran = ran(&calls);
    let tools: Vec<&str> = ran.iter().map(|c| c["tool"].as_str().unwrap()).collect();
    assert_eq!(tools.len(), 4, "{ran:#?}");
    assert!(!tools.contains(&"delete_notes"));
    assert!(
        ran.iter()
            .any(|c| c["tool"] == "add" && c["arguments"] == json!({"a": 2, "b": 3}))
    );

    // Each call is a task of the agent, caused by the conversation, and
    // its submit is audited with the server and the tool.
    let correlation = done["correlation_id"].as_str().unwrap();
    let (_, page) = sys
        .get(&format!("/v1/tasks?correlation_id={correlation}&limit=100"))
        .await;
    let children: Vec<&Value> = page["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["causation_id"] == id.as_str() && t["turn"].is_null())
        .collect();
    assert_eq!(children.len(), 4, "{page:#}");
    assert!(children.iter().all(|t| t["agent"] == "keeper"));
    let (_, audit) = sys
        .get(&format!("/v1/audit?correlation_id={correlation}&limit=100"))
        .await;
    let records = audit["records"].as_array().unwrap();
    let mut audited: Vec<&str> = records
        .iter()
        .filter(|r| r["kind"] == "task.submitted")
        .filter_map(|r| r["detail"]["mcp"]["tool"].as_str())
        .collect();
    audited.sort_unstable();
    assert_eq!(
        audited,
        ["add", "environment", "environment", "search_notes"],
        "{audit:#}"
    );
    assert!(
        records.iter().any(|r| r["kind"] == "llm.tool_refused"
            && r["detail"]["tool"] == "mcp__notes__delete_notes")
    );
}

/// A child process killed when dropped.
struct Served(Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the test server over streamable HTTP; its URL.
fn serve_http(calls: &Path) -> (Served, String) {
    let port = free_port();
    let child = Command::new(python())
        .args([server_script(), "http".into(), port.to_string()])
        .env("MCP_CALLS", calls)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let served = Served(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the MCP server did not listen");
        std::thread::sleep(Duration::from_millis(100));
    }
    (served, format!("http://127.0.0.1:{port}/mcp"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_servers_tool_error_goes_back_to_the_model_and_the_conversation_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let calls = dir.path().join("calls.jsonl");
    let (_server, url) = serve_http(&calls);
    let model = Model::serve(|r| {
        let told = tool_results(r);
        match told.len() {
            0 => Reply::Calls(vec![("mcp__remote__broken".into(), json!({}))]),
            1 => Reply::Calls(vec![("mcp__remote__add".into(), json!({"a": 40, "b": 2}))]),
            _ => Reply::Text(
                told.iter()
                    .map(|(_, c)| c.clone())
                    .collect::<Vec<_>>()
                    .join(" | "),
            ),
        }
    })
    .await;
    // As `agent.json` names it: a dependency, needed.
    let mut asker = mcp_card("asker", &[], &[]);
    asker.dependencies = Some(Dependencies {
        mcps: vec![McpDependency {
            name: "remote".into(),
            required: true,
            capabilities: Vec::new(),
        }],
        ..Dependencies::default()
    });
    let mcp = McpSettings {
        servers: BTreeMap::from([(
            "remote".to_string(),
            McpServer {
                url: Some(url),
                ..McpServer::default()
            },
        )]),
    };
    let mut sys = System::start(vec![asker.clone()], fast_bus()).await;
    let handler = handler_for(&asker, &llm(&model), &mcp).unwrap();
    sys.worker(asker, handler).await;
    let id = sys.submit("asker", "ask", json!({"text": "go"})).await;
    let done = sys.wait_terminal(&id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "completed", "{done:#}");
    let answer = done["result"].as_str().unwrap();
    assert!(answer.contains("the disk is on fire"), "{answer}");
    assert!(answer.contains("tool_error"), "{answer}");
    assert!(answer.ends_with(r#"{"result":42}"#), "{answer}");
    assert_eq!(model.calls(), 3);
    let tools: Vec<String> = ran(&calls)
        .iter()
        .map(|c| c["tool"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(tools, ["broken", "add"]);
    // All its tools are offered: no filter.
    assert_eq!(offered(&model.requests()[0]).len(), 6);
}

#[test]
fn a_needed_server_the_settings_do_not_define_stops_the_worker_from_starting() {
    let keeper = mcp_card("keeper", &["notes"], &[]);
    let err = handler_for(&keeper, &LlmSettings::default(), &McpSettings::default())
        .err()
        .unwrap();
    assert!(
        matches!(&err, orchestrator::worker::HandlerError::UndefinedServer(s) if s == "notes"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_server_that_exited_is_started_again_at_the_next_need() {
    let dir = tempfile::tempdir().unwrap();
    let calls = dir.path().join("calls.jsonl");
    let model = Model::serve(|r| match tool_results(r).len() {
        0 => Reply::Calls(vec![("mcp__notes__quit".into(), json!({}))]),
        // Held until the first process is gone.
        1 => Reply::Held(Box::new(Reply::Calls(vec![(
            "mcp__notes__add".into(),
            json!({"a": 1, "b": 1}),
        )]))),
        _ => Reply::Text("done".into()),
    })
    .await;
    let keeper = mcp_card("keeper", &["notes"], &[]);
    let mcp = stdio_notes(&calls, &[]);
    let mut sys = System::start(vec![keeper.clone()], fast_bus()).await;
    let handler = handler_for(&keeper, &llm(&model), &mcp).unwrap();
    sys.worker(keeper, handler).await;
    let id = sys.submit("keeper", "ask", json!({"text": "go"})).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let pid = loop {
        if let Some(first) = ran(&calls).first() {
            break first["pid"].as_u64().unwrap();
        }
        assert!(Instant::now() < deadline, "`quit` never ran");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // Gone, or a zombie its parent has not reaped yet.
    while std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z ")) {
        assert!(Instant::now() < deadline, "the server did not exit");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    model.open();
    let done = sys.wait_terminal(&id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "completed", "{done:#}");
    let told = results(&model.requests()[2]);
    assert_eq!(
        told["call_0_mcp__notes__add"], r#"{"result":2}"#,
        "{told:#?}"
    );
    let ran = ran(&calls);
    assert_eq!(ran.len(), 2, "{ran:#?}");
    assert_eq!(
        (ran[0]["tool"].as_str(), ran[1]["tool"].as_str()),
        (Some("quit"), Some("add"))
    );
    assert_ne!(
        ran[0]["pid"], ran[1]["pid"],
        "a second process ran the second call"
    );
}
