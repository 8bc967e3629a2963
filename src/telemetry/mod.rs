//! Observability: traces exported over OTLP, trace context carried across
//! NATS, Prometheus metrics and structured logs (DESIGN section 11,
//! `docs/observability.md`).
//!
//! [`init`] installs one subscriber with two layers, each with its own
//! filter: the log lines (`RUST_LOG`, human or JSON) and the spans sent to
//! OpenTelemetry (`ORCH_TRACE_FILTER`). The OpenTelemetry layer is always
//! there, exporter or not, so trace context is always carried on: a
//! process that exports nothing still keeps the trace whole for those that
//! do.

pub mod context;
mod error;
mod init;
pub mod metrics;
pub mod quiet;
pub mod readiness;
pub mod recent;
pub mod settings;
pub mod spans;

pub use error::TelemetryError;
pub use init::{LogFormat, Telemetry, init};
pub use settings::TelemetrySettings;
