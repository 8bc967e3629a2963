//! `orchestrator bench`: throughput and latency of the full durable path,
//! against a bare JetStream round trip measured in the same run.
//!
//! Everything runs in this process against one broker (a managed
//! `nats-server` on a free port unless `--nats-url` is given): the
//! orchestrator (store + event consumer), an echo worker, and the clients.

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, stream};
use clap::Args;
use futures::StreamExt;
use orchestrator::agent::AgentCard;
use orchestrator::broker::ManagedBroker;
use orchestrator::bus::{Bus, BusConfig};
use orchestrator::service::{Caller, Orchestrator, ServiceConfig, TaskRequest};
use orchestrator::worker::{EchoHandler, Worker, WorkerConfig};
use serde_json::json;
use tokio::sync::{Semaphore, oneshot};
use tokio_util::sync::CancellationToken;

#[derive(Args)]
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
    /// Use this broker instead of starting one.
    #[arg(long)]
    nats_url: Option<String>,
    /// Print the figures as JSON.
    #[arg(long)]
    json: bool,
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
    println!("{title}:");
    println!(
        "  {} {items}, {in_flight} in flight: {:.0} {rate}, p50 {:.2} ms, p99 {:.2} ms",
        busy.count, busy.per_second, busy.p50_ms, busy.p99_ms
    );
    println!(
        "  low load, 1 in flight, {} {items}: p50 {:.2} ms, p99 {:.2} ms",
        low.count, low.p50_ms, low.p99_ms
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
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let managed = match &args.nats_url {
        Some(_) => None,
        None => {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map_err(|e| e.to_string())?
                .port();
            Some(ManagedBroker::start(dir.path(), port).await?)
        }
    };
    let url = args
        .nats_url
        .clone()
        .or(managed.as_ref().map(|m| m.url().to_string()))
        .unwrap_or_default();
    let tag = &uuid::Uuid::now_v7().simple().to_string()[20..];
    let bus_config = BusConfig {
        prefix: format!("bench{tag}"),
        ..BusConfig::default()
    };

    let bare = bare_round_trip(&url, tag, args).await?;
    let full = full_path(&url, bus_config, dir.path(), args).await?;

    let ratio = full.0.per_second / bare.0.per_second;
    let rss = rss_mib();
    if args.json {
        println!(
            "{}",
            json!({
                "full_path": {"throughput": full.0, "low_load": full.1},
                "bare_jetstream": {"throughput": bare.0, "low_load": bare.1},
                "throughput_ratio": ratio,
                "rss_mib": rss,
                "concurrency": args.concurrency,
            })
        );
    } else {
        if on_terminal() {
            eprint!("\r\x1b[2K");
        }
        print_run(
            "full path (submit → store → JetStream → worker → result → store)",
            ("tasks", "tasks/s"),
            args.concurrency,
            &full,
        );
        print_run(
            "bare JetStream round trip (publish, pull, ack, reply)",
            ("messages", "msgs/s"),
            args.concurrency,
            &bare,
        );
        println!("full path / bare throughput: {:.0} %", ratio * 100.0);
        if let Some(rss) = rss {
            println!(
                "process RSS at the end: {rss:.0} MiB (orchestrator, worker and clients in one process)"
            );
        }
    }
    if let Some(m) = managed {
        m.stop().await;
    }
    Ok(())
}

/// Publish (awaiting the stream's ack), pull, ack, reply: the least any
/// durable JetStream task system does per task.
async fn bare_round_trip(
    url: &str,
    tag: &str,
    args: &BenchArgs,
) -> Result<(Figures, Figures), String> {
    let client = async_nats::connect(url).await.map_err(|e| e.to_string())?;
    let js = jetstream::new(client.clone());
    let subject = format!("bare{tag}.work");
    let replies = format!("bare{tag}.reply");
    let stream = js
        .create_stream(stream::Config {
            name: format!("BARE{tag}"),
            subjects: vec![subject.clone()],
            retention: stream::RetentionPolicy::WorkQueue,
            storage: stream::StorageType::File,
            ..Default::default()
        })
        .await
        .map_err(|e| e.to_string())?;
    let consumer: consumer::PullConsumer = stream
        .create_consumer(consumer::pull::Config {
            durable_name: Some("bare".into()),
            ack_policy: consumer::AckPolicy::Explicit,
            max_ack_pending: -1,
            ..Default::default()
        })
        .await
        .map_err(|e| e.to_string())?;
    let stop = CancellationToken::new();
    let responder = {
        let client = client.clone();
        let replies = replies.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let Ok(mut messages) = consumer.messages().await else {
                return;
            };
            loop {
                let msg = tokio::select! {
                    m = messages.next() => m,
                    () = stop.cancelled() => return,
                };
                let Some(Ok(msg)) = msg else { continue };
                let payload = msg.payload.clone();
                let _ = msg.ack().await;
                let _ = client.publish(replies.clone(), payload).await;
            }
        })
    };
    let waiting: Arc<Mutex<HashMap<u64, oneshot::Sender<()>>>> = Arc::default();
    let listener = {
        let mut sub = client.subscribe(replies).await.map_err(|e| e.to_string())?;
        let waiting = Arc::clone(&waiting);
        tokio::spawn(async move {
            while let Some(m) = sub.next().await {
                let id = std::str::from_utf8(&m.payload)
                    .ok()
                    .and_then(|s| s.parse::<u64>().ok());
                if let Some(tx) = id.and_then(|id| waiting.lock().ok()?.remove(&id)) {
                    let _ = tx.send(());
                }
            }
        })
    };
    let one = |id: u64| {
        let js = js.clone();
        let subject = subject.clone();
        let waiting = Arc::clone(&waiting);
        async move {
            let (tx, rx) = oneshot::channel();
            waiting.lock().map_err(|e| e.to_string())?.insert(id, tx);
            let t = Instant::now();
            js.publish(subject, id.to_string().into())
                .await
                .map_err(|e| e.to_string())?
                .await
                .map_err(|e| e.to_string())?;
            rx.await.map_err(|e| e.to_string())?;
            Ok::<Duration, String>(t.elapsed())
        }
    };
    let throughput = measure("bare", args.tasks, args.concurrency, |i| one(i as u64)).await?;
    let low = measure("bare, low load", args.samples, 1, |i| {
        one((args.tasks + i) as u64)
    })
    .await?;
    stop.cancel();
    let _ = responder.await;
    listener.abort();
    let _ = js.delete_stream(format!("BARE{tag}")).await;
    Ok((throughput, low))
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
    Ok(figures(latencies, started.elapsed()))
}

/// Submit through the orchestrator's library API (claim, store, flush,
/// publish), run by an echo worker, the result applied to the store.
async fn full_path(
    url: &str,
    bus_config: BusConfig,
    dir: &std::path::Path,
    args: &BenchArgs,
) -> Result<(Figures, Figures), String> {
    let card: AgentCard = serde_json::from_value(json!({
        "name": "echo", "version": "1.0.0", "description": "bench echo",
        "skills": [{"id": "echo", "description": "echo"}],
        "invocation": {"type": "builtin", "handler": "echo"}
    }))
    .map_err(|e| e.to_string())?;
    let config = ServiceConfig {
        data_dir: dir.join("data"),
        ..ServiceConfig::default()
    };
    let bus = Bus::connect_now(url, bus_config.clone())
        .await
        .map_err(|e| e.to_string())?;
    let orchestrator = Orchestrator::open(config, bus, vec![card.clone()], Default::default())
        .await
        .map_err(|e| e.to_string())?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let stop = CancellationToken::new();
    let server = tokio::spawn(orchestrator::server::serve(
        orchestrator.clone(),
        listener,
        stop.clone(),
    ));
    let worker_bus = Bus::connect_now(url, bus_config)
        .await
        .map_err(|e| e.to_string())?;
    let worker_config = WorkerConfig {
        concurrency: args.concurrency,
        ..WorkerConfig::default()
    };
    let worker = Worker::start(
        worker_bus,
        card,
        ".".into(),
        Arc::new(EchoHandler),
        worker_config,
    )
    .await
    .map_err(|e| e.to_string())?;
    let worker = tokio::spawn(worker.run(stop.clone()));

    let one = |i: usize| {
        let orchestrator = orchestrator.clone();
        async move {
            let request: TaskRequest =
                serde_json::from_value(json!({"to": "echo", "action": "echo", "params": {"i": i}}))
                    .map_err(|e| e.to_string())?;
            let t = Instant::now();
            let submitted = orchestrator
                .submit(request, &Caller::new("bench"))
                .await
                .map_err(|e| e.to_string())?;
            let id = submitted.record().task_id();
            let ended = orchestrator
                .task_when_ended(id, Duration::from_secs(60))
                .await
                .map_err(|e| e.to_string())?;
            match ended {
                Some(r) if r.state.is_terminal() => Ok::<Duration, String>(t.elapsed()),
                _ => Err(format!("task {id} did not end within a minute")),
            }
        }
    };
    let throughput = measure("full path", args.tasks, args.concurrency, one).await?;
    let low = measure("full path, low load", args.samples, 1, one).await?;
    stop.cancel();
    let _ = worker.await;
    let _ = server.await;
    Ok((throughput, low))
}

fn rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}
