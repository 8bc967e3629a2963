//! The spans of a task's path, named and attributed in one place so every
//! process describes the same things the same way: the task's ids as
//! fields (they also reach every log line inside the span) and the
//! OpenTelemetry messaging conventions as span attributes (exported only).
//!
//! A request's trace: `POST /v1/tasks` (orchestrator) → `publish <subject>`
//! (orchestrator; `retry <subject>` for attempt 2 on) → `process <subject>`
//! (worker; one per delivery) → `handle <action>` (worker) →
//! `report <state>` (worker) → `apply <state>` (orchestrator).

use tracing::{Span, field};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::envelope::Envelope;
use crate::event::WorkerEvent;

/// The server span of one HTTP request; the route is the matched pattern.
pub fn http_request(method: &str, route: &str) -> Span {
    tracing::info_span!(
        "http",
        otel.name = %format_args!("{method} {route}"),
        otel.kind = "server",
        http.request.method = %method,
        http.route = %route,
        http.response.status_code = field::Empty,
        otel.status_code = field::Empty,
    )
}

/// Records the response status on an HTTP span (5xx is an error).
pub fn http_status(span: &Span, status: u16) {
    span.record("http.response.status_code", status);
    if status >= 500 {
        span.record("otel.status_code", "ERROR");
    }
}

macro_rules! task_span {
    ($name:expr, $kind:expr, $env:expr) => {{
        let env = $env;
        let span = tracing::info_span!(
            "task",
            otel.name = %$name,
            otel.kind = $kind,
            task_id = %env.header.task_id,
            correlation_id = %env.header.correlation_id,
            agent = %env.header.to,
            action = %env.payload.action,
            attempt = env.control.attempt.get(),
            trigger_id = field::Empty,
            otel.status_code = field::Empty,
        );
        if let Some(trigger) = &env.payload.meta.trigger_id {
            span.record("trigger_id", trigger.as_str());
        }
        span
    }};
}

fn messaging(span: &Span, operation: &'static str, kind: &'static str, subject: &str) {
    span.set_attribute("messaging.system", "nats");
    span.set_attribute("messaging.operation.name", operation);
    span.set_attribute("messaging.operation.type", kind);
    span.set_attribute("messaging.destination.name", subject.to_string());
}

/// The orchestrator's publish of one attempt (`retry …` from attempt 2).
pub fn publish_task(env: &Envelope, subject: &str, msg_id: &str) -> Span {
    let verb = if env.control.attempt.get() > 1 {
        "retry"
    } else {
        "publish"
    };
    let span = task_span!(format_args!("{verb} {subject}"), "producer", env);
    messaging(&span, "publish", "send", subject);
    span.set_attribute("messaging.message.id", msg_id.to_string());
    span.set_attribute(
        "messaging.message.conversation_id",
        env.header.correlation_id.to_string(),
    );
    span
}

/// A worker's handling of one delivery of a task message; a redelivery
/// (`delivered` > 1) is a span of its own, marked so.
pub fn process_task(env: &Envelope, subject: &str, delivered: i64, consumer: &str) -> Span {
    let span = task_span!(format_args!("process {subject}"), "consumer", env);
    messaging(&span, "process", "process", subject);
    span.set_attribute("messaging.consumer.group.name", consumer.to_string());
    span.set_attribute(
        "messaging.message.conversation_id",
        env.header.correlation_id.to_string(),
    );
    span.set_attribute("messaging.nats.delivery_count", delivered);
    span.set_attribute("redelivered", delivered > 1);
    span
}

/// A worker's handling of a message it cannot read (it is dead-lettered).
pub fn dead_letter(subject: &str) -> Span {
    let span = tracing::info_span!(
        "dead_letter",
        otel.name = %format_args!("dead-letter {subject}"),
        otel.kind = "consumer",
        otel.status_code = "ERROR",
    );
    messaging(&span, "process", "process", subject);
    span
}

/// The agent's handler running one attempt, inside the delivery's span.
pub fn handle(env: &Envelope) -> Span {
    tracing::info_span!(
        "handle",
        otel.name = %format_args!("handle {}", env.payload.action),
        otel.kind = "internal",
        otel.status_code = field::Empty,
    )
}

fn event_span(verb: &str, kind: &'static str, event: &WorkerEvent) -> Span {
    tracing::info_span!(
        "event",
        otel.name = %format_args!("{verb} {}", event.state.as_str()),
        otel.kind = kind,
        task_id = %event.task_id,
        correlation_id = %event.correlation_id,
        agent = %event.agent,
        attempt = event.attempt.get(),
        state = event.state.as_str(),
        otel.status_code = field::Empty,
    )
}

/// A worker's report of an attempt's state, a child of `parent`.
pub fn report_event(parent: &Span, event: &WorkerEvent, subject: &str, msg_id: &str) -> Span {
    let span = parent.in_scope(|| event_span("report", "producer", event));
    messaging(&span, "publish", "send", subject);
    span.set_attribute("messaging.message.id", msg_id.to_string());
    span
}

/// The orchestrator's application of a worker event to the store.
pub fn apply_event(event: &WorkerEvent, subject: &str) -> Span {
    let span = event_span("apply", "consumer", event);
    messaging(&span, "process", "process", subject);
    span
}

/// Marks a span as failed, with why.
pub fn failed(span: &Span, why: &str) {
    span.record("otel.status_code", "ERROR");
    span.set_attribute("error.message", why.to_string());
}

/// What a span of a workflow run marks.
#[derive(Clone, Copy, Debug)]
pub enum RunMark<'a> {
    /// `run <trigger>`: the run started; its context is stored with the
    /// run, and every other mark is its child (across restarts).
    Start,
    /// `step <id>`: the step's task is submitted (the task's spans are its
    /// children).
    Step(&'a str),
    /// `route <id>`: a `route:` step chose its agent.
    Route(&'a str),
    /// `wait <id>`: the run reached an approval gate and waits.
    Wait(&'a str),
    /// `approve <id>`, `reject <id>` or `input <id>`: a person answered
    /// the gate.
    Answer(&'a str, &'a str),
    /// `end <state>`: the run ended.
    End(&'a str),
}

/// A span of workflow run `run_id` of `trigger`, named for `mark`.
pub fn run(trigger: &str, run_id: &str, mark: RunMark<'_>) -> Span {
    let (name, step) = match mark {
        RunMark::Start => (format!("run {trigger}"), None),
        RunMark::Step(step) => (format!("step {step}"), Some(step)),
        RunMark::Route(step) => (format!("route {step}"), Some(step)),
        RunMark::Wait(step) => (format!("wait {step}"), Some(step)),
        RunMark::Answer(step, answer) => (format!("{answer} {step}"), Some(step)),
        RunMark::End(state) => (format!("end {state}"), None),
    };
    tracing::info_span!(
        "run",
        otel.name = %name,
        otel.kind = "internal",
        run_id = %run_id,
        trigger_id = %trigger,
        step_id = step,
        otel.status_code = field::Empty,
    )
}
