//! What `orchestrator bench` is asked: the sizes of its runs, which paths
//! and faces it measures, and how its clients wait.

use clap::Args;

#[derive(Args, Clone)]
pub struct BenchArgs {
    /// Tasks (and bare messages) per throughput run.
    #[arg(long, default_value_t = 10_000)]
    pub(super) tasks: usize,
    /// How many are in flight at once in the throughput runs.
    #[arg(long, default_value_t = 256)]
    pub(super) concurrency: usize,
    /// Round trips, one at a time, for the low-load latency figures.
    #[arg(long, default_value_t = 500)]
    pub(super) samples: usize,
    /// Use this broker instead of starting one (several URLs,
    /// comma-separated, for a cluster).
    #[arg(long, conflicts_with = "cluster")]
    pub(super) nats_url: Option<String>,
    /// Measure a three-node JetStream cluster with every stream in three
    /// replicas against a single server in one replica, both started by
    /// the bench, and the stall across a kill of the task stream's leader;
    /// the deployed path and the bare round trip only.
    #[arg(long)]
    pub(super) cluster: bool,
    /// Finished tasks stored before each full-path run (each path gets a
    /// store of its own with this many), to measure a store in use.
    #[arg(long, default_value_t = 0)]
    pub(super) preload: usize,
    /// Trace the deployed processes at this sampling ratio (0 to 1),
    /// exporting over OTLP/HTTP to a sink in the bench; without it they
    /// export nothing (tracing off).
    #[arg(long)]
    pub(super) trace_sampling: Option<f64>,
    /// How the deployed path's clients wait for a task's end: `poll`
    /// submits, then long-polls `GET /v1/tasks/{id}?wait=` (two calls);
    /// `sync` submits with `response_mode: sync` (one call).
    #[arg(long, value_enum, default_value_t = Client::Poll)]
    pub(super) client: Client,
    /// Also measure the A2A face, beside the REST path: the deployed path
    /// again with clients that send one blocking A2A `SendMessage`
    /// (JSON-RPC) per task, and the memory of `--subscribers` open
    /// `SubscribeToTask` streams.
    #[arg(long, conflicts_with = "cluster")]
    pub(super) a2a: bool,
    /// Also measure push notifications: the deployed path again with A2A
    /// messages that carry a push config (to a receiver in the bench):
    /// notifications per second, and the delay from a task's end to its
    /// terminal notification.
    #[arg(long, conflicts_with = "cluster")]
    pub(super) push: bool,
    /// Also measure LLM agents: the deployed path again with an agent that
    /// is a prompt for a model (against a model server in the bench),
    /// conversations of one model call and of one tool call: the
    /// orchestrator's CPU for each, beside a plain task's.
    #[arg(long, conflicts_with = "cluster")]
    pub(super) llm: bool,
    /// The model server the deployed path's LLM agent calls (set by
    /// `--llm`'s run, not a flag).
    #[arg(skip)]
    pub(super) llm_model: Option<String>,
    /// Also measure the web console: its pages' reads on a store of
    /// `--console-tasks` finished tasks, and the task path's throughput
    /// with and without a console open on the overview.
    #[arg(long, conflicts_with = "cluster")]
    pub(super) console: bool,
    /// With `--console`: the finished tasks stored first.
    #[arg(long, default_value_t = 100_000)]
    pub(super) console_tasks: usize,
    /// Measure an overload instead: for this many seconds, clients submit
    /// as fast as the orchestrator answers to a worker taking one task at
    /// a time, with `max_backlog` at `--overload-backlog`: what was
    /// offered, accepted and shed (429), the orchestrator's memory, and
    /// that every accepted task completed.
    #[arg(long, value_name = "SECONDS", conflicts_with = "cluster")]
    pub(super) overload: Option<u64>,
    /// Also measure the single process on the store's log path: the
    /// deployed path again with `replication.enabled`, every commit of
    /// the store appended to `<PREFIX>_STORE` on the same broker (one
    /// replica) before it is reported.
    #[arg(long, conflicts_with = "cluster")]
    pub(super) log_path: bool,
    /// How the broker the bench starts syncs its store to disk: `both`
    /// measures the bare round trip and the deployed path at the server's
    /// default (an fsync every two minutes) and again on a second broker
    /// with `sync_interval: always` (an fsync before each acknowledgement,
    /// what survives a power loss); `interval` or `always` measure one.
    /// Ignored with `--nats-url` (that broker's setting holds) and with
    /// `--cluster`.
    #[arg(long, value_enum, default_value_t = BrokerSync::Both)]
    pub(super) broker_sync: BrokerSync,
    /// Whether the deployed orchestrator runs with `replication.enabled`
    /// (set by `--log-path`'s run, not a flag).
    #[arg(skip)]
    pub(super) replicated_store: bool,
    /// With `--overload`: the orchestrator's `max_backlog`.
    #[arg(long, default_value_t = 2000)]
    pub(super) overload_backlog: usize,
    /// With `--a2a`: how many SSE subscriptions are held open at once.
    #[arg(long, default_value_t = 1000)]
    pub(super) subscribers: usize,
    /// Print JSON (`--json`).
    #[arg(skip)]
    pub json: bool,
}

/// How the deployed path's clients wait for a task's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Client {
    /// Submit, then a long poll: two HTTP calls per task.
    Poll,
    /// One submit with `response_mode: sync`.
    Sync,
    /// One blocking A2A `SendMessage` (JSON-RPC 1.0).
    A2a,
}

/// Which broker syncs the bench measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum BrokerSync {
    /// The server's default and `sync_interval: always`, one after the
    /// other.
    Both,
    /// The server's default only.
    Interval,
    /// `sync_interval: always` only.
    Always,
}
