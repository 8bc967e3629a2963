//! `orchestrator bench`: throughput and latency of the full durable path,
//! against a bare JetStream round trip measured in the same run.
//!
//! Three paths against one broker (a managed `nats-server` on a free port
//! unless `--nats-url` is given): the bare JetStream round trip; the full
//! path in this process (orchestrator, echo worker and clients together);
//! and the full path as deployed, with `orchestrator run` and
//! `orchestrator worker` as processes of their own, driven over HTTP.
//! `--cluster` measures replication and a leader kill instead (see
//! `cluster`); `--a2a`, `--push` and `--llm` add the A2A face, push
//! notifications and LLM agents (see `a2a`, `push` and `llm`).

mod a2a;
mod bare;
mod cluster;
mod console;
mod cpu;
mod inproc;
mod llm;
mod overload;
mod preload;
mod procs;
mod push;
mod sink;

use crate::cli::output::outln;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use cpu::print_cpu;
use orchestrator::agent::AgentCard;
use orchestrator::broker::ManagedBroker;
use orchestrator::bus::BusSettings;
use serde_json::json;
use tokio::sync::Semaphore;

#[derive(Args, Clone)]
pub struct BenchArgs {
    /// Tasks (and bare messages) per throughput run.
    #[arg(long, default_value_t = 10_000)]
    tasks: usize,
    /// How many are in flight at once in the throughput runs.
    #[arg(long, default_value_t = 256)]
    concurrency: usize,
    /// Round trips, one at a time, for the low-load latency figures.
    #[arg(long, default_value_t = 500)]
    samples: usize,
    /// Use this broker instead of starting one (several URLs,
    /// comma-separated, for a cluster).
    #[arg(long, conflicts_with = "cluster")]
    nats_url: Option<String>,
    /// Measure a three-node JetStream cluster with every stream in three
    /// replicas against a single server in one replica, both started by
    /// the bench, and the stall across a kill of the task stream's leader;
    /// the deployed path and the bare round trip only.
    #[arg(long)]
    cluster: bool,
    /// Finished tasks stored before each full-path run (each path gets a
    /// store of its own with this many), to measure a store in use.
    #[arg(long, default_value_t = 0)]
    preload: usize,
    /// Trace the deployed processes at this sampling ratio (0 to 1),
    /// exporting over OTLP/HTTP to a sink in the bench; without it they
    /// export nothing (tracing off).
    #[arg(long)]
    trace_sampling: Option<f64>,
    /// How the deployed path's clients wait for a task's end: `poll`
    /// submits, then long-polls `GET /v1/tasks/{id}?wait=` (two calls);
    /// `sync` submits with `response_mode: sync` (one call).
    #[arg(long, value_enum, default_value_t = Client::Poll)]
    client: Client,
    /// Also measure the A2A face, beside the REST path: the deployed path
    /// again with clients that send one blocking A2A `SendMessage`
    /// (JSON-RPC) per task, and the memory of `--subscribers` open
    /// `SubscribeToTask` streams.
    #[arg(long, conflicts_with = "cluster")]
    a2a: bool,
    /// Also measure push notifications: the deployed path again with A2A
    /// messages that carry a push config (to a receiver in the bench):
    /// notifications per second, and the delay from a task's end to its
    /// terminal notification.
    #[arg(long, conflicts_with = "cluster")]
    push: bool,
    /// Also measure LLM agents: the deployed path again with an agent that
    /// is a prompt for a model (against a model server in the bench),
    /// conversations of one model call and of one tool call: the
    /// orchestrator's CPU for each, beside a plain task's.
    #[arg(long, conflicts_with = "cluster")]
    llm: bool,
    /// The model server the deployed path's LLM agent calls (set by
    /// `--llm`'s run, not a flag).
    #[arg(skip)]
    llm_model: Option<String>,
    /// Also measure the web console: its pages' reads on a store of
    /// `--console-tasks` finished tasks, and the task path's throughput
    /// with and without a console open on the overview.
    #[arg(long, conflicts_with = "cluster")]
    console: bool,
    /// With `--console`: the finished tasks stored first.
    #[arg(long, default_value_t = 100_000)]
    console_tasks: usize,
    /// Measure an overload instead: for this many seconds, clients submit
    /// as fast as the orchestrator answers to a worker taking one task at
    /// a time, with `max_backlog` at `--overload-backlog`: what was
    /// offered, accepted and shed (429), the orchestrator's memory, and
    /// that every accepted task completed.
    #[arg(long, value_name = "SECONDS", conflicts_with = "cluster")]
    overload: Option<u64>,
    /// With `--overload`: the orchestrator's `max_backlog`.
    #[arg(long, default_value_t = 2000)]
    overload_backlog: usize,
    /// With `--a2a`: how many SSE subscriptions are held open at once.
    #[arg(long, default_value_t = 1000)]
    subscribers: usize,
    /// Print JSON (`--json`).
    #[arg(skip)]
    pub json: bool,
}

/// How the deployed path's clients wait for a task's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "snake_case")]
enum Client {
    /// Submit, then a long poll: two HTTP calls per task.
    Poll,
    /// One submit with `response_mode: sync`.
    Sync,
    /// One blocking A2A `SendMessage` (JSON-RPC 1.0).
    A2a,
}

/// Figures of one measured run.
#[derive(Debug, Clone, serde::Serialize)]
struct Figures {
    count: usize,
    per_second: f64,
    p50_ms: f64,
    p99_ms: f64,
}

fn figures(mut latencies: Vec<Duration>, elapsed: Duration) -> Figures {
    latencies.sort();
    let at = |p: f64| {
        let i = ((latencies.len().max(1) - 1) as f64 * p).round() as usize;
        latencies
            .get(i)
            .map(|d| d.as_secs_f64() * 1000.0)
            .unwrap_or(0.0)
    };
    Figures {
        count: latencies.len(),
        per_second: latencies.len() as f64 / elapsed.as_secs_f64(),
        p50_ms: at(0.5),
        p99_ms: at(0.99),
    }
}

/// Whether progress goes to a terminal (a pipe or file gets only the
/// figures).
fn on_terminal() -> bool {
    std::io::IsTerminal::is_terminal(&std::io::stderr())
}

/// Prints one measured path: its throughput run and its low-load run.
fn print_run(title: &str, (items, rate): (&str, &str), in_flight: usize, run: &(Figures, Figures)) {
    let (busy, low) = run;
    outln!("{title}:");
    outln!(
        "  {} {items}, {in_flight} in flight: {:.0} {rate}, p50 {:.2} ms, p99 {:.2} ms",
        busy.count,
        busy.per_second,
        busy.p50_ms,
        busy.p99_ms
    );
    outln!(
        "  low load, 1 in flight, {} {items}: p50 {:.2} ms, p99 {:.2} ms",
        low.count,
        low.p50_ms,
        low.p99_ms
    );
}

/// Shows progress on a terminal.
fn progress(label: &str, done: usize, total: usize) {
    if !on_terminal() {
        return;
    }
    if total >= 20 && done.is_multiple_of((total / 20).max(1)) {
        eprint!("\r{label}: {done}/{total}   ");
    }
}

pub async fn bench(args: BenchArgs) -> ExitCode {
    match run(&args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

async fn run(args: &BenchArgs) -> Result<(), String> {
    if args.cluster {
        return cluster::run(args).await;
    }
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let managed = match &args.nats_url {
        Some(_) => None,
        None => {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map_err(|e| e.to_string())?
                .port();
            Some(
                ManagedBroker::start(dir.path(), port, None)
                    .await
                    .map_err(|e| e.to_string())?,
            )
        }
    };
    let url = args
        .nats_url
        .clone()
        .or(managed.as_ref().map(|m| m.url().to_string()))
        .unwrap_or_default();
    let tag = &uuid::Uuid::now_v7().simple().to_string()[20..];
    let bus_config = BusSettings {
        prefix: format!("bench{tag}"),
        ..BusSettings::default()
    };
    if let Some(seconds) = args.overload {
        let m = overload::measure(&url, &format!("bencho{tag}"), dir.path(), args, seconds).await?;
        if args.json {
            outln!("{}", json!({"overload": m.json(args.overload_backlog)}));
        } else {
            if on_terminal() {
                eprint!("\r\x1b[2K");
            }
            m.print(args.overload_backlog);
        }
        if let Some(m) = managed {
            m.stop().await;
        }
        return Ok(());
    }

    let brokers: Vec<u32> = managed.iter().filter_map(ManagedBroker::pid).collect();
    let (bare, bare_cpu) = bare::bare_round_trip(&url, &brokers, tag, 1, args).await?;
    let full = inproc::full_path(&url, bus_config, dir.path(), args).await?;
    let sink = match args.trace_sampling {
        Some(r) if !(0.0..=1.0).contains(&r) => {
            return Err(format!(
                "--trace-sampling {r}: expected a ratio from 0 to 1"
            ));
        }
        Some(r) => Some((sink::start().await?, r)),
        None => None,
    };
    let tracing = sink.as_ref().map(|((url, _), r)| (url.as_str(), *r));
    let rest =
        procs::Deployed::start(&url, &format!("benchp{tag}"), dir.path(), 1, args, tracing).await?;
    let procs::Measured {
        figures: deployed,
        orchestrator_rss,
        cpu,
    } = procs::full_path(&rest, &brokers, args).await?;
    drop(rest);
    let site = procs::Site {
        url: &url,
        dir: dir.path(),
        tag,
        brokers: &brokers,
    };
    let a2a = match args.a2a {
        true => Some(a2a::measure(&site, args).await?),
        false => None,
    };
    let push = match args.push {
        true => Some(push::measure(&site, args).await?),
        false => None,
    };
    let llm = match args.llm {
        true => Some(llm::measure(&site, args).await?),
        false => None,
    };
    let console = match args.console {
        true => Some(console::measure(&site, args).await?),
        false => None,
    };
    let exported = sink.as_ref().map(|((_, got), _)| {
        json!({
            "requests": got.requests.load(std::sync::atomic::Ordering::Relaxed),
            "bytes": got.bytes.load(std::sync::atomic::Ordering::Relaxed),
        })
    });

    let ratio = full.0.per_second / bare.0.per_second;
    let rss = rss_mib_of(std::process::id());
    if args.json {
        outln!(
            "{}",
            json!({
                "full_path": {"throughput": full.0, "low_load": full.1, "process_rss_mib": rss},
                "processes": {
                    "throughput": deployed.0,
                    "low_load": deployed.1,
                    "orchestrator_rss_mib": orchestrator_rss,
                    "cpu_per_task": cpu,
                },
                "bare_jetstream": {
                    "throughput": bare.0,
                    "low_load": bare.1,
                    "cpu_per_message": bare_cpu,
                },
                "throughput_ratio": ratio,
                "preloaded": args.preload,
                "trace_sampling": args.trace_sampling,
                "client": args.client,
                "otlp_received": exported,
                "concurrency": args.concurrency,
                "a2a": a2a.as_ref().map(|a| a.json(&cpu)),
                "push": push.as_ref().map(|p| p.json(&cpu)),
                "llm": llm.as_ref().map(|l| l.json(&cpu)),
                "console": console.as_ref().map(console::Measured::json),
            })
        );
    } else {
        if on_terminal() {
            eprint!("\r\x1b[2K");
        }
        if args.preload > 0 {
            outln!(
                "each full path ran on a store preloaded with {} finished tasks",
                args.preload
            );
        }
        print_run(
            "full path, in one process (submit → store → JetStream → worker → result → store)",
            ("tasks", "tasks/s"),
            args.concurrency,
            &full,
        );
        print_run(
            "full path, as deployed (HTTP client → `run` process → JetStream → `worker` process → `run`)",
            ("tasks", "tasks/s"),
            args.concurrency,
            &deployed,
        );
        print_run(
            "bare JetStream round trip (publish, pull, ack, reply)",
            ("messages", "msgs/s"),
            args.concurrency,
            &bare,
        );
        outln!(
            "full path (one process) / bare throughput: {:.0} %",
            ratio * 100.0
        );
        match (args.trace_sampling, &exported) {
            (Some(r), Some(got)) => outln!(
                "deployed processes traced at {:.0} % sampling: {} OTLP exports, {} bytes received",
                r * 100.0,
                got["requests"],
                got["bytes"]
            ),
            _ => outln!(
                "deployed processes not traced (no OTLP endpoint; --trace-sampling sets one)"
            ),
        }
        print_cpu("CPU per task, as deployed", &cpu);
        if let Some(a2a) = &a2a {
            a2a.print(args, &cpu);
        }
        if let Some(push) = &push {
            push.print(args, &cpu);
        }
        if let Some(console) = &console {
            console.print();
        }
        if let Some(llm) = &llm {
            llm.print(args, &cpu);
        }
        print_cpu("CPU per message, bare JetStream", &bare_cpu);
        if let Some(rss) = orchestrator_rss {
            outln!("orchestrator process RSS at the end (as deployed): {rss:.0} MiB");
        }
        if let Some(rss) = rss {
            outln!("bench process RSS at the end (one-process path and clients): {rss:.0} MiB");
        }
    }
    if let Some(m) = managed {
        m.stop().await;
    }
    Ok(())
}

/// Serves `app` on a port of 127.0.0.1 until the bench ends; its URL,
/// `path` added.
async fn serve_loopback(app: axum::Router, path: &str) -> Result<String, String> {
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

/// Runs `count` operations with at most `concurrency` at once.
async fn measure<F, Fut>(
    label: &str,
    count: usize,
    concurrency: usize,
    op: F,
) -> Result<Figures, String>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<Duration, String>> + Send + 'static,
{
    let (latencies, elapsed) = latencies(label, count, concurrency, op).await?;
    Ok(figures(latencies, elapsed))
}

/// Runs `op` `count` times, `concurrency` at once: each one's latency,
/// and the time they took together.
async fn latencies<F, Fut>(
    label: &str,
    count: usize,
    concurrency: usize,
    op: F,
) -> Result<(Vec<Duration>, Duration), String>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<Duration, String>> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(concurrency.max(1)));
    let started = Instant::now();
    let mut handles = Vec::with_capacity(count);
    for i in 0..count {
        let permit = Arc::clone(&slots)
            .acquire_owned()
            .await
            .map_err(|e| e.to_string())?;
        let fut = op(i);
        handles.push(tokio::spawn(async move {
            let r = fut.await;
            drop(permit);
            r
        }));
        progress(label, i + 1, count);
    }
    let mut latencies = Vec::with_capacity(count);
    for h in handles {
        latencies.push(h.await.map_err(|e| e.to_string())??);
    }
    Ok((latencies, started.elapsed()))
}

/// The echo agent every full path runs, taking `concurrency` at once.
fn echo_card(concurrency: usize) -> Result<AgentCard, String> {
    serde_json::from_value(json!({
        "name": "echo", "version": "1.0.0", "description": "bench echo",
        "skills": [{"id": "echo", "description": "echo"}],
        "invocation": {"type": "builtin", "handler": "echo"},
        "delivery": {"concurrency": concurrency},
    }))
    .map_err(|e| e.to_string())
}

/// A process's resident memory, in MiB.
fn rss_mib_of(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}
