//! No caller can starve the API: probes answer while it is full, one
//! principal holds at most its share, a body must arrive in time and is
//! read only after the caller's scopes are checked, and connections that
//! dribble their headers are cut and capped.

use crate::common;

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
    let mut sys = System::start_with_settings(
        common::nats::NatsServer::start(),
        vec![card("echo", &["echo"])],
        fast_bus(),
        |c, h| {
            c.api_auth.api_keys.extend([eve_entry, mallory_entry]);
            h.max_in_flight = 8;
            h.max_in_flight_per_principal = 4;
            h.body_timeout = Duration::from_secs(2);
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
/// the header timeout; past `http_max_connections` and the probes'
/// reserve, a connection is answered 503 at once (not left in the
/// backlog), and the API serves again once the dribblers are cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_that_dribble_headers_are_cut_and_capped() {
    let sys = System::start_with_settings(
        common::nats::NatsServer::start(),
        vec![card("echo", &["echo"])],
        fast_bus(),
        |_, h| {
            h.max_connections = 4;
            h.probe_connections = 2;
            h.header_timeout = Duration::from_secs(1);
        },
    )
    .await;
    let mut dribblers = Vec::new();
    for _ in 0..6 {
        dribblers.push(dribble(&sys.http, "GET /healthz HTTP/1.1\r\nHo").await);
    }
    let mut refused = dribble(&sys.http, "GET /healthz HTTP/1.1\r\nHo").await;
    let (status, text) = answer(&mut refused, Duration::from_secs(5)).await;
    assert_eq!(status, Some(503), "{text}");
    assert!(text.contains("too_many_connections"), "{text}");
    assert!(text.to_lowercase().contains("retry-after: 1"), "{text}");
    for mut stream in dribblers {
        let (_, text) = answer(&mut stream, Duration::from_secs(15)).await;
        assert!(!text.contains("200 OK"), "a dribbler was served: {text}");
    }
    let (status, _) = sys.get("/healthz").await;
    assert_eq!(status, 200, "served once the dribblers are cut");
    let metrics = common::get_text(&reqwest::Client::new(), &format!("{}/metrics", sys.http)).await;
    let reached = metric(&metrics, "orch_http_connection_cap_reached_total ");
    assert!(reached > 0, "{metrics}");
    let full = metric(
        &metrics,
        "orch_http_connections_refused_total{reason=\"full\"} ",
    );
    assert!(full > 0, "{metrics}");
}

/// The value of the metric line that starts with `prefix`, or 0.
fn metric(text: &str, prefix: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// A connection to `http` from the loopback address `from` (the whole of
/// 127.0.0.0/8 is this machine), so a test can play several peers.
async fn connect_from(from: [u8; 4], http: &str) -> TcpStream {
    let to: std::net::SocketAddr = http.trim_start_matches("http://").parse().unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(std::net::SocketAddr::from((from, 0))).unwrap();
    socket.connect(to).await.unwrap()
}

/// A connection from `from` that sent `head` and nothing after it.
async fn dribble_from(from: [u8; 4], http: &str, head: &str) -> TcpStream {
    let mut stream = connect_from(from, http).await;
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
}

/// The status of the first answer on `stream`, read within `within`
/// without waiting for the end (a stream's answer has none).
async fn status_line(stream: &mut TcpStream, within: Duration) -> Option<u16> {
    let mut head = Vec::new();
    let mut buf = [0u8; 512];
    let deadline = Instant::now() + within;
    while !head.windows(2).any(|w| w == b"\r\n") {
        let left = deadline.checked_duration_since(Instant::now())?;
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => head.extend_from_slice(&buf[..n]),
            _ => return None,
        }
    }
    String::from_utf8_lossy(&head)
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
}

/// An HTTP client whose connections come from `from`, sending `key`.
fn client_from(from: [u8; 4], key: &str) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {key}").parse().unwrap(),
    );
    reqwest::Client::builder()
        .default_headers(headers)
        .local_address(std::net::IpAddr::from(from))
        .timeout(PROMPTLY)
        .build()
        .unwrap()
}

/// What "answered at once" means under attack: well under the header
/// deadline an attacker's connections hold a slot for.
const PROMPTLY: Duration = Duration::from_secs(1);

/// The attack that locked everyone out, and the one beside it: one
/// ordinary key opens idle streams (`GET /v1/changes`, A2A
/// `SubscribeToTask`) while a peer without credentials runs a slowloris.
/// The key holds at most `http_max_streams_per_principal` streams (429,
/// and -32103 on the A2A face, past it), the slowloris at most
/// `http_max_connections_per_peer` connections (503 at once past it), and
/// meanwhile another principal's submit and every probe answer within a
/// second. Then dribblers from many peers fill every API slot: the probes
/// still answer (from their reserve) while the API answers 503 at once,
/// and dribblers opened under that pressure are cut at the shorter header
/// deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_and_a_slowloris_cannot_lock_others_out() {
    let (eve, eve_entry) = key_for("eve", &[]);
    let sys = System::start_with_settings(
        common::nats::NatsServer::start(),
        vec![card("echo", &["echo"])],
        fast_bus(),
        |c, h| {
            c.api_auth.api_keys.push(eve_entry);
            h.max_connections = 64;
            h.probe_connections = 8;
            h.max_connections_per_peer = 16;
            h.max_streams_per_principal = 4;
            h.header_timeout = Duration::from_secs(30);
            h.header_timeout_under_pressure = Duration::from_secs(2);
        },
    )
    .await;
    let admin = sys.admin_key.clone().unwrap();
    const EVE: [u8; 4] = [127, 0, 0, 4];
    const SLOWLORIS: [u8; 4] = [127, 0, 0, 2];
    const OTHER: [u8; 4] = [127, 0, 0, 3];

    // Eve's streams: her share, then 429.
    let changes =
        format!("GET /v1/changes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {eve}\r\n\r\n");
    let mut streams = Vec::new();
    for _ in 0..4 {
        let mut stream = dribble_from(EVE, &sys.http, &changes).await;
        assert_eq!(
            status_line(&mut stream, Duration::from_secs(5)).await,
            Some(200)
        );
        streams.push(stream);
    }
    let mut over = dribble_from(
        EVE,
        &sys.http,
        &changes.replace("\r\n\r\n", "\r\nConnection: close\r\n\r\n"),
    )
    .await;
    let (status, text) = answer(&mut over, Duration::from_secs(5)).await;
    assert_eq!(status, Some(429), "{text}");
    assert!(text.contains("http_max_streams_per_principal"), "{text}");
    assert!(text.to_lowercase().contains("retry-after: 1"), "{text}");
    let eve_client = client_from(EVE, &eve);
    let refused = common::a2a::rpc_as(
        &sys,
        &eve_client,
        Some("1.0"),
        "SubscribeToTask",
        json!({"id": "tasks/0193a1b2-0000-7000-8000-000000000000"}),
    )
    .await;
    assert_eq!(refused["error"]["code"], -32103, "{refused:#}");

    // A slowloris from one peer: 16 held, the rest refused at once.
    let mut slowloris = Vec::new();
    let mut turned_away = 0;
    for _ in 0..40 {
        let mut stream = dribble_from(SLOWLORIS, &sys.http, "GET /healthz HTTP/1.1\r\nHo").await;
        tokio::time::sleep(Duration::from_millis(5)).await;
        let mut probe = [0u8; 1];
        match tokio::time::timeout(Duration::from_millis(300), stream.peek(&mut probe)).await {
            Ok(_) => {
                let (status, text) = answer(&mut stream, Duration::from_secs(2)).await;
                assert_eq!(status, Some(503), "{text}");
                turned_away += 1;
            }
            Err(_) => slowloris.push(stream),
        }
    }
    assert_eq!(slowloris.len(), 16, "the peer holds its cap");
    assert_eq!(turned_away, 24);

    // Meanwhile another principal and the probes are served at once.
    let other = client_from(OTHER, &admin);
    let submitted = other
        .post(format!("{}/v1/tasks", sys.http))
        .json(&json!({"to": "echo", "action": "echo", "params": {}}))
        .send()
        .await
        .expect("another principal's submit answers within a second");
    assert_eq!(submitted.status(), 201);
    for probe in ["/healthz", "/readyz", "/metrics"] {
        let answered = other
            .get(format!("{}{probe}", sys.http))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{probe} within a second: {e}"));
        assert_eq!(answered.status(), 200, "{probe}");
    }

    // Every API slot taken by dribblers from many peers (4 streams and 16
    // slowloris connections hold 20 of 64 once the clients' idle
    // connections are gone).
    drop((other, eve_client));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut crowd = Vec::new();
    for i in 0..44u8 {
        let from = [127, 0, 1, i / 11];
        crowd.push(dribble_from(from, &sys.http, "GET /healthz HTTP/1.1\r\nHo").await);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let fresh = client_from([127, 0, 0, 9], &admin);
    for probe in ["/healthz", "/readyz", "/metrics"] {
        let answered = fresh
            .get(format!("{}{probe}", sys.http))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{probe} within a second from the reserve: {e}"));
        assert_eq!(answered.status(), 200, "{probe}");
    }
    let full = fresh
        .post(format!("{}/v1/tasks", sys.http))
        .json(&json!({"to": "echo", "action": "echo", "params": {}}))
        .send()
        .await
        .expect("the API answers at once when full");
    assert_eq!(full.status(), 503);
    let body: serde_json::Value = full.json().await.unwrap();
    assert_eq!(body["error"]["code"], "too_many_connections", "{body:#}");

    // The dribblers opened under pressure are cut at its deadline (2 s),
    // the first slowloris connections (opened before) are not.
    let started = Instant::now();
    for mut stream in crowd.drain(22..) {
        let (_, text) = answer(&mut stream, Duration::from_secs(10)).await;
        assert!(!text.contains("200 OK"), "{text}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "cut at the shorter deadline"
    );
    let mut probe = [0u8; 1];
    assert!(
        tokio::time::timeout(Duration::from_millis(100), slowloris[0].peek(&mut probe))
            .await
            .is_err(),
        "a connection opened before the pressure keeps its deadline"
    );
    let metrics = common::get_text(&reqwest::Client::new(), &format!("{}/metrics", sys.http)).await;
    assert!(
        metric(
            &metrics,
            "orch_http_connections_refused_total{reason=\"peer\"} "
        ) >= 24,
        "{metrics}"
    );
    assert!(
        metric(
            &metrics,
            "orch_http_streams_refused_total{reason=\"principal\"} "
        ) >= 2,
        "{metrics}"
    );
    drop(streams);
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
    assert!(text.contains("lowered to 428"), "{text}");
}

/// Submitting faster than any worker takes: past `max_backlog` tasks
/// waiting, a new task is refused with 429 `overloaded` and
/// `Retry-After`, counted in the metrics, while every task accepted before
/// completes once a worker comes; then new tasks are taken again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overload_is_shed_and_what_was_accepted_completes() {
    let mut sys = System::start_with(
        common::nats::NatsServer::start(),
        vec![card("echo", &["echo"])],
        fast_bus(),
        |c| c.max_backlog = 20,
    )
    .await;
    let task = json!({"to": "echo", "action": "echo", "params": {}});
    let mut accepted = Vec::new();
    let mut shed = None;
    // The count is read again every 250 ms: a burst may pass it by a few.
    for _ in 0..200 {
        let resp = sys
            .client
            .post(format!("{}/v1/tasks", sys.http))
            .json(&task)
            .send()
            .await
            .unwrap();
        if resp.status() == 429 {
            shed = Some(resp);
            break;
        }
        assert_eq!(resp.status(), 201);
        let body: serde_json::Value = resp.json().await.unwrap();
        accepted.push(body["task_id"].as_str().unwrap().to_string());
        if accepted.len() >= 20 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let shed = shed.expect("an overload is shed");
    assert_eq!(shed.headers()["retry-after"], "5");
    let body: serde_json::Value = shed.json().await.unwrap();
    assert_eq!(body["error"]["code"], "overloaded", "{body:#}");
    assert!(
        (20..40).contains(&accepted.len()),
        "shed near the bound: {}",
        accepted.len()
    );

    sys.worker(
        card("echo", &["echo"]),
        std::sync::Arc::new(orchestrator::worker::EchoHandler),
    )
    .await;
    for id in &accepted {
        let done = sys.wait_terminal(id, Duration::from_secs(60)).await;
        assert_eq!(done["state"], "completed", "{done:#}");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, body) = sys.post("/v1/tasks", task).await;
    assert_eq!(status, 201, "taken again once drained: {body:#}");
    let metrics = common::get_text(&reqwest::Client::new(), &format!("{}/metrics", sys.http)).await;
    assert!(
        metric(&metrics, "orch_requests_shed_total ") >= 1,
        "{metrics}"
    );
}
