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
/// oldest first, as [`Reading`] gives them.
pub async fn entries_after(
    bus: &Bus,
    partition: u32,
    after: u64,
) -> Result<Vec<Entry>, ReplicationError> {
    let mut reading = Reading::after(bus, partition, after).await?;
    let mut out = Vec::new();
    while let Some(entry) = reading.next().await? {
        out.push(entry);
    }
    reading.close().await;
    Ok(out)
}

/// The messages of a partition after a stream sequence, up to the log's
/// end when reading began, read one at a time through one ordered
/// consumer (pushed in order, not a request each); a commit sent in parts
/// is one entry, at its last part's sequence, once every part is read
/// (parts of a commit that was never finished, a leader dying half way,
/// are passed over).
pub struct Reading {
    /// `None` once the log's end is read (or there was nothing to read).
    open: Option<Open>,
    /// The sequence of the last message to read.
    end: u64,
    /// The position of the last whole commit by then.
    end_position: u64,
    parts: Option<Parts>,
    stream_name: String,
}

/// The consumer a [`Reading`] reads through.
struct Open {
    stream: async_nats::jetstream::stream::Stream<()>,
    consumer: String,
    messages: consumer::push::Ordered,
}

impl Reading {
    /// Starts reading partition `partition` after stream sequence `after`.
    pub async fn after(bus: &Bus, partition: u32, after: u64) -> Result<Self, ReplicationError> {
        let end = last(bus, partition).await?;
        let stream_name = bus.names().store_stream();
        let mut reading = Reading {
            open: None,
            end: end.seq,
            end_position: end.position,
            parts: None,
            stream_name,
        };
        if end.seq <= after {
            return Ok(reading);
        }
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
            .map_err(|e| reading.failed(e.into()))?;
        let name = consumer.cached_info().name.clone();
        let messages = consumer
            .messages()
            .await
            .map_err(|e| reading.failed(e.into()))?;
        reading.open = Some(Open {
            stream,
            consumer: name,
            messages,
        });
        Ok(reading)
    }

    /// The log's position when reading began: that of its last whole
    /// commit, or of a seal after it (a leader whose store was ahead of
    /// the log went on from a snapshot at its own position).
    pub fn end_position(&self) -> u64 {
        self.end_position
    }

    fn failed(&self, source: async_nats::Error) -> ReplicationError {
        ReplicationError::Stream {
            stream: self.stream_name.clone(),
            source,
        }
    }

    /// The next entry; `None` past the log's end as it was when reading
    /// began.
    pub async fn next(&mut self) -> Result<Option<Entry>, ReplicationError> {
        while let Some(open) = &mut self.open {
            let Some(msg) = open.messages.next().await else {
                break;
            };
            let msg = msg.map_err(|e| self.failed(e.into()))?;
            let seq = msg.info().map_err(|e| self.failed(e))?.stream_sequence;
            if seq >= self.end {
                self.close().await;
            }
            let frame = decode_frame(&msg.payload)
                .map_err(|source| ReplicationError::Frame { seq, source })?;
            if let Some(entry) = assemble(seq, frame, &mut self.parts)? {
                return Ok(Some(entry));
            }
        }
        Ok(None)
    }

    /// Stops reading: the consumer is deleted now rather than when the
    /// server notices it idle (dropped unclosed, it is deleted in the
    /// background).
    pub async fn close(&mut self) {
        if let Some(open) = self.open.take() {
            drop(open.messages);
            let _ = open.stream.delete_consumer(&open.consumer).await;
        }
    }
}

impl Drop for Reading {
    fn drop(&mut self) {
        if let Some(open) = self.open.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            drop(open.messages);
            runtime.spawn(async move {
                let _ = open.stream.delete_consumer(&open.consumer).await;
            });
        }
    }
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct End {
    /// The sequence of its last message (0: none).
    pub(super) seq: u64,
    /// The position of its last whole commit (0: none).
    pub(super) position: u64,
    /// The sequence to read after to find every commit after `position`
    /// (before a commit whose parts are not all there).
    pub(super) after: u64,
    /// The appender that wrote the last message (from its `Nats-Msg-Id`,
    /// `<partition>.<appender>.<id>`).
    pub(super) appender: Option<String>,
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
            let appender = msg
                .headers
                .get("Nats-Msg-Id")
                .and_then(|id| id.as_str().split('.').nth(1))
                .map(str::to_string);
            Ok(match frame.part {
                Some(p) if p.index + 1 < p.count => End {
                    seq,
                    position: frame.position - 1,
                    after: seq.saturating_sub(u64::from(p.index) + 1),
                    appender,
                },
                _ => End {
                    seq,
                    position: frame.position,
                    after: seq,
                    appender,
                },
            })
        }
        Err(e) if e.kind() == DirectGetErrorKind::NotFound => Ok(End {
            seq: 0,
            position: 0,
            after: 0,
            appender: None,
        }),
        Err(e) => Err(ReplicationError::Stream {
            stream: bus.names().store_stream(),
            source: e.into(),
        }),
    }
}

/// The most writes a standby applies in one transaction.
const APPLY_WRITES: usize = 16_384;

/// How far [`catch_up`] read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caught {
    /// The sequence of the last message applied (the one read after when
    /// there was none).
    pub seq: u64,
    /// The log's position at the end it read to: above the store's once
    /// caught up only where the log went on from a snapshot (a leader's
    /// store that was ahead of the log), which the store must load.
    pub log_position: u64,
}

/// Applies to `store` every commit of partition `partition` in the
/// messages after stream sequence `after` (a standby following the
/// leader; commits it holds already change nothing), many in each
/// transaction.
pub async fn catch_up(
    bus: &Bus,
    partition: u32,
    store: &crate::store::Store,
    after: u64,
) -> Result<Caught, ReplicationError> {
    let mut reading = Reading::after(bus, partition, after).await?;
    let log_position = reading.end_position();
    let mut applied = after;
    let mut held: Vec<Commit> = Vec::new();
    let mut writes = 0;
    let mut held_until = after;
    loop {
        let entry = reading.next().await?;
        let done = entry.is_none();
        if let Some(entry) = entry {
            writes += entry.commits.iter().map(|c| c.writes.len()).sum::<usize>();
            held.extend(entry.commits);
            held_until = entry.seq;
        }
        if (done || writes >= APPLY_WRITES) && held_until > applied {
            // A transaction of thousands of writes: off the runtime's
            // threads, which serve the standby's face meanwhile.
            let (into, batch) = (store.clone(), std::mem::take(&mut held));
            let failed = |source| ReplicationError::Apply {
                seq: held_until,
                source,
            };
            tokio::task::spawn_blocking(move || into.apply_commits(&batch))
                .await
                .map_err(|e| failed(crate::store::StoreError::Io(e.to_string())))?
                .map_err(failed)?;
            writes = 0;
            applied = held_until;
        }
        if done {
            return Ok(Caught {
                seq: applied,
                log_position,
            });
        }
    }
}
