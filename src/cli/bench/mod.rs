//! `orchestrator bench`: throughput and latency of the full durable path,
//! against a bare JetStream round trip measured in the same run.
//!
//! Three paths against one broker (a managed `nats-server` on a free port
//! unless `--nats-url` is given): the bare JetStream round trip; the full
//! path in this process (orchestrator, echo worker and clients together);
//! and the full path as deployed, with `orchestrator run` and
//! `orchestrator worker` as processes of their own, driven over HTTP.

mod bare;
mod inproc;
mod preload;
mod procs;
mod sink;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use orchestrator::agent::AgentCard;
use orchestrator::broker::ManagedBroker;
use orchestrator::bus::BusConfig;
use serde_json::json;
use tokio::sync::Semaphore;

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
    /// Finished tasks stored before each full-path run (each path gets a
    /// store of its own with this many), to measure a store in use.
    #[arg(long, default_value_t = 0)]
    preload: usize,
    /// Trace the deployed processes at this sampling ratio (0 to 1),
    /// exporting over OTLP/HTTP to a sink in the bench; without it they
    /// export nothing (tracing off).
    #[arg(long)]
    trace_sampling: Option<f64>,
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

/// Prints where a throughput run's CPU time went, per task or message,
/// by process (those not part of the run left out).
fn print_cpu(title: &str, cpu: &CpuPerTask) {
    let parts = [
        ("orchestrator", cpu.orchestrator_us),
        ("worker", cpu.worker_us),
        ("broker", cpu.broker_us),
        ("clients", cpu.client_us),
    ];
    let shown: Vec<String> = parts
        .iter()
        .filter_map(|(name, us)| us.map(|us| format!("{name} {us:.0} µs")))
        .collect();
    println!("{title} (throughput run):");
    println!("  {}: {:.0} µs in all", shown.join(", "), cpu.total_us);
    println!(
        "  at that cost {} cores carry at most {:.0} per second",
        cpu.cores, cpu.ceiling_per_second
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
            Some(ManagedBroker::start(dir.path(), port, None).await?)
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

    let broker = managed.as_ref().and_then(ManagedBroker::pid);
    let (bare, bare_cpu) = bare::bare_round_trip(&url, broker, tag, args).await?;
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
    let procs::Measured {
        figures: deployed,
        orchestrator_rss,
        cpu,
    } = procs::full_path(
        &url,
        broker,
        &format!("benchp{tag}"),
        dir.path(),
        args,
        tracing,
    )
    .await?;
    let exported = sink.as_ref().map(|((_, got), _)| {
        json!({
            "requests": got.requests.load(std::sync::atomic::Ordering::Relaxed),
            "bytes": got.bytes.load(std::sync::atomic::Ordering::Relaxed),
        })
    });

    let ratio = full.0.per_second / bare.0.per_second;
    let rss = rss_mib_of(std::process::id());
    if args.json {
        println!(
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
                "otlp_received": exported,
                "concurrency": args.concurrency,
            })
        );
    } else {
        if on_terminal() {
            eprint!("\r\x1b[2K");
        }
        if args.preload > 0 {
            println!(
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
        println!(
            "full path (one process) / bare throughput: {:.0} %",
            ratio * 100.0
        );
        match (args.trace_sampling, &exported) {
            (Some(r), Some(got)) => println!(
                "deployed processes traced at {:.0} % sampling: {} OTLP exports, {} bytes received",
                r * 100.0,
                got["requests"],
                got["bytes"]
            ),
            _ => println!(
                "deployed processes not traced (no OTLP endpoint; --trace-sampling sets one)"
            ),
        }
        print_cpu("CPU per task, as deployed", &cpu);
        print_cpu("CPU per message, bare JetStream", &bare_cpu);
        if let Some(rss) = orchestrator_rss {
            println!("orchestrator process RSS at the end (as deployed): {rss:.0} MiB");
        }
        if let Some(rss) = rss {
            println!("bench process RSS at the end (one-process path and clients): {rss:.0} MiB");
        }
    }
    if let Some(m) = managed {
        m.stop().await;
    }
    Ok(())
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

/// CPU seconds (user and system, every thread) a process has used so far.
fn cpu_seconds_of(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok()??;
    Some(cpu_ticks(&stat)? / ticks as f64)
}

/// User and system clock ticks from a `/proc/<pid>/stat` line.
fn cpu_ticks(stat: &str) -> Option<f64> {
    // The command name (field 2) may hold spaces and parentheses: count
    // from after its last `)`. utime and stime are fields 14 and 15, so the
    // 12th and 13th after the name.
    let after_name = stat.get(stat.rfind(')')? + 1..)?;
    let mut fields = after_name.split_whitespace().skip(11);
    let user: f64 = fields.next()?.parse().ok()?;
    let system: f64 = fields.next()?.parse().ok()?;
    Some(user + system)
}

/// The processes of the deployed path, whose CPU time is counted.
#[derive(Debug, Clone, Copy)]
struct Processes {
    orchestrator: Option<u32>,
    worker: Option<u32>,
    /// `None` with `--nats-url` (a broker the bench did not start).
    broker: Option<u32>,
    /// This process: the HTTP clients.
    client: u32,
}

/// Each process's CPU seconds so far.
#[derive(Debug, Clone, Copy)]
struct CpuSnapshot([Option<f64>; 4]);

impl Processes {
    fn cpu(&self) -> CpuSnapshot {
        let of = |pid: Option<u32>| pid.and_then(cpu_seconds_of);
        CpuSnapshot([
            of(self.orchestrator),
            of(self.worker),
            of(self.broker),
            of(Some(self.client)),
        ])
    }
}

/// CPU time per task of a run, in microseconds, by process: what each task
/// costs the machine, and the most tasks per second its cores can carry at
/// that cost.
#[derive(Debug, Clone, serde::Serialize)]
struct CpuPerTask {
    orchestrator_us: Option<f64>,
    worker_us: Option<f64>,
    broker_us: Option<f64>,
    client_us: Option<f64>,
    total_us: f64,
    cores: usize,
    /// `cores` seconds of CPU per second over `total_us` per task.
    ceiling_per_second: f64,
}

impl CpuPerTask {
    fn between(before: CpuSnapshot, after: CpuSnapshot, tasks: usize) -> Self {
        // Clock ticks are 10 ms: a tenth of a microsecond per task is more
        // than the figures carry.
        let tenths = |us: f64| (us * 10.0).round() / 10.0;
        let per_task = |i: usize| match (before.0[i], after.0[i]) {
            (Some(b), Some(a)) => Some(tenths((a - b) * 1e6 / tasks.max(1) as f64)),
            _ => None,
        };
        let [orchestrator_us, worker_us, broker_us, client_us] = [0, 1, 2, 3].map(per_task);
        let total_us = tenths(
            [orchestrator_us, worker_us, broker_us, client_us]
                .into_iter()
                .flatten()
                .sum::<f64>(),
        );
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        CpuPerTask {
            orchestrator_us,
            worker_us,
            broker_us,
            client_us,
            total_us,
            cores,
            ceiling_per_second: if total_us > 0.0 {
                (cores as f64 * 1e6 / total_us).round()
            } else {
                0.0
            },
        }
    }
}

/// A process's resident memory, in MiB.
fn rss_mib_of(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_are_read_after_a_name_with_spaces_and_parentheses() {
        let line = "4242 (tokio (rt) 1) S 1 4242 4242 0 -1 4194560 1000 0 0 0 \
                    731 269 0 0 20 0 9 0 123 456 789";
        assert_eq!(cpu_ticks(line), Some(1000.0));
        assert_eq!(cpu_ticks("4242 (x) S 1 2"), None);
        assert_eq!(cpu_ticks("no name here"), None);
    }

    #[test]
    fn this_process_cpu_time_grows_as_it_works() {
        let me = std::process::id();
        let start = cpu_seconds_of(me).expect("/proc/self/stat is readable");
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut x = 0u64;
        while cpu_seconds_of(me).expect("readable") < start + 0.05 {
            assert!(Instant::now() < deadline, "50 ms of work never showed");
            for i in 0..100_000u64 {
                x = std::hint::black_box(x.wrapping_add(i.wrapping_mul(i)));
            }
        }
    }

    #[test]
    fn cpu_per_task_divides_each_process_and_caps_throughput_by_cores() {
        let before = CpuSnapshot([Some(1.0), Some(2.0), None, Some(0.5)]);
        let after = CpuSnapshot([Some(2.0), Some(2.5), None, Some(1.0)]);
        let cpu = CpuPerTask::between(before, after, 1000);
        assert_eq!(cpu.orchestrator_us, Some(1000.0));
        assert_eq!(cpu.worker_us, Some(500.0));
        assert_eq!(cpu.broker_us, None);
        assert_eq!(cpu.client_us, Some(500.0));
        assert_eq!(cpu.total_us, 2000.0);
        assert_eq!(cpu.ceiling_per_second, (cpu.cores as f64 * 500.0).round());
    }
}
