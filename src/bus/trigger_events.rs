//! The stream behind event triggers: it keeps every message on the
//! subjects of `run_mode: event` triggers (for `events_max_age`), so a
//! message published while the orchestrator is down still starts its run.
//! Each trigger reads it through its own durable consumer.

use async_nats::jetstream::{consumer, stream};

use super::error::provision_error;
use super::{Bus, BusError};

impl Bus {
    /// Creates the trigger events stream on `subjects`, or changes its
    /// subjects to these (messages of subjects no longer listed stay until
    /// they age out). Nothing is done for no subjects.
    pub async fn provision_trigger_events(&self, subjects: &[String]) -> Result<(), BusError> {
        if subjects.is_empty() {
            return Ok(());
        }
        let name = self.inner.names.trigger_events_stream();
        let failed = |e: async_nats::jetstream::context::CreateStreamError| {
            provision_error(format!("stream {name} on {}", subjects.join(", ")))(e)
        };
        let config = stream::Config {
            name: name.clone(),
            subjects: subjects.to_vec(),
            retention: stream::RetentionPolicy::Limits,
            storage: stream::StorageType::File,
            max_age: self.inner.config.events_max_age,
            duplicate_window: self.inner.config.duplicate_window,
            num_replicas: self.inner.config.replicas,
            ..Default::default()
        };
        let js = &self.inner.js;
        let stream = js
            .get_or_create_stream(config.clone())
            .await
            .map_err(failed)?;
        let info = &stream.cached_info().config;
        let mut held = info.subjects.clone();
        let mut wanted = subjects.to_vec();
        held.sort();
        wanted.sort();
        if held != wanted || info.num_replicas != self.inner.config.replicas {
            js.update_stream(config).await.map_err(failed)?;
        }
        Ok(())
    }

    /// Trigger `trigger`'s durable consumer of `subject` on the trigger
    /// events stream, created or updated (explicit ack, redelivered after
    /// `consumer_ack_wait`).
    pub async fn trigger_consumer(
        &self,
        trigger: &str,
        subject: &str,
    ) -> Result<consumer::PullConsumer, BusError> {
        let stream_name = self.inner.names.trigger_events_stream();
        let name = self.inner.names.trigger_consumer(trigger);
        let error = |e: crate::bus::Cause| BusError::Provision {
            what: format!("consumer {name} on {stream_name}"),
            source: e,
        };
        let stream = self
            .inner
            .js
            .get_stream(&stream_name)
            .await
            .map_err(|e| error(e.into()))?;
        stream
            .create_consumer(consumer::pull::Config {
                durable_name: Some(name.clone()),
                filter_subject: subject.to_string(),
                ack_policy: consumer::AckPolicy::Explicit,
                ack_wait: self.inner.config.consumer_ack_wait,
                ..Default::default()
            })
            .await
            .map_err(|e| error(e.into()))
    }
}
