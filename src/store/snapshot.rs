//! A snapshot of the store: every tree's entries as one stream of bytes,
//! written while the store runs, and loaded to make a store that then
//! follows the log from the snapshot's position (a node that joins without
//! its data, or one the trimmed log has left behind).
//!
//! A snapshot is read while the writer goes on, so it may hold some
//! entries as of later commits than its position. That is harmless: each
//! write of a record sets a key's whole value (or removes it), so once
//! every record after the position is applied in order, each key holds
//! the value of its last write, exactly as on the store that wrote the
//! snapshot. A loaded store is therefore the log's view only once it has
//! applied every record written while its snapshot was read; a standby
//! reads the log to its end before it leads, which covers them.
//!
//! Wire form (version 1), integers big-endian: `ORCHSNAP`, `0x01`, the
//! position (u64); per entry the tree (one byte, as in a record), the
//! key's length (u32) and bytes, the value's length (u32) and bytes; then
//! `0x00`, the number of entries (u64), and the SHA-256 of every byte
//! before it. The log's own position keys in `meta` are not in it.

use std::io::{BufReader, BufWriter, Read, Write};

use sha2::{Digest, Sha256};

use super::log::{APPLIED_KEY, TreeId};
use super::{Store, StoreError, StoreSettings};

const MAGIC: &[u8; 8] = b"ORCHSNAP";
const VERSION: u8 = 1;
const END: u8 = 0;
/// Entries loaded per sled batch.
const BATCH: usize = 4096;

/// What a snapshot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotSize {
    /// The log position it follows.
    pub position: u64,
    /// Its entries.
    pub entries: u64,
    /// Its length in bytes.
    pub bytes: u64,
}

impl Store {
    /// Writes a snapshot of every tree to `out`, stating `position`: the
    /// log position after which every record must be applied to a store
    /// loaded from it. Every record up to `position` must be in this store
    /// before it starts.
    pub fn write_snapshot(
        &self,
        position: u64,
        out: impl Write,
    ) -> Result<SnapshotSize, StoreError> {
        let mut w = Hashing {
            inner: BufWriter::new(out),
            hash: Sha256::new(),
            bytes: 0,
        };
        w.put(MAGIC)?;
        w.put(&[VERSION])?;
        w.put(&position.to_be_bytes())?;
        let mut entries = 0u64;
        for id in TreeId::ALL {
            for item in self.inner.trees.entries(id) {
                let (key, value) = item?;
                w.put(&[id as u8])?;
                w.sized(&key)?;
                w.sized(&value)?;
                entries += 1;
            }
        }
        w.put(&[END])?;
        w.put(&entries.to_be_bytes())?;
        let digest = w.hash.finalize();
        w.inner.write_all(&digest).map_err(io)?;
        w.inner.flush().map_err(io)?;
        Ok(SnapshotSize {
            position,
            entries,
            bytes: w.bytes + digest.len() as u64,
        })
    }

    /// Makes the store at `settings.path` from the snapshot `input`
    /// (replacing what is there): loaded into a directory beside it and
    /// moved into place only once whole, so a load cut short leaves the
    /// old store. The store is at the snapshot's position afterwards.
    pub fn restore_snapshot(
        settings: &StoreSettings,
        input: impl Read,
    ) -> Result<SnapshotSize, StoreError> {
        let path = &settings.path;
        let beside = path.with_extension("restoring");
        let fs = |e: std::io::Error, at: &std::path::Path| {
            StoreError::Io(format!("{}: {e}", at.display()))
        };
        if beside.exists() {
            std::fs::remove_dir_all(&beside).map_err(|e| fs(e, &beside))?;
        }
        let mut loading = settings.clone();
        loading.path = beside.clone();
        loading.commits = None;
        loading.collect_keys = false;
        let loaded = Store::open(&loading).and_then(|store| {
            let size = store.load(input)?;
            store.inner.trees.meta.flush()?;
            futures::executor::block_on(store.flush())?;
            Ok(size)
        });
        let size = match loaded {
            Ok(size) => size,
            Err(e) => {
                // Nothing half-loaded stays beside the store.
                let _ = std::fs::remove_dir_all(&beside);
                return Err(e);
            }
        };
        if path.exists() {
            std::fs::remove_dir_all(path).map_err(|e| fs(e, path))?;
        }
        std::fs::rename(&beside, path).map_err(|e| fs(e, path))?;
        Ok(size)
    }

    /// Loads a snapshot into this store, which must hold nothing yet.
    fn load(&self, input: impl Read) -> Result<SnapshotSize, StoreError> {
        if self.holds_data() || self.log_position()? != 0 {
            return Err(StoreError::Snapshot(
                "a snapshot is loaded only into an empty store".into(),
            ));
        }
        let mut r = Hashed {
            inner: BufReader::new(input),
            hash: Sha256::new(),
            bytes: 0,
        };
        if &r.array::<8>("the magic bytes")? != MAGIC {
            return Err(r.error("not a store snapshot (no ORCHSNAP at its start)"));
        }
        let version = r.array::<1>("the version")?[0];
        if version != VERSION {
            return Err(r.error(&format!(
                "version {version}, and this build reads version {VERSION}"
            )));
        }
        let position = u64::from_be_bytes(r.array("the position")?);
        let trees = &self.inner.trees;
        let mut batches: Vec<(TreeId, sled::Batch, usize)> = Vec::new();
        let mut entries = 0u64;
        loop {
            let byte = r.array::<1>("an entry's tree")?[0];
            if byte == END {
                break;
            }
            let id = TreeId::from_byte(byte)
                .ok_or_else(|| r.error(&format!("an entry names tree {byte}, which is none")))?;
            let key = r.sized("an entry's key")?;
            let value = r.sized("an entry's value")?;
            match batches.iter_mut().find(|(t, ..)| *t == id) {
                Some((_, batch, n)) => {
                    batch.insert(key, value);
                    *n += 1;
                }
                None => {
                    let mut batch = sled::Batch::default();
                    batch.insert(key, value);
                    batches.push((id, batch, 1));
                }
            }
            entries += 1;
            if let Some(i) = batches.iter().position(|(.., n)| *n >= BATCH) {
                let (id, batch, _) = batches.swap_remove(i);
                trees.tree(id).apply_batch(batch)?;
            }
        }
        let stated = u64::from_be_bytes(r.array("the number of entries")?);
        if stated != entries {
            return Err(r.error(&format!("it states {stated} entries and holds {entries}")));
        }
        let computed = r.hash.clone().finalize();
        let mut digest = [0u8; 32];
        r.inner
            .read_exact(&mut digest)
            .map_err(|_| r.error("cut short before its digest"))?;
        if digest[..] != computed[..] {
            return Err(r.error("its digest does not match its bytes"));
        }
        if r.inner.read(&mut [0u8; 1]).map_err(io)? != 0 {
            return Err(r.error("bytes after its digest"));
        }
        for (id, batch, _) in batches {
            trees.tree(id).apply_batch(batch)?;
        }
        // Last: a load cut short before here is never taken for a store at
        // the snapshot's position.
        trees
            .meta
            .insert(APPLIED_KEY, &position.to_be_bytes()[..])?;
        Ok(SnapshotSize {
            position,
            entries,
            bytes: r.bytes + 32,
        })
    }
}

fn io(e: std::io::Error) -> StoreError {
    StoreError::Snapshot(e.to_string())
}

/// A writer that hashes and counts what it writes.
struct Hashing<W: Write> {
    inner: W,
    hash: Sha256,
    bytes: u64,
}

impl<W: Write> Hashing<W> {
    fn put(&mut self, bytes: &[u8]) -> Result<(), StoreError> {
        self.hash.update(bytes);
        self.bytes += bytes.len() as u64;
        self.inner.write_all(bytes).map_err(io)
    }

    fn sized(&mut self, bytes: &[u8]) -> Result<(), StoreError> {
        let len = u32::try_from(bytes.len())
            .map_err(|_| StoreError::Snapshot("an entry longer than 4 GiB".into()))?;
        self.put(&len.to_be_bytes())?;
        self.put(bytes)
    }
}

/// A reader that hashes and counts what it reads.
struct Hashed<R: Read> {
    inner: R,
    hash: Sha256,
    bytes: u64,
}

impl<R: Read> Hashed<R> {
    fn error(&self, what: &str) -> StoreError {
        StoreError::Snapshot(format!("at byte {}: {what}", self.bytes))
    }

    fn take(&mut self, n: usize, what: &str) -> Result<Vec<u8>, StoreError> {
        let mut buf = vec![0u8; n];
        self.inner
            .read_exact(&mut buf)
            .map_err(|_| self.error(&format!("cut short in {what}")))?;
        self.hash.update(&buf);
        self.bytes += n as u64;
        Ok(buf)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], StoreError> {
        let mut buf = [0u8; N];
        self.inner
            .read_exact(&mut buf)
            .map_err(|_| self.error(&format!("cut short in {what}")))?;
        self.hash.update(buf);
        self.bytes += N as u64;
        Ok(buf)
    }

    fn sized(&mut self, what: &str) -> Result<Vec<u8>, StoreError> {
        let len = u32::from_be_bytes(self.array(what)?) as usize;
        self.take(len, what)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        // Each case opens a store: fewer than the parsers' budget.
        #![proptest_config(ProptestConfig { cases: 24, ..crate::fuzz::config() })]

        /// Any bytes, or a snapshot with one byte changed, load or are
        /// refused as a snapshot error: never a panic, and a refused one
        /// leaves nothing in place.
        #[test]
        fn any_bytes_load_or_are_refused(
            noise in proptest::collection::vec(any::<u8>(), 0..120),
            at in any::<usize>(),
            byte in any::<u8>(),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let store = Store::open(&StoreSettings::new(dir.path().join("a"))).unwrap();
            let mut good = Vec::new();
            store.write_snapshot(0, &mut good).unwrap();
            drop(store);
            let mut edited = good.clone();
            let i = at % edited.len();
            let changed = edited[i] != byte;
            edited[i] = byte;
            let into = StoreSettings::new(dir.path().join("b"));
            for (bytes, must_fail) in [(&noise, true), (&edited, changed)] {
                match Store::restore_snapshot(&into, &bytes[..]) {
                    Ok(_) => prop_assert!(!must_fail, "loaded what is not a snapshot"),
                    Err(StoreError::Snapshot(_)) => {
                        prop_assert!(!into.path.with_extension("restoring").exists());
                    }
                    Err(e) => prop_assert!(false, "not a snapshot error: {e}"),
                }
            }
        }
    }
}
