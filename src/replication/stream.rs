//! The log's stream: `<PREFIX>_STORE`, every partition's subject, on file,
//! in `bus.replicas` copies, kept until it is trimmed (nothing expires it).

use async_nats::jetstream::stream;

use super::ReplicationError;
use crate::bus::Bus;

/// Makes the log's stream when it is missing; the stream.
pub async fn provision(bus: &Bus) -> Result<stream::Stream, ReplicationError> {
    let n = bus.names();
    let settings = bus.settings();
    let config = stream::Config {
        name: n.store_stream(),
        subjects: vec![n.all_store()],
        retention: stream::RetentionPolicy::Limits,
        storage: stream::StorageType::File,
        num_replicas: settings.replicas,
        duplicate_window: settings.duplicate_window,
        // A follower reads the log by direct gets.
        allow_direct: true,
        ..Default::default()
    };
    bus.jetstream()
        .get_or_create_stream(config)
        .await
        .map_err(|e| ReplicationError::Stream {
            stream: n.store_stream(),
            source: e.into(),
        })
}
