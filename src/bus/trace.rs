//! W3C trace context (`traceparent`), carried on every message so one user
//! request is one trace across processes. Spans are not exported yet (no
//! OpenTelemetry exporter is built); the ids are recorded on each task and
//! passed along so an exporter can join them later.

use std::fmt;

/// A trace id and the id of the span that sends a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceContext {
    /// 16 bytes, shared by every span of one request.
    trace_id: [u8; 16],
    /// 8 bytes, this span.
    span_id: [u8; 8],
}

/// The header name.
pub const TRACEPARENT: &str = "traceparent";

fn random_bytes<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    let mut filled = 0;
    while filled < N {
        let chunk = *uuid::Uuid::new_v4().as_bytes();
        let take = (N - filled).min(16);
        out[filled..filled + take].copy_from_slice(&chunk[..take]);
        filled += take;
    }
    out
}

impl TraceContext {
    /// A new trace.
    pub fn root() -> Self {
        TraceContext {
            trace_id: random_bytes(),
            span_id: random_bytes(),
        }
    }

    /// A new span in the same trace.
    pub fn child(&self) -> Self {
        TraceContext {
            trace_id: self.trace_id,
            span_id: random_bytes(),
        }
    }

    /// A new span in the trace with this hex id (as stored on a task).
    pub fn in_trace(trace_id: &str) -> Option<Self> {
        let bytes = hex::decode(trace_id).ok()?;
        let trace_id: [u8; 16] = bytes.try_into().ok()?;
        (trace_id != [0; 16]).then(|| TraceContext {
            trace_id,
            span_id: random_bytes(),
        })
    }

    /// Reads a `traceparent` header value (version 00).
    pub fn parse(header: &str) -> Option<Self> {
        let mut parts = header.trim().split('-');
        let (version, trace, span, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if version != "00" || flags.len() != 2 || parts.next().is_some() {
            return None;
        }
        let trace_id: [u8; 16] = hex::decode(trace).ok()?.try_into().ok()?;
        let span_id: [u8; 8] = hex::decode(span).ok()?.try_into().ok()?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(TraceContext { trace_id, span_id })
    }

    /// The trace id in hex, as recorded on tasks and audit rows.
    pub fn trace_id(&self) -> String {
        hex::encode(self.trace_id)
    }
}

impl fmt::Display for TraceContext {
    /// The `traceparent` header value.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "00-{}-{}-01",
            hex::encode(self.trace_id),
            hex::encode(self.span_id)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_and_children_keep_the_trace() {
        let root = TraceContext::root();
        let parsed = TraceContext::parse(&root.to_string()).unwrap();
        assert_eq!(parsed, root);
        let child = root.child();
        assert_eq!(child.trace_id(), root.trace_id());
        assert_ne!(child.to_string(), root.to_string());
        assert_eq!(
            TraceContext::in_trace(&root.trace_id()).unwrap().trace_id(),
            root.trace_id()
        );
    }

    #[test]
    fn malformed_headers_are_ignored() {
        for bad in [
            "",
            "00-abc-def-01",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        ] {
            assert!(TraceContext::parse(bad).is_none(), "{bad}");
        }
        let ok = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(
            TraceContext::parse(ok).unwrap().trace_id(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
    }
}
