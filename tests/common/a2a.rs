//! Calling the A2A face as a client: JSON-RPC calls, their errors, and
//! streams read event by event.

use std::time::Duration;

use serde_json::{Value, json};

use super::system::System;

/// A message with an id, parts and metadata (1.0 spellings).
pub fn message(id: &str, parts: Value, metadata: Value) -> Value {
    json!({"messageId": id, "role": "ROLE_USER", "parts": parts, "metadata": metadata})
}

/// A JSON-RPC call as `client`, in `version` (`None`: no header, 0.3).
pub async fn rpc_as(
    sys: &System,
    client: &reqwest::Client,
    version: Option<&str>,
    method: &str,
    params: Value,
) -> Value {
    let mut req = client
        .post(format!("{}/a2a", sys.http))
        .json(&json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}));
    if let Some(v) = version {
        req = req.header("A2A-Version", v);
    }
    let resp = req.send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["id"], 7, "{body:#}");
    body
}

pub async fn rpc(sys: &System, method: &str, params: Value) -> Value {
    rpc_as(sys, &sys.client, Some("1.0"), method, params).await
}

pub fn error_code(body: &Value) -> i64 {
    body["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("no error: {body:#}"))
}

/// Whether an error's message says `text`.
pub fn says(body: &Value, text: &str) -> bool {
    body["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains(text))
}

pub fn reason(body: &Value) -> &str {
    body["error"]["data"][0]["reason"]
        .as_str()
        .unwrap_or_default()
}

/// Reads SSE events from `resp` until `n` have come or the stream ends:
/// their ids and data.
pub async fn read_events(resp: &mut reqwest::Response, n: usize) -> Vec<(u64, Value)> {
    let mut buf = String::new();
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while out.len() < n {
        let chunk = tokio::time::timeout_at(deadline, resp.chunk()).await;
        let Some(chunk) = chunk
            .unwrap_or_else(|_| panic!("events in time; got {out:?}"))
            .unwrap()
        else {
            break;
        };
        buf.push_str(std::str::from_utf8(&chunk).unwrap());
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let mut id = None;
            let mut data = None;
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("id:") {
                    id = Some(v.trim().parse::<u64>().unwrap());
                } else if let Some(v) = line.strip_prefix("data:") {
                    data = Some(serde_json::from_str::<Value>(v.trim()).unwrap());
                }
            }
            if let (Some(id), Some(data)) = (id, data) {
                out.push((id, data));
            }
        }
    }
    out
}

pub async fn open_stream(
    sys: &System,
    method: &str,
    params: Value,
    last: Option<u64>,
) -> reqwest::Response {
    let mut req = sys
        .client
        .post(format!("{}/a2a", sys.http))
        .header("A2A-Version", "1.0")
        .json(&json!({"jsonrpc": "2.0", "id": "s", "method": method, "params": params}));
    if let Some(l) = last {
        req = req.header("Last-Event-ID", l.to_string());
    }
    let resp = req.send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream"),
        "{:?}",
        resp.headers()
    );
    resp
}

pub fn kind(event: &Value) -> String {
    let r = &event["result"];
    if let Some(s) = r.get("statusUpdate") {
        let state = s["status"]["state"].as_str().unwrap();
        return state.trim_start_matches("TASK_STATE_").to_lowercase();
    }
    if r.get("artifactUpdate").is_some() {
        return "artifact".into();
    }
    if r.get("task").is_some() {
        return "task".into();
    }
    format!("{r}")
}

/// The Python that has the official client: `A2A_SDK_PYTHON`, as
/// `scripts/test` sets it (from `scripts/ensure-a2a-sdk`).
fn sdk_python() -> String {
    std::env::var("A2A_SDK_PYTHON").unwrap_or_else(|_| {
        panic!("A2A_SDK_PYTHON is not set: run the tests with scripts/test, or set it to the output of scripts/ensure-a2a-sdk")
    })
}

/// Runs `tests/a2a/<script>` with the official client against `sys` as
/// the holder of `key`; each line it prints is a check
/// (`{"check", "ok", "detail"}`). Fails on a failed check or a failed
/// script; the names of the checks made.
pub async fn sdk_checks(script: &str, sys: &System, key: &str) -> Vec<String> {
    let script = format!("{}/tests/a2a/{script}", env!("CARGO_MANIFEST_DIR"));
    let child = tokio::process::Command::new(sdk_python())
        .args([&script, &sys.http, key])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .expect("the client script finished in time")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let checks: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let failed: Vec<&Value> = checks.iter().filter(|c| c["ok"] != true).collect();
    assert!(
        out.status.success() && failed.is_empty(),
        "failed: {failed:#?}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    checks
        .iter()
        .map(|c| c["check"].as_str().unwrap_or_default().to_string())
        .collect()
}
