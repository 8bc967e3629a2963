//! The bus settings (`bus` in the settings file): layout, delivery,
//! replication, retries and how to log in.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::NatsAuth;
use crate::envelope::AgentName;

/// How the bus is laid out and how deliveries behave.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BusSettings {
    /// Prefix of every subject, stream and bucket (`orch` → `ORCH_TASKS`).
    pub prefix: String,
    /// How long a worker may hold a delivery without acking or sending
    /// progress before JetStream redelivers it.
    #[serde(with = "humantime_serde")]
    pub ack_wait: Duration,
    /// Deliveries of one message before it is dead-lettered.
    pub max_deliver: i64,
    /// Redelivery delays after missed acks; empty = `ack_wait` each time.
    #[serde(with = "durations")]
    pub backoff: Vec<Duration>,
    /// Window in which a republished envelope (same `Nats-Msg-Id`) is dropped.
    #[serde(with = "humantime_serde")]
    pub duplicate_window: Duration,
    /// How long worker events are kept.
    #[serde(with = "humantime_serde")]
    pub events_max_age: Duration,
    /// How long a live-registry entry lives without a heartbeat.
    #[serde(with = "humantime_serde")]
    pub registry_ttl: Duration,
    /// How long a cancel mark is kept in the claim bucket: a canceled task's
    /// message may wait in the queue this long and still be refused.
    #[serde(with = "humantime_serde")]
    pub deliveries_ttl: Duration,
    /// Ack wait of the orchestrator's own consumers (events, advisories):
    /// what a crashed orchestrator had taken comes back after this long.
    #[serde(with = "humantime_serde")]
    pub consumer_ack_wait: Duration,
    /// Deliveries of one worker event before it is a poison event, copied to
    /// the DLQ and skipped.
    pub events_max_deliver: i64,
    /// Worker events the orchestrator has taken but not yet acked, at most.
    pub events_max_ack_pending: i64,
    /// Delay before a message is tried again after a dependency failed;
    /// repeated failures back off from it, with jitter, up to
    /// `retry_max_delay`.
    #[serde(with = "humantime_serde")]
    pub retry_delay: Duration,
    /// The longest delay between tries of something that keeps failing.
    #[serde(with = "humantime_serde")]
    pub retry_max_delay: Duration,
    /// Copies JetStream keeps of every stream and bucket the orchestrator
    /// provisions (1: one server; 3 on a cluster). Consumers follow their
    /// stream.
    pub replicas: usize,
    /// How long a process waits at start for any of its NATS servers to
    /// answer.
    #[serde(with = "humantime_serde")]
    pub connect_wait: Duration,
    /// How to log in to NATS and secure the connection.
    pub auth: NatsAuth,
    /// The prefix of this client's reply subjects (`None`: `_INBOX`). A
    /// worker uses [`agent_inbox_prefix`], the only replies a
    /// least-privilege bus lets it receive.
    #[serde(skip)]
    pub inbox_prefix: Option<String>,
}

/// The reply-subject prefix of agent `agent`'s workers:
/// `_INBOX.agents.<agent>`.
pub fn agent_inbox_prefix(agent: &AgentName) -> String {
    format!("_INBOX.agents.{agent}")
}

impl Default for BusSettings {
    fn default() -> Self {
        BusSettings {
            prefix: "orch".into(),
            ack_wait: Duration::from_secs(30),
            max_deliver: 5,
            backoff: Vec::new(),
            duplicate_window: Duration::from_secs(120),
            events_max_age: Duration::from_secs(7 * 24 * 3600),
            registry_ttl: Duration::from_secs(15),
            deliveries_ttl: Duration::from_secs(7 * 24 * 3600),
            consumer_ack_wait: Duration::from_secs(5),
            events_max_deliver: 10,
            events_max_ack_pending: 4096,
            retry_delay: Duration::from_secs(1),
            retry_max_delay: Duration::from_secs(5),
            replicas: 1,
            connect_wait: Duration::from_secs(60),
            auth: NatsAuth::default(),
            inbox_prefix: None,
        }
    }
}

/// Delivery settings of one agent's consumers.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliverySettings {
    /// See [`BusSettings::ack_wait`].
    pub ack_wait: Duration,
    /// See [`BusSettings::max_deliver`].
    pub max_deliver: i64,
    /// See [`BusSettings::backoff`].
    pub backoff: Vec<Duration>,
}

impl From<&BusSettings> for DeliverySettings {
    fn from(c: &BusSettings) -> Self {
        DeliverySettings {
            ack_wait: c.ack_wait,
            max_deliver: c.max_deliver,
            backoff: c.backoff.clone(),
        }
    }
}

/// `serde(with)` for a list of human-readable durations (`["1s", "5s"]`).
mod durations {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[Duration], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(|d| humantime::format_duration(*d).to_string()))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Duration>, D::Error> {
        Vec::<String>::deserialize(d)?
            .iter()
            .map(|s| humantime::parse_duration(s).map_err(serde::de::Error::custom))
            .collect()
    }
}

impl BusSettings {
    /// The waits between tries of something that keeps failing: from
    /// `retry_delay`, doubling, up to `retry_max_delay`, with jitter.
    pub fn backoff(&self) -> crate::backoff::Backoff {
        crate::backoff::Backoff::new(self.retry_delay, self.retry_max_delay)
    }

    /// Checks what the types alone cannot: a replica count JetStream
    /// takes, retry delays that make sense, one way to log in.
    pub fn check(&self) -> Result<(), crate::codec::DecodeError> {
        use crate::codec::DecodeError;
        if !(1..=5).contains(&self.replicas) {
            return Err(DecodeError::invalid(
                "bus.replicas",
                "must be 1 to 5 (JetStream keeps at most 5 copies; 3 on a three-node cluster)",
            ));
        }
        if self.retry_delay.is_zero() {
            return Err(DecodeError::invalid("bus.retry_delay", "must be positive"));
        }
        if self.retry_max_delay < self.retry_delay {
            return Err(DecodeError::invalid(
                "bus.retry_max_delay",
                "must be at least bus.retry_delay",
            ));
        }
        self.auth.check()
    }
}
