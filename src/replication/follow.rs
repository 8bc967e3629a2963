//! Reading the log back: the messages of a partition after a stream
//! sequence, each with the commits it carries.

use async_nats::jetstream::stream::DirectGetErrorKind;

use super::{ReplicationError, decode_frame};
use crate::bus::Bus;
use crate::store::Commit;

/// One message of the log.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Its stream sequence.
    pub seq: u64,
    /// The commits it carries.
    pub commits: Vec<Commit>,
}

/// Every message of partition `partition` after stream sequence `after`,
/// oldest first.
pub async fn entries_after(
    bus: &Bus,
    partition: u32,
    after: u64,
) -> Result<Vec<Entry>, ReplicationError> {
    let stream = super::provision(bus).await?;
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
                let commits = decode_frame(&msg.payload)
                    .map_err(|source| ReplicationError::Frame { seq, source })?;
                out.push(Entry { seq, commits });
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
    let stream = super::provision(bus).await?;
    let subject = bus.names().store_subject(partition);
    match stream.direct_get_last_for_subject(subject).await {
        Ok(msg) => {
            let seq = msg.sequence;
            let commits = decode_frame(&msg.payload)
                .map_err(|source| ReplicationError::Frame { seq, source })?;
            Ok((seq, commits.last().map_or(0, |c| c.position)))
        }
        Err(e) if e.kind() == DirectGetErrorKind::NotFound => Ok((0, 0)),
        Err(e) => Err(ReplicationError::Stream {
            stream: bus.names().store_stream(),
            source: e.into(),
        }),
    }
}
