//! Reading the log back: the messages of a partition after a stream
//! sequence, each with the commits it carries.

use async_nats::jetstream::consumer;
use async_nats::jetstream::stream::DirectGetErrorKind;
use futures::StreamExt;

use super::{FrameError, ReplicationError, decode_frame};
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

/// A commit's parts read so far.
struct Parts {
    position: u64,
    count: u32,
    next: u32,
    bytes: Vec<u8>,
}

/// Every message of partition `partition` after stream sequence `after`,
/// oldest first; a commit sent in parts is one entry, at its last part's
/// sequence, once every part is read (parts of a commit that was never
/// finished, a leader dying half way, are passed over). Read up to the
/// log's end when called, through one ordered consumer: the messages come
/// pushed in order, not one request each.
pub async fn entries_after(
    bus: &Bus,
    partition: u32,
    after: u64,
) -> Result<Vec<Entry>, ReplicationError> {
    let end = last(bus, partition).await?;
    let mut out = Vec::new();
    if end.seq <= after {
        return Ok(out);
    }
    let failed = |e: async_nats::Error| ReplicationError::Stream {
        stream: bus.names().store_stream(),
        source: e,
    };
    let stream = stream(bus).await?;
    let consumer = stream
        .create_consumer(consumer::push::OrderedConfig {
            deliver_subject: bus.client().new_inbox(),
            filter_subject: bus.names().store_subject(partition),
            deliver_policy: consumer::DeliverPolicy::ByStartSequence {
                start_sequence: after + 1,
            },
            description: Some("a standby reading the store's log".into()),
            ..Default::default()
        })
        .await
        .map_err(|e| failed(e.into()))?;
    let name = consumer.cached_info().name.clone();
    let mut messages = consumer.messages().await.map_err(|e| failed(e.into()))?;
    let mut parts: Option<Parts> = None;
    while let Some(msg) = messages.next().await {
        let msg = msg.map_err(|e| failed(e.into()))?;
        let seq = msg.info().map_err(failed)?.stream_sequence;
        let frame =
            decode_frame(&msg.payload).map_err(|source| ReplicationError::Frame { seq, source })?;
        if let Some(entry) = assemble(seq, frame, &mut parts)? {
            out.push(entry);
        }
        if seq >= end.seq {
            break;
        }
    }
    drop(messages);
    // Gone now rather than when the server notices it idle.
    let _ = stream.delete_consumer(&name).await;
    Ok(out)
}

/// The entry message `seq` (`frame`) completes, given the parts read so
/// far (`parts`, updated): a whole message is one; a part is one when it
/// is the last of its commit; a part without those before it is passed
/// over.
fn assemble(
    seq: u64,
    frame: super::Frame,
    parts: &mut Option<Parts>,
) -> Result<Option<Entry>, ReplicationError> {
    let Some(part) = frame.part else {
        *parts = None;
        return Ok(Some(Entry {
            seq,
            position: frame.position,
            commits: frame.commits,
        }));
    };
    let mut held = match parts.take() {
        _ if part.index == 0 => Parts {
            position: frame.position,
            count: part.count,
            next: 0,
            bytes: Vec::new(),
        },
        Some(p)
            if p.position == frame.position && p.next == part.index && p.count == part.count =>
        {
            p
        }
        // A part without those before it.
        _ => return Ok(None),
    };
    held.bytes.extend_from_slice(&part.bytes);
    held.next += 1;
    if held.next < held.count {
        *parts = Some(held);
        return Ok(None);
    }
    let commit = Commit::decode(&held.bytes).map_err(|source| ReplicationError::Frame {
        seq,
        source: FrameError::Record { index: 0, source },
    })?;
    if commit.position != held.position {
        return Err(ReplicationError::Frame {
            seq,
            source: FrameError::Position {
                stated: held.position,
                last: commit.position,
            },
        });
    }
    Ok(Some(Entry {
        seq,
        position: commit.position,
        commits: vec![commit],
    }))
}

/// Where a partition's log ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct End {
    /// The sequence of its last message (0: none).
    pub(super) seq: u64,
    /// The position of its last whole commit (0: none).
    pub(super) position: u64,
    /// The sequence to read after to find every commit after `position`
    /// (before a commit whose parts are not all there).
    pub(super) after: u64,
}

/// The position of partition `partition`'s last whole commit (0: the
/// log holds none).
pub async fn log_position(bus: &Bus, partition: u32) -> Result<u64, ReplicationError> {
    Ok(last(bus, partition).await?.position)
}

/// Where partition `partition`'s log ends.
pub(super) async fn last(bus: &Bus, partition: u32) -> Result<End, ReplicationError> {
    let stream = stream(bus).await?;
    let subject = bus.names().store_subject(partition);
    match stream.direct_get_last_for_subject(subject).await {
        Ok(msg) => {
            let seq = msg.sequence;
            let frame = decode_frame(&msg.payload)
                .map_err(|source| ReplicationError::Frame { seq, source })?;
            Ok(match frame.part {
                Some(p) if p.index + 1 < p.count => End {
                    seq,
                    position: frame.position - 1,
                    after: seq.saturating_sub(u64::from(p.index) + 1),
                },
                _ => End {
                    seq,
                    position: frame.position,
                    after: seq,
                },
            })
        }
        Err(e) if e.kind() == DirectGetErrorKind::NotFound => Ok(End {
            seq: 0,
            position: 0,
            after: 0,
        }),
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
