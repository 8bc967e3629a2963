//! An OTLP receiver inside the test: decodes real OTLP protobuf, over HTTP
//! (`POST /v1/traces`) and over gRPC (`TraceService/Export`), and keeps
//! every span with the service that sent it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

/// A span as received.
#[derive(Debug, Clone)]
pub struct Got {
    /// `service.name` of the resource that sent it.
    pub service: String,
    /// `http` or `grpc`.
    pub via: &'static str,
    /// The span.
    pub span: Span,
}

fn value(v: &AnyValue) -> String {
    match &v.value {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

fn find(attrs: &[KeyValue], key: &str) -> Option<String> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .map(value)
}

impl Got {
    pub fn name(&self) -> &str {
        &self.span.name
    }
    pub fn trace_id(&self) -> String {
        hex::encode(&self.span.trace_id)
    }
    pub fn span_id(&self) -> String {
        hex::encode(&self.span.span_id)
    }
    pub fn parent(&self) -> String {
        hex::encode(&self.span.parent_span_id)
    }
    /// An attribute's value as text.
    pub fn attr(&self, key: &str) -> Option<String> {
        find(&self.span.attributes, key)
    }
    /// The spans it links to, as (trace id, span id) in hex.
    pub fn links(&self) -> Vec<(String, String)> {
        self.span
            .links
            .iter()
            .map(|l| (hex::encode(&l.trace_id), hex::encode(&l.span_id)))
            .collect()
    }
    /// `SPAN_KIND_…` as a number (2 server, 4 producer, 5 consumer, 1 internal).
    pub fn kind(&self) -> i32 {
        self.span.kind
    }
    /// Everything the span carries, as text: name, attributes, events and
    /// their attributes, status message.
    pub fn all_text(&self) -> String {
        format!("{:?}", self.span)
    }
}

/// The spans received so far.
#[derive(Clone, Default)]
pub struct Spans(Arc<Mutex<Vec<Got>>>);

impl Spans {
    fn add(&self, request: ExportTraceServiceRequest, via: &'static str) {
        let mut all = self.0.lock().unwrap();
        for resource in request.resource_spans {
            let service = resource
                .resource
                .as_ref()
                .and_then(|r| find(&r.attributes, "service.name"))
                .unwrap_or_default();
            for scope in resource.scope_spans {
                for span in scope.spans {
                    all.push(Got {
                        service: service.clone(),
                        via,
                        span,
                    });
                }
            }
        }
    }

    /// Every span received.
    pub fn all(&self) -> Vec<Got> {
        self.0.lock().unwrap().clone()
    }

    /// Waits until `done` holds for the spans received, and returns them.
    pub async fn wait_for(&self, what: &str, done: impl Fn(&[Got]) -> bool) -> Vec<Got> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let all = self.all();
            if done(&all) {
                return all;
            }
            assert!(
                Instant::now() < deadline,
                "never received {what}; got:\n{}",
                all.iter()
                    .map(|g| format!(
                        "{} {} {} parent {} ({})",
                        g.service,
                        g.name(),
                        g.span_id(),
                        g.parent(),
                        g.via
                    ))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

#[derive(Clone)]
struct Grpc(Spans);

#[tonic::async_trait]
impl TraceService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.0.add(request.into_inner(), "grpc");
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

/// A receiver on two ports of 127.0.0.1.
pub struct Receiver {
    /// What arrived, by either protocol.
    pub spans: Spans,
    /// The OTLP/HTTP base URL (`/v1/traces` is the path).
    pub http_url: String,
    /// The OTLP/gRPC URL.
    pub grpc_url: String,
}

impl Receiver {
    pub async fn start() -> Receiver {
        let spans = Spans::default();
        let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let http_url = format!("http://{}", http.local_addr().unwrap());
        let for_http = spans.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: axum::body::Bytes| {
                let spans = for_http.clone();
                async move {
                    match ExportTraceServiceRequest::decode(body) {
                        Ok(request) => {
                            spans.add(request, "http");
                            (
                                axum::http::StatusCode::OK,
                                ExportTraceServiceResponse {
                                    partial_success: None,
                                }
                                .encode_to_vec(),
                            )
                        }
                        Err(e) => (
                            axum::http::StatusCode::BAD_REQUEST,
                            e.to_string().into_bytes(),
                        ),
                    }
                }
            }),
        );
        tokio::spawn(async move { axum::serve(http, app).await });
        let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let grpc_url = format!("http://{}", grpc.local_addr().unwrap());
        let service = TraceServiceServer::new(Grpc(spans.clone()));
        tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(grpc))
                .await
        });
        Receiver {
            spans,
            http_url,
            grpc_url,
        }
    }
}
