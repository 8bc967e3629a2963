//! Timing a run: operations run so many at once, each one's latency, the
//! figures (throughput, p50, p99) and how they are printed, with progress
//! on a terminal.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

use crate::cli::output::outln;

/// Figures of one measured run.
#[derive(Debug, Clone, serde::Serialize)]
pub(super) struct Figures {
    pub(super) count: usize,
    pub(super) per_second: f64,
    pub(super) p50_ms: f64,
    pub(super) p99_ms: f64,
}

pub(super) fn figures(mut latencies: Vec<Duration>, elapsed: Duration) -> Figures {
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
pub(super) fn on_terminal() -> bool {
    std::io::IsTerminal::is_terminal(&std::io::stderr())
}

/// Prints one measured path: its throughput run and its low-load run.
pub(super) fn print_run(
    title: &str,
    (items, rate): (&str, &str),
    in_flight: usize,
    run: &(Figures, Figures),
) {
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
pub(super) fn progress(label: &str, done: usize, total: usize) {
    if !on_terminal() {
        return;
    }
    if total >= 20 && done.is_multiple_of((total / 20).max(1)) {
        eprint!("\r{label}: {done}/{total}   ");
    }
}

/// Runs `count` operations with at most `concurrency` at once.
pub(super) async fn measure<F, Fut>(
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
pub(super) async fn latencies<F, Fut>(
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
