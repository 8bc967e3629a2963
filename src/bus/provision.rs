//! Provisioning: the orchestrator creates the streams and buckets (or
//! brings them to this layout); a worker waits until they exist, since on a
//! least-privilege bus it may not create them.

use std::time::Duration;

use async_nats::jetstream::{kv, stream};
use tracing::info;

use super::{Bus, BusConfig, BusError, provision_error};

impl Bus {
    /// Creates the streams and buckets, or brings those of an older layout
    /// to this one (the orchestrator, at every start; workers only wait for
    /// them, [`Bus::wait_provisioned`]).
    pub async fn provision(&self) -> Result<(), BusError> {
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
            let failed = |e: &dyn std::fmt::Display| {
                provision_error(format!("stream {name}"))(e.to_string())
            };
            let stream = js
                .get_or_create_stream(config.clone())
                .await
                .map_err(|e| failed(&e))?;
            if !in_layout(n, &stream.cached_info().config) {
                js.update_stream(config).await.map_err(|e| failed(&e))?;
            }
        }
        self.agents().await?;
        self.deliveries().await?;
        Ok(())
    }

    async fn bucket(&self, name: String, ttl: Duration) -> Result<kv::Store, BusError> {
        let js = &self.inner.js;
        if let Ok(store) = js.get_key_value(&name).await {
            return Ok(store);
        }
        js.create_key_value(kv::Config {
            bucket: name.clone(),
            history: 1,
            max_age: ttl,
            storage: stream::StorageType::File,
            ..Default::default()
        })
        .await
        .map_err(|e| provision_error(format!("bucket {name}"))(e.to_string()))
    }

    /// The live agent registry.
    pub async fn agents(&self) -> Result<kv::Store, BusError> {
        let (name, ttl) = (
            self.inner.names.agents_bucket(),
            self.inner.config.registry_ttl,
        );
        let store = self
            .inner
            .agents
            .get_or_try_init(|| self.bucket(name, ttl))
            .await?;
        Ok(store.clone())
    }

    /// The delivery-claim bucket: per-key TTL (leases measured by the
    /// broker), entries otherwise kept `deliveries_ttl` (cancel marks).
    /// Created, or updated from an older layout, at every start.
    pub async fn deliveries(&self) -> Result<kv::Store, BusError> {
        let store = self
            .inner
            .deliveries
            .get_or_try_init(|| async {
                let name = self.inner.names.deliveries_bucket();
                // A bucket already in this layout is used as it is: a worker
                // on a least-privilege bus may read it but not change it.
                if let Ok(store) = self.inner.js.get_key_value(&name).await
                    && in_layout(&self.inner.names, &store.stream.cached_info().config)
                {
                    return Ok(store);
                }
                self.inner
                    .js
                    .create_or_update_key_value(kv::Config {
                        bucket: name.clone(),
                        history: 1,
                        max_age: self.inner.config.deliveries_ttl,
                        storage: stream::StorageType::File,
                        // Enables per-key TTL; markers left by expired
                        // leases live one second.
                        limit_markers: Some(Duration::from_secs(1)),
                        ..Default::default()
                    })
                    .await
                    .map_err(|e| provision_error(format!("bucket {name}"))(e.to_string()))
            })
            .await?;
        Ok(store.clone())
    }

    /// Waits until the streams and buckets the orchestrator provisions
    /// exist (in this layout), looking every half second and saying once
    /// that it waits. For workers, which never create them.
    pub async fn wait_provisioned(&self) -> Result<(), BusError> {
        let mut said = false;
        loop {
            let missing = self.missing().await?;
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

    /// The first stream or bucket not provisioned yet, if any.
    async fn missing(&self) -> Result<Option<String>, BusError> {
        let n = &self.inner.names;
        let streams = [
            n.tasks_stream(),
            n.events_stream(),
            n.advisories_stream(),
            n.dlq_stream(),
            format!("KV_{}", n.agents_bucket()),
            format!("KV_{}", n.deliveries_bucket()),
        ];
        for name in streams {
            match self.inner.js.get_stream(&name).await {
                // A stream of an older layout counts as not there yet.
                Ok(s) if !in_layout(n, &s.cached_info().config) => return Ok(Some(name)),
                Ok(_) => {}
                Err(e) if not_found(&e) => return Ok(Some(name)),
                Err(e) => return Err(provision_error(format!("stream {name}"))(e.to_string())),
            }
        }
        Ok(None)
    }
}

/// Whether a stream has what this version relies on: direct gets on the
/// events stream (workers read their last events so), per-message TTL on
/// the claim bucket (leases). Older streams lack them.
fn in_layout(names: &super::Names, config: &stream::Config) -> bool {
    let events = config.name == names.events_stream();
    let claims = config.name == format!("KV_{}", names.deliveries_bucket());
    (!events || config.allow_direct) && (!claims || config.allow_message_ttl)
}

/// Whether a stream lookup failed because there is no such stream.
fn not_found(e: &async_nats::jetstream::context::GetStreamError) -> bool {
    use async_nats::jetstream::{ErrorCode, context::GetStreamErrorKind};
    matches!(e.kind(), GetStreamErrorKind::JetStream(j) if j.error_code() == ErrorCode::STREAM_NOT_FOUND)
}

/// A file-stored stream on `subject`; `max_age` zero keeps messages until
/// acked (work queue) or forever.
fn file_stream(
    name: String,
    subject: String,
    retention: stream::RetentionPolicy,
    max_age: Duration,
    config: &BusConfig,
) -> stream::Config {
    stream::Config {
        name,
        subjects: vec![subject],
        retention,
        storage: stream::StorageType::File,
        max_age,
        duplicate_window: config.duplicate_window,
        ..Default::default()
    }
}
