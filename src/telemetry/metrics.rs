//! Prometheus metrics, in the process's default registry (with the
//! standard `process_*` metrics), served as text at `/metrics`.
//! `docs/observability.md` lists every metric with its meaning.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
};

use crate::envelope::Timestamp;

/// Latency buckets, in seconds: 1 ms to 5 minutes.
const LATENCY: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// `metric`, registered in the default registry. The names and labels
/// are this file's constants: an error is a bug, caught by any scrape test.
fn registered<M: prometheus::core::Collector + Clone + 'static>(
    metric: Result<M, prometheus::Error>,
) -> M {
    let metric = metric.expect("a valid metric");
    prometheus::register(Box::new(metric.clone())).expect("registered once");
    metric
}

fn counter_vec(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    registered(IntCounterVec::new(Opts::new(name, help), labels))
}

fn gauge_vec(name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    registered(IntGaugeVec::new(Opts::new(name, help), labels))
}

fn histogram_vec(name: &str, help: &str, labels: &[&str], buckets: &[f64]) -> HistogramVec {
    registered(HistogramVec::new(
        HistogramOpts::new(name, help).buckets(buckets.to_vec()),
        labels,
    ))
}

fn histogram(name: &str, help: &str, buckets: &[f64]) -> Histogram {
    registered(Histogram::with_opts(
        HistogramOpts::new(name, help).buckets(buckets.to_vec()),
    ))
}

// --- the orchestrator ---

static TASKS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter_vec(
        "orch_tasks_total",
        "Tasks that entered each state, by agent (a retry enters submitted again).",
        &["agent", "state"],
    )
});

static TASK_SECONDS: LazyLock<HistogramVec> = LazyLock::new(|| {
    histogram_vec(
        "orch_task_duration_seconds",
        "End to end: from a task's creation to its final state, by agent and final state.",
        &["agent", "state"],
        LATENCY,
    )
});

static PUSH_DELIVERIES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter_vec(
        "orch_delivery_attempts_total",
        "Attempts at push notifications and callbacks, by outcome (ok: a 2xx; failed: anything else).",
        &["outcome"],
    )
});

static QUEUE_DEPTH: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    gauge_vec(
        "orch_queue_depth",
        "Task messages waiting for a worker (not yet delivered), by agent and priority; read from JetStream at scrape time.",
        &["agent", "priority"],
    )
});

static DLQ: LazyLock<IntGauge> = LazyLock::new(|| {
    registered(IntGauge::new(
        "orch_dlq_messages",
        "Messages in the dead-letter stream; read from JetStream at scrape time.",
    ))
});

static EVENT_REDELIVERIES: LazyLock<IntCounter> = LazyLock::new(|| {
    registered(IntCounter::new(
        "orch_event_redeliveries_total",
        "Worker events the orchestrator received more than once (a crash or a failed apply).",
    ))
});

static FLUSH_SECONDS: LazyLock<Histogram> = LazyLock::new(|| {
    histogram(
        "orch_store_flush_seconds",
        "How long one store flush (fsync) takes.",
        LATENCY,
    )
});

static FLUSH_COMMITS: LazyLock<Histogram> = LazyLock::new(|| {
    histogram(
        "orch_store_flush_batch_size",
        "Store transactions made durable by one flush (group commit).",
        &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0],
    )
});

static LOG_APPEND_SECONDS: LazyLock<Histogram> = LazyLock::new(|| {
    histogram(
        "orch_store_log_append_seconds",
        "How long one append of the store's commits to its replicated log takes, from the publish to the broker's acknowledgement (replication on).",
        LATENCY,
    )
});

static LOG_APPEND_COMMITS: LazyLock<Histogram> = LazyLock::new(|| {
    histogram(
        "orch_store_log_append_batch_size",
        "Store transactions one append to the replicated log carries (group commit over the log).",
        &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0],
    )
});

static TRANSACTION_JOBS: LazyLock<Histogram> = LazyLock::new(|| {
    histogram(
        "orch_store_transaction_jobs",
        "Changes (submissions, state changes, audit rows) written in one store transaction.",
        &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0],
    )
});

static HTTP_REQUESTS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter_vec(
        "orch_http_requests_total",
        "HTTP API requests answered, by route and status code.",
        &["method", "route", "status"],
    )
});

static HTTP_CONNECTION_CAP: LazyLock<IntCounter> = LazyLock::new(|| {
    registered(IntCounter::new(
        "orch_http_connection_cap_reached_total",
        "Times a new HTTP connection found http_max_connections open: it was served probes only, from the reserve, or refused.",
    ))
});

static HTTP_CONNECTIONS_REFUSED: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter_vec(
        "orch_http_connections_refused_total",
        "HTTP connections answered 503 and closed at once, by reason (peer: its address held http_max_connections_per_peer; full: every slot and the probes' reserve were taken).",
        &["reason"],
    )
});

static SHED: LazyLock<IntCounter> = LazyLock::new(|| {
    registered(IntCounter::new(
        "orch_requests_shed_total",
        "New tasks and runs refused (429) because max_backlog tasks waited for a worker.",
    ))
});

static HTTP_STREAMS_REFUSED: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter_vec(
        "orch_http_streams_refused_total",
        "Streams (SSE) refused, by reason (principal: its principal held http_max_streams_per_principal; full: a2a.max_streams were open).",
        &["reason"],
    )
});

static RUNS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter_vec(
        "orch_runs_total",
        "Workflow runs started, and ended by state, by trigger.",
        &["trigger", "state"],
    )
});

static RUN_SECONDS: LazyLock<HistogramVec> = LazyLock::new(|| {
    histogram_vec(
        "orch_run_duration_seconds",
        "From a workflow run's start to its end, by trigger and final state.",
        &["trigger", "state"],
        LATENCY,
    )
});

static WAITS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter_vec(
        "orch_worker_waits_total",
        "Times a worker kept a message and looked again later instead of settling it, by agent and reason: claim_busy (another replica holds the claim), claims_unavailable (the claims bucket cannot be reached), record_unavailable (a repeated delivery whose attempt's record cannot be read), report_failed (the result could not be published yet).",
        &["agent", "reason"],
    )
});

static READY: LazyLock<IntGauge> = LazyLock::new(|| {
    registered(IntGauge::new(
        "orch_ready",
        "1 when the process is ready (what /readyz says), 0 when not: a stream or bucket it needs has no leader, or work waits and nothing has moved for the configured time.",
    ))
});

/// Sets the readiness gauge.
pub fn set_ready(ok: bool) {
    READY.set(i64::from(ok));
}

/// Counts a run started.
pub fn run_started(trigger: &str) {
    RUNS.with_label_values(&[trigger, "started"]).inc();
}

/// Counts a run ended in `state`, and how long it took.
pub fn run_ended(trigger: &str, state: &str, created_at: &Timestamp) {
    RUNS.with_label_values(&[trigger, state]).inc();
    let took = Timestamp::now().as_offset_date_time() - created_at.as_offset_date_time();
    RUN_SECONDS
        .with_label_values(&[trigger, state])
        .observe(took.as_seconds_f64().max(0.0));
}

// --- workers ---

static HANDLER_SECONDS: LazyLock<HistogramVec> = LazyLock::new(|| {
    histogram_vec(
        "orch_worker_handler_duration_seconds",
        "How long the agent's handler ran for one attempt, by agent, action and outcome.",
        &["agent", "action", "outcome"],
        LATENCY,
    )
});

static DELIVERIES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter_vec(
        "orch_worker_deliveries_total",
        "Task messages a worker received, by agent.",
        &["agent"],
    )
});

static REDELIVERIES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter_vec(
        "orch_worker_redeliveries_total",
        "Task messages a worker received again (delivery count above 1), by agent.",
        &["agent"],
    )
});

static RUNNING: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    gauge_vec(
        "orch_worker_running",
        "Handlers running now, by agent.",
        &["agent"],
    )
});

static MODEL_CALLS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter_vec(
        "orch_llm_calls_total",
        "Model calls that answered, by trigger, agent and model (docs/llm.md).",
        &["trigger", "agent", "model"],
    )
});

static MODEL_TOKENS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter_vec(
        "orch_llm_tokens_total",
        "Tokens model calls spent, by trigger, agent, model and kind (input, output).",
        &["trigger", "agent", "model", "kind"],
    )
});

static MODEL_SECONDS: LazyLock<HistogramVec> = LazyLock::new(|| {
    histogram_vec(
        "orch_llm_call_duration_seconds",
        "How long model calls took, by agent and model.",
        &["agent", "model"],
        LATENCY,
    )
});

/// A model call of `agent` (for `trigger`, empty when none) answered.
pub fn model_called(
    trigger: &str,
    agent: &str,
    model: &str,
    input: u64,
    output: u64,
    took: Duration,
) {
    MODEL_CALLS
        .with_label_values(&[trigger, agent, model])
        .inc();
    MODEL_TOKENS
        .with_label_values(&[trigger, agent, model, "input"])
        .inc_by(input);
    MODEL_TOKENS
        .with_label_values(&[trigger, agent, model, "output"])
        .inc_by(output);
    MODEL_SECONDS
        .with_label_values(&[agent, model])
        .observe(took.as_secs_f64());
}

/// A task entered the state named `state`; a final one (`ended`) also
/// observes its end-to-end latency.
pub fn task_entered(agent: &str, state: &str, ended: bool, created_at: &Timestamp) {
    TASKS.with_label_values(&[agent, state]).inc();
    if ended {
        let since = time::OffsetDateTime::now_utc() - created_at.as_offset_date_time();
        let seconds = since.as_seconds_f64().max(0.0);
        TASK_SECONDS
            .with_label_values(&[agent, state])
            .observe(seconds);
        super::recent::ended(seconds, state != "completed");
    }
}

/// The queue depth of one agent and priority, as read now.
pub fn set_queue_depth(agent: &str, priority: &str, depth: u64) {
    QUEUE_DEPTH
        .with_label_values(&[agent, priority])
        .set(i64::try_from(depth).unwrap_or(i64::MAX));
}

/// The dead-letter stream's size, as read now.
pub fn set_dlq_size(messages: u64) {
    DLQ.set(i64::try_from(messages).unwrap_or(i64::MAX));
}

/// The outbox attempted a delivery; `ok`: the target took it.
pub fn delivery_sent(ok: bool) {
    PUSH_DELIVERIES
        .with_label_values(&[if ok { "ok" } else { "failed" }])
        .inc();
}

/// The orchestrator received an event again.
pub fn event_redelivered() {
    EVENT_REDELIVERIES.inc();
}

/// A store flush took `took` and made `commits` transactions durable.
pub fn store_flushed(took: Duration, commits: u64) {
    FLUSH_SECONDS.observe(took.as_secs_f64());
    FLUSH_COMMITS.observe(commits as f64);
}

/// An append to the store's log took `took` and carried `commits`
/// transactions.
pub fn store_log_appended(took: Duration, commits: usize) {
    LOG_APPEND_SECONDS.observe(took.as_secs_f64());
    LOG_APPEND_COMMITS.observe(commits as f64);
}

/// A store transaction wrote `jobs` changes.
pub fn store_transaction(jobs: usize) {
    TRANSACTION_JOBS.observe(jobs as f64);
}

/// An HTTP request was answered.
pub fn http_answered(method: &str, route: &str, status: u16) {
    HTTP_REQUESTS
        .with_label_values(&[method, route, &status.to_string()])
        .inc();
}

/// A new HTTP connection waits: `http_max_connections` are open.
pub fn http_connection_cap_reached() {
    HTTP_CONNECTION_CAP.inc();
}

/// An HTTP connection was refused at once (`reason`: `peer` or `full`).
pub fn http_connection_refused(reason: &str) {
    HTTP_CONNECTIONS_REFUSED.with_label_values(&[reason]).inc();
}

/// A new task or run was refused: the backlog is full.
pub fn shed() {
    SHED.inc();
}

/// A stream was refused (`reason`: `principal` or `full`).
pub fn http_stream_refused(reason: &str) {
    HTTP_STREAMS_REFUSED.with_label_values(&[reason]).inc();
}

/// A worker received a task message (`delivered`: its delivery count).
pub fn delivered(agent: &str, delivered: i64) {
    DELIVERIES.with_label_values(&[agent]).inc();
    if delivered > 1 {
        REDELIVERIES.with_label_values(&[agent]).inc();
    }
}

/// A worker kept a message and will look again instead of settling it
/// (`reason`: `claim_busy`, `claims_unavailable`, `record_unavailable`,
/// `report_failed`).
pub fn worker_waited(agent: &str, reason: &str) {
    WAITS.with_label_values(&[agent, reason]).inc();
}

/// A handler started; the guard counts it as running until dropped.
pub fn handler_started(agent: &str) -> RunningGuard {
    let gauge = RUNNING.with_label_values(&[agent]);
    gauge.inc();
    RunningGuard(gauge)
}

/// Counts a handler as running while it lives.
pub struct RunningGuard(IntGauge);

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// A handler ran for `took` and ended with `outcome`.
pub fn handler_finished(agent: &str, action: &str, outcome: &str, took: Duration) {
    HANDLER_SECONDS
        .with_label_values(&[agent, action, outcome])
        .observe(took.as_secs_f64());
}

/// Every metric of this process in Prometheus' text format.
pub fn render() -> String {
    // Metrics that were never touched are registered here, so a scrape
    // lists every family from the start.
    LazyLock::force(&TASKS);
    LazyLock::force(&DELIVERIES);
    LazyLock::force(&REDELIVERIES);
    LazyLock::force(&HTTP_REQUESTS);
    LazyLock::force(&HTTP_CONNECTION_CAP);
    LazyLock::force(&HTTP_CONNECTIONS_REFUSED);
    LazyLock::force(&HTTP_STREAMS_REFUSED);
    LazyLock::force(&SHED);
    LazyLock::force(&TASK_SECONDS);
    LazyLock::force(&QUEUE_DEPTH);
    LazyLock::force(&DLQ);
    LazyLock::force(&EVENT_REDELIVERIES);
    LazyLock::force(&FLUSH_SECONDS);
    LazyLock::force(&FLUSH_COMMITS);
    LazyLock::force(&TRANSACTION_JOBS);
    LazyLock::force(&RUNS);
    LazyLock::force(&RUN_SECONDS);
    LazyLock::force(&HANDLER_SECONDS);
    LazyLock::force(&RUNNING);
    LazyLock::force(&WAITS);
    LazyLock::force(&READY);
    prometheus::TextEncoder::new()
        .encode_to_string(&prometheus::gather())
        .unwrap_or_else(|e| format!("# metrics could not be encoded: {e}\n"))
}

/// The content type of [`render`]'s text.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Serves `/metrics`, `/healthz` and `/readyz` (what `ready` last said) on
/// `listener` until `stop` fires: a worker's metrics port.
pub async fn serve(
    listener: tokio::net::TcpListener,
    ready: super::readiness::Readiness,
    stop: tokio_util::sync::CancellationToken,
) {
    let app = axum::Router::new()
        .route("/metrics", axum::routing::get(metrics_response))
        .route("/healthz", axum::routing::get(|| async { "ok" }))
        .route(
            "/readyz",
            axum::routing::get(move || {
                let ready = ready.clone();
                async move { ready_response(&ready) }
            }),
        );
    let _ = axum::serve(listener, app)
        .with_graceful_shutdown(stop.cancelled_owned())
        .await;
}

/// A `/readyz` answer: 200 when ready, else 503, with what the checks
/// found as JSON.
pub fn ready_response(
    ready: &super::readiness::Readiness,
) -> (axum::http::StatusCode, axum::Json<serde_json::Value>) {
    let (ok, mut detail) = ready.get();
    detail["ok"] = serde_json::Value::Bool(ok);
    let status = if ok {
        axum::http::StatusCode::OK
    } else {
        axum::http::StatusCode::SERVICE_UNAVAILABLE
    };
    (status, axum::Json(detail))
}

/// The `/metrics` answer.
pub async fn metrics_response() -> impl axum::response::IntoResponse {
    ([(axum::http::header::CONTENT_TYPE, CONTENT_TYPE)], render())
}
