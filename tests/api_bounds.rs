//! No caller can starve the API: probes answer while it is full, one
//! principal holds at most its share, a body must arrive in time and is
//! read only after the caller's scopes are checked, and connections that
//! dribble their headers are cut and capped.

mod common;

use std::time::{Duration, Instant};

use common::system::{System, card, fast_bus, key_for};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A connection that sent `head` (and nothing after it).
async fn dribble(http: &str, head: &str) -> TcpStream {
    let addr = http.trim_start_matches("http://");
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
}

/// A POST whose headers arrive whole and whose body never does.
async fn slow_body(http: &str, path: &str, key: &str) -> TcpStream {
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{"
    );
    dribble(http, &head).await
}

/// What the server sent on `stream` until it closed it (or `within`
/// passed): its status line's code, if any.
async fn answer(stream: &mut TcpStream, within: Duration) -> (Option<u16>, String) {
    let mut text = Vec::new();
    let _ = tokio::time::timeout(within, stream.read_to_end(&mut text)).await;
    let text = String::from_utf8_lossy(&text).into_owned();
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok());
    (status, text)
}

/// A caller with a valid key and no scopes opens more slow-body POSTs than
/// its share: the ones past it get 429 with `Retry-After` at once, while
/// another principal is served; when a second such caller fills the rest
/// of the API, the probes still answer; the held ones get 408 when their
/// body does not arrive in time, and the API serves again; a trigger a
/// caller may not start refuses it before reading the body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_with_slow_bodies_holds_only_its_share() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("t.yaml"),
        "id: t\nrequired_scopes: [Mail.Send]\nsteps:\n  - {id: s, agent: echo, action: echo}\n",
    )
    .unwrap();
    let (eve, eve_entry) = key_for("eve", &[]);
    let (mallory, mallory_entry) = key_for("mallory", &[]);
    let mut sys = System::start_with(
        common::nats::NatsServer::start(),
        vec![card("echo", &["echo"])],
        fast_bus(),
        |c| {
            c.api_auth.api_keys.extend([eve_entry, mallory_entry]);
            c.http_max_in_flight = 8;
            c.http_max_in_flight_per_principal = 4;
            c.http_body_timeout = Duration::from_secs(2);
        },
    )
    .await;
    sys.stop_orchestrator().await;
    sys.triggers = orchestrator::trigger::Triggers::load(dir.path(), &Default::default());
    sys.start_orchestrator(vec![card("echo", &["echo"])]).await;

    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(slow_body(&sys.http, "/v1/tasks", &eve).await);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut over = slow_body(&sys.http, "/v1/tasks", &eve).await;
    let (status, text) = answer(&mut over, Duration::from_secs(5)).await;
    assert_eq!(status, Some(429), "{text}");
    assert!(text.to_lowercase().contains("retry-after: 1"), "{text}");
    assert!(text.contains("too_many_requests"), "{text}");

    let task = json!({"to": "echo", "action": "echo", "params": {}});
    let (status, body) = sys.post("/v1/tasks", task.clone()).await;
    assert_eq!(status, 201, "another principal is served: {body:#}");

    for _ in 0..4 {
        held.push(slow_body(&sys.http, "/v1/tasks", &mallory).await);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, body) = sys.post("/v1/tasks", task.clone()).await;
    assert_eq!(status, 503, "the API is full: {body:#}");
    for probe in ["/healthz", "/readyz", "/metrics"] {
        let (status, _) = sys.get(probe).await;
        assert_eq!(status, 200, "{probe}");
    }

    let started = Instant::now();
    for mut stream in held {
        let (status, text) = answer(&mut stream, Duration::from_secs(10)).await;
        assert_eq!(status, Some(408), "{text}");
        assert!(text.contains("body_timeout"), "{text}");
    }
    assert!(started.elapsed() < Duration::from_secs(8));
    let (status, body) = sys.post("/v1/tasks", task).await;
    assert_eq!(status, 201, "{body:#}");

    let mut forbidden = slow_body(&sys.http, "/v1/triggers/t/runs", &eve).await;
    let (status, text) = answer(&mut forbidden, Duration::from_secs(1)).await;
    assert_eq!(status, Some(403), "refused before the body: {text}");
}

/// Connections that send part of their headers and stop are closed after
/// the header timeout, at most `http_max_connections` are open at once,
/// and a real request behind them is answered once they are cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_that_dribble_headers_are_cut_and_capped() {
    let sys = System::start_with(
        common::nats::NatsServer::start(),
        vec![card("echo", &["echo"])],
        fast_bus(),
        |c| {
            c.http_max_connections = 4;
            c.http_header_timeout = Duration::from_secs(1);
        },
    )
    .await;
    let mut dribblers = Vec::new();
    for _ in 0..10 {
        dribblers.push(dribble(&sys.http, "GET /healthz HTTP/1.1\r\nHo").await);
    }
    let started = Instant::now();
    let healthy = tokio::time::timeout(
        Duration::from_secs(15),
        reqwest::get(format!("{}/healthz", sys.http)),
    )
    .await
    .expect("the probe is answered once the dribblers are cut")
    .unwrap();
    assert_eq!(healthy.status(), 200);
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "the cap did not hold it back"
    );
    for mut stream in dribblers {
        let (_, text) = answer(&mut stream, Duration::from_secs(15)).await;
        assert!(!text.contains("200 OK"), "a dribbler was served: {text}");
    }
    let metrics = common::get_text(&reqwest::Client::new(), &format!("{}/metrics", sys.http)).await;
    let reached = metrics
        .lines()
        .find_map(|l| l.strip_prefix("orch_http_connection_cap_reached_total "))
        .and_then(|n| n.trim().parse::<u64>().ok())
        .unwrap_or(0);
    assert!(reached > 0, "{metrics}");
}

/// Started with a low soft open-file limit, `orchestrator run` raises it
/// to the hard limit and lowers `http_max_connections` to fit what is
/// left beside the descriptors it keeps for itself, saying both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_raises_its_open_file_limit_and_fits_the_connection_cap() {
    use common::process::{Proc, free_port, run_args, wait_ready};
    let nats = common::nats::NatsServer::start();
    let (agents, data, logs) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let port = free_port();
    let log = logs.path().join("run.log");
    let child = std::process::Command::new("prlimit")
        .arg("--nofile=512:700")
        .arg(env!("CARGO_BIN_EXE_orchestrator"))
        .args(run_args(agents.path(), data.path(), port, &[]))
        .env("NATS_URL", nats.url())
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let run = Proc(child);
    wait_ready(&format!("http://127.0.0.1:{port}/readyz")).await;
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", run.0.id())).unwrap();
    let open_files = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap()
        .split_whitespace()
        .skip(3)
        .take(2)
        .collect::<Vec<_>>();
    assert_eq!(open_files, ["700", "700"], "{limits}");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("raised the open-file limit"), "{text}");
    assert!(text.contains("lowered to 444"), "{text}");
}
