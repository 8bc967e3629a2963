//! `orchestrator trace <task id | correlation id>`: the span tree of a
//! task's trace, read from Jaeger's HTTP query API (`GET
//! /api/traces/{trace id}`), as an indented tree with timings.

use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;

use clap::Args;
use serde_json::{Value, json};

use super::client::{Api, ClientArgs, Failure, finish, list_path};
use super::output::outln;

#[derive(Args)]
pub struct TraceArgs {
    /// A task id, a correlation id (every task of the request), or a
    /// trace id (32 hex digits, read from Jaeger without asking the
    /// orchestrator).
    id: String,
    /// The Jaeger UI and query API.
    #[arg(
        long,
        env = "ORCH_JAEGER_URL",
        default_value = orchestrator::telemetry::settings::DEFAULT_JAEGER_UI
    )]
    jaeger_url: String,
}

/// One span, as the tree shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub span_id: String,
    pub parent: Option<String>,
    pub service: String,
    pub name: String,
    /// Microseconds since the epoch.
    pub start_us: i64,
    pub duration_us: i64,
    pub error: bool,
}

pub async fn trace(args: &ClientArgs, t: TraceArgs) -> ExitCode {
    let api = match Api::new(args) {
        Ok(api) => api,
        Err(f) => return f.report(args.json),
    };
    let jaeger = t.jaeger_url.trim_end_matches('/').to_string();
    let result = async {
        let trace_ids = trace_ids(&api, &t.id).await?;
        let http = reqwest::Client::new();
        let mut traces = Vec::new();
        for trace_id in trace_ids {
            let spans = fetch(&http, &jaeger, &trace_id).await?;
            let ordered = tree(spans);
            traces.push(json!({
                "trace_id": trace_id,
                "url": format!("{jaeger}/trace/{trace_id}"),
                "spans": ordered.iter().map(|(depth, n)| json!({
                    "span_id": n.span_id,
                    "parent_span_id": n.parent,
                    "service": n.service,
                    "name": n.name,
                    "start_us": n.start_us,
                    "duration_us": n.duration_us,
                    "status": if n.error { "error" } else { "ok" },
                    "depth": depth,
                })).collect::<Vec<_>>(),
            }));
        }
        Ok((json!({ "traces": traces }), 0))
    }
    .await;
    finish(args, result, |v| {
        for trace in v["traces"].as_array().into_iter().flatten() {
            print_trace(trace);
        }
    })
}

/// The trace ids of a task, or of every task of a correlation id.
async fn trace_ids(api: &Api, id: &str) -> Result<Vec<String>, Failure> {
    if id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok(vec![id.to_ascii_lowercase()]);
    }
    if id.parse::<orchestrator::envelope::TaskId>().is_ok() {
        match api.get(&format!("/v1/tasks/{id}")).await {
            Ok((task, _)) => {
                return task["trace_id"]
                    .as_str()
                    .map(|t| vec![t.to_string()])
                    .ok_or_else(|| {
                        Failure::new(1, "no_trace", format!("task {id} has no trace id"))
                    });
            }
            Err(f) if f.exit == 2 => {} // not a task: try it as a correlation id
            Err(f) => return Err(f),
        }
    }
    let path = list_path(
        "/v1/tasks",
        1000,
        &[("correlation_id", Some(id.to_string()))],
    );
    let (page, _) = api.get(&path).await?;
    let ids: BTreeSet<String> = page["tasks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["trace_id"].as_str().map(str::to_string))
        .collect();
    if ids.is_empty() {
        return Err(Failure::new(
            2,
            "not_found",
            format!("no task has the id or correlation id `{id}`"),
        ));
    }
    Ok(ids.into_iter().collect())
}

/// The spans of one trace from Jaeger's query API.
async fn fetch(http: &reqwest::Client, jaeger: &str, trace_id: &str) -> Result<Vec<Node>, Failure> {
    let url = format!("{jaeger}/api/traces/{trace_id}");
    let unreachable = |e: String| {
        Failure::new(
            3,
            "jaeger_unreachable",
            format!(
                "cannot reach Jaeger's query API at {jaeger} ({e}); pass --jaeger-url or set ORCH_JAEGER_URL. \
                 The trace is {jaeger}/trace/{trace_id}"
            ),
        )
    };
    let resp = http
        .get(&url)
        .timeout(std::time::Duration::from_secs(10))
        .send()
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    let status = resp.status();
    if status == reqwest::StatusCode::NOT_FOUND {
        return Err(not_found(trace_id));
    }
    if !status.is_success() {
        return Err(unreachable(format!("it answered {status}")));
    }
    let body: Value = resp
        .json()
        .await
        .map_err(|e| unreachable(format!("its answer is not JSON: {e}")))?;
    let spans = parse(&body, trace_id);
    if spans.is_empty() {
        return Err(not_found(trace_id));
    }
    Ok(spans)
}

fn not_found(trace_id: &str) -> Failure {
    Failure::new(
        1,
        "trace_not_found",
        format!(
            "Jaeger has no spans of trace {trace_id}: spans arrive a few seconds after the work \
             (batch export), and only from processes with an OTLP endpoint configured \
             (docs/observability.md) whose sampler recorded the trace"
        ),
    )
}

/// The spans of `trace_id` in a Jaeger query answer
/// (`{"data":[{"traceID","spans":[…],"processes":{…}}]}`).
pub fn parse(body: &Value, trace_id: &str) -> Vec<Node> {
    let mut nodes = Vec::new();
    for trace in body["data"].as_array().into_iter().flatten() {
        if trace["traceID"]
            .as_str()
            .is_some_and(|t| !t.eq_ignore_ascii_case(trace_id))
        {
            continue;
        }
        let processes = &trace["processes"];
        for span in trace["spans"].as_array().into_iter().flatten() {
            let tag = |key: &str| {
                span["tags"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|t| t["key"] == key)
                    .map(|t| t["value"].clone())
            };
            let error = tag("error") == Some(Value::Bool(true))
                || tag("otel.status_code").is_some_and(|v| v == "ERROR");
            let parent = span["references"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|r| r["refType"] == "CHILD_OF")
                .or_else(|| span["references"].get(0))
                .and_then(|r| r["spanID"].as_str())
                .map(str::to_string);
            let process = span["processID"].as_str().unwrap_or_default();
            nodes.push(Node {
                span_id: span["spanID"].as_str().unwrap_or_default().to_string(),
                parent,
                service: processes[process]["serviceName"]
                    .as_str()
                    .unwrap_or("?")
                    .to_string(),
                name: span["operationName"].as_str().unwrap_or("?").to_string(),
                start_us: span["startTime"].as_i64().unwrap_or_default(),
                duration_us: span["duration"].as_i64().unwrap_or_default(),
                error,
            });
        }
    }
    nodes
}

/// The spans in tree order (each followed by its children, by start
/// time), with their depth. A span whose parent is not in the trace is a
/// root.
pub fn tree(nodes: Vec<Node>) -> Vec<(usize, Node)> {
    let ids: BTreeSet<String> = nodes.iter().map(|n| n.span_id.clone()).collect();
    let mut children: BTreeMap<Option<String>, Vec<Node>> = BTreeMap::new();
    for n in nodes {
        let parent = n.parent.clone().filter(|p| ids.contains(p));
        children.entry(parent).or_default().push(n);
    }
    for list in children.values_mut() {
        list.sort_by_key(|n| (n.start_us, n.span_id.clone()));
    }
    let mut out = Vec::new();
    let mut stack: Vec<(usize, Node)> = children
        .remove(&None)
        .unwrap_or_default()
        .into_iter()
        .rev()
        .map(|n| (0, n))
        .collect();
    while let Some((depth, node)) = stack.pop() {
        if let Some(kids) = children.remove(&Some(node.span_id.clone())) {
            stack.extend(kids.into_iter().rev().map(|k| (depth + 1, k)));
        }
        out.push((depth, node));
    }
    out
}

fn millis(us: i64) -> String {
    format!("{:.1} ms", us as f64 / 1000.0)
}

fn print_trace(trace: &Value) {
    outln!("trace {}  {}", s(&trace["trace_id"]), s(&trace["url"]));
    let spans = trace["spans"].as_array().cloned().unwrap_or_default();
    let start = spans
        .iter()
        .filter_map(|sp| sp["start_us"].as_i64())
        .min()
        .unwrap_or_default();
    outln!("{:>10}  {:>10}  {:<6}  SPAN", "AT", "DURATION", "STATUS");
    for sp in &spans {
        let depth = sp["depth"].as_u64().unwrap_or_default() as usize;
        outln!(
            "{:>10}  {:>10}  {:<6}  {}{} [{}]",
            format!(
                "+{}",
                millis(sp["start_us"].as_i64().unwrap_or_default() - start)
            ),
            millis(sp["duration_us"].as_i64().unwrap_or_default()),
            s(&sp["status"]),
            "  ".repeat(depth),
            s(&sp["name"]),
            s(&sp["service"]),
        );
    }
}

fn s(v: &Value) -> String {
    super::output::s(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(id: &str, parent: Option<&str>, start: i64, process: &str) -> Value {
        json!({
            "traceID": "t1", "spanID": id, "operationName": format!("op-{id}"),
            "references": parent.map(|p| vec![json!({"refType": "CHILD_OF", "traceID": "t1", "spanID": p})]).unwrap_or_default(),
            "startTime": start, "duration": 1500, "processID": process,
            "tags": if id == "c" { vec![json!({"key": "otel.status_code", "type": "string", "value": "ERROR"})] } else { vec![] },
        })
    }

    #[test]
    fn spans_come_out_as_a_tree_in_start_order() {
        let body = json!({"data": [{
            "traceID": "t1",
            "spans": [span("c", Some("a"), 30, "p2"), span("a", None, 10, "p1"),
                      span("b", Some("a"), 20, "p1"), span("d", Some("b"), 25, "p2"),
                      span("e", Some("gone"), 40, "p1")],
            "processes": {"p1": {"serviceName": "orchestrator"}, "p2": {"serviceName": "agent-echo"}},
        }]});
        let nodes = parse(&body, "t1");
        assert_eq!(nodes.len(), 5);
        let order: Vec<(usize, String, String, bool)> = tree(nodes)
            .into_iter()
            .map(|(d, n)| (d, n.span_id, n.service, n.error))
            .collect();
        assert_eq!(
            order,
            vec![
                (0, "a".into(), "orchestrator".into(), false),
                (1, "b".into(), "orchestrator".into(), false),
                (2, "d".into(), "agent-echo".into(), false),
                (1, "c".into(), "agent-echo".into(), true),
                (0, "e".into(), "orchestrator".into(), false),
            ]
        );
        assert!(parse(&body, "other").is_empty());
    }
}
