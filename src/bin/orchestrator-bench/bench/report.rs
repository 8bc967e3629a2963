//! The report of one sitting: every path's figures, as text or as one
//! JSON object (`--json`).

use orchestrator::broker::DiskSync;
use serde_json::{Value, json};

use super::cpu::{CpuPerTask, print_cpu};
use super::{BenchArgs, Figures, a2a, console, llm, print_run, procs, push};
use crate::cli::output::outln;

/// What one sitting measured.
pub(super) struct Sitting {
    /// The full path in one process: throughput and low load.
    pub(super) full: (Figures, Figures),
    /// The full path as deployed.
    pub(super) deployed: (Figures, Figures),
    /// The deployed orchestrator's RSS (MiB) at the end.
    pub(super) orchestrator_rss: Option<f64>,
    /// CPU per task, as deployed.
    pub(super) cpu: CpuPerTask,
    /// The bare JetStream round trip.
    pub(super) bare: (Figures, Figures),
    /// CPU per bare message.
    pub(super) bare_cpu: CpuPerTask,
    /// What the trace sink received, when the processes were traced.
    pub(super) exported: Option<Value>,
    /// The A2A face, when asked for.
    pub(super) a2a: Option<a2a::Measured>,
    /// Push notifications, when asked for.
    pub(super) push: Option<push::Measured>,
    /// LLM agents, when asked for.
    pub(super) llm: Option<llm::Measured>,
    /// The console, when asked for.
    pub(super) console: Option<console::Measured>,
    /// The deployed path with the store on its log, when asked for.
    pub(super) log_path: Option<procs::Measured>,
    /// The bare round trip and the deployed path on a broker with
    /// `sync_interval: always`, when measured beside the default's.
    pub(super) synced: Option<Synced>,
    /// How the bench's own broker synced in the figures above (`None`:
    /// a broker given by URL).
    pub(super) broker_sync: Option<DiskSync>,
    /// The bench process's own RSS (MiB) at the end.
    pub(super) process_rss: Option<f64>,
}

/// What a broker that syncs before each acknowledgement gives.
pub(super) struct Synced {
    /// The bare JetStream round trip.
    pub(super) bare: (Figures, Figures),
    /// CPU per bare message.
    pub(super) bare_cpu: CpuPerTask,
    /// The full path as deployed.
    pub(super) deployed: procs::Measured,
}

/// A deployed path's figures, as the report's JSON gives them.
fn measured_json(m: &procs::Measured) -> Value {
    json!({
        "throughput": m.figures.0,
        "low_load": m.figures.1,
        "orchestrator_rss_mib": m.orchestrator_rss,
        "cpu_per_task": m.cpu,
    })
}

/// A bare round trip's figures, as the report's JSON gives them.
fn bare_json(bare: &(Figures, Figures), cpu: &CpuPerTask) -> Value {
    json!({
        "throughput": bare.0,
        "low_load": bare.1,
        "cpu_per_message": cpu,
    })
}

/// The name of a broker's disk sync in the report.
fn sync_name(sync: Option<DiskSync>) -> Option<&'static str> {
    sync.map(|s| match s {
        DiskSync::Interval => "interval",
        DiskSync::Always => "always",
    })
}

impl Sitting {
    /// The one-process path's throughput over the bare round trip's.
    fn ratio(&self) -> f64 {
        self.full.0.per_second / self.bare.0.per_second
    }

    /// The sitting as one JSON object.
    pub(super) fn json(&self, args: &BenchArgs) -> Value {
        json!({
            "full_path": {"throughput": self.full.0, "low_load": self.full.1, "process_rss_mib": self.process_rss},
            "processes": {
                "throughput": self.deployed.0,
                "low_load": self.deployed.1,
                "orchestrator_rss_mib": self.orchestrator_rss,
                "cpu_per_task": self.cpu,
            },
            "bare_jetstream": bare_json(&self.bare, &self.bare_cpu),
            "throughput_ratio": self.ratio(),
            "preloaded": args.preload,
            "trace_sampling": args.trace_sampling,
            "client": args.client,
            "otlp_received": self.exported,
            "concurrency": args.concurrency,
            "a2a": self.a2a.as_ref().map(|a| a.json(&self.cpu)),
            "push": self.push.as_ref().map(|p| p.json(&self.cpu)),
            "llm": self.llm.as_ref().map(|l| l.json(&self.cpu)),
            "console": self.console.as_ref().map(console::Measured::json),
            "broker_sync": sync_name(self.broker_sync),
            "sync_always": self.synced.as_ref().map(|m| json!({
                "processes": measured_json(&m.deployed),
                "bare_jetstream": bare_json(&m.bare, &m.bare_cpu),
                "throughput_of_interval": m.deployed.figures.0.per_second / self.deployed.0.per_second,
            })),
            "log_path": self.log_path.as_ref().map(|m| {
                let mut v = measured_json(m);
                v["throughput_of_processes"] = json!(m.figures.0.per_second / self.deployed.0.per_second);
                v
            }),
        })
    }

    /// The sitting as text.
    pub(super) fn print(&self, args: &BenchArgs) {
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
            &self.full,
        );
        print_run(
            "full path, as deployed (HTTP client → `run` process → JetStream → `worker` process → `run`)",
            ("tasks", "tasks/s"),
            args.concurrency,
            &self.deployed,
        );
        print_run(
            "bare JetStream round trip (publish, pull, ack, reply)",
            ("messages", "msgs/s"),
            args.concurrency,
            &self.bare,
        );
        outln!(
            "full path (one process) / bare throughput: {:.0} %",
            self.ratio() * 100.0
        );
        match (args.trace_sampling, &self.exported) {
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
        print_cpu("CPU per task, as deployed", &self.cpu);
        match self.broker_sync {
            Some(DiskSync::Always) => outln!(
                "the broker synced its store before each acknowledgement (sync_interval: always)"
            ),
            Some(_) => {
                outln!("the broker synced its store at the server's default (every two minutes)")
            }
            None => outln!("the broker given by --nats-url synced its store as it is set"),
        }
        if let Some(m) = &self.log_path {
            print_run(
                "full path, as deployed, the store's commits through its JetStream log (replication.enabled, one replica)",
                ("tasks", "tasks/s"),
                args.concurrency,
                &m.figures,
            );
            outln!(
                "store on its log / as deployed: throughput {:.0} %, low-load p50 {:.0} %",
                m.figures.0.per_second / self.deployed.0.per_second * 100.0,
                m.figures.1.p50_ms / self.deployed.1.p50_ms * 100.0
            );
            print_cpu("CPU per task, the store on its log", &m.cpu);
        }
        if let Some(a2a) = &self.a2a {
            a2a.print(args, &self.cpu);
        }
        if let Some(push) = &self.push {
            push.print(args, &self.cpu);
        }
        if let Some(console) = &self.console {
            console.print();
        }
        if let Some(llm) = &self.llm {
            llm.print(args, &self.cpu);
        }
        print_cpu("CPU per message, bare JetStream", &self.bare_cpu);
        if let Some(m) = &self.synced {
            print_run(
                "full path, as deployed, the broker syncing before each acknowledgement (sync_interval: always)",
                ("tasks", "tasks/s"),
                args.concurrency,
                &m.deployed.figures,
            );
            print_run(
                "bare JetStream round trip, the broker syncing before each acknowledgement",
                ("messages", "msgs/s"),
                args.concurrency,
                &m.bare,
            );
            outln!(
                "sync_interval always / default: as deployed throughput {:.0} %, low-load p50 {:.0} %",
                m.deployed.figures.0.per_second / self.deployed.0.per_second * 100.0,
                m.deployed.figures.1.p50_ms / self.deployed.1.p50_ms * 100.0
            );
            print_cpu(
                "CPU per task, as deployed, sync_interval always",
                &m.deployed.cpu,
            );
        }
        if let Some(rss) = self.orchestrator_rss {
            outln!("orchestrator process RSS at the end (as deployed): {rss:.0} MiB");
        }
        if let Some(rss) = self.process_rss {
            outln!("bench process RSS at the end (one-process path and clients): {rss:.0} MiB");
        }
    }
}
