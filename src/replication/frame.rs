//! One message of the store's log: the log position it ends at and the
//! commits it carries, in order (the appender sends the commits waiting
//! when the last append was acknowledged together, in as few messages as
//! the broker's payload limit allows; a new leader's first message carries
//! none: it seals the log against its predecessor), or one part of a
//! commit too large for one message.
//! Wire form, integers big-endian: the position (u64), the number of
//! commits (u32), then for each its length (u32) and its record
//! (`store::Commit`'s wire form); the last commit is at the position.
//! A part: the position of its commit (u64), `0xFFFFFFFF`, the part's
//! index from 0 (u32), the number of parts (u32), then the part's bytes:
//! the commit's record is its parts' bytes in order, sent in consecutive
//! messages.

use crate::store::{Commit, RecordError};

/// Why a log message is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Cut short, or bytes left after the last commit.
    #[error("the message's framing breaks at byte {0}")]
    Framing(usize),
    /// A commit in it is not one.
    #[error("commit {index}: {source}")]
    Record {
        /// Its place in the message, from 0.
        index: usize,
        /// Why.
        #[source]
        source: RecordError,
    },
    /// Its last commit is not at the position it states.
    #[error("it states position {stated} but its last commit is at {last}")]
    Position {
        /// The position stated.
        stated: u64,
        /// The last commit's.
        last: u64,
    },
    /// Its commits' positions do not follow one another.
    #[error("commit {index} is at position {found}, after {after}")]
    OutOfOrder {
        /// Its place in the message.
        index: usize,
        /// Its position.
        found: u64,
        /// The position before it.
        after: u64,
    },
}

/// One message of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The log position after it (for a part, its commit's position).
    pub position: u64,
    /// The commits it carries (none for a seal or a part).
    pub commits: Vec<Commit>,
    /// A part of the commit at `position`.
    pub part: Option<Part>,
}

/// A part of a commit too large for one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// Its index, from 0.
    pub index: u32,
    /// How many parts the commit has.
    pub count: u32,
    /// Its bytes of the commit's record.
    pub bytes: Vec<u8>,
}

/// The count that marks a part.
const PART: u32 = u32::MAX;

/// Bytes of a message before a part's bytes.
pub(super) const PART_HEADER: usize = 20;

/// The message carrying part `index` of `count` of the record of the
/// commit at `position`.
pub fn encode_part(position: u64, index: u32, count: u32, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(PART_HEADER + bytes.len());
    out.extend_from_slice(&position.to_be_bytes());
    out.extend_from_slice(&PART.to_be_bytes());
    out.extend_from_slice(&index.to_be_bytes());
    out.extend_from_slice(&count.to_be_bytes());
    out.extend_from_slice(bytes);
    out
}

/// The message carrying `commits`, ending at `position` (the last
/// commit's, or the log's position for a seal).
pub fn encode_frame(position: u64, commits: &[Commit]) -> Vec<u8> {
    let records: Vec<Vec<u8>> = commits.iter().map(Commit::encode).collect();
    frame_of(position, &records)
}

/// The message carrying the commits whose records are `records`.
fn frame_of(position: u64, records: &[Vec<u8>]) -> Vec<u8> {
    let size = 12 + records.iter().map(|r| 4 + r.len()).sum::<usize>();
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(&position.to_be_bytes());
    out.extend_from_slice(&(records.len() as u32).to_be_bytes());
    for r in records {
        out.extend_from_slice(&(r.len() as u32).to_be_bytes());
        out.extend_from_slice(r);
    }
    out
}

/// One message to append.
#[derive(Debug)]
pub(super) struct Message {
    /// Its bytes.
    pub(super) payload: Vec<u8>,
    /// The log position once it is appended (a part but the last: the
    /// position before its commit).
    pub(super) position: u64,
    /// What names it among the appender's messages: its first commit's
    /// position, `<position>.<part>` for a part.
    pub(super) id: String,
}

/// The messages carrying `batch` in order, each at most `limit` bytes
/// (whole commits together while they fit, a commit larger than a
/// message in parts); for an empty batch, the seal at `position`.
pub(super) fn messages(position: u64, batch: &[Commit], limit: usize) -> Vec<Message> {
    let mut out = Vec::new();
    if batch.is_empty() {
        out.push(Message {
            payload: frame_of(position, &[]),
            position,
            id: position.to_string(),
        });
        return out;
    }
    let limit = limit.max(PART_HEADER + 1024);
    let mut pack: Vec<Vec<u8>> = Vec::new();
    let (mut size, mut first, mut last) = (12, 0, 0);
    let flush = |pack: &mut Vec<Vec<u8>>, out: &mut Vec<Message>, first: u64, last: u64| {
        if !pack.is_empty() {
            out.push(Message {
                payload: frame_of(last, pack),
                position: last,
                id: first.to_string(),
            });
            pack.clear();
        }
    };
    for c in batch {
        let record = c.encode();
        if 12 + 4 + record.len() > limit {
            flush(&mut pack, &mut out, first, last);
            size = 12;
            let chunk = limit - PART_HEADER;
            let count = record.len().div_ceil(chunk) as u32;
            for (i, piece) in record.chunks(chunk).enumerate() {
                let i = i as u32;
                out.push(Message {
                    payload: encode_part(c.position, i, count, piece),
                    position: if i + 1 == count {
                        c.position
                    } else {
                        c.position - 1
                    },
                    id: format!("{}.{i}", c.position),
                });
            }
            continue;
        }
        if size + 4 + record.len() > limit {
            flush(&mut pack, &mut out, first, last);
            size = 12;
        }
        if pack.is_empty() {
            first = c.position;
        }
        size += 4 + record.len();
        last = c.position;
        pack.push(record);
    }
    flush(&mut pack, &mut out, first, last);
    out
}

/// A message's position and commits; each commit's position one more than
/// the one before it, the last at the position.
pub fn decode_frame(bytes: &[u8]) -> Result<Frame, FrameError> {
    let word = bytes.get(..8).ok_or(FrameError::Framing(0))?;
    let position = u64::from_be_bytes(word.try_into().map_err(|_| FrameError::Framing(0))?);
    let mut at = 8;
    let u32_at = |at: &mut usize| -> Result<usize, FrameError> {
        let word = bytes.get(*at..*at + 4).ok_or(FrameError::Framing(*at))?;
        *at += 4;
        Ok(u32::from_be_bytes([word[0], word[1], word[2], word[3]]) as usize)
    };
    let count = u32_at(&mut at)?;
    if count == PART as usize {
        let index = u32_at(&mut at)? as u32;
        let parts = u32_at(&mut at)? as u32;
        if index >= parts {
            return Err(FrameError::Framing(12));
        }
        return Ok(Frame {
            position,
            commits: Vec::new(),
            part: Some(Part {
                index,
                count: parts,
                bytes: bytes[at..].to_vec(),
            }),
        });
    }
    let mut commits: Vec<Commit> = Vec::with_capacity(count.min(1024));
    for index in 0..count {
        let len = u32_at(&mut at)?;
        let end = at.checked_add(len).filter(|e| *e <= bytes.len());
        let record = &bytes[at..end.ok_or(FrameError::Framing(at))?];
        let commit =
            Commit::decode(record).map_err(|source| FrameError::Record { index, source })?;
        if let Some(before) = commits.last()
            && commit.position != before.position + 1
        {
            return Err(FrameError::OutOfOrder {
                index,
                found: commit.position,
                after: before.position,
            });
        }
        at += len;
        commits.push(commit);
    }
    if at != bytes.len() {
        return Err(FrameError::Framing(at));
    }
    if let Some(last) = commits.last()
        && last.position != position
    {
        return Err(FrameError::Position {
            stated: position,
            last: last.position,
        });
    }
    Ok(Frame {
        position,
        commits,
        part: None,
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// A write: its tree, insert (or remove), key and value.
    type Written = (u8, bool, Vec<u8>, Vec<u8>);

    /// A record in its documented wire form: position, then per write the
    /// tree, remove or insert, the key, and an insert's value.
    fn record(position: u64, writes: &[Written]) -> Vec<u8> {
        let mut out = vec![1];
        out.extend_from_slice(&position.to_be_bytes());
        out.extend_from_slice(&(writes.len() as u32).to_be_bytes());
        for (tree, insert, key, value) in writes {
            out.push(*tree);
            out.push(u8::from(*insert));
            out.extend_from_slice(&(key.len() as u32).to_be_bytes());
            out.extend_from_slice(key);
            if *insert {
                out.extend_from_slice(&(value.len() as u32).to_be_bytes());
                out.extend_from_slice(value);
            }
        }
        out
    }

    fn writes() -> impl Strategy<Value = Vec<Written>> {
        proptest::collection::vec(
            (
                1u8..=10,
                any::<bool>(),
                proptest::collection::vec(any::<u8>(), 0..16),
                proptest::collection::vec(any::<u8>(), 0..600),
            ),
            0..6,
        )
    }

    /// Commits `first..` made of `each`'s writes.
    fn commits(first: u64, each: &[Vec<Written>]) -> Vec<Commit> {
        each.iter()
            .enumerate()
            .map(|(i, w)| Commit::decode(&record(first + i as u64, w)).unwrap())
            .collect()
    }

    proptest! {
        #![proptest_config(crate::fuzz::config())]

        /// Any bytes are a message or a typed refusal, never a panic.
        #[test]
        fn any_bytes_are_a_message_or_refused(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_frame(&bytes);
        }

        /// Messages of commits, packed within a limit or split in parts,
        /// decode to what was sent; one byte changed decodes or is
        /// refused, never a panic.
        #[test]
        fn messages_decode_to_their_commits(
            first in 1u64..1000,
            each in proptest::collection::vec(writes(), 1..5),
            limit in 40usize..400,
            at in any::<usize>(),
            byte in any::<u8>(),
        ) {
            let batch = commits(first, &each);
            let mut whole = Vec::new();
            let mut parts = Vec::new();
            for m in messages(0, &batch, limit) {
                prop_assert!(m.payload.len() <= limit.max(PART_HEADER + 1024));
                let frame = decode_frame(&m.payload).unwrap();
                match frame.part {
                    None => whole.extend(frame.commits),
                    Some(part) => {
                        prop_assert_eq!(part.index as usize, parts.len());
                        parts.push(part.bytes);
                        if part.index + 1 == part.count {
                            whole.push(Commit::decode(&parts.concat()).unwrap());
                            parts.clear();
                        }
                    }
                }
                let mut edited = m.payload.clone();
                let i = at % edited.len();
                edited[i] = byte;
                let _ = decode_frame(&edited);
            }
            prop_assert_eq!(whole, batch);
        }
    }

    /// A commit larger than the limit goes in parts, each within it; a
    /// seal is one message at the position.
    #[test]
    fn a_large_commit_goes_in_parts_within_the_limit() {
        let big = vec![(1u8, true, b"k".to_vec(), vec![7u8; 5000])];
        let batch = commits(9, &[big]);
        let sent = messages(9, &batch, 2048);
        assert_eq!(sent.len(), 3);
        assert!(sent.iter().all(|m| m.payload.len() <= 2048));
        assert_eq!(
            sent.iter().map(|m| m.position).collect::<Vec<_>>(),
            [8, 8, 9]
        );
        let seal = messages(4, &[], 2048);
        assert_eq!(seal.len(), 1);
        assert_eq!(decode_frame(&seal[0].payload).unwrap().position, 4);
    }
}
