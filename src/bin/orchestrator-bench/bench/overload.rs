//! `bench --overload SECONDS`: the deployed path offered more than it can
//! take, for a while. Clients submit as fast as the orchestrator answers
//! (no client waits for a task's end) to an echo worker that takes one
//! task at a time, with `max_backlog` at `--overload-backlog`; the figures
//! say what was offered, accepted and shed (429) per second, the
//! orchestrator's memory over the run, and whether every accepted task
//! completed once the offer stopped.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::BenchArgs;
use super::procs::Deployed;
use crate::cli::output::outln;

/// Clients submitting at once.
const CLIENTS: usize = 64;

/// What one overload run measured.
pub(super) struct Measured {
    seconds: f64,
    accepted: usize,
    shed: usize,
    completed: usize,
    not_completed: usize,
    rss_start: Option<f64>,
    rss_max: Option<f64>,
    rss_end: Option<f64>,
    drain_seconds: f64,
}

pub(super) async fn measure(
    url: &str,
    prefix: &str,
    dir: &std::path::Path,
    args: &BenchArgs,
    seconds: u64,
) -> Result<Measured, String> {
    let mut args = args.clone();
    // The worker takes one task at a time: the sustainable rate is well
    // under what the clients offer.
    args.concurrency = 1;
    let deployed = Deployed::start(url, prefix, dir, 1, &args, None).await?;
    let pid = deployed.orchestrator_pid();
    let rss = || pid.and_then(super::rss_mib_of);
    let rss_start = rss();
    let stop = Arc::new(AtomicBool::new(false));
    let shed = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        let (client, http) = (deployed.client.clone(), deployed.http.clone());
        let (stop, shed) = (Arc::clone(&stop), Arc::clone(&shed));
        clients.push(tokio::spawn(async move {
            let mut accepted = Vec::new();
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let body = json!({"to": "echo", "action": "echo", "params": {"c": c, "i": i}});
                let response = client
                    .post(format!("{http}/v1/tasks"))
                    .json(&body)
                    .send()
                    .await
                    .map_err(|e| e.to_string())?;
                match response.status().as_u16() {
                    201 => {
                        let task: Value = response.json().await.map_err(|e| e.to_string())?;
                        accepted.push(task["task_id"].as_str().unwrap_or_default().to_string());
                    }
                    429 => {
                        shed.fetch_add(1, Ordering::Relaxed);
                        // Offered again at once: an overload, not a polite client.
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    s => return Err(format!("a submit answered {s}")),
                }
            }
            Ok::<_, String>(accepted)
        }));
    }
    let started = Instant::now();
    let mut rss_max = rss_start;
    while started.elapsed() < Duration::from_secs(seconds) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        rss_max = higher(rss_max, rss());
        super::progress(
            "overload",
            started.elapsed().as_secs() as usize,
            seconds as usize,
        );
    }
    stop.store(true, Ordering::Relaxed);
    let elapsed = started.elapsed();
    let mut accepted = Vec::new();
    for c in clients {
        accepted.extend(c.await.map_err(|e| e.to_string())??);
    }
    // Every accepted task, to its end.
    let drain = Instant::now();
    let ended = Arc::new(AtomicUsize::new(0));
    let completed = super::measure("overload: draining", accepted.len(), 64, |i| {
        let (client, http) = (deployed.client.clone(), deployed.http.clone());
        let id = accepted[i].clone();
        let ended = Arc::clone(&ended);
        async move {
            let deadline = Instant::now() + Duration::from_secs(600);
            loop {
                let task = super::procs::call(client.get(format!("{http}/v1/tasks/{id}?wait=20s")))
                    .await
                    .map_err(super::procs::Failed::into_message)?;
                if task["state"] == "completed" {
                    ended.fetch_add(1, Ordering::Relaxed);
                    return Ok(Duration::ZERO);
                }
                if Instant::now() > deadline {
                    return Ok(Duration::ZERO);
                }
            }
        }
    })
    .await?;
    let completed_count = ended.load(Ordering::Relaxed);
    Ok(Measured {
        seconds: elapsed.as_secs_f64(),
        accepted: accepted.len(),
        shed: shed.load(Ordering::Relaxed),
        completed: completed_count,
        not_completed: completed.count - completed_count,
        rss_start,
        rss_max: higher(rss_max, rss()),
        rss_end: rss(),
        drain_seconds: drain.elapsed().as_secs_f64(),
    })
}

/// The higher of two readings, either perhaps missing.
fn higher(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

impl Measured {
    pub(super) fn json(&self, backlog: usize) -> Value {
        json!({
            "seconds": self.seconds,
            "max_backlog": backlog,
            "accepted": self.accepted,
            "accepted_per_second": self.accepted as f64 / self.seconds,
            "shed": self.shed,
            "shed_per_second": self.shed as f64 / self.seconds,
            "completed": self.completed,
            "not_completed": self.not_completed,
            "drain_seconds": self.drain_seconds,
            "orchestrator_rss_mib": {"start": self.rss_start, "max": self.rss_max, "end": self.rss_end},
        })
    }

    pub(super) fn print(&self, backlog: usize) {
        let per = |n: usize| n as f64 / self.seconds;
        outln!(
            "overload, {CLIENTS} clients submitting without waiting for {:.0} s to one echo worker taking one task at a time, max_backlog {backlog}:",
            self.seconds
        );
        outln!(
            "  offered {:.0}/s: accepted {:.0}/s ({}), shed with 429 {:.0}/s ({})",
            per(self.accepted + self.shed),
            per(self.accepted),
            self.accepted,
            per(self.shed),
            self.shed
        );
        outln!(
            "  accepted and completed: {} of {} ({} not completed), the rest drained in {:.1} s after the offer stopped",
            self.completed,
            self.accepted,
            self.not_completed,
            self.drain_seconds
        );
        let mib = |v: Option<f64>| v.map_or("?".to_string(), |m| format!("{m:.0} MiB"));
        outln!(
            "  orchestrator RSS: {} at the start, {} at most, {} at the end",
            mib(self.rss_start),
            mib(self.rss_max),
            mib(self.rss_end)
        );
    }
}
