//! Reading the log back: the messages of a partition after a stream
//! sequence, each with the commits it carries.

use async_nats::jetstream::stream::DirectGetErrorKind;

use super::{ReplicationError, decode_frame};
use crate::bus::Bus;
use crate::store::Commit;

/// The log's stream, without a request for its info (made by
/// [`super::provision`] before anyone reads it).
async fn stream(bus: &Bus) -> Result<async_nats::jetstream::stream::Stream<()>, ReplicationError> {
    let name = bus.names().store_stream();
    bus.jetstream()
        .get_stream_no_info(&name)
        .await
        .map_err(|e| ReplicationError::Stream {
            stream: name,
            source: e.into(),
        })
}

/// One message of the log.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Its stream sequence.
    pub seq: u64,
    /// The log position after it.
    pub position: u64,
    /// The commits it carries (none for a seal).
    pub commits: Vec<Commit>,
}

/// Every message of partition `partition` after stream sequence `after`,
/// oldest first.
pub async fn entries_after(
    bus: &Bus,
    partition: u32,
    after: u64,
) -> Result<Vec<Entry>, ReplicationError> {
    let stream = stream(bus).await?;
    let subject = bus.names().store_subject(partition);
    let mut out = Vec::new();
    let mut next = after + 1;
    loop {
        match stream
            .direct_get_next_for_subject(&subject, Some(next))
            .await
        {
            Ok(msg) => {
                let seq = msg.sequence;
                let frame = decode_frame(&msg.payload)
                    .map_err(|source| ReplicationError::Frame { seq, source })?;
                out.push(Entry {
                    seq,
                    position: frame.position,
                    commits: frame.commits,
                });
                next = seq + 1;
            }
            Err(e) if e.kind() == DirectGetErrorKind::NotFound => return Ok(out),
            Err(e) => {
                return Err(ReplicationError::Stream {
                    stream: bus.names().store_stream(),
                    source: e.into(),
                });
            }
        }
    }
}

/// The last message of partition `partition`: its sequence and the last
/// position it carries (`(0, 0)` for an empty log).
pub(super) async fn last(bus: &Bus, partition: u32) -> Result<(u64, u64), ReplicationError> {
    let stream = stream(bus).await?;
    let subject = bus.names().store_subject(partition);
    match stream.direct_get_last_for_subject(subject).await {
        Ok(msg) => {
            let seq = msg.sequence;
            let frame = decode_frame(&msg.payload)
                .map_err(|source| ReplicationError::Frame { seq, source })?;
            Ok((seq, frame.position))
        }
        Err(e) if e.kind() == DirectGetErrorKind::NotFound => Ok((0, 0)),
        Err(e) => Err(ReplicationError::Stream {
            stream: bus.names().store_stream(),
            source: e.into(),
        }),
    }
}

/// Applies to `store` every commit of partition `partition` in the
/// messages after stream sequence `after` (a standby following the
/// leader; commits it holds already change nothing); the sequence of the
/// last message read (`after` when there was none).
pub async fn catch_up(
    bus: &Bus,
    partition: u32,
    store: &crate::store::Store,
    after: u64,
) -> Result<u64, ReplicationError> {
    let mut last = after;
    for entry in entries_after(bus, partition, after).await? {
        for commit in &entry.commits {
            store
                .apply_commit(commit)
                .map_err(|source| ReplicationError::Apply {
                    seq: entry.seq,
                    source,
                })?;
        }
        last = entry.seq;
    }
    Ok(last)
}
