//! Why telemetry cannot start as configured.

/// Why logging and tracing cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// A setting or variable (`name`) holds a value that cannot be used.
    #[error("{name}: `{value}` {expected}")]
    Value {
        /// The variable (`OTEL_TRACES_SAMPLER`) or field
        /// (`telemetry.sample_ratio`).
        name: String,
        /// Its value.
        value: String,
        /// What it should have been.
        expected: &'static str,
    },
    /// The OTLP endpoint is not an HTTP(S) URL.
    #[error("OTLP endpoint `{0}`: expected an http:// or https:// URL")]
    Endpoint(String),
    /// The filter of exported spans does not parse.
    #[error("trace filter `{filter}`: {why}")]
    Filter {
        /// The filter.
        filter: String,
        /// What the parser said.
        why: String,
    },
    /// The exporter could not be built.
    #[error("OTLP exporter for {endpoint}: {source}")]
    Exporter {
        /// Where it would export to.
        endpoint: String,
        /// Why not.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}
