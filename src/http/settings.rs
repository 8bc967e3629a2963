//! The HTTP face's settings: the API's bounds (the `http_*` members of
//! the settings file) and the A2A face's (`a2a`). The service knows
//! nothing of them: `server::Settings` reads this part of the file beside
//! the service's and gives each its own.

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::codec::DecodeError;

/// The HTTP face's part of the settings file: its members are named
/// `http_*` there (`http_addr`, `http_max_in_flight`, …), beside `a2a`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HttpSettings {
    /// The HTTP API's address.
    #[serde(rename = "http_addr")]
    pub addr: SocketAddr,
    /// HTTP requests served at once; more are answered 503 at once.
    /// Health checks and metrics are outside this limit.
    #[serde(rename = "http_max_in_flight")]
    pub max_in_flight: usize,
    /// HTTP requests of one principal served at once; more are answered
    /// 429 at once, so no caller can take every slot.
    #[serde(rename = "http_max_in_flight_per_principal")]
    pub max_in_flight_per_principal: usize,
    /// How long one HTTP request may take before it is answered 408.
    #[serde(with = "humantime_serde")]
    #[serde(rename = "http_request_timeout")]
    pub request_timeout: Duration,
    /// How long a request's body may take to arrive (408 after).
    #[serde(with = "humantime_serde")]
    #[serde(rename = "http_body_timeout")]
    pub body_timeout: Duration,
    /// How long a request's headers may take to arrive; an idle
    /// keep-alive connection is closed after it too.
    #[serde(with = "humantime_serde")]
    #[serde(rename = "http_header_timeout")]
    pub header_timeout: Duration,
    /// HTTP connections open at once for the API. Past it, up to
    /// `http_probe_connections` more are served the probes only
    /// (`/healthz`, `/readyz`, `/metrics`; anything else 503), and any
    /// more are answered 503 and closed. Lowered at start to fit the
    /// open-file limit.
    #[serde(rename = "http_max_connections")]
    pub max_connections: usize,
    /// Connections kept for the probes beyond `http_max_connections`, so
    /// they answer however full the API is.
    #[serde(rename = "http_probe_connections")]
    pub probe_connections: usize,
    /// HTTP connections open at once from one address (IPv4, or IPv6);
    /// one more is answered 503 and closed, so no single peer (a slowloris
    /// above all) holds the rest.
    #[serde(rename = "http_max_connections_per_peer")]
    pub max_connections_per_peer: usize,
    /// The header deadline of a new connection while more than half of
    /// `http_max_connections` are open (`http_header_timeout` when lower),
    /// so dribbling connections are cut sooner under pressure.
    #[serde(with = "humantime_serde")]
    #[serde(rename = "http_header_timeout_under_pressure")]
    pub header_timeout_under_pressure: Duration,
    /// Streams (the console's `GET /v1/changes`, A2A subscriptions and
    /// streamed sends) one principal holds open at once; one more is
    /// refused (429), so one key cannot take every connection with idle
    /// streams.
    #[serde(rename = "http_max_streams_per_principal")]
    pub max_streams_per_principal: usize,
    /// The A2A face (docs/a2a.md).
    pub a2a: A2aSettings,
}

impl Default for HttpSettings {
    fn default() -> Self {
        HttpSettings {
            addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
            max_in_flight: 512,
            max_in_flight_per_principal: 128,
            request_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(10),
            header_timeout: Duration::from_secs(10),
            max_connections: 1024,
            probe_connections: 16,
            max_connections_per_peer: 512,
            header_timeout_under_pressure: Duration::from_secs(2),
            max_streams_per_principal: 32,
            a2a: A2aSettings::default(),
        }
    }
}

impl HttpSettings {
    /// The longest a request may wait for something to happen (a long
    /// poll, a blocking A2A call): the request timeout less a second, to
    /// answer before the timeout does.
    pub fn longest_wait(&self) -> Duration {
        self.request_timeout.saturating_sub(Duration::from_secs(1))
    }
}

impl crate::codec::Validate for HttpSettings {
    fn validate(&self) -> Result<(), DecodeError> {
        let positive = [
            ("http_max_in_flight", self.max_in_flight),
            (
                "http_max_in_flight_per_principal",
                self.max_in_flight_per_principal,
            ),
            ("http_max_connections", self.max_connections),
            ("http_probe_connections", self.probe_connections),
            (
                "http_max_connections_per_peer",
                self.max_connections_per_peer,
            ),
            (
                "http_max_streams_per_principal",
                self.max_streams_per_principal,
            ),
            ("a2a.max_streams", self.a2a.max_streams),
        ];
        if let Some((field, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(DecodeError::invalid(*field, "must be positive"));
        }
        let timeouts = [
            ("http_request_timeout", self.request_timeout),
            ("http_body_timeout", self.body_timeout),
            ("http_header_timeout", self.header_timeout),
            (
                "http_header_timeout_under_pressure",
                self.header_timeout_under_pressure,
            ),
            ("a2a.keepalive", self.a2a.keepalive),
        ];
        if let Some((field, _)) = timeouts.iter().find(|(_, t)| t.is_zero()) {
            return Err(DecodeError::invalid(*field, "must be positive"));
        }
        Ok(())
    }
}

/// The A2A face's settings (`a2a` in the file; every field optional).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct A2aSettings {
    /// The URL clients reach the orchestrator at, as the agent card names
    /// it (`https://agents.example.com`); default: `http://` and the
    /// request's `Host`.
    pub public_url: Option<String>,
    /// The name the agent card gives.
    pub name: String,
    /// The skill a message goes to when neither its metadata nor the
    /// router picks one (`agent/skill`); default: none (such a message
    /// is refused, naming what was tried).
    pub default_skill: Option<String>,
    /// How often an idle stream sends a keep-alive comment.
    #[serde(with = "humantime_serde")]
    pub keepalive: Duration,
    /// Streams open at once, over every caller; more are refused (503).
    pub max_streams: usize,
    /// What a message's id is to the orchestrator (default `keys`).
    pub message_ids: MessageIds,
    /// Whether the agent card also has 0.3's top-level `url`,
    /// `protocolVersion`, `preferredTransport` and `additionalInterfaces`,
    /// so 0.3 clients find the endpoint (default true; a 1.0 reader
    /// ignores them, but a strict 1.0 schema, such as the TCK's, refuses
    /// them).
    pub card_v0_3_fields: bool,
}

/// What a message's id is to the orchestrator, when no `Idempotency-Key`
/// header is given (`docs/a2a.md`, "Idempotent sends").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageIds {
    /// An idempotency key of its sender: the same message again is the
    /// same task; the same id with other content is refused (-32100).
    #[default]
    Keys,
    /// Not a key: every message is a new task (an `Idempotency-Key`
    /// header still makes a send idempotent). For clients that reuse ids
    /// for different requests (the A2A TCK does).
    Ignored,
}

impl Default for A2aSettings {
    fn default() -> Self {
        A2aSettings {
            public_url: None,
            name: "orchestrator".into(),
            default_skill: None,
            keepalive: Duration::from_secs(15),
            max_streams: 10_000,
            message_ids: MessageIds::Keys,
            card_v0_3_fields: true,
        }
    }
}
