//! `orchestrator bench --push`: push notifications from the outbox, in the
//! same run as the REST path. The deployed path again, its tasks sent as
//! A2A messages that carry a push config pointing at a receiver in the
//! bench (deliveries to loopback allowed), which answers 204 to each
//! notification. Measured: notifications per second out of the outbox,
//! and how long after a task's end (the timestamp of its terminal status)
//! its terminal notification arrives; under load and one at a time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::cpu::{CpuPerTask, print_cpu};
use super::procs::{Failed, Site, call};
use super::{BenchArgs, Client, Figures, figures};
use crate::cli::output::outln;

/// What the receiver saw.
#[derive(Default)]
struct Seen {
    /// Every notification's arrival.
    arrivals: Vec<Instant>,
    /// Per task: how long after its end its terminal notification came.
    ended: HashMap<String, Duration>,
}

/// Starts the receiver on a loopback port: its URL and what it sees.
async fn receiver() -> Result<(String, Arc<Mutex<Seen>>), String> {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let state = Arc::clone(&seen);
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |body: axum::body::Bytes| {
            let state = Arc::clone(&state);
            async move {
                let now = Instant::now();
                let wall = time::OffsetDateTime::now_utc();
                let v: Value = serde_json::from_slice(&body).unwrap_or_default();
                let update = &v["statusUpdate"];
                let mut seen = state.lock().unwrap_or_else(|p| p.into_inner());
                seen.arrivals.push(now);
                if update["status"]["state"] == "TASK_STATE_COMPLETED"
                    && let Some(at) = update["status"]["timestamp"].as_str().and_then(|t| {
                        time::OffsetDateTime::parse(
                            t,
                            &time::format_description::well_known::Rfc3339,
                        )
                        .ok()
                    })
                {
                    let after = (wall - at).max(time::Duration::ZERO);
                    let id = update["taskId"].as_str().unwrap_or_default().to_string();
                    seen.ended
                        .entry(id)
                        .or_insert(Duration::from_nanos(after.whole_nanoseconds() as u64));
                }
                axum::http::StatusCode::NO_CONTENT
            }
        }),
    );
    let url = super::serve_loopback(app, "/hook").await?;
    Ok((url, seen))
}

/// Sends task `i` as an A2A message with a push config for `hook`,
/// answered at once (the receiver sees its end).
async fn send(
    client: &reqwest::Client,
    http: &str,
    hook: &str,
    i: usize,
) -> Result<String, String> {
    let request = json!({
        "jsonrpc": "2.0", "id": i, "method": "SendMessage",
        "params": {
            "message": {
                "messageId": uuid::Uuid::now_v7().to_string(),
                "role": "ROLE_USER",
                "parts": [{"data": {"i": i}}],
                "metadata": {"skillId": "echo/echo"},
            },
            "configuration": {
                "returnImmediately": true,
                "taskPushNotificationConfig": {"url": hook, "token": "bench"},
            },
        },
    });
    let answer = call(super::procs::a2a(client, http, &request))
        .await
        .map_err(Failed::into_message)?;
    answer["result"]["task"]["id"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| format!("SendMessage answered no task: {answer}"))
}

/// Waits until the receiver has the ends of `ids`.
async fn ends_of(seen: &Mutex<Seen>, ids: &[String]) -> Result<Vec<Duration>, String> {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        {
            let seen = seen.lock().unwrap_or_else(|p| p.into_inner());
            let got: Vec<Duration> = ids
                .iter()
                .filter_map(|id| seen.ended.get(id))
                .copied()
                .collect();
            if got.len() == ids.len() {
                return Ok(got);
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "{} of {} tasks' terminal notifications came within five minutes",
                    got.len(),
                    ids.len()
                ));
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What the push run measured.
pub(super) struct Measured {
    /// Tasks sent under load, from the first send to the last terminal
    /// notification: tasks per second, and the delay from each task's end
    /// to its terminal notification.
    load: Figures,
    /// Notifications per second out of the outbox under load.
    notifications_per_second: f64,
    /// Notifications per task.
    per_task: f64,
    /// The same delay, one task at a time.
    low: Figures,
    /// Each process's CPU per task under load.
    cpu: CpuPerTask,
}

/// Starts the deployed path with pushes under `dir/push` and measures it.
pub(super) async fn measure(site: &Site<'_>, args: &BenchArgs) -> Result<Measured, String> {
    let push_args = BenchArgs {
        client: Client::A2a,
        ..args.clone()
    };
    let (hook, seen) = receiver().await?;
    let deployed = site.deploy("push", &push_args).await?;
    let processes = deployed.processes(site.brokers);
    let before = processes.cpu();
    let started = Instant::now();
    let slots = Arc::new(tokio::sync::Semaphore::new(args.concurrency.max(1)));
    let mut sends = Vec::with_capacity(args.tasks);
    for i in 0..args.tasks {
        let permit = Arc::clone(&slots)
            .acquire_owned()
            .await
            .map_err(|e| e.to_string())?;
        let (client, http, hook) = (deployed.client.clone(), deployed.http.clone(), hook.clone());
        sends.push(tokio::spawn(async move {
            let id = send(&client, &http, &hook, i).await;
            drop(permit);
            id
        }));
        super::progress("push", i + 1, args.tasks);
    }
    let mut ids = Vec::with_capacity(args.tasks);
    for s in sends {
        ids.push(s.await.map_err(|e| e.to_string())??);
    }
    let delays = ends_of(&seen, &ids).await?;
    let elapsed = started.elapsed();
    let cpu = CpuPerTask::between(before, processes.cpu(), ids.len());
    let (count, first, last) = {
        let seen = seen.lock().unwrap_or_else(|p| p.into_inner());
        let first = seen.arrivals.iter().min().copied();
        let last = seen.arrivals.iter().max().copied();
        (seen.arrivals.len(), first, last)
    };
    let span = match (first, last) {
        (Some(a), Some(b)) if b > a => b - a,
        _ => elapsed,
    };
    let load = figures(delays, elapsed);
    let mut low_delays = Vec::with_capacity(args.samples);
    for i in 0..args.samples {
        let id = send(&deployed.client, &deployed.http, &hook, args.tasks + i).await?;
        low_delays.extend(ends_of(&seen, &[id]).await?);
        super::progress("push, low load", i + 1, args.samples);
    }
    Ok(Measured {
        load,
        notifications_per_second: count as f64 / span.as_secs_f64(),
        per_task: count as f64 / ids.len().max(1) as f64,
        low: figures(low_delays, Duration::from_secs(1)),
        cpu,
    })
}

impl Measured {
    fn cpu_ratio(&self, rest: &CpuPerTask) -> Option<f64> {
        Some(self.cpu.orchestrator_us? / rest.orchestrator_us?)
    }

    pub(super) fn json(&self, rest: &CpuPerTask) -> Value {
        json!({
            "tasks_per_second": self.load.per_second,
            "notifications_per_second": self.notifications_per_second,
            "notifications_per_task": self.per_task,
            "end_to_notification_ms": {"p50": self.load.p50_ms, "p99": self.load.p99_ms},
            "end_to_notification_low_load_ms": {"p50": self.low.p50_ms, "p99": self.low.p99_ms},
            "cpu_per_task": self.cpu,
            "orchestrator_cpu_vs_rest": self.cpu_ratio(rest),
        })
    }

    pub(super) fn print(&self, args: &BenchArgs, rest: &CpuPerTask) {
        outln!(
            "push notifications, as deployed (A2A messages with a push config → `run` → `worker` → `run` → outbox → receiver):"
        );
        outln!(
            "  {} tasks, {} in flight: {:.0} tasks/s, {:.0} notifications/s ({:.1} per task)",
            self.load.count,
            args.concurrency,
            self.load.per_second,
            self.notifications_per_second,
            self.per_task
        );
        outln!(
            "  from a task's end to its terminal notification: p50 {:.2} ms, p99 {:.2} ms; one at a time ({}): p50 {:.2} ms, p99 {:.2} ms",
            self.load.p50_ms,
            self.load.p99_ms,
            self.low.count,
            self.low.p50_ms,
            self.low.p99_ms
        );
        print_cpu("CPU per task, push, as deployed", &self.cpu);
        if let Some(ratio) = self.cpu_ratio(rest) {
            outln!(
                "orchestrator CPU per task, with a push config / REST: {:.0} %",
                ratio * 100.0
            );
        }
    }
}
