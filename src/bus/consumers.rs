//! The pull consumers the bus makes: each agent's per priority (its
//! workers share them), the orchestrator's own durable ones, and the
//! delivery claims' bucket.

use std::time::Duration;

use async_nats::jetstream::consumer;

use super::error::provision_error;
use super::{Bus, BusError, Cause, DeliverySettings};
use crate::envelope::{AgentName, Priority};

impl Bus {
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
}
