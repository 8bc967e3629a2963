//! `orchestrator bench --a2a`: the A2A face beside the REST path, in the
//! same run. The deployed path again, with clients that send one blocking
//! A2A `SendMessage` (JSON-RPC 1.0) per task, and its CPU per task against
//! the REST path's; then the orchestrator's resident memory before and
//! with `--subscribers` `SubscribeToTask` streams open on a task that
//! waits (its agent has no worker).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::cpu::{CpuPerTask, print_cpu};
use super::procs::{self, Deployed, Ended, Failed, Site, call};
use super::{BenchArgs, Client, Figures, print_run, rss_mib_of};
use crate::cli::output::outln;

/// The card of an agent no worker serves: its tasks wait.
pub(super) fn idle_card() -> Value {
    json!({
        "name": "idle", "version": "1.0.0", "description": "bench: tasks that wait",
        "skills": [{"id": "wait", "description": "never runs"}],
    })
}

/// Sends task `i` as one blocking A2A `SendMessage` and waits for the
/// answer: the task, ended.
pub(super) async fn send(client: &reqwest::Client, http: &str, i: usize) -> Result<Ended, String> {
    let request = json!({
        "jsonrpc": "2.0", "id": i, "method": "SendMessage",
        "params": {"message": {
            "messageId": uuid::Uuid::now_v7().to_string(),
            "role": "ROLE_USER",
            "parts": [{"data": {"i": i}}],
            "metadata": {"skillId": "echo/echo"},
        }},
    });
    let t = Instant::now();
    let answer = call(procs::a2a(client, http, &request))
        .await
        .map_err(Failed::into_message)?;
    let state = answer["result"]["task"]["status"]["state"]
        .as_str()
        .ok_or_else(|| format!("SendMessage answered no task: {answer}"))?;
    match state {
        "TASK_STATE_COMPLETED" => Ok(Ended {
            latency: t.elapsed(),
            state: "completed".into(),
            resubmits: 0,
        }),
        other => Err(format!("an A2A task ended {other}: {answer}")),
    }
}

/// What the A2A face measured.
pub(super) struct Measured {
    /// The throughput run and the low-load run, A2A clients.
    figures: (Figures, Figures),
    /// Each process's CPU per task in the throughput run.
    cpu: CpuPerTask,
    /// Streams held open at once.
    subscribers: usize,
    /// The orchestrator's RSS (MiB) before they opened, and with them open.
    rss: (Option<f64>, Option<f64>),
}

/// Starts the deployed path with A2A clients under `dir/a2a`, measures
/// it, then holds the subscriptions.
pub(super) async fn measure(site: &Site<'_>, args: &BenchArgs) -> Result<Measured, String> {
    let a2a_args = BenchArgs {
        client: Client::A2a,
        ..args.clone()
    };
    let deployed = site.deploy("a2a", &a2a_args).await?;
    let measured = procs::full_path(&deployed, site.brokers, &a2a_args).await?;
    let rss = subscribe(&deployed, args.subscribers).await?;
    Ok(Measured {
        figures: measured.figures,
        cpu: measured.cpu,
        subscribers: args.subscribers,
        rss,
    })
}

/// Opens `n` `SubscribeToTask` streams on one waiting task, each read up to
/// its snapshot; the orchestrator's RSS before and with them open.
async fn subscribe(deployed: &Deployed, n: usize) -> Result<(Option<f64>, Option<f64>), String> {
    let task = call(
        deployed
            .client
            .post(format!("{}/v1/tasks", deployed.http))
            .json(&json!({"to": "idle", "action": "wait", "params": {}})),
    )
    .await
    .map_err(Failed::into_message)?;
    let id = task["task_id"].as_str().unwrap_or_default().to_string();
    let pid = deployed.orchestrator_pid();
    // Settle after the throughput runs before the first reading.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = pid.and_then(rss_mib_of);
    let mut streams = Vec::with_capacity(n);
    for i in 0..n {
        let subscribe =
            json!({"jsonrpc": "2.0", "id": i, "method": "SubscribeToTask", "params": {"id": id}});
        let mut stream = procs::a2a(&deployed.client, &deployed.http, &subscribe)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if !stream.status().is_success() {
            return Err(format!("subscription {i} refused: {}", stream.status()));
        }
        // The snapshot: the stream is open and served.
        stream
            .chunk()
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("subscription {i} ended at once"))?;
        streams.push(stream);
        super::progress("subscriptions", i + 1, n);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let with = pid.and_then(rss_mib_of);
    drop(streams);
    Ok((before, with))
}

impl Measured {
    /// What the orchestrator spent per task on A2A against REST, as a ratio.
    fn cpu_ratio(&self, rest: &CpuPerTask) -> Option<f64> {
        Some(self.cpu.orchestrator_us? / rest.orchestrator_us?)
    }

    fn per_stream_kib(&self) -> Option<f64> {
        let (Some(before), Some(with)) = self.rss else {
            return None;
        };
        Some((with - before) * 1024.0 / self.subscribers.max(1) as f64)
    }

    pub(super) fn json(&self, rest: &CpuPerTask) -> Value {
        json!({
            "throughput": self.figures.0,
            "low_load": self.figures.1,
            "cpu_per_task": self.cpu,
            "orchestrator_cpu_vs_rest": self.cpu_ratio(rest),
            "subscribers": self.subscribers,
            "orchestrator_rss_mib_before": self.rss.0,
            "orchestrator_rss_mib_with_subscribers": self.rss.1,
            "per_subscriber_kib": self.per_stream_kib(),
        })
    }

    pub(super) fn print(&self, args: &BenchArgs, rest: &CpuPerTask) {
        print_run(
            "A2A, as deployed (blocking SendMessage over JSON-RPC → `run` → JetStream → `worker` → `run`)",
            ("tasks", "tasks/s"),
            args.concurrency,
            &self.figures,
        );
        print_cpu("CPU per task, A2A, as deployed", &self.cpu);
        if let Some(ratio) = self.cpu_ratio(rest) {
            let rest_client = match args.client {
                Client::Poll => "poll",
                Client::Sync => "sync",
                Client::A2a => "a2a",
            };
            outln!(
                "orchestrator CPU per task, A2A / REST ({rest_client} client): {:.0} %",
                ratio * 100.0
            );
        }
        if let (Some(before), Some(with)) = self.rss {
            outln!(
                "orchestrator RSS: {before:.0} MiB, with {} subscriptions open {with:.0} MiB ({:.1} KiB each)",
                self.subscribers,
                self.per_stream_kib().unwrap_or_default()
            );
        }
    }
}
