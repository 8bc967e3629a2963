//! Traces, metrics and trace links, with the orchestrator and a worker as
//! separate processes exporting to a receiver inside the test that decodes
//! real OTLP protobuf (the orchestrator over HTTP, the worker over gRPC).

use crate::common;
#[path = "common/otlp.rs"]
mod otlp;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::nats::NatsServer;
use common::process::{Proc, free_port, run_args, wait_ready};
use otlp::{Got, Receiver};
use serde_json::{Value, json};

const PLANTED: &str = "s3cret-planted-91d2e7";

/// A command agent: `echo` answers with the `TRACEPARENT` it was given;
/// `flaky` fails retryably (printing the password it got) on attempt 1,
/// then answers like `echo`.
fn tracer_agent(dir: &Path) {
    common::command_agent(
        dir,
        json!({
            "name": "tracer", "version": "1.0.0", "description": "reports its trace context",
            "skills": [
                {"id": "echo", "description": "echo", "triggers": ["say it back"]},
                {"id": "flaky", "description": "fails once"}
            ],
            "invocation": {"type": "command", "command": ["python3", "tracer.py"], "timeout": "30s"}
        }),
        "tracer.py",
        "import json, os, sys\n\
         env = json.load(sys.stdin)\n\
         if env['payload']['action'] == 'flaky' and os.environ['ORCH_ATTEMPT'] == '1':\n\
         \x20   print('busy; password was', env['payload']['params'].get('password'), file=sys.stderr)\n\
         \x20   sys.exit(75)\n\
         print(json.dumps({'traceparent': os.environ.get('TRACEPARENT')}))\n",
    );
}

/// A workflow on the tracer: a task, a routed task, an approval gate, a
/// task.
const TRACED: &str = "\
id: traced
name: Traced
description: every kind of run span
run_mode: on_demand
input_schema: { type: object, required: [request], properties: { request: { type: string } } }
steps:
  - { id: first, agent: tracer, action: echo, params: {} }
  - id: pick
    route: { text: \"{{ input.request }}\", agents: [tracer] }
    params: {}
  - { id: confirm, approval: { prompt: Go on? } }
  - { id: last, agent: tracer, action: echo, params: {} }
";

/// A workflow whose one step fails (and prints the password it got).
const DOOMED: &str = "\
id: doomed
name: Doomed
description: a run that fails
run_mode: on_demand
steps:
  - { id: only, agent: tracer, action: flaky, params: { password: s3cret-planted-91d2e7 }, max_attempts: 1 }
";

/// A service process with `env` set, logging to `log`.
fn service(args: &[impl AsRef<std::ffi::OsStr>], env: &[(&str, &str)], log: &Path) -> Proc {
    let mut command = Command::new(env!("CARGO_BIN_EXE_orchestrator"));
    command
        .args(args)
        .env("RUST_LOG", "info")
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap());
    for (k, v) in env {
        command.env(k, v);
    }
    Proc(command.spawn().unwrap())
}

struct Deployment {
    _nats: NatsServer,
    _dirs: Vec<tempfile::TempDir>,
    base: String,
    metrics: String,
    http: reqwest::Client,
    procs: Vec<Proc>,
    logs: std::path::PathBuf,
}

impl Deployment {
    /// An orchestrator exporting over OTLP/HTTP and a worker over OTLP/gRPC,
    /// both to `receiver`, with `extra` in both environments.
    async fn start(receiver: &Receiver, extra: &[(&str, &str)]) -> Deployment {
        let nats = NatsServer::start();
        let agents = tempfile::tempdir().unwrap();
        tracer_agent(&agents.path().join("tracer"));
        let triggers = tempfile::tempdir().unwrap();
        std::fs::write(triggers.path().join("traced.yaml"), TRACED).unwrap();
        std::fs::write(triggers.path().join("doomed.yaml"), DOOMED).unwrap();
        let data = tempfile::tempdir().unwrap();
        let logs = tempfile::tempdir().unwrap();
        let port = free_port();
        let metrics_port = free_port();
        let base = format!("http://127.0.0.1:{port}");
        let data_arg = data.path().to_str().unwrap();
        let url = nats.url();
        let mut run_env = vec![
            ("NATS_URL", url.as_str()),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.http_url.as_str()),
        ];
        run_env.extend_from_slice(extra);
        let run = service(
            &run_args(
                agents.path(),
                data.path(),
                port,
                &["--triggers", triggers.path().to_str().unwrap()],
            ),
            &run_env,
            &logs.path().join("run.log"),
        );
        wait_ready(&format!("{base}/readyz")).await;
        let mut worker_env = vec![
            ("NATS_URL", url.as_str()),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.grpc_url.as_str()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ];
        worker_env.extend_from_slice(extra);
        let tracer = agents.path().join("tracer");
        let metrics_addr = format!("127.0.0.1:{metrics_port}");
        let worker = service(
            &[
                "worker",
                "--agent",
                tracer.to_str().unwrap(),
                "--data-dir",
                data_arg,
                "--metrics-addr",
                &metrics_addr,
            ],
            &worker_env,
            &logs.path().join("worker.log"),
        );
        let metrics = format!("http://{metrics_addr}");
        wait_ready(&format!("{metrics}/healthz")).await;
        let http = common::process::admin_client(data.path());
        let logs_path = logs.path().to_path_buf();
        Deployment {
            _nats: nats,
            _dirs: vec![agents, triggers, data, logs],
            base,
            metrics,
            http,
            procs: vec![run, worker],
            logs: logs_path,
        }
    }

    async fn submit(&self, body: Value, traceparent: Option<&str>) -> String {
        let mut request = self
            .http
            .post(format!("{}/v1/tasks", self.base))
            .json(&body);
        if let Some(tp) = traceparent {
            request = request.header("traceparent", tp);
        }
        let answer: Value = request.send().await.unwrap().json().await.unwrap();
        answer["task_id"]
            .as_str()
            .unwrap_or_else(|| panic!("not submitted: {answer}"))
            .to_string()
    }

    /// Run `id` once it is in `state`.
    async fn run_in(&self, id: &str, state: &str) -> Value {
        let url = format!("{}/v1/runs/{id}?wait=1s", self.base);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let run = common::get_json(&self.http, &url).await;
            if run["state"] == state {
                return run;
            }
            assert!(Instant::now() < deadline, "never {state}: {run:#}");
        }
    }

    /// The orchestrator's `/metrics`, scraped.
    async fn orchestrator_metrics(&self) -> BTreeMap<String, f64> {
        let url = format!("{}/metrics", self.base);
        scrape(&common::get_text(&self.http, &url).await)
    }

    async fn finished(&self, id: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let t =
                common::get_json(&self.http, &format!("{}/v1/tasks/{id}?wait=5s", self.base)).await;
            if t["state"] == "completed" {
                return t;
            }
            assert!(
                Instant::now() < deadline,
                "task never completed: {t:#}\n{}",
                std::fs::read_to_string(self.logs.join("worker.log")).unwrap_or_default()
            );
        }
    }
}

/// How many spans named `name` `trace` has.
fn count(spans: &[Got], trace: &str, name: &str) -> usize {
    spans
        .iter()
        .filter(|g| g.trace_id() == trace && g.name() == name)
        .count()
}

/// The one span named `name` of `trace`, by `service`.
fn one<'a>(spans: &'a [Got], trace: &str, service: &str, name: &str) -> &'a Got {
    let found: Vec<&Got> = spans
        .iter()
        .filter(|g| g.trace_id() == trace && g.service == service && g.name() == name)
        .collect();
    assert_eq!(found.len(), 1, "{service} `{name}` in {trace}: {found:#?}");
    found[0]
}

fn task_attrs(g: &Got, task: &Value, attempt: u32) {
    assert_eq!(
        g.attr("task_id").as_deref(),
        task["task_id"].as_str(),
        "{}",
        g.name()
    );
    assert_eq!(
        g.attr("correlation_id").as_deref(),
        task["correlation_id"].as_str(),
        "{}",
        g.name()
    );
    assert_eq!(g.attr("agent").as_deref(), Some("tracer"), "{}", g.name());
    assert_eq!(g.attr("attempt"), Some(attempt.to_string()), "{}", g.name());
}

/// Prometheus text as (name{sorted labels}) → value.
fn scrape(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let (key, value) = line.rsplit_once(' ').unwrap();
        let key = match key.split_once('{') {
            Some((name, labels)) => {
                let mut labels: Vec<&str> = labels.trim_end_matches('}').split(',').collect();
                labels.sort();
                format!("{name}{{{}}}", labels.join(","))
            }
            None => key.to_string(),
        };
        out.insert(key, value.parse().unwrap());
    }
    out
}

/// One task and one retried task: each is one trace from the API request
/// through the orchestrator's publish, the worker's handling (in another
/// process, exported over gRPC) and the command it ran, to the result the
/// orchestrator applied, with the expected parents, the task's attributes,
/// a retry span, and no secret anywhere. `/metrics` on both processes
/// counts what ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_request_is_one_trace_across_processes() {
    let receiver = Receiver::start().await;
    let mut d = Deployment::start(&receiver, &[]).await;
    let caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller_span = "00f067aa0ba902b7";
    let echo_id = d
        .submit(
            json!({"to": "tracer", "action": "echo", "params": {"password": PLANTED}}),
            Some(&format!("00-{caller_trace}-{caller_span}-01")),
        )
        .await;
    let flaky_id = d
        .submit(
            json!({"to": "tracer", "action": "flaky", "params": {"password": PLANTED}, "max_attempts": 3}),
            None,
        )
        .await;
    let echo = d.finished(&echo_id).await;
    let flaky = d.finished(&flaky_id).await;
    assert_eq!(echo["trace_id"], caller_trace, "the caller's trace is kept");
    assert!(
        echo["trace_url"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/trace/{caller_trace}")),
        "{echo:#}"
    );
    let flaky_trace = flaky["trace_id"].as_str().unwrap().to_string();
    assert_eq!(flaky["attempt"], 2);

    let spans = receiver
        .spans
        .wait_for("both traces, applied, with every delivery", |all| {
            // The worker exports on its own: its deliveries' spans may come
            // after the orchestrator's last one.
            [(caller_trace, 1), (flaky_trace.as_str(), 2)]
                .iter()
                .all(|(t, deliveries)| {
                    count(all, t, "apply completed") == 1
                        && count(all, t, "process orch.tasks.tracer.normal") == *deliveries
                })
        })
        .await;

    // The plain task: API → publish → process → handle, report → apply.
    let t = caller_trace;
    let subject = "orch.tasks.tracer.normal";
    let http = one(&spans, t, "orchestrator", "POST /v1/tasks");
    assert_eq!(http.parent(), caller_span);
    assert_eq!(http.kind(), 2, "server");
    assert_eq!(
        http.attr("http.response.status_code").as_deref(),
        Some("201")
    );
    let publish = one(&spans, t, "orchestrator", &format!("publish {subject}"));
    assert_eq!(publish.parent(), http.span_id());
    assert_eq!(publish.kind(), 4, "producer");
    task_attrs(publish, &echo, 1);
    assert_eq!(publish.attr("messaging.system").as_deref(), Some("nats"));
    assert_eq!(
        publish.attr("messaging.destination.name").as_deref(),
        Some(subject)
    );
    assert_eq!(
        publish.attr("messaging.operation.type").as_deref(),
        Some("send")
    );
    assert_eq!(
        publish.attr("messaging.message.id"),
        Some(format!("{echo_id}.1"))
    );
    let process = one(&spans, t, "agent-tracer", &format!("process {subject}"));
    assert_eq!(process.via, "grpc");
    assert_eq!(process.parent(), publish.span_id(), "across processes");
    assert_eq!(process.kind(), 5, "consumer");
    task_attrs(process, &echo, 1);
    assert_eq!(process.attr("action").as_deref(), Some("echo"));
    assert_eq!(
        process.attr("messaging.operation.type").as_deref(),
        Some("process")
    );
    let handle = one(&spans, t, "agent-tracer", "handle echo");
    assert_eq!(handle.parent(), process.span_id());
    // The command got the handler span's context in TRACEPARENT.
    assert_eq!(
        echo["result"]["traceparent"],
        format!("00-{t}-{}-01", handle.span_id())
    );
    let report = one(&spans, t, "agent-tracer", "report completed");
    assert_eq!(report.parent(), process.span_id());
    let apply = one(&spans, t, "orchestrator", "apply completed");
    assert_eq!(apply.parent(), report.span_id(), "back across processes");
    task_attrs(apply, &echo, 1);

    // The retried task: one trace, a span per attempt.
    let f = flaky_trace.as_str();
    let http = one(&spans, f, "orchestrator", "POST /v1/tasks");
    let first = one(&spans, f, "orchestrator", &format!("publish {subject}"));
    let retry = one(&spans, f, "orchestrator", &format!("retry {subject}"));
    assert_eq!(first.parent(), http.span_id());
    assert_eq!(retry.parent(), http.span_id());
    task_attrs(retry, &flaky, 2);
    assert_eq!(retry.attr("trigger_id"), None);
    let processes: Vec<&Got> = spans
        .iter()
        .filter(|g| g.trace_id() == f && g.name() == format!("process {subject}"))
        .collect();
    assert_eq!(processes.len(), 2, "{processes:#?}");
    let by_attempt = |n: &str| {
        processes
            .iter()
            .find(|g| g.attr("attempt").as_deref() == Some(n))
            .unwrap()
    };
    assert_eq!(by_attempt("1").parent(), first.span_id());
    assert_eq!(by_attempt("2").parent(), retry.span_id());
    one(&spans, f, "agent-tracer", "report failed");
    one(&spans, f, "orchestrator", "apply failed");
    // One trace id per task: every span about a task is in its trace.
    for (task, trace) in [(&echo_id, t), (&flaky_id, f)] {
        let about: Vec<&Got> = spans
            .iter()
            .filter(|g| g.attr("task_id").as_deref() == Some(task.as_str()))
            .collect();
        assert!(
            about.len() >= 4,
            "publish, process, report, apply: {about:#?}"
        );
        assert!(
            about.iter().all(|g| g.trace_id() == trace),
            "a span of task {task} is in another trace: {about:#?}"
        );
    }

    // No secret in any span: not the planted password (sent as a param and
    // printed by the command), not a task token (a JWT: `eyJ…`).
    for g in &spans {
        let text = g.all_text();
        assert!(!text.contains(PLANTED), "a span holds the secret: {text}");
        assert!(!text.contains("eyJ"), "a span holds a token: {text}");
    }

    // The metrics count what ran.
    let orchestrator = d.orchestrator_metrics().await;
    let worker_metrics = format!("{}/metrics", d.metrics);
    let worker = scrape(&common::get_text(&reqwest::Client::new(), &worker_metrics).await);
    let get = |m: &BTreeMap<String, f64>, k: &str| {
        *m.get(k).unwrap_or_else(|| panic!("no {k} in {m:#?}"))
    };
    for (key, want) in [
        (r#"orch_tasks_total{agent="tracer",state="submitted"}"#, 3.0),
        (r#"orch_tasks_total{agent="tracer",state="completed"}"#, 2.0),
        (
            r#"orch_task_duration_seconds_count{agent="tracer",state="completed"}"#,
            2.0,
        ),
        (r#"orch_queue_depth{agent="tracer",priority="normal"}"#, 0.0),
        ("orch_dlq_messages", 0.0),
        (
            r#"orch_http_requests_total{method="POST",route="/v1/tasks",status="201"}"#,
            2.0,
        ),
    ] {
        assert_eq!(get(&orchestrator, key), want, "{key}");
    }
    assert!(get(&orchestrator, "orch_store_flush_seconds_count") >= 1.0);
    assert!(get(&orchestrator, "orch_store_flush_batch_size_count") >= 1.0);
    assert!(get(&orchestrator, "process_resident_memory_bytes") > 0.0);
    assert_eq!(
        get(&worker, r#"orch_worker_deliveries_total{agent="tracer"}"#),
        3.0
    );
    for outcome in ["failed_retryable", "completed"] {
        let key = format!(
            r#"orch_worker_handler_duration_seconds_count{{action="flaky",agent="tracer",outcome="{outcome}"}}"#
        );
        assert_eq!(get(&worker, &key), 1.0, "{outcome}");
    }
    assert_eq!(get(&worker, r#"orch_worker_running{agent="tracer"}"#), 0.0);
    assert!(get(&worker, "process_cpu_seconds_total") >= 0.0);
    for p in &mut d.procs {
        p.kill();
    }
}

/// A workflow run is one trace: the request that started it, the run's
/// span, and as its children a span per step (the parent of the step's
/// task spans, across processes), the routing choice, the wait at the gate,
/// the answer (linked to the request that gave it, in its own trace) and
/// the end. The run metrics count it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_is_one_trace_with_a_span_per_step() {
    let receiver = Receiver::start().await;
    let mut d = Deployment::start(&receiver, &[]).await;
    let caller_trace = "0af7651916cd43dd8448eb211c80319c";
    let caller_span = "b7ad6b7169203331";
    let started = d
        .http
        .post(format!("{}/v1/triggers/traced/runs", d.base))
        .header("traceparent", format!("00-{caller_trace}-{caller_span}-01"))
        .json(&json!({"input": {"request": "please say it back"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(started.status(), 201);
    let run: Value = started.json().await.unwrap();
    assert_eq!(
        run["trace_id"], caller_trace,
        "the run is in the caller's trace"
    );
    let id = run["run_id"].as_str().unwrap().to_string();
    d.run_in(&id, "input_required").await;
    let answer_trace = "5c2a9f3e1d0b47a68e9f00112233aabb";
    let approved = d
        .http
        .post(format!("{}/v1/runs/{id}/approve", d.base))
        .header(
            "traceparent",
            format!("00-{answer_trace}-00f067aa0ba902b7-01"),
        )
        .json(&json!({"reason": "looks right"}))
        .send()
        .await
        .unwrap();
    assert_eq!(approved.status(), 200);
    let done = d.run_in(&id, "completed").await;

    let t = caller_trace;
    let spans = receiver
        .spans
        .wait_for(
            "the run's end, its three tasks delivered and applied, and the answer's request",
            |all| {
                count(all, t, "end completed") == 1
                    && count(all, t, "process orch.tasks.tracer.normal") == 3
                    && count(all, t, "apply completed") == 3
                    && count(all, answer_trace, "POST /v1/runs/{id}/approve") == 1
            },
        )
        .await;
    let http = one(&spans, t, "orchestrator", "POST /v1/triggers/{id}/runs");
    assert_eq!(http.parent(), caller_span);
    let run_span = one(&spans, t, "orchestrator", "run traced");
    assert_eq!(run_span.parent(), http.span_id());
    assert_eq!(run_span.attr("run_id").as_deref(), Some(id.as_str()));
    for name in [
        "step first",
        "route pick",
        "step pick",
        "wait confirm",
        "approve confirm",
        "step last",
        "end completed",
    ] {
        let g = one(&spans, t, "orchestrator", name);
        assert_eq!(g.parent(), run_span.span_id(), "{name} is the run's child");
        assert_eq!(g.attr("run_id").as_deref(), Some(id.as_str()), "{name}");
        assert_eq!(g.attr("trigger_id").as_deref(), Some("traced"), "{name}");
    }
    let route = one(&spans, t, "orchestrator", "route pick");
    assert_eq!(route.attr("agent").as_deref(), Some("tracer"));
    assert_eq!(route.attr("skill").as_deref(), Some("echo"));
    // The answer came in its own trace; its span in the run's trace links
    // to that request's span.
    let answer_http = one(
        &spans,
        answer_trace,
        "orchestrator",
        "POST /v1/runs/{id}/approve",
    );
    let answer = one(&spans, t, "orchestrator", "approve confirm");
    assert_eq!(
        answer.links(),
        vec![(answer_trace.to_string(), answer_http.span_id())]
    );
    assert!(answer.attr("decided_by").is_some());
    // Each step's task: published under its step span, processed by the
    // worker in another process, applied back, all in the run's trace.
    let subject = "orch.tasks.tracer.normal";
    for step in ["first", "pick", "last"] {
        let step_span = one(&spans, t, "orchestrator", &format!("step {step}"));
        let task = done["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == step)
            .unwrap()["task_id"]
            .as_str()
            .unwrap()
            .to_string();
        let about: Vec<&Got> = spans
            .iter()
            .filter(|g| g.attr("task_id").as_deref() == Some(task.as_str()))
            .collect();
        let publish = about
            .iter()
            .find(|g| g.name() == format!("publish {subject}"))
            .unwrap_or_else(|| panic!("no publish of step {step}: {about:#?}"));
        assert_eq!(publish.parent(), step_span.span_id(), "step {step}");
        let process = about
            .iter()
            .find(|g| g.name() == format!("process {subject}"))
            .unwrap_or_else(|| panic!("no process of step {step}: {about:#?}"));
        assert_eq!(process.service, "agent-tracer");
        assert_eq!(process.parent(), publish.span_id(), "step {step}");
        assert!(about.iter().all(|g| g.trace_id() == t), "{about:#?}");
    }
    // Every span about the run is in its trace.
    let stray: Vec<&Got> = spans
        .iter()
        .filter(|g| g.attr("run_id").as_deref() == Some(id.as_str()) && g.trace_id() != t)
        .collect();
    assert!(stray.is_empty(), "{stray:#?}");

    // A failed run's end is an error, with its code and not the secret
    // its step printed.
    let doomed = common::post_json(
        &d.http,
        &format!("{}/v1/triggers/doomed/runs", d.base),
        &json!({"input": {}}),
    )
    .await;
    let doomed = d.run_in(doomed["run_id"].as_str().unwrap(), "failed").await;
    let dt = doomed["trace_id"].as_str().unwrap().to_string();
    let spans = receiver
        .spans
        .wait_for("the failed run's end", |all| {
            count(all, &dt, "end failed") == 1
        })
        .await;
    let end = one(&spans, &dt, "orchestrator", "end failed");
    let status = end.span.status.clone().unwrap_or_default();
    assert_eq!(status.code, 2, "ERROR: {end:#?}");
    let code = doomed["error"]["code"].as_str().unwrap();
    let why = format!("the run failed: {code}");
    assert_eq!(end.attr("error.message"), Some(why));
    for g in spans.iter().filter(|g| g.trace_id() == dt) {
        assert!(!g.all_text().contains(PLANTED), "{g:#?}");
    }

    let orchestrator = d.orchestrator_metrics().await;
    for key in [
        r#"orch_runs_total{state="started",trigger="traced"}"#,
        r#"orch_runs_total{state="completed",trigger="traced"}"#,
        r#"orch_run_duration_seconds_count{state="completed",trigger="traced"}"#,
    ] {
        assert_eq!(
            orchestrator.get(key),
            Some(&1.0),
            "{key} in {orchestrator:#?}"
        );
    }
    for p in &mut d.procs {
        p.kill();
    }
}

/// At 0 % sampling nothing is exported, yet the context still travels: the
/// command sees the task's trace id (not sampled).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_at_zero_exports_nothing_and_still_propagates_context() {
    let receiver = Receiver::start().await;
    let mut d = Deployment::start(&receiver, &[("OTEL_TRACES_SAMPLER_ARG", "0")]).await;
    let id = d
        .submit(
            json!({"to": "tracer", "action": "echo", "params": {}}),
            None,
        )
        .await;
    let done = d.finished(&id).await;
    let trace = done["trace_id"].as_str().unwrap();
    let given = done["result"]["traceparent"].as_str().unwrap().to_string();
    assert!(
        given.starts_with(&format!("00-{trace}-")),
        "{given} vs {trace}"
    );
    assert!(given.ends_with("-00"), "not sampled: {given}");
    // Batches go out every 100 ms here: a second is plenty.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for p in &mut d.procs {
        // SIGKILL would skip the final flush; SIGTERM runs it.
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(p.0.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = p.0.wait();
    }
    assert!(
        receiver.spans.all().is_empty(),
        "{:#?}",
        receiver.spans.all()
    );
}
