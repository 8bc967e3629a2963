//! Trace context across processes: W3C `traceparent` and `tracestate`,
//! written and read by OpenTelemetry's propagator on NATS headers, HTTP
//! headers, a command's environment and a task's record.

use async_nats::HeaderMap;
use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{SpanContext, TraceContextExt, TraceFlags, TraceState};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use serde::{Deserialize, Serialize};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The `traceparent` header (and environment variable `TRACEPARENT`).
pub const TRACEPARENT: &str = "traceparent";
/// The `tracestate` header (and environment variable `TRACESTATE`).
pub const TRACESTATE: &str = "tracestate";

fn propagator() -> TraceContextPropagator {
    TraceContextPropagator::new()
}

/// A span's context as the W3C headers carry it: kept on a task so each
/// of its publishes, even after a restart, is a child of the request that
/// created it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredTrace {
    /// The `traceparent` value.
    pub traceparent: String,
    /// The `tracestate` value, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
}

impl Injector for StoredTrace {
    fn set(&mut self, key: &str, value: String) {
        match key {
            TRACEPARENT => self.traceparent = value,
            TRACESTATE if !value.is_empty() => self.tracestate = Some(value),
            _ => {}
        }
    }
}

impl Extractor for StoredTrace {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            TRACEPARENT => Some(&self.traceparent),
            TRACESTATE => self.tracestate.as_deref(),
            _ => None,
        }
    }
    fn keys(&self) -> Vec<&str> {
        vec![TRACEPARENT, TRACESTATE]
    }
}

impl StoredTrace {
    /// The context of `span`, if it has one (an OpenTelemetry layer
    /// records it).
    pub fn of_span(span: &Span) -> Option<StoredTrace> {
        let cx = span.context();
        cx.span()
            .span_context()
            .is_valid()
            .then(|| StoredTrace::injected(&cx))
    }

    /// The context of `span`; when it has none, a new trace, so every task
    /// still has a trace id.
    pub fn of(span: &Span) -> StoredTrace {
        StoredTrace::of_span(span).unwrap_or_else(|| {
            StoredTrace::injected(&Context::new().with_remote_span_context(fresh_span_context()))
        })
    }

    fn injected(cx: &Context) -> StoredTrace {
        let mut stored = StoredTrace::default();
        propagator().inject_context(cx, &mut stored);
        stored
    }

    /// The context it holds, as a parent.
    pub fn context(&self) -> Context {
        propagator().extract(self)
    }

    /// The trace id, in hex; `None` if the value does not parse.
    pub fn trace_id(&self) -> Option<String> {
        let sc = self.context().span().span_context().clone();
        sc.is_valid().then(|| sc.trace_id().to_string())
    }
}

/// A sampled span context with random ids.
fn fresh_span_context() -> SpanContext {
    let bytes = *uuid::Uuid::new_v4().as_bytes();
    let span = *uuid::Uuid::new_v4().as_bytes();
    let mut span_id = [0u8; 8];
    span_id.copy_from_slice(&span[..8]);
    SpanContext::new(
        opentelemetry::trace::TraceId::from_bytes(bytes),
        opentelemetry::trace::SpanId::from_bytes(span_id),
        TraceFlags::SAMPLED,
        false,
        TraceState::NONE,
    )
}

/// NATS headers being written.
struct NatsWriter<'a>(&'a mut HeaderMap);

impl Injector for NatsWriter<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key, value.as_str());
    }
}

/// NATS headers being read.
struct NatsReader<'a>(&'a HeaderMap);

impl Extractor for NatsReader<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(|v| v.as_str())
    }
    fn keys(&self) -> Vec<&str> {
        self.0.iter().map(|(k, _)| k.as_ref()).collect()
    }
}

/// HTTP headers being read.
struct HttpReader<'a>(&'a axum::http::HeaderMap);

impl Extractor for HttpReader<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

/// Writes `span`'s context into message headers.
pub fn inject(span: &Span, headers: &mut HeaderMap) {
    propagator().inject_context(&span.context(), &mut NatsWriter(headers));
}

/// Makes `span` a child of the context a message's headers carry, if any.
pub fn follow_message(span: &Span, headers: Option<&HeaderMap>) {
    if let Some(headers) = headers {
        adopt(span, propagator().extract(&NatsReader(headers)));
    }
}

/// Makes `span` a child of the context an HTTP request's headers carry.
pub fn follow_request(span: &Span, headers: &axum::http::HeaderMap) {
    adopt(span, propagator().extract(&HttpReader(headers)));
}

/// Makes `span` a child of a stored context.
pub fn follow_stored(span: &Span, stored: &StoredTrace) {
    adopt(span, stored.context());
}

fn adopt(span: &Span, parent: Context) {
    if parent.span().span_context().is_valid() {
        // Fails only for a span no layer records (nothing to link then).
        let _ = span.set_parent(parent);
    }
}

/// `span`'s context as `TRACEPARENT` (and `TRACESTATE`) environment
/// variables, for a process that starts its own spans.
pub fn environment(span: &Span) -> Vec<(&'static str, String)> {
    let Some(stored) = StoredTrace::of_span(span) else {
        return Vec::new();
    };
    let mut vars = vec![("TRACEPARENT", stored.traceparent)];
    if let Some(state) = stored.tracestate {
        vars.push(("TRACESTATE", state));
    }
    vars
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_trace_round_trips_through_the_propagator() {
        let stored = StoredTrace::of(&Span::none());
        assert!(stored.traceparent.starts_with("00-"));
        let id = stored.trace_id().unwrap();
        assert_eq!(id.len(), 32);
        assert!(stored.traceparent.contains(&id));
        let mut headers = HeaderMap::new();
        propagator().inject_context(&stored.context(), &mut NatsWriter(&mut headers));
        assert_eq!(
            headers.get(TRACEPARENT).map(|v| v.as_str()),
            Some(stored.traceparent.as_str())
        );
    }

    #[test]
    fn malformed_context_is_ignored() {
        for bad in [
            "",
            "00-not-hex-01",
            "zz-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        ] {
            let stored = StoredTrace {
                traceparent: bad.into(),
                tracestate: None,
            };
            assert_eq!(stored.trace_id(), None, "{bad}");
        }
    }
}
