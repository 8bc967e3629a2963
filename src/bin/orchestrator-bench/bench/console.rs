//! `orchestrator bench --console`: what the web console's reads cost
//! (`docs/console.md`). The deployed path again, on a store preloaded with
//! `--console-tasks` finished tasks (100,000 by default) and one finished
//! workflow run: each read a console page makes, timed one at a time;
//! then, after a run that warms the path up, three throughput runs each
//! alternated without and with one console open on the overview (a `GET /v1/changes` stream, and the overview read again
//! at each batch of changes, as the page does), to show what an open
//! console takes from the task path.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::cpu::CpuPerTask;
use super::procs::{Site, call};
use super::{BenchArgs, Figures};
use crate::cli::output::outln;

/// Reads of each page, timed one after another.
const READS: usize = 40;

/// What the console bench measured.
pub(super) struct Measured {
    tasks: usize,
    /// Each page's read: what, the path, its figures.
    pages: Vec<(String, Figures)>,
    /// Throughput runs without and with a console open, alternated.
    without: Vec<(Figures, CpuPerTask)>,
    with: Vec<(Figures, CpuPerTask)>,
    /// Overview reads the open console made.
    console_reads: usize,
}

pub(super) async fn measure(site: &Site<'_>, args: &BenchArgs) -> Result<Measured, String> {
    let triggers = site.dir("console").join("procs/triggers");
    std::fs::create_dir_all(&triggers).map_err(|e| e.to_string())?;
    std::fs::write(
        triggers.join("bench-run.yaml"),
        "id: bench-run\nsteps:\n  - id: one\n    agent: echo\n    action: echo\n    params: { n: 1 }\n  - id: two\n    agent: echo\n    action: echo\n    params: { n: 2 }\n",
    )
    .map_err(|e| e.to_string())?;
    let console_args = BenchArgs {
        preload: args.console_tasks,
        ..args.clone()
    };
    let deployed = site.deploy("console", &console_args).await?;
    let (client, http) = (&deployed.client, deployed.http.as_str());
    let get = |path: String| {
        let request = client.get(format!("{http}{path}"));
        async move { call(request).await.map_err(|f| f.into_message()) }
    };
    let run = call(
        client
            .post(format!("{http}/v1/triggers/bench-run/runs"))
            .json(&json!({"input": {}})),
    )
    .await
    .map_err(|f| f.into_message())?;
    let run_id = run["run_id"].as_str().unwrap_or_default().to_string();
    let ended = get(format!("/v1/runs/{run_id}?wait=20s")).await?;
    if ended["state"] != "completed" {
        return Err(format!("the bench's run ended {}", ended["state"]));
    }
    let newest = get("/v1/tasks?order=newest&limit=50".into()).await?;
    let task_id = newest["tasks"][0]["task_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let cursor = newest["next_cursor"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let pages = [
        (
            "tasks page, newest 50",
            "/v1/tasks?order=newest&limit=50".to_string(),
        ),
        (
            "tasks page, its next page",
            format!("/v1/tasks?order=newest&limit=50&cursor={cursor}"),
        ),
        (
            "tasks page, state completed",
            "/v1/tasks?order=newest&limit=50&state=completed".into(),
        ),
        (
            "tasks page, agent echo",
            "/v1/tasks?order=newest&limit=50&agent=echo".into(),
        ),
        (
            "tasks page, the last hour",
            "/v1/tasks?order=newest&limit=50&since=1h".into(),
        ),
        (
            "tasks page, a trigger's",
            "/v1/tasks?order=newest&limit=50&trigger_id=bench-run".into(),
        ),
        ("a task's page", format!("/v1/tasks/{task_id}")),
        ("a run's page", format!("/v1/runs/{run_id}")),
        ("runs page", "/v1/runs?limit=50".into()),
        ("overview", "/v1/overview".into()),
    ];
    let mut timed = Vec::new();
    for (what, path) in pages {
        let mut latencies = Vec::with_capacity(READS);
        let started = Instant::now();
        for _ in 0..READS {
            let t = Instant::now();
            get(path.clone()).await?;
            latencies.push(t.elapsed());
        }
        timed.push((
            what.to_string(),
            super::figures(latencies, started.elapsed()),
        ));
    }

    let processes = deployed.processes(site.brokers);
    let mut without = Vec::new();
    let mut with = Vec::new();
    let mut console_reads = 0;
    // A first run warms the path up (not counted); then three of each,
    // alternated.
    let warm = |i: usize| {
        let task = deployed.task(i, false);
        async move { Ok(task.await?.latency) }
    };
    super::measure("warming up", args.tasks, args.concurrency, warm).await?;
    for round in 0..6 {
        let open = round % 2 == 1;
        let reads = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let console = open.then(|| {
            tokio::spawn(overview_open(
                client.clone(),
                http.to_string(),
                std::sync::Arc::clone(&reads),
            ))
        });
        let before = processes.cpu();
        let one = |i: usize| {
            let task = deployed.task(i, false);
            async move { Ok(task.await?.latency) }
        };
        let label = if open {
            "with a console open"
        } else {
            "no console"
        };
        let figures = super::measure(label, args.tasks, args.concurrency, one).await?;
        let cpu = CpuPerTask::between(before, processes.cpu(), figures.count);
        if let Some(console) = console {
            console.abort();
            console_reads += reads.load(std::sync::atomic::Ordering::Relaxed);
            with.push((figures, cpu));
        } else {
            without.push((figures, cpu));
        }
    }
    Ok(Measured {
        tasks: args.console_tasks,
        pages: timed,
        without,
        with,
        console_reads,
    })
}

/// What an overview page open in a browser does: follows `/v1/changes`
/// and reads the overview again at each batch (at most every 500 ms),
/// counting its reads in `reads`, until aborted.
async fn overview_open(
    client: reqwest::Client,
    http: String,
    reads: std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    let Ok(mut stream) = client.get(format!("{http}/v1/changes")).send().await else {
        return;
    };
    let mut last = Instant::now() - Duration::from_secs(1);
    while let Ok(Some(chunk)) = stream.chunk().await {
        if !String::from_utf8_lossy(&chunk).contains("event: changes") {
            continue;
        }
        if last.elapsed() >= Duration::from_millis(500) {
            last = Instant::now();
            let _ = client.get(format!("{http}/v1/overview")).send().await;
            reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

impl Measured {
    fn mean(runs: &[(Figures, CpuPerTask)]) -> (f64, Option<f64>) {
        let n = runs.len().max(1) as f64;
        let per_second = runs.iter().map(|(f, _)| f.per_second).sum::<f64>() / n;
        let cpu: Option<f64> = runs
            .iter()
            .map(|(_, c)| c.orchestrator_us)
            .sum::<Option<f64>>()
            .map(|s| s / n);
        (per_second, cpu)
    }

    pub(super) fn json(&self) -> Value {
        let (without, cpu_without) = Self::mean(&self.without);
        let (with, cpu_with) = Self::mean(&self.with);
        json!({
            "stored_tasks": self.tasks,
            "pages": self.pages.iter().map(|(what, f)| json!({"page": what, "reads": f.count, "p50_ms": f.p50_ms, "p99_ms": f.p99_ms})).collect::<Vec<_>>(),
            "throughput_without_console": without,
            "throughput_with_console": with,
            "throughput_change": with / without - 1.0,
            "orchestrator_us_without_console": cpu_without,
            "orchestrator_us_with_console": cpu_with,
            "console_overview_reads": self.console_reads,
        })
    }

    pub(super) fn print(&self) {
        outln!(
            "console reads, one at a time, on a store of {} finished tasks:",
            self.tasks
        );
        for (what, f) in &self.pages {
            outln!(
                "  {what}: p50 {:.1} ms, p99 {:.1} ms ({} reads)",
                f.p50_ms,
                f.p99_ms,
                f.count
            );
        }
        let (without, cpu_without) = Self::mean(&self.without);
        let (with, cpu_with) = Self::mean(&self.with);
        outln!(
            "  throughput, three runs each, alternated: {without:.0} tasks/s without a console, {with:.0} with one open on the overview ({:+.1} %; it read the overview {} times)",
            (with / without - 1.0) * 100.0,
            self.console_reads
        );
        if let (Some(a), Some(b)) = (cpu_without, cpu_with) {
            outln!("  orchestrator CPU per task: {a:.0} µs without, {b:.0} µs with");
        }
    }
}
