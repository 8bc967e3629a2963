//! `orchestrator trace` against a local server answering with Jaeger's
//! query API JSON (`GET /api/traces/{id}`), and the trace links of `tasks
//! get` and `audit list`.

use crate::common;

use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use common::system::{System, card, fast_bus};
use orchestrator::worker::EchoHandler;
use serde_json::{Value, json};

/// A Jaeger query API that knows one trace, as Jaeger answers it.
async fn jaeger(trace_id: String) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new().route(
        "/api/traces/{id}",
        axum::routing::get(move |axum::extract::Path(id): axum::extract::Path<String>| {
            let known = trace_id.clone();
            async move {
                if id != known {
                    return (
                        axum::http::StatusCode::NOT_FOUND,
                        axum::Json(json!({"data": null, "errors": [{"code": 404, "msg": "trace not found"}]})),
                    );
                }
                let span = |id: &str, parent: Option<&str>, name: &str, start: i64, dur: i64, p: &str, error: bool| {
                    json!({
                        "traceID": known, "spanID": id, "operationName": name,
                        "references": parent.map(|p| vec![json!({"refType": "CHILD_OF", "traceID": known, "spanID": p})]).unwrap_or_default(),
                        "startTime": start, "duration": dur, "processID": p,
                        "tags": if error { vec![json!({"key": "error", "type": "bool", "value": true})] } else { vec![] },
                        "logs": [], "warnings": null,
                    })
                };
                let t0 = 1_700_000_000_000_000_i64;
                (
                    axum::http::StatusCode::OK,
                    axum::Json(json!({"data": [{
                        "traceID": known,
                        "spans": [
                            span("b2", Some("a1"), "publish orch.tasks.echo.normal", t0 + 1_200, 900, "p1", false),
                            span("a1", None, "POST /v1/tasks", t0, 4_000, "p1", false),
                            span("c3", Some("b2"), "process orch.tasks.echo.normal", t0 + 2_500, 7_500, "p2", true),
                            span("d4", Some("c3"), "report completed", t0 + 9_000, 800, "p2", false),
                        ],
                        "processes": {"p1": {"serviceName": "orchestrator", "tags": []}, "p2": {"serviceName": "agent-echo", "tags": []}},
                        "warnings": null,
                    }], "total": 0, "limit": 0, "offset": 0, "errors": null})),
                )
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

fn cli(sys: &System, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_orchestrator"))
        .args(args)
        .env("ORCH_SERVER", &sys.http)
        .env("ORCH_API_KEY", sys.admin_key.as_deref().unwrap())
        .env_remove("ORCH_JAEGER_URL")
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A task's trace prints as an indented tree with services, timings and
/// status, by task id and by correlation id, as text and JSON; an unknown
/// trace and an unreachable Jaeger are each said plainly, with their own
/// exit code. `tasks get` and `audit list` link to the trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_prints_the_span_tree_from_jaegers_query_api() {
    let echo = card("echo", &["echo"]);
    let ui = "http://jaeger.example:16686";
    let mut sys = System::start_with(
        common::nats::NatsServer::start(),
        vec![echo.clone()],
        fast_bus(),
        |c| c.telemetry.jaeger_url = Some(ui.into()),
    )
    .await;
    sys.worker(echo, Arc::new(EchoHandler)).await;
    let id = sys.submit("echo", "echo", json!({"n": 1})).await;
    let done = sys.wait_terminal(&id, Duration::from_secs(30)).await;
    let trace_id = done["trace_id"].as_str().unwrap().to_string();
    let link = format!("{ui}/trace/{trace_id}");
    assert_eq!(done["trace_url"], link.as_str());

    let got = cli(&sys, &["tasks", "get", &id]);
    assert!(
        text(&got).contains(&format!("trace    {link}")),
        "{}",
        text(&got)
    );
    let audit = cli(&sys, &["audit", "list", "--task-id", &id]);
    assert!(text(&audit).contains(&link), "{}", text(&audit));
    let audit = cli(&sys, &["audit", "list", "--task-id", &id, "--json"]);
    let records: Value = serde_json::from_slice(&audit.stdout).unwrap();
    assert!(
        records["records"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["trace_id"] == trace_id.as_str() && r["trace_url"] == link.as_str()),
        "{records:#}"
    );

    let jaeger_url = jaeger(trace_id.clone()).await;
    let out = cli(&sys, &["trace", &id, "--jaeger-url", &jaeger_url]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let printed = String::from_utf8_lossy(&out.stdout).to_string();
    let lines: Vec<&str> = printed.lines().collect();
    assert!(
        lines[0].starts_with(&format!("trace {trace_id}")),
        "{printed}"
    );
    let rows: Vec<String> = lines[2..]
        .iter()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(
        rows,
        [
            "+0.0 ms 4.0 ms ok POST /v1/tasks [orchestrator]",
            "+1.2 ms 0.9 ms ok publish orch.tasks.echo.normal [orchestrator]",
            "+2.5 ms 7.5 ms error process orch.tasks.echo.normal [agent-echo]",
            "+9.0 ms 0.8 ms ok report completed [agent-echo]",
        ],
        "{printed}"
    );
    // The indentation shows the tree.
    let column = lines[1].find("SPAN").unwrap();
    let names: Vec<&str> = lines[2..].iter().map(|l| &l[column..]).collect();
    assert_eq!(
        names,
        [
            "POST /v1/tasks [orchestrator]",
            "  publish orch.tasks.echo.normal [orchestrator]",
            "    process orch.tasks.echo.normal [agent-echo]",
            "      report completed [agent-echo]",
        ],
        "{printed}"
    );

    let by_request = cli(
        &sys,
        &[
            "trace",
            done["correlation_id"].as_str().unwrap(),
            "--jaeger-url",
            &jaeger_url,
            "--json",
        ],
    );
    assert_eq!(by_request.status.code(), Some(0), "{}", text(&by_request));
    let v: Value = serde_json::from_slice(&by_request.stdout).unwrap();
    let spans = v["traces"][0]["spans"].as_array().unwrap();
    assert_eq!(spans.len(), 4);
    assert_eq!(spans[2]["depth"], 2);
    assert_eq!(spans[2]["status"], "error");

    // A trace id goes straight to Jaeger.
    let direct = cli(&sys, &["trace", &trace_id, "--jaeger-url", &jaeger_url]);
    assert_eq!(direct.stdout, out.stdout, "{}", text(&direct));

    // Jaeger has not got the trace: exit 1, and why.
    let other = sys.submit("echo", "echo", json!({"n": 2})).await;
    sys.wait_terminal(&other, Duration::from_secs(30)).await;
    let missing = cli(&sys, &["trace", &other, "--jaeger-url", &jaeger_url]);
    assert_eq!(missing.status.code(), Some(1), "{}", text(&missing));
    assert!(
        text(&missing).contains("Jaeger has no spans of trace"),
        "{}",
        text(&missing)
    );
    // Jaeger is not there: exit 3, naming where it looked.
    let port = common::process::free_port();
    let nowhere = format!("http://127.0.0.1:{port}");
    let down = cli(&sys, &["trace", &id, "--jaeger-url", &nowhere]);
    assert_eq!(down.status.code(), Some(3), "{}", text(&down));
    assert!(
        text(&down).contains(&format!("cannot reach Jaeger's query API at {nowhere}")),
        "{}",
        text(&down)
    );
    // An id that is no task and no request.
    let unknown = cli(
        &sys,
        &["trace", "no-such-request", "--jaeger-url", &jaeger_url],
    );
    assert_eq!(unknown.status.code(), Some(2), "{}", text(&unknown));
}
