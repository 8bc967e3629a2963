//! One message of the store's log: the log position it ends at and the
//! commits it carries, in order (the appender sends every commit waiting
//! when the last append was acknowledged as one message; a new leader's
//! first message carries none: it seals the log against its predecessor).
//! Wire form, integers big-endian: the position (u64), the number of
//! commits (u32), then for each its length (u32) and its record
//! (`store::Commit`'s wire form); the last commit is at the position.

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
    /// The log position after it.
    pub position: u64,
    /// The commits it carries (none for a seal).
    pub commits: Vec<Commit>,
}

/// The message carrying `commits`, ending at `position` (the last
/// commit's, or the log's position for a seal).
pub fn encode_frame(position: u64, commits: &[Commit]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&position.to_be_bytes());
    out.extend_from_slice(&(commits.len() as u32).to_be_bytes());
    for c in commits {
        let bytes = c.encode();
        out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
        out.extend_from_slice(&bytes);
    }
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
    Ok(Frame { position, commits })
}
