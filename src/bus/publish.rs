//! Publishing to JetStream: envelopes (pipelined, their acks awaited
//! apart), worker events and run-abandoned notes, each with the task's
//! headers and its trace context; a message over the broker's
//! `max_payload` is refused before it is sent.

use async_nats::HeaderMap;
use async_nats::jetstream;
use tracing::Instrument;

use super::{Bus, BusError};
use crate::envelope::Envelope;
use crate::event::WorkerEvent;

/// Header carrying the task id on every message.
pub const TASK_ID_HEADER: &str = "Orch-Task-Id";
/// Header carrying the correlation id on every message.
pub const CORRELATION_ID_HEADER: &str = "Orch-Correlation-Id";
/// Header on an envelope published again by recovery after a restart: the
/// broker may hold an earlier copy, so a worker checks the attempt's result
/// record before running it.
pub const REPUBLISHED_HEADER: &str = "Orch-Republished";

impl Bus {
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

    /// Publishes a worker event and waits for JetStream to store it, in a
    /// `report` span that is a child of `parent` and whose context the
    /// message carries.
    pub async fn publish_event(
        &self,
        event: &WorkerEvent,
        parent: &tracing::Span,
    ) -> Result<(), BusError> {
        let subject = self.inner.names.event_subject(&event.agent, event.task_id);
        // A progress report has its own id,
        // `<task>.<attempt>.working.<instance>.<seq>`: the instance keeps
        // a run that took the attempt over from being dropped as copies
        // of the first run's reports.
        let msg_id = match &event.progress {
            Some(p) => format!(
                "{}.{}.working.{}.{}",
                event.task_id,
                event.attempt,
                event.instance.as_deref().unwrap_or("-"),
                p.seq
            ),
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

    pub(super) async fn publish(
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
    pub(super) async fn send(
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
