//! What several paths use: a loopback HTTP server, the echo agent's card,
//! and a process's resident memory.

use orchestrator::agent::AgentCard;
use serde_json::json;

/// Serves `app` on a port of 127.0.0.1 until the bench ends; its URL,
/// `path` added.
pub(super) async fn serve_loopback(app: axum::Router, path: &str) -> Result<String, String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let url = format!(
        "http://{}{path}",
        listener.local_addr().map_err(|e| e.to_string())?
    );
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(url)
}

/// The echo agent every full path runs, taking `concurrency` at once.
pub(super) fn echo_card(concurrency: usize) -> Result<AgentCard, String> {
    serde_json::from_value(json!({
        "name": "echo", "version": "1.0.0", "description": "bench echo",
        "skills": [{"id": "echo", "description": "echo"}],
        "invocation": {"type": "builtin", "handler": "echo"},
        "delivery": {"concurrency": concurrency},
    }))
    .map_err(|e| e.to_string())
}

/// A process's resident memory, in MiB.
pub(super) fn rss_mib_of(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}
