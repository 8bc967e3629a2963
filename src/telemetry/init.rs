//! Installing the subscriber: the log layer, the OpenTelemetry layer and
//! its exporter, each with its filter.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use super::TelemetryError;
use super::settings::{Protocol, Resolved, Sampling, TelemetrySettings};

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Text for people.
    Human,
    /// One JSON object per line.
    Json,
}

/// The installed telemetry; [`Telemetry::shutdown`] sends the spans still
/// waiting in the batch.
#[must_use = "call shutdown() before exiting, or the last spans are lost"]
pub struct Telemetry {
    provider: SdkTracerProvider,
    exporting: Option<String>,
}

impl Telemetry {
    /// Where spans go, if anywhere.
    pub fn exporting_to(&self) -> Option<&str> {
        self.exporting.as_deref()
    }

    /// Flushes the spans not yet sent and stops the exporter.
    pub fn shutdown(self) {
        if self.exporting.is_some() {
            if let Err(e) = self.provider.force_flush() {
                eprintln!("warning: the last spans could not be sent: {e}");
            }
            let _ = self.provider.shutdown();
        }
    }
}

/// Installs logging and tracing for `service` (`orchestrator` or
/// `agent-<id>`). `default_level` is the log level when `RUST_LOG` is
/// unset. `settings`: `None` for a command that exports nothing (a
/// client). An endpoint or sampler that cannot be used is an error; no
/// endpoint at all is not.
pub fn init(
    service: &str,
    format: LogFormat,
    default_level: &str,
    settings: Option<&TelemetrySettings>,
) -> Result<Telemetry, TelemetryError> {
    let resolved = match settings {
        Some(settings) => settings.resolve(|k| std::env::var(k).ok())?,
        None => TelemetrySettings::default().resolve(|_| None)?,
    };
    let (provider, exporting) = provider(service, &resolved)?;
    let log_filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    let trace_filter =
        EnvFilter::try_new(&resolved.trace_filter).map_err(|e| TelemetryError::Filter {
            filter: resolved.trace_filter.clone(),
            why: e.to_string(),
        })?;
    let logs = match format {
        // Colours only for a terminal: a log file gets plain text.
        LogFormat::Human => tracing_subscriber::fmt::layer()
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_writer(std::io::stderr)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .with_writer(std::io::stderr)
            .boxed(),
    };
    let spans = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("orchestrator"))
        .with_filter(trace_filter);
    // A second init (a test calling twice) keeps the first subscriber.
    let _ = tracing_subscriber::registry()
        .with(logs.with_filter(log_filter))
        .with(spans)
        .try_init();
    Ok(Telemetry {
        provider,
        exporting,
    })
}

fn sampler(sampling: Sampling) -> Sampler {
    match sampling {
        Sampling::ParentBasedRatio(r) => {
            Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(r)))
        }
        Sampling::AlwaysOn => Sampler::AlwaysOn,
        Sampling::AlwaysOff => Sampler::AlwaysOff,
        Sampling::Ratio(r) => Sampler::TraceIdRatioBased(r),
    }
}

fn provider(
    service: &str,
    resolved: &Resolved,
) -> Result<(SdkTracerProvider, Option<String>), TelemetryError> {
    let builder = SdkTracerProvider::builder()
        .with_sampler(sampler(resolved.sampling))
        .with_resource(
            Resource::builder()
                .with_service_name(service.to_string())
                .build(),
        );
    let Some(export) = &resolved.export else {
        return Ok((builder.build(), None));
    };
    let exporter = match export.protocol {
        Protocol::HttpProtobuf => opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(export.endpoint.clone())
            .build(),
        Protocol::Grpc => opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(export.endpoint.clone())
            .build(),
    }
    .map_err(|e| TelemetryError::Exporter {
        endpoint: export.endpoint.clone(),
        source: e.into(),
    })?;
    let described = format!(
        "{} ({})",
        export.endpoint,
        match export.protocol {
            Protocol::HttpProtobuf => "http/protobuf",
            Protocol::Grpc => "grpc",
        }
    );
    Ok((
        builder.with_batch_exporter(exporter).build(),
        Some(described),
    ))
}
