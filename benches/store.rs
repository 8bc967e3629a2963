//! Store throughput and latency, printed as figures (not a pass/fail test).
//!
//! `cargo bench --bench store` — optional arguments: tasks per run (default
//! 20000) and in-flight writers (default 64).
//!
//! Measures, on a fresh store in a temporary directory:
//! - one writer, one task at a time: the latency of a durable submit
//!   (each waits for its own flush);
//! - many writers: durable submits per second when group commit shares
//!   flushes between them;
//! - the full task life in the store: submit + working + completed.

use std::time::{Duration, Instant};

use orchestrator::envelope::{Action, AgentName, Envelope, Sender};
use orchestrator::store::{Change, Fingerprint, NewTask};
use orchestrator::{Store, StoreSettings, Transition};
use serde_json::json;

fn new_task(i: usize) -> NewTask {
    let mut params = serde_json::Map::new();
    params.insert("i".into(), json!(i));
    let env = Envelope::new(
        "orchestrator".parse::<Sender>().unwrap(),
        "echo".parse::<AgentName>().unwrap(),
        "echo".parse::<Action>().unwrap(),
        params,
    );
    NewTask {
        fingerprint: Some(Fingerprint::of(&env.payload)),
        envelope: env,
        scope: "bench".into(),
        actor: "bench".into(),
        trace: None,
        step: None,
        conversation: false,
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let n: usize = args.first().and_then(|s| s.parse().ok()).unwrap_or(20_000);
    let inflight: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(64);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&StoreSettings::new(dir.path().join("store"))).unwrap();

        let sequential = (n / 10).max(100);
        let mut latencies = Vec::with_capacity(sequential);
        let started = Instant::now();
        for i in 0..sequential {
            let t = Instant::now();
            store.submit(new_task(i)).await.unwrap();
            latencies.push(t.elapsed());
        }
        let elapsed = started.elapsed();
        latencies.sort();
        println!(
            "sequential durable submit: {sequential} tasks, {:.0}/s, p50 {:?}, p99 {:?}",
            sequential as f64 / elapsed.as_secs_f64(),
            percentile(&latencies, 0.5),
            percentile(&latencies, 0.99)
        );

        for (label, lifecycle) in [
            ("durable submit", false),
            ("submit + working + completed", true),
        ] {
            let started = Instant::now();
            let per = n / inflight;
            let handles: Vec<_> = (0..inflight)
                .map(|w| {
                    let store = store.clone();
                    tokio::spawn(async move {
                        let mut lat = Vec::with_capacity(per);
                        for i in 0..per {
                            let t = Instant::now();
                            let task = new_task(1_000_000 + w * per + i);
                            let id = task.envelope.header.task_id;
                            store.submit(task).await.unwrap();
                            if lifecycle {
                                store
                                    .apply(id, Change::new(Transition::Start, "w", ""))
                                    .await
                                    .unwrap();
                                store
                                    .apply(id, Change::new(Transition::Complete, "w", ""))
                                    .await
                                    .unwrap();
                            }
                            lat.push(t.elapsed());
                        }
                        lat
                    })
                })
                .collect();
            let mut latencies = Vec::new();
            for h in handles {
                latencies.extend(h.await.unwrap());
            }
            let elapsed = started.elapsed();
            latencies.sort();
            println!(
                "{inflight} writers, {label}: {} tasks, {:.0} tasks/s, p50 {:?}, p99 {:?}",
                latencies.len(),
                latencies.len() as f64 / elapsed.as_secs_f64(),
                percentile(&latencies, 0.5),
                percentile(&latencies, 0.99)
            );
        }
        let size: u64 = walk_size(&dir.path().join("store"));
        println!("store on disk: {:.1} MiB", size as f64 / (1024.0 * 1024.0));
        if let Some(rss) = rss_mib() {
            println!("process RSS with the store open: {rss:.0} MiB");
        }
    });
}

fn walk_size(path: &std::path::Path) -> u64 {
    std::fs::read_dir(path)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => walk_size(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

fn rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}
