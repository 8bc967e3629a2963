//! The commit mark: a small file beside the sled files that records the
//! audit head as of the last completed flush.
//!
//! sled recovers from a damaged log by keeping the longest readable prefix,
//! silently. That is right for a torn write of data nobody was told about,
//! and wrong for data that was flushed and acknowledged. Every audited change
//! moves the audit head, so a store whose head is behind the mark (or whose
//! record at the mark has another hash) has lost acknowledged writes: it is
//! refused at open with an error naming the path, instead of serving less.
//!
//! The file holds two slots written alternately, each with a checksum, so a
//! torn write of the mark itself leaves the other slot readable.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::StoreError;
use super::audit::Head;

/// The mark's file name inside the store directory.
pub(crate) const FILE_NAME: &str = "commit.mark";
const MAGIC: &[u8; 4] = b"OCM1";
const SLOT: usize = 48;

/// An open commit mark.
pub(crate) struct CommitMark {
    /// The open file.
    file: File,
    /// Its path, for errors.
    path: PathBuf,
    /// The slot the next write goes to (0 or 1).
    next_slot: u64,
}

impl CommitMark {
    /// Creates the mark of a new store in `dir`, recording an empty log.
    pub(crate) fn create(dir: &Path) -> Result<CommitMark, StoreError> {
        let path = dir.join(FILE_NAME);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| open_error(&path, e))?;
        let mut mark = CommitMark {
            file,
            path,
            next_slot: 0,
        };
        for _ in 0..2 {
            mark.write(Head::default())
                .map_err(|e| open_error(&mark.path, e))?;
        }
        Ok(mark)
    }

    /// Opens the mark in `dir` with the head it records; `None` when there
    /// is no mark (a store never opened, or one whose mark was removed).
    pub(crate) fn open(dir: &Path) -> Result<Option<(CommitMark, Head)>, StoreError> {
        let path = dir.join(FILE_NAME);
        let file = match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(open_error(&path, e)),
        };
        let mut bytes = vec![0u8; 2 * SLOT];
        let read = read_up_to(&file, &mut bytes).map_err(|e| open_error(&path, e))?;
        let first = decode_slot(&bytes[..SLOT.min(read)]);
        let second = decode_slot(&bytes[SLOT..read.max(SLOT)]);
        // The next write goes over the older slot.
        let best = match (first, second) {
            (Some(a), Some(b)) if b.seq > a.seq => Some((b, 0)),
            (Some(a), _) => Some((a, 1)),
            (None, Some(b)) => Some((b, 0)),
            (None, None) => None,
        };
        match best {
            Some((head, next_slot)) => Ok(Some((
                CommitMark {
                    file,
                    path,
                    next_slot,
                },
                head,
            ))),
            None => Err(StoreError::Open {
                path,
                message: "the commit mark is corrupt (neither slot is readable)".into(),
            }),
        }
    }

    /// Records `head` durably.
    pub(crate) fn write(&mut self, head: Head) -> std::io::Result<()> {
        let mut slot = [0u8; SLOT];
        slot[..4].copy_from_slice(MAGIC);
        slot[4..12].copy_from_slice(&head.seq.to_be_bytes());
        slot[12..44].copy_from_slice(&head.hash);
        let sum = Sha256::digest(&slot[..44]);
        slot[44..].copy_from_slice(&sum[..4]);
        self.file
            .write_all_at(&slot, self.next_slot * SLOT as u64)?;
        self.file.sync_data()?;
        self.next_slot = 1 - self.next_slot;
        Ok(())
    }
}

/// Where the flusher records the audit head each flush covered: the
/// commit mark, or in tests a stand-in that can be held up.
pub(crate) trait MarkSink: Send + 'static {
    /// Records `head` durably.
    fn write(&mut self, head: Head) -> std::io::Result<()>;
    /// What is written, for errors (the mark's path).
    fn describe(&self) -> String;
}

impl MarkSink for CommitMark {
    fn write(&mut self, head: Head) -> std::io::Result<()> {
        CommitMark::write(self, head)
    }

    fn describe(&self) -> String {
        self.path.display().to_string()
    }
}

fn open_error(path: &Path, e: std::io::Error) -> StoreError {
    StoreError::Open {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

fn read_up_to(file: &File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read_at(&mut buf[filled..], filled as u64)? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

fn decode_slot(slot: &[u8]) -> Option<Head> {
    if slot.len() != SLOT || &slot[..4] != MAGIC {
        return None;
    }
    let sum = Sha256::digest(&slot[..44]);
    if slot[44..] != sum[..4] {
        return None;
    }
    let mut seq = [0u8; 8];
    seq.copy_from_slice(&slot[4..12]);
    let mut hash = [0u8; 32];
    hash.copy_from_slice(&slot[12..44]);
    Some(Head {
        seq: u64::from_be_bytes(seq),
        hash,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_readable_slot_wins_and_a_torn_slot_is_survived() {
        let dir = tempfile::tempdir().unwrap();
        assert!(CommitMark::open(dir.path()).unwrap().is_none());
        let mut mark = CommitMark::create(dir.path()).unwrap();
        mark.write(Head {
            seq: 5,
            hash: [5; 32],
        })
        .unwrap();
        mark.write(Head {
            seq: 6,
            hash: [6; 32],
        })
        .unwrap();
        drop(mark);
        let (_, head) = CommitMark::open(dir.path()).unwrap().unwrap();
        assert_eq!(head.seq, 6);
        // Tear the newest slot (slot 1 holds seq 6): the older one is used.
        let file = OpenOptions::new()
            .write(true)
            .open(dir.path().join(FILE_NAME))
            .unwrap();
        file.write_all_at(&[0xAA; 10], SLOT as u64 + 20).unwrap();
        let (_, head) = CommitMark::open(dir.path()).unwrap().unwrap();
        assert_eq!(head.seq, 5);
        // Tear both: the mark is reported corrupt, naming its path.
        file.write_all_at(&[0xAA; 10], 20).unwrap();
        let err = CommitMark::open(dir.path()).err().unwrap();
        assert!(err.to_string().contains(FILE_NAME), "{err}");
    }
}
