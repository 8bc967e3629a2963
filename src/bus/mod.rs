//! The NATS JetStream bus: connection, idempotent provisioning of streams,
//! consumers and buckets, and publishing envelopes and events.
//!
//! Layout (DESIGN section 3), for the default prefix `orch`:
//! `ORCH_TASKS` (work queue, `orch.tasks.<agent>.<priority>`), `ORCH_EVENTS`
//! (limits, `orch.events.<agent>.<task_id>`), `ORCH_DLQ` (`orch.dlq.<agent>`),
//! KV buckets `ORCH_AGENTS` (live registry) and `ORCH_DELIVERIES` (shared
//! delivery claims), and per agent and priority the durable pull consumers
//! `agent_<agent>_<priority>`.

mod connect;
mod credentials;
mod depth;
mod dlq;
mod health;
mod names;
pub mod permissions;
mod provision;
mod settings;
pub use provision::refused_placement;
mod pull;
mod servers;
mod settle;
mod trigger_events;

pub use credentials::{CredentialsError, NatsAuth};
pub use depth::QueueDepth;
pub use dlq::{
    DLQ_CODE_HEADER, DLQ_REASON_HEADER, DLQ_SEQ_HEADER, DLQ_SUBJECT_HEADER, DeadLetterCopy,
    Original,
};
pub use health::{Flow, PROBE_TIMEOUT, Unserved};
pub use names::Names;
pub use pull::{PullSettings, Puller};
pub use servers::Servers;
pub use settings::{BusSettings, DeliverySettings, agent_inbox_prefix};
pub use settle::{Settlement, settle, settle_confirmed};

use std::sync::Arc;
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, consumer, kv, stream};
use tracing::Instrument;

use crate::envelope::{AgentName, Envelope, Priority};
use crate::event::WorkerEvent;

/// Header carrying the task id on every message.
pub const TASK_ID_HEADER: &str = "Orch-Task-Id";
/// Header carrying the correlation id on every message.
pub const CORRELATION_ID_HEADER: &str = "Orch-Correlation-Id";
/// Header on an envelope published again by recovery after a restart: the
/// broker may hold an earlier copy, so a worker checks the attempt's result
/// record before running it.
pub const REPUBLISHED_HEADER: &str = "Orch-Republished";

/// What a bus operation's failure came from: async-nats' own error, whose
/// kind a caller reads by downcasting it (`source()` gives it), or the
/// bus's own words where no library error is behind it.
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A bus operation's failure.
#[derive(Debug, thiserror::Error)]
pub enum BusError {
    /// The server could not be reached.
    #[error("cannot connect to NATS at {url}: {source}")]
    Connect {
        /// The URL tried.
        url: String,
        /// Why.
        #[source]
        source: Cause,
    },
    /// A stream, consumer or bucket could not be created or checked.
    #[error("cannot provision {what}: {source}")]
    Provision {
        /// What was being provisioned.
        what: String,
        /// Why.
        #[source]
        source: Cause,
    },
    /// JetStream could not place the copies `bus.replicas` asks for.
    #[error(
        "cannot provision {what}: {source} (bus.replicas is {replicas}: the cluster needs at least {replicas} JetStream servers up to place that many copies)"
    )]
    Replicas {
        /// What was being provisioned.
        what: String,
        /// `bus.replicas`.
        replicas: usize,
        /// JetStream's refusal.
        #[source]
        source: Cause,
    },
    /// A publish was not acknowledged by JetStream.
    #[error("publish to {subject} failed: {source}")]
    Publish {
        /// The subject.
        subject: String,
        /// Why.
        #[source]
        source: Cause,
    },
    /// The message is larger than the broker carries (its `max_payload`):
    /// sending it again will not help.
    #[error(
        "a message of {size} bytes (and its headers) to {subject} exceeds the broker's max_payload of {max} bytes"
    )]
    TooLarge {
        /// The subject.
        subject: String,
        /// The message's size (payload and headers), in bytes.
        size: usize,
        /// The broker's limit.
        max: usize,
    },
    /// Reading a stream failed.
    #[error("cannot read {what}: {source}")]
    Read {
        /// What was being read.
        what: String,
        /// Why.
        #[source]
        source: Cause,
    },
}

fn provision_error<E: Into<Cause>>(what: impl Into<String>) -> impl FnOnce(E) -> BusError {
    let what = what.into();
    move |e| BusError::Provision {
        what,
        source: e.into(),
    }
}

/// A cheap, cloneable handle to the bus.
#[derive(Clone)]
pub struct Bus {
    /// Shared by every clone.
    inner: Arc<Inner>,
}

struct Inner {
    /// The core NATS client.
    client: async_nats::Client,
    /// The JetStream context over it.
    js: jetstream::Context,
    /// Every name on the bus.
    names: Names,
    /// Layout and delivery settings.
    config: BusSettings,
    /// The live registry bucket, looked up once.
    agents: tokio::sync::OnceCell<kv::Store>,
    /// The delivery-claim bucket, looked up once.
    deliveries: tokio::sync::OnceCell<kv::Store>,
}

impl Bus {
    fn from_client(client: async_nats::Client, config: BusSettings) -> Bus {
        let js = jetstream::new(client.clone());
        Bus {
            inner: Arc::new(Inner {
                names: Names::new(&config.prefix),
                client,
                js,
                config,
                agents: tokio::sync::OnceCell::new(),
                deliveries: tokio::sync::OnceCell::new(),
            }),
        }
    }

    /// The names in use.
    pub fn names(&self) -> &Names {
        &self.inner.names
    }

    /// The bus settings.
    pub fn settings(&self) -> &BusSettings {
        &self.inner.config
    }

    /// The core NATS client.
    pub fn client(&self) -> &async_nats::Client {
        &self.inner.client
    }

    /// The JetStream context.
    pub fn jetstream(&self) -> &jetstream::Context {
        &self.inner.js
    }

    /// Whether the client is connected right now.
    pub fn is_connected(&self) -> bool {
        self.inner.client.connection_state() == async_nats::connection::State::Connected
    }

    /// The delivery claims, with leases of `lease` (no request to the
    /// broker: the bucket is the orchestrator's to provision).
    pub async fn claims(&self, lease: Duration) -> Result<crate::claim::Claims, BusError> {
        let bucket = self.inner.names.deliveries_bucket();
        let stream = self
            .inner
            .js
            .get_stream_no_info(format!("KV_{bucket}"))
            .await
            .map_err(provision_error(format!("bucket {bucket}")))?;
        Ok(crate::claim::Claims::new(
            self.inner.js.clone(),
            stream,
            bucket,
            lease,
        ))
    }

    /// The durable pull consumer the workers of `agent` share for
    /// `priority`, created when missing (and updated to `settings`).
    pub async fn agent_consumer(
        &self,
        agent: &AgentName,
        priority: Priority,
        settings: &DeliverySettings,
    ) -> Result<consumer::PullConsumer, BusError> {
        let n = &self.inner.names;
        let name = n.agent_consumer(agent, priority);
        // No stream info: a worker may create only its own consumers.
        let stream = self
            .inner
            .js
            .get_stream_no_info(n.tasks_stream())
            .await
            .map_err(provision_error(format!("stream {}", n.tasks_stream())))?;
        let config = consumer::pull::Config {
            durable_name: Some(name.clone()),
            filter_subject: n.task_subject(agent, priority),
            ack_policy: consumer::AckPolicy::Explicit,
            ack_wait: settings.ack_wait,
            max_deliver: settings.max_deliver,
            backoff: settings.backoff.clone(),
            max_ack_pending: -1,
            ..Default::default()
        };
        stream
            .create_consumer(config)
            .await
            .map_err(provision_error(format!("consumer {name}")))
    }

    /// Publishes an envelope on its agent's subject and waits for JetStream
    /// to store it; returns its stream sequence. `Nats-Msg-Id` is
    /// `<task_id>.<attempt>`, so a republish of the same attempt within the
    /// duplicate window is dropped. `republished`: sent again by recovery,
    /// so a worker checks the attempt's result record before running it.
    /// `trace`: the span whose context the message carries (its W3C
    /// `traceparent`/`tracestate` headers).
    pub async fn publish_envelope(
        &self,
        envelope: &Envelope,
        trace: &tracing::Span,
        republished: bool,
    ) -> Result<u64, BusError> {
        self.send_envelope(envelope, trace, republished)
            .await?
            .await_seq()
            .await
    }

    /// Where an envelope is published and its `Nats-Msg-Id`
    /// (`<task_id>.<attempt>`).
    pub fn envelope_address(&self, envelope: &Envelope) -> (String, String) {
        let h = &envelope.header;
        (
            self.inner
                .names
                .task_subject(&h.to, envelope.control.priority),
            format!("{}.{}", h.task_id, envelope.control.attempt),
        )
    }

    /// Sends an envelope without waiting for JetStream's ack (pipelined
    /// publishing); the ack is awaited with [`PendingPublish::await_seq`].
    pub async fn send_envelope(
        &self,
        envelope: &Envelope,
        trace: &tracing::Span,
        republished: bool,
    ) -> Result<PendingPublish, BusError> {
        let address = self.envelope_address(envelope);
        self.send_envelope_to(envelope, address, trace, republished)
            .await
    }

    /// [`Bus::send_envelope`] to an address [`Bus::envelope_address`] gave
    /// (a caller that needs it too computes it once).
    pub async fn send_envelope_to(
        &self,
        envelope: &Envelope,
        (subject, msg_id): (String, String),
        trace: &tracing::Span,
        republished: bool,
    ) -> Result<PendingPublish, BusError> {
        let h = &envelope.header;
        let mut headers = task_headers(&h.task_id.to_string(), h.correlation_id.as_str(), trace);
        if republished {
            headers.insert(REPUBLISHED_HEADER, "1");
        }
        self.send(subject, msg_id, headers, envelope.to_vec()).await
    }

    /// The largest message the broker carries, in bytes (payload and
    /// headers), as it advertised when this client connected.
    pub fn max_payload(&self) -> usize {
        self.inner.client.max_payload()
    }

    /// Whether the task stream still holds message `seq` (not yet acked).
    pub async fn task_message_exists(&self, seq: u64) -> Result<bool, BusError> {
        let stream = self.inner.names.tasks_stream();
        let found = self
            .read_message(
                stream,
                || format!("task message {seq}"),
                |m| m.sequence(seq),
            )
            .await?;
        Ok(found.is_some())
    }

    /// The last event published about `task`, if any: the record a worker
    /// checks before running a redelivered attempt.
    pub async fn last_event(
        &self,
        agent: &AgentName,
        task: crate::envelope::TaskId,
    ) -> Result<Option<WorkerEvent>, BusError> {
        let n = &self.inner.names;
        let subject = n.event_subject(agent, task);
        // A direct get names the subject in the request's own subject, so a
        // least-privilege bus can let an agent read only its own events.
        let read = async {
            let stream = self
                .inner
                .js
                .get_stream_no_info(n.events_stream())
                .await
                .map_err(|e| e.to_string())?;
            match stream.direct_get_last_for_subject(subject).await {
                Ok(msg) => Ok(Some(msg)),
                Err(e) if e.kind() == stream::DirectGetErrorKind::NotFound => Ok(None),
                Err(e) => Err(e.to_string()),
            }
        };
        let found = read.await.map_err(|message| BusError::Read {
            what: format!("the last event of task {task}"),
            source: message.into(),
        })?;
        Ok(found.and_then(|msg| WorkerEvent::from_wire(&msg.payload, usize::MAX).ok()))
    }

    /// One message of `stream`, as `pick` chooses it; `None` when there is
    /// no such message. `what` names it in errors.
    async fn read_message(
        &self,
        stream: String,
        what: impl FnOnce() -> String,
        pick: impl FnOnce(stream::RawMessageBuilder) -> stream::RawMessageBuilder,
    ) -> Result<Option<jetstream::message::StreamMessage>, BusError> {
        let read = async {
            let stream = self
                .inner
                .js
                .get_stream_no_info(stream)
                .await
                .map_err(|e| e.to_string())?;
            match pick(stream.raw_message_builder()).send().await {
                Ok(msg) => Ok(Some(msg)),
                Err(e) if e.kind() == stream::RawMessageErrorKind::NoMessageFound => Ok(None),
                Err(e) => Err(e.to_string()),
            }
        };
        read.await.map_err(|message| BusError::Read {
            what: what(),
            source: message.into(),
        })
    }

    /// The orchestrator's durable pull consumer `name` on `stream`, created
    /// or updated: explicit ack, `consumer_ack_wait`, and the given limits
    /// (`-1`: none).
    pub async fn durable_consumer(
        &self,
        stream: &str,
        name: &str,
        max_deliver: i64,
        max_ack_pending: i64,
    ) -> Result<consumer::PullConsumer, BusError> {
        let error = |e: Cause| BusError::Provision {
            what: format!("consumer {name} on {stream}"),
            source: e,
        };
        let stream = self
            .inner
            .js
            .get_stream(stream)
            .await
            .map_err(|e| error(e.into()))?;
        stream
            .create_consumer(consumer::pull::Config {
                durable_name: Some(name.to_string()),
                ack_policy: consumer::AckPolicy::Explicit,
                ack_wait: self.inner.config.consumer_ack_wait,
                max_deliver,
                max_ack_pending,
                ..Default::default()
            })
            .await
            .map_err(|e| error(e.into()))
    }

    /// Publishes a worker event and waits for JetStream to store it, in a
    /// `report` span that is a child of `parent` and whose context the
    /// message carries.
    pub async fn publish_event(
        &self,
        event: &WorkerEvent,
        parent: &tracing::Span,
    ) -> Result<(), BusError> {
        let subject = self.inner.names.event_subject(&event.agent, event.task_id);
        // A progress report has its own id: `<task>.<attempt>.working.<seq>`.
        let msg_id = match &event.progress {
            Some(p) => format!("{}.{}.working.{}", event.task_id, event.attempt, p.seq),
            None => format!(
                "{}.{}.{}",
                event.task_id,
                event.attempt,
                event.state.as_str()
            ),
        };
        let span = crate::telemetry::spans::report_event(parent, event, &subject, &msg_id);
        let headers = task_headers(
            &event.task_id.to_string(),
            event.correlation_id.as_str(),
            &span,
        );
        let body = serde_json::to_vec(event).unwrap_or_default();
        let published = self
            .publish(subject, msg_id, headers, body)
            .instrument(span.clone())
            .await;
        if let Err(e) = &published {
            crate::telemetry::spans::failed(&span, &e.to_string());
        }
        published
    }

    /// Publishes a run-abandoned note and waits for JetStream to store it
    /// (one per attempt and instance: copies are dropped as duplicates).
    pub async fn publish_abandoned(
        &self,
        note: &crate::event::RunAbandoned,
        parent: &tracing::Span,
    ) -> Result<(), BusError> {
        let subject = self
            .inner
            .names
            .abandoned_subject(&note.agent, note.task_id);
        let msg_id = format!(
            "{}.{}.abandoned.{}",
            note.task_id, note.attempt, note.instance
        );
        let headers = task_headers(
            &note.task_id.to_string(),
            note.correlation_id.as_str(),
            parent,
        );
        let body = serde_json::to_vec(note).unwrap_or_default();
        self.publish(subject, msg_id, headers, body).await
    }

    async fn publish(
        &self,
        subject: String,
        msg_id: String,
        headers: HeaderMap,
        body: Vec<u8>,
    ) -> Result<(), BusError> {
        let pending = self.send(subject, msg_id, headers, body).await?;
        pending.await_seq().await.map(|_| ())
    }

    /// Sends one message to JetStream; the ack is awaited by the caller.
    /// The client refuses a message over the broker's `max_payload` before
    /// sending it: that is [`BusError::TooLarge`].
    async fn send(
        &self,
        subject: String,
        msg_id: String,
        headers: HeaderMap,
        body: Vec<u8>,
    ) -> Result<PendingPublish, BusError> {
        let size = body.len();
        let publish = jetstream::message::PublishMessage::build()
            .payload(body.into())
            .headers(headers)
            .message_id(msg_id);
        match self.inner.js.send_publish(subject.clone(), publish).await {
            Ok(ack) => Ok(PendingPublish { ack, subject }),
            Err(e) if e.kind() == jetstream::context::PublishErrorKind::MaxPayloadExceeded => {
                let max = self.max_payload();
                Err(BusError::TooLarge { subject, size, max })
            }
            Err(e) => Err(BusError::Publish {
                subject,
                source: e.into(),
            }),
        }
    }
}

/// A publish sent to JetStream whose ack has not arrived yet.
pub struct PendingPublish {
    /// The ack to come.
    ack: jetstream::context::PublishAckFuture,
    /// Where it was sent, for errors.
    subject: String,
}

impl PendingPublish {
    /// Waits for the ack: the stream sequence the message was stored at (or
    /// the earlier copy's, for a duplicate).
    pub async fn await_seq(self) -> Result<u64, BusError> {
        let subject = self.subject;
        self.ack
            .await
            .map(|ack| ack.sequence)
            .map_err(|e| BusError::Publish {
                subject,
                source: e.into(),
            })
    }
}

fn task_headers(task_id: &str, correlation_id: &str, trace: &tracing::Span) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(TASK_ID_HEADER, task_id);
    headers.insert(CORRELATION_ID_HEADER, correlation_id);
    crate::telemetry::context::inject(trace, &mut headers);
    headers
}
