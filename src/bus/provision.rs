//! Provisioning: the orchestrator creates the streams and buckets (or
//! brings them to this layout); a worker waits until they exist, since on a
//! least-privilege bus it may not create them.

use std::time::Duration;

use async_nats::jetstream::{kv, stream};
use tracing::info;

use super::error::provision_error;
use super::{Bus, BusError, BusSettings, Cause};
use crate::envelope::AgentName;

impl Bus {
    /// Creates the streams and buckets, or brings those of an older layout
    /// to this one (the orchestrator, at every start; workers only wait for
    /// them, [`Bus::wait_provisioned`]). A cluster that is still electing
    /// its JetStream leader, or waiting for enough nodes to place the
    /// replicas, is waited for (within `bus.connect_wait`, with a backoff);
    /// any other refusal is final.
    pub async fn provision(&self) -> Result<(), BusError> {
        self.check_replicas()?;
        self.patiently(|| self.provision_once()).await
    }

    /// Runs `op` until it succeeds, fails for good, or `bus.connect_wait`
    /// has passed: an error a cluster gets over by itself (no answer yet,
    /// a leader being elected, too few nodes up for the replicas) is tried
    /// again after a backoff.
    pub async fn patiently<T, F, Fut>(&self, mut op: F) -> Result<T, BusError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, BusError>>,
    {
        let deadline = tokio::time::Instant::now() + self.inner.config.connect_wait;
        let mut backoff = self.inner.config.backoff();
        loop {
            match op().await {
                Err(e) if passing(&e) && tokio::time::Instant::now() < deadline => {
                    crate::telemetry::quiet::warn_quietly!("bus.provision_waiting", error = %e, "JetStream cannot serve this yet; trying again");
                    tokio::time::sleep(backoff.next_delay()).await;
                }
                done => return done,
            }
        }
    }

    async fn provision_once(&self) -> Result<(), BusError> {
        let n = &self.inner.names;
        let c = &self.inner.config;
        let js = &self.inner.js;
        let streams = [
            file_stream(
                n.tasks_stream(),
                n.all_tasks(),
                stream::RetentionPolicy::WorkQueue,
                Duration::ZERO,
                c,
            ),
            stream::Config {
                // Workers read their own last events by direct get.
                allow_direct: true,
                ..file_stream(
                    n.events_stream(),
                    n.all_events(),
                    stream::RetentionPolicy::Limits,
                    c.events_max_age,
                    c,
                )
            },
            file_stream(
                n.advisories_stream(),
                n.max_deliveries_advisory(),
                stream::RetentionPolicy::Limits,
                c.events_max_age,
                c,
            ),
            file_stream(
                n.dlq_stream(),
                n.all_dlq(),
                stream::RetentionPolicy::Limits,
                Duration::ZERO,
                c,
            ),
        ];
        for config in streams {
            let name = config.name.clone();
            let failed = |e| self.provision_failed(format!("stream {name}"), e);
            let stream = js
                .get_or_create_stream(config.clone())
                .await
                .map_err(failed)?;
            let held = &stream.cached_info().config;
            if !in_layout(n, held) || held.num_replicas != c.replicas {
                if held.num_replicas != c.replicas {
                    info!(stream = %name, from = held.num_replicas, to = c.replicas, "changing the stream's replicas");
                }
                js.update_stream(config).await.map_err(failed)?;
            }
        }
        self.agents().await?;
        self.deliveries().await?;
        Ok(())
    }

    /// Refuses more than one replica on a server that is not part of a
    /// cluster, saying what to change (JetStream's own refusal names
    /// neither the setting nor the fix).
    fn check_replicas(&self) -> Result<(), BusError> {
        let replicas = self.inner.config.replicas;
        let info = self.inner.client.server_info();
        if replicas > 1 && info.cluster.is_none() {
            return Err(BusError::Provision {
                what: "the streams and buckets".into(),
                source: format!(
                    "bus.replicas is {replicas}, but the NATS server {} ({}:{}) is not part of a \
                     cluster, and one server keeps one copy: set bus.replicas to 1, or connect \
                     to a JetStream cluster of at least {replicas} servers",
                    info.server_name, info.host, info.port
                )
                .into(),
            });
        }
        Ok(())
    }

    /// Provisioning `what` failed with `e`: said with what `bus.replicas`
    /// has to do with it when JetStream refused to place the copies it
    /// asks for (its error code says so).
    fn provision_failed(&self, what: String, e: impl Into<Cause>) -> BusError {
        let source = e.into();
        let replicas = self.inner.config.replicas;
        if replicas > 1 && refused_placement(source.as_ref()) {
            BusError::Replicas {
                what,
                replicas,
                source,
            }
        } else {
            BusError::Provision { what, source }
        }
    }

    /// A key-value bucket in this layout with `bus.replicas` copies:
    /// created when missing, brought to the layout and the replica count
    /// when it differs, else used as it is (a worker on a least-privilege
    /// bus may read a bucket but not change it). `layout` is the rest of
    /// the bucket's settings.
    async fn bucket(&self, layout: kv::Config) -> Result<kv::Store, BusError> {
        let js = &self.inner.js;
        let replicas = self.inner.config.replicas;
        let name = layout.bucket.clone();
        if let Ok(store) = js.get_key_value(&name).await {
            let held = &store.stream.cached_info().config;
            if in_layout(&self.inner.names, held) && held.num_replicas == replicas {
                return Ok(store);
            }
            if held.num_replicas != replicas {
                info!(bucket = %name, from = held.num_replicas, to = replicas, "changing the bucket's replicas");
            }
        }
        js.create_or_update_key_value(kv::Config {
            num_replicas: replicas,
            ..layout
        })
        .await
        .map_err(|e| self.provision_failed(format!("bucket {name}"), e))
    }

    /// The live agent registry.
    pub async fn agents(&self) -> Result<kv::Store, BusError> {
        let layout = kv::Config {
            bucket: self.inner.names.agents_bucket(),
            history: 1,
            max_age: self.inner.config.registry_ttl,
            storage: stream::StorageType::File,
            ..Default::default()
        };
        let store = self
            .inner
            .agents
            .get_or_try_init(|| self.bucket(layout))
            .await?;
        Ok(store.clone())
    }

    /// The delivery-claim bucket: per-key TTL (leases measured by the
    /// broker), entries otherwise kept `deliveries_ttl` (cancel marks).
    /// Created, or updated from an older layout, at every start.
    pub async fn deliveries(&self) -> Result<kv::Store, BusError> {
        let layout = kv::Config {
            bucket: self.inner.names.deliveries_bucket(),
            history: 1,
            max_age: self.inner.config.deliveries_ttl,
            storage: stream::StorageType::File,
            // Enables per-key TTL; markers left by expired leases live
            // one second.
            limit_markers: Some(Duration::from_secs(1)),
            ..Default::default()
        };
        let store = self
            .inner
            .deliveries
            .get_or_try_init(|| self.bucket(layout))
            .await?;
        Ok(store.clone())
    }

    /// Waits until what `agent`'s workers use exists in this layout,
    /// looking every half second and saying once that it waits. For
    /// workers, which never create streams: each look touches only the
    /// agent's own consumer, event subject and claim key (what a
    /// least-privilege bus allows it), never a stream's info, which would
    /// list every agent's tasks.
    pub async fn wait_provisioned(&self, agent: &AgentName) -> Result<(), BusError> {
        let mut said = false;
        loop {
            let missing = self.patiently(|| self.missing_for(agent)).await?;
            let Some(missing) = missing else {
                return Ok(());
            };
            if !said {
                info!(missing = %missing, "waiting for the orchestrator to provision the bus");
                said = true;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// The first thing `agent`'s workers use that is not provisioned (in
    /// this layout) yet, if any:
    /// - the task stream: its high-priority consumer can be asked about
    ///   (found, or "consumer not found", not "stream not found");
    /// - the event stream, with direct gets: the last event on the
    ///   agent's probe subject can be asked for (found or not);
    /// - the claim bucket, with per-message TTL: a one-second entry under
    ///   the agent's probe key is taken (JetStream refuses a TTL the
    ///   stream does not allow, and there is nobody to take it without the
    ///   stream).
    async fn missing_for(&self, agent: &AgentName) -> Result<Option<String>, BusError> {
        use async_nats::jetstream::response::Response;
        use async_nats::jetstream::{ErrorCode, consumer};
        let n = &self.inner.names;
        let js = &self.inner.js;
        let tasks = n.tasks_stream();
        let consumer = n.agent_consumer(agent, crate::envelope::Priority::High);
        // The request must be empty (not JSON `null`).
        let info = self
            .inner
            .client
            .request(
                format!("$JS.API.CONSUMER.INFO.{tasks}.{consumer}"),
                bytes::Bytes::new(),
            )
            .await
            .map_err(provision_error(format!("stream {tasks}")))?;
        match serde_json::from_slice::<Response<consumer::Info>>(&info.payload) {
            Ok(Response::Ok(_)) => {}
            Ok(Response::Err { error }) if error.error_code() == ErrorCode::CONSUMER_NOT_FOUND => {}
            _ => return Ok(Some(tasks)),
        }
        let events = n.events_stream();
        let probe = n.agent_events(agent).replace('>', PROBE);
        let stream = js
            .get_stream_no_info(&events)
            .await
            .map_err(provision_error(format!("stream {events}")))?;
        match stream.direct_get_last_for_subject(probe).await {
            Ok(_) => {}
            Err(e) if e.kind() == stream::DirectGetErrorKind::NotFound => {}
            Err(_) => return Ok(Some(format!("{events} (with direct gets)"))),
        }
        let bucket = n.deliveries_bucket();
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(async_nats::header::NATS_MESSAGE_TTL, "1");
        let taken = async {
            js.publish_with_headers(format!("$KV.{bucket}.{agent}.{PROBE}"), headers, "".into())
                .await?
                .await
        };
        if taken.await.is_err() {
            return Ok(Some(format!("KV_{bucket} (with per-message TTL)")));
        }
        Ok(None)
    }

    /// Puts `value` as this worker's live-registry entry
    /// (`<agent>.<instance>` in `ORCH_AGENTS`): a publish to its key's
    /// subject, which a least-privilege bus lets the agent make.
    pub async fn register(
        &self,
        agent: &AgentName,
        instance: &str,
        value: bytes::Bytes,
    ) -> Result<(), BusError> {
        self.registry_write(agent, instance, async_nats::HeaderMap::new(), value)
            .await
    }

    /// Deletes this worker's live-registry entry (at shutdown).
    pub async fn unregister(&self, agent: &AgentName, instance: &str) -> Result<(), BusError> {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("KV-Operation", "DEL");
        self.registry_write(agent, instance, headers, bytes::Bytes::new())
            .await
    }

    async fn registry_write(
        &self,
        agent: &AgentName,
        instance: &str,
        headers: async_nats::HeaderMap,
        value: bytes::Bytes,
    ) -> Result<(), BusError> {
        let subject = format!(
            "$KV.{}.{agent}.{instance}",
            self.inner.names.agents_bucket()
        );
        let failed = |e: crate::bus::Cause| BusError::Publish {
            subject: subject.clone(),
            source: e,
        };
        self.inner
            .js
            .publish_with_headers(subject.clone(), headers, value)
            .await
            .map_err(|e| failed(e.into()))?
            .await
            .map_err(|e| failed(e.into()))?;
        Ok(())
    }
}

/// The last token of the subjects a worker probes to learn that the bus
/// is provisioned (`orch.events.<agent>.layout`, claim key
/// `<agent>.layout`): never a task id, so no task's record is touched.
pub const PROBE: &str = "layout";

/// Whether a stream has what this version relies on: direct gets on the
/// events stream (workers read their last events so), per-message TTL on
/// the claim bucket (leases). Older streams lack them.
fn in_layout(names: &super::Names, config: &stream::Config) -> bool {
    let events = config.name == names.events_stream();
    let claims = config.name == format!("KV_{}", names.deliveries_bucket());
    (!events || config.allow_direct) && (!claims || config.allow_message_ttl)
}

/// A file-stored stream on `subject`; `max_age` zero keeps messages until
/// acked (work queue) or forever.
fn file_stream(
    name: String,
    subject: String,
    retention: stream::RetentionPolicy,
    max_age: Duration,
    config: &BusSettings,
) -> stream::Config {
    stream::Config {
        name,
        subjects: vec![subject],
        retention,
        storage: stream::StorageType::File,
        max_age,
        duplicate_window: config.duplicate_window,
        num_replicas: config.replicas,
        ..Default::default()
    }
}

/// Whether a provisioning error is one a cluster gets over by itself: no
/// answer yet, a leader being elected, too few nodes up for the replicas.
/// Told by the kinds and JetStream codes of the errors behind it, never by
/// their text.
fn passing(e: &BusError) -> bool {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(e) = next {
        if passing_here(e) {
            return true;
        }
        next = e.source();
    }
    false
}

/// JetStream's codes for what a cluster gets over: not available yet, too
/// few servers or resources up, a stream or consumer offline (the ones the
/// text match this replaced knew, no more).
const PASSING_CODES: [async_nats::jetstream::ErrorCode; 7] = {
    use async_nats::jetstream::ErrorCode;
    [
        ErrorCode::CLUSTER_NOT_AVAILABLE,
        ErrorCode::CLUSTER_NO_PEERS,
        ErrorCode::INSUFFICIENT_RESOURCES,
        ErrorCode::STREAM_OFFLINE,
        ErrorCode::CONSUMER_OFFLINE,
        ErrorCode::STREAM_OFFLINE_REASON,
        ErrorCode::CONSUMER_OFFLINE_REASON,
    ]
};

/// [`passing`] for one error of the chain.
fn passing_here(e: &(dyn std::error::Error + 'static)) -> bool {
    use async_nats::jetstream::context::{
        CreateKeyValueError, CreateKeyValueErrorKind, CreateStreamError, CreateStreamErrorKind,
        GetStreamError, GetStreamErrorKind, RequestError, RequestErrorKind,
    };
    use async_nats::jetstream::stream::{ConsumerError, ConsumerErrorKind};
    let code = |j: &async_nats::jetstream::Error| PASSING_CODES.contains(&j.error_code());
    if let Some(j) = e.downcast_ref::<async_nats::jetstream::Error>() {
        return code(j);
    }
    if let Some(e) = e.downcast_ref::<CreateStreamError>() {
        return match e.kind() {
            CreateStreamErrorKind::TimedOut | CreateStreamErrorKind::JetStreamUnavailable => true,
            CreateStreamErrorKind::JetStream(j) => code(&j),
            _ => false,
        };
    }
    if let Some(e) = e.downcast_ref::<GetStreamError>() {
        return matches!(e.kind(), GetStreamErrorKind::JetStream(j) if code(&j));
    }
    if let Some(e) = e.downcast_ref::<ConsumerError>() {
        return match e.kind() {
            ConsumerErrorKind::TimedOut => true,
            ConsumerErrorKind::JetStream(j) => code(&j),
            _ => false,
        };
    }
    if let Some(e) = e.downcast_ref::<CreateKeyValueError>() {
        return e.kind() == CreateKeyValueErrorKind::TimedOut;
    }
    if let Some(e) = e.downcast_ref::<RequestError>() {
        return matches!(
            e.kind(),
            RequestErrorKind::TimedOut | RequestErrorKind::NoResponders
        );
    }
    if let Some(e) = e.downcast_ref::<async_nats::RequestError>() {
        return matches!(
            e.kind(),
            async_nats::RequestErrorKind::TimedOut | async_nats::RequestErrorKind::NoResponders
        );
    }
    false
}

/// Whether `e`, or an error behind it, is JetStream refusing to place a
/// stream's copies: too few servers or resources (for now, in a cluster
/// still forming or losing a node), or replicas on a server outside a
/// cluster.
pub fn refused_placement(e: &(dyn std::error::Error + 'static)) -> bool {
    use async_nats::jetstream::ErrorCode;
    use async_nats::jetstream::context::{CreateStreamError, CreateStreamErrorKind};
    let placement = [
        ErrorCode::INSUFFICIENT_RESOURCES,
        ErrorCode::STREAM_REPLICAS_NOT_SUPPORTED,
        ErrorCode::CLUSTER_NO_PEERS,
    ];
    let mut next = Some(e);
    while let Some(e) = next {
        if let Some(created) = e.downcast_ref::<CreateStreamError>()
            && let CreateStreamErrorKind::JetStream(refusal) = created.kind()
            && placement.contains(&refusal.error_code())
        {
            return true;
        }
        next = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use async_nats::jetstream::context::{CreateStreamError, CreateStreamErrorKind};

    use super::*;

    fn provision(source: impl Into<Cause>) -> BusError {
        BusError::Provision {
            what: "stream x".into(),
            source: source.into(),
        }
    }

    fn jetstream(code: u64, description: &str) -> async_nats::jetstream::Error {
        serde_json::from_value(serde_json::json!({
            "code": 503, "err_code": code, "description": description
        }))
        .unwrap()
    }

    /// Told by kinds and codes: the same words in plain text do not count.
    #[test]
    fn what_a_cluster_gets_over_is_told_by_kind_and_code_not_text() {
        let timed_out = CreateStreamError::new(CreateStreamErrorKind::TimedOut);
        assert!(passing(&provision(timed_out)));
        let unavailable = jetstream(10008, "JetStream system temporarily unavailable");
        let refused = CreateStreamError::new(CreateStreamErrorKind::JetStream(unavailable));
        assert!(passing(&provision(refused)));
        let in_use = jetstream(
            10058,
            "stream name already in use with a different configuration",
        );
        let refused = CreateStreamError::new(CreateStreamErrorKind::JetStream(in_use));
        assert!(!passing(&provision(refused)));
        assert!(!passing(&provision(
            "timed out: no responders, temporarily unavailable"
        )));
        let no_responders =
            async_nats::RequestError::new(async_nats::RequestErrorKind::NoResponders);
        assert!(passing(&provision(no_responders)));
    }
}
