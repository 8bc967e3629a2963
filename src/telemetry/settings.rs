//! What to export and where: the `telemetry` section of the settings file,
//! with the standard `OTEL_*` variables over it.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::TelemetryError;

/// The Jaeger UI a task's trace link points at when none is configured.
pub const DEFAULT_JAEGER_UI: &str = "http://localhost:16686";

/// The `telemetry` section (every field optional). Without an OTLP
/// endpoint nothing is exported and nothing complains; trace context is
/// still carried on every message, so the processes that do export stay in
/// one trace.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetrySettings {
    /// Where spans go: the collector's base URL (`http://jaeger:4318` for
    /// OTLP over HTTP, `http://jaeger:4317` for gRPC). For HTTP, `/v1/traces`
    /// is appended unless the URL already ends with it.
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as is) and
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` override it.
    pub otlp_endpoint: Option<String>,
    /// `http/protobuf` (the default) or `grpc`.
    /// `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` and `OTEL_EXPORTER_OTLP_PROTOCOL`
    /// override it.
    pub otlp_protocol: Option<String>,
    /// The share of new traces recorded, 0 to 1 (default 1); a trace that
    /// arrives with a parent follows the parent's decision.
    /// `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG` override it.
    pub sample_ratio: Option<f64>,
    /// Which spans are exported, as a `RUST_LOG`-style filter (default
    /// `info`), apart from the log filter so a quiet log never silences
    /// traces. `ORCH_TRACE_FILTER` overrides it.
    pub trace_filter: Option<String>,
    /// The Jaeger UI that trace links point at (default
    /// `http://localhost:16686`); `orchestrator trace` queries it.
    /// `ORCH_JAEGER_URL` overrides it.
    pub jaeger_url: Option<String>,
    /// A worker's `/metrics` address; none: the worker serves no metrics.
    /// (The orchestrator serves `/metrics` on its API address.)
    /// `--metrics-addr` / `ORCH_METRICS_ADDR` override it.
    pub metrics_addr: Option<SocketAddr>,
}

/// How spans travel to the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP over HTTP with protobuf bodies.
    HttpProtobuf,
    /// OTLP over gRPC.
    Grpc,
}

/// Which new traces are recorded.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sampling {
    /// Follow the parent's decision; a new trace is recorded with this
    /// probability.
    ParentBasedRatio(f64),
    /// Every trace, whatever its parent says.
    AlwaysOn,
    /// No trace.
    AlwaysOff,
    /// A new trace with this probability, whatever the parent says.
    Ratio(f64),
}

/// The export the settings and the environment ask for.
#[derive(Debug, Clone, PartialEq)]
pub struct Export {
    /// The traces endpoint, as the exporter is given it.
    pub endpoint: String,
    /// How.
    pub protocol: Protocol,
}

/// The settings resolved against the environment.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    /// `None`: nothing is exported.
    pub export: Option<Export>,
    /// Which traces are recorded.
    pub sampling: Sampling,
    /// The filter of exported spans.
    pub trace_filter: String,
}

impl TelemetrySettings {
    /// The settings with `env`'s standard variables over them; a value
    /// that cannot be used is an error naming the variable or field.
    pub fn resolve(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Resolved, TelemetryError> {
        let env = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        let protocol = match env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .map(|v| ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", v))
            .or_else(|| {
                env("OTEL_EXPORTER_OTLP_PROTOCOL").map(|v| ("OTEL_EXPORTER_OTLP_PROTOCOL", v))
            })
            .or_else(|| {
                self.otlp_protocol
                    .clone()
                    .map(|v| ("telemetry.otlp_protocol", v))
            }) {
            None => Protocol::HttpProtobuf,
            Some((source, value)) => match value.trim() {
                "http/protobuf" => Protocol::HttpProtobuf,
                "grpc" => Protocol::Grpc,
                other => {
                    return Err(TelemetryError::Value {
                        name: source.into(),
                        value: other.into(),
                        expected: "is not a supported OTLP protocol (expected `http/protobuf` or `grpc`)",
                    });
                }
            },
        };
        let disabled =
            env("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
        let endpoint = if let Some(exact) = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
            Some(exact)
        } else {
            env("OTEL_EXPORTER_OTLP_ENDPOINT")
                .or_else(|| self.otlp_endpoint.clone())
                .map(|base| match protocol {
                    Protocol::Grpc => base,
                    Protocol::HttpProtobuf
                        if base.trim_end_matches('/').ends_with("/v1/traces") =>
                    {
                        base
                    }
                    Protocol::HttpProtobuf => format!("{}/v1/traces", base.trim_end_matches('/')),
                })
        };
        if let Some(url) = &endpoint
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(TelemetryError::Endpoint(url.clone()));
        }
        Ok(Resolved {
            export: endpoint
                .filter(|_| !disabled)
                .map(|endpoint| Export { endpoint, protocol }),
            sampling: self.sampling(&env)?,
            trace_filter: env("ORCH_TRACE_FILTER")
                .or_else(|| self.trace_filter.clone())
                .unwrap_or_else(|| "info".into()),
        })
    }

    fn sampling(&self, env: &impl Fn(&str) -> Option<String>) -> Result<Sampling, TelemetryError> {
        let ratio = |source: &str, value: Option<String>| -> Result<f64, TelemetryError> {
            let Some(value) = value else { return Ok(1.0) };
            match value.trim().parse::<f64>() {
                Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
                _ => Err(TelemetryError::Value {
                    name: source.into(),
                    value,
                    expected: "is not a ratio from 0 to 1",
                }),
            }
        };
        let Some(sampler) = env("OTEL_TRACES_SAMPLER") else {
            if let Some(arg) = env("OTEL_TRACES_SAMPLER_ARG") {
                return Ok(Sampling::ParentBasedRatio(ratio(
                    "OTEL_TRACES_SAMPLER_ARG",
                    Some(arg),
                )?));
            }
            return Ok(Sampling::ParentBasedRatio(ratio(
                "telemetry.sample_ratio",
                self.sample_ratio.map(|r| r.to_string()),
            )?));
        };
        let arg = || ratio("OTEL_TRACES_SAMPLER_ARG", env("OTEL_TRACES_SAMPLER_ARG"));
        Ok(match sampler.trim() {
            "parentbased_traceidratio" => Sampling::ParentBasedRatio(arg()?),
            "parentbased_always_on" => Sampling::ParentBasedRatio(1.0),
            "parentbased_always_off" => Sampling::ParentBasedRatio(0.0),
            "traceidratio" => Sampling::Ratio(arg()?),
            "always_on" => Sampling::AlwaysOn,
            "always_off" => Sampling::AlwaysOff,
            other => {
                return Err(TelemetryError::Value {
                    name: "OTEL_TRACES_SAMPLER".into(),
                    value: other.into(),
                    expected: "is not supported (expected parentbased_traceidratio, \
                               parentbased_always_on, parentbased_always_off, traceidratio, \
                               always_on or always_off)",
                });
            }
        })
    }

    /// The Jaeger UI's base URL, without a trailing slash.
    pub fn jaeger_url(&self, env: impl Fn(&str) -> Option<String>) -> String {
        env("ORCH_JAEGER_URL")
            .or_else(|| self.jaeger_url.clone())
            .unwrap_or_else(|| DEFAULT_JAEGER_UI.into())
            .trim_end_matches('/')
            .to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn resolve(
        settings: &TelemetrySettings,
        vars: &[(&str, &str)],
    ) -> Result<Resolved, TelemetryError> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        settings.resolve(|k| vars.get(k).cloned())
    }

    #[test]
    fn nothing_configured_exports_nothing() {
        let r = resolve(&TelemetrySettings::default(), &[]).unwrap();
        assert_eq!(r.export, None);
        assert_eq!(r.sampling, Sampling::ParentBasedRatio(1.0));
        assert_eq!(r.trace_filter, "info");
    }

    #[test]
    fn the_environment_overrides_the_file_and_http_gets_its_path() {
        let file = TelemetrySettings {
            otlp_endpoint: Some("http://file:4318".into()),
            sample_ratio: Some(0.25),
            ..Default::default()
        };
        let r = resolve(&file, &[]).unwrap();
        assert_eq!(r.export.unwrap().endpoint, "http://file:4318/v1/traces");
        assert_eq!(r.sampling, Sampling::ParentBasedRatio(0.25));
        let r = resolve(
            &file,
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4317"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ("OTEL_TRACES_SAMPLER_ARG", "0.01"),
            ],
        )
        .unwrap();
        assert_eq!(
            r.export.unwrap(),
            Export {
                endpoint: "http://env:4317".into(),
                protocol: Protocol::Grpc
            }
        );
        assert_eq!(r.sampling, Sampling::ParentBasedRatio(0.01));
        let r = resolve(
            &file,
            &[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://exact/x")],
        )
        .unwrap();
        assert_eq!(r.export.unwrap().endpoint, "http://exact/x");
        let r = resolve(&file, &[("OTEL_SDK_DISABLED", "true")]).unwrap();
        assert_eq!(r.export, None);
    }

    #[test]
    fn bad_values_name_their_source() {
        let bad = [
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ("OTEL_TRACES_SAMPLER", "jaeger_remote"),
            ("OTEL_TRACES_SAMPLER_ARG", "2"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "jaeger:4318"),
        ];
        for (var, value) in bad {
            let e = resolve(&TelemetrySettings::default(), &[(var, value)]).unwrap_err();
            match e {
                TelemetryError::Value { name, value: v, .. } => {
                    assert_eq!((name.as_str(), v.as_str()), (var, value));
                }
                TelemetryError::Endpoint(url) => assert!(url.starts_with(value), "{url}"),
                other => panic!("{var}: {other:?}"),
            }
        }
        let file = TelemetrySettings {
            sample_ratio: Some(-1.0),
            ..Default::default()
        };
        assert!(matches!(
            resolve(&file, &[]).unwrap_err(),
            TelemetryError::Value { name, .. } if name == "telemetry.sample_ratio"
        ));
    }
}
