//! The store's commits as records: each batch the one writer commits is
//! the list of its writes to every tree, in order; applied in order to a
//! store, the records make it again. This is what the replicated log will
//! carry (issue 44): sled becomes the local, rebuildable view of it.
//!
//! A record's wire form (version 1), every integer big-endian:
//! `0x01`, the log position it is (u64), the number of writes (u32), then
//! per write: the tree (one byte, [`TreeId`]), `0` for a remove or `1` for
//! an insert, the key's length (u32) and bytes, and for an insert the
//! value's length (u32) and bytes. Applying a record writes every one of
//! its writes and the position into `meta` (`log_applied`) in one
//! transaction, so a record applied twice changes nothing the second time.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use sled::IVec;
use sled::Transactional;
use tokio::sync::watch;

use super::StoreError;
use super::writer::Trees;

/// The `meta` key of the last record applied.
pub(crate) const APPLIED_KEY: &[u8] = b"log_applied";

/// The `meta` key of the last record's digest.
pub(crate) const DIGEST_KEY: &[u8] = b"log_digest";

/// The trees a record writes to, by the byte that names each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum TreeId {
    Tasks = 1,
    Envelopes = 2,
    Idempotency = 3,
    ByCorrelation = 4,
    ByState = 5,
    ByLabel = 6,
    Audit = 7,
    AuditByTask = 8,
    Meta = 9,
    Runs = 10,
}

impl TreeId {
    /// Every tree, in the order a transaction lists them.
    pub(crate) const ALL: [TreeId; 10] = [
        TreeId::Tasks,
        TreeId::Envelopes,
        TreeId::Idempotency,
        TreeId::ByCorrelation,
        TreeId::ByState,
        TreeId::ByLabel,
        TreeId::Audit,
        TreeId::AuditByTask,
        TreeId::Meta,
        TreeId::Runs,
    ];

    /// The tree's name in sled.
    pub(crate) fn name(self) -> &'static str {
        match self {
            TreeId::Tasks => "tasks",
            TreeId::Envelopes => "envelopes",
            TreeId::Idempotency => "idempotency",
            TreeId::ByCorrelation => "by_correlation",
            TreeId::ByState => "by_state",
            TreeId::ByLabel => "by_label",
            TreeId::Audit => "audit",
            TreeId::AuditByTask => "audit_by_task",
            TreeId::Meta => "meta",
            TreeId::Runs => "runs",
        }
    }

    pub(crate) fn from_byte(b: u8) -> Option<TreeId> {
        TreeId::ALL.into_iter().find(|t| *t as u8 == b)
    }
}

/// One write of a commit: `value` `None` removes the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Write {
    pub(crate) tree: TreeId,
    pub(crate) key: IVec,
    pub(crate) value: Option<IVec>,
}

/// One committed batch: its position in the log (1, 2, …) and its writes
/// in the order they were made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    /// Its position: one more than the commit before it.
    pub position: u64,
    pub(crate) writes: Vec<Write>,
}

/// How far the log has taken a store's commits: every position up to
/// `position` is in it; `refused` once it refused one (another process
/// leads the log now), after which nothing more is taken.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Acked {
    /// The last position the log holds.
    pub position: u64,
    /// Why the log refused a commit, once it did.
    pub refused: Option<Arc<str>>,
}

/// Where a store hands each commit once sled has it (the log's appender;
/// a test's collector), called on the writer's thread in commit order;
/// and, for a log, how far it has taken them: a change is then reported
/// only once the log has it.
#[derive(Clone)]
pub struct CommitSink {
    send: Arc<dyn Fn(Commit) + Send + Sync>,
    acked: Option<watch::Receiver<Acked>>,
}

impl CommitSink {
    /// A sink that calls `f` with every commit; nothing waits for it.
    pub fn new(f: impl Fn(Commit) + Send + Sync + 'static) -> Self {
        CommitSink {
            send: Arc::new(f),
            acked: None,
        }
    }

    /// A sink that calls `f` with every commit, whose changes are reported
    /// only once `acked` says the log holds them.
    pub fn acknowledged(
        f: impl Fn(Commit) + Send + Sync + 'static,
        acked: watch::Receiver<Acked>,
    ) -> Self {
        CommitSink {
            send: Arc::new(f),
            acked: Some(acked),
        }
    }

    pub(crate) fn send(&self, commit: Commit) {
        (self.send)(commit)
    }

    pub(crate) fn acked(&self) -> Option<watch::Receiver<Acked>> {
        self.acked.clone()
    }
}

impl std::fmt::Debug for CommitSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CommitSink")
    }
}

impl PartialEq for CommitSink {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.send, &other.send)
    }
}

/// What a store with a log waits on: the last position its writer handed
/// to the log, and how far the log has taken them.
#[derive(Clone)]
pub(crate) struct LogWatch {
    pub(crate) recorded: Arc<AtomicU64>,
    pub(crate) acked: watch::Receiver<Acked>,
}

impl LogWatch {
    /// The error every write gets once the log refused one.
    pub(crate) fn refused(&self) -> Option<StoreError> {
        let a = self.acked.borrow();
        a.refused
            .as_ref()
            .map(|why| StoreError::NotLeader(why.to_string()))
    }

    /// Whether the log holds every commit made so far.
    pub(crate) fn caught_up(&self) -> bool {
        let a = self.acked.borrow();
        a.refused.is_none() && a.position >= self.recorded.load(Ordering::SeqCst)
    }

    /// The last position handed to the log now.
    pub(crate) fn recorded(&self) -> u64 {
        self.recorded.load(Ordering::SeqCst)
    }

    /// Waits until the log holds position `want`, or refused a commit.
    pub(crate) async fn reached(&self, want: u64) -> Result<(), StoreError> {
        let mut acked = self.acked.clone();
        loop {
            {
                let a = acked.borrow_and_update();
                if let Some(why) = &a.refused {
                    return Err(StoreError::NotLeader(why.to_string()));
                }
                if a.position >= want {
                    return Ok(());
                }
            }
            if acked.changed().await.is_err() {
                return Err(StoreError::NotLeader(
                    "the log's appender stopped".to_string(),
                ));
            }
        }
    }
}

/// Why a record's bytes are not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("log record at byte {at}: {what}")]
pub struct RecordError {
    /// Where reading stopped.
    pub at: usize,
    /// What was expected there.
    pub what: &'static str,
}

impl Commit {
    /// The record's bytes.
    pub fn encode(&self) -> Vec<u8> {
        encode(self.position, &self.writes)
    }

    /// The digest of the record's bytes: what a store keeps of the last
    /// record it wrote or applied, to tell it from another at the same
    /// position.
    pub fn digest(&self) -> Digest {
        digest(self.position, &self.writes)
    }

    /// Reads a record's bytes; every byte must belong to it.
    pub fn decode(bytes: &[u8]) -> Result<Commit, RecordError> {
        let mut r = Reader { bytes, at: 0 };
        if r.take(1, "the version")? != [1] {
            return Err(r.error("version 1"));
        }
        let position = u64::from_be_bytes(r.array("the position")?);
        let count = u32::from_be_bytes(r.array("the number of writes")?);
        let mut writes = Vec::with_capacity(count.min(1 << 16) as usize);
        for _ in 0..count {
            let tree = r.take(1, "a tree")?[0];
            let tree = TreeId::from_byte(tree).ok_or_else(|| r.error("a known tree"))?;
            let insert = match r.take(1, "the operation")?[0] {
                0 => false,
                1 => true,
                _ => return Err(r.error("0 (remove) or 1 (insert)")),
            };
            let key = IVec::from(r.sized("the key")?);
            let value = match insert {
                true => Some(IVec::from(r.sized("the value")?)),
                false => None,
            };
            writes.push(Write { tree, key, value });
        }
        if r.at != bytes.len() {
            return Err(r.error("the end of the record"));
        }
        Ok(Commit { position, writes })
    }
}

/// A record's bytes: the position and the writes.
pub(crate) fn encode(position: u64, writes: &[Write]) -> Vec<u8> {
    let size: usize = writes
        .iter()
        .map(|w| 10 + w.key.len() + w.value.as_ref().map_or(0, |v| v.len()))
        .sum();
    let mut out = Vec::with_capacity(13 + size);
    write_record(position, writes, &mut |bytes| out.extend_from_slice(bytes));
    out
}

/// Hands a record's bytes to `out`, piece by piece.
fn write_record(position: u64, writes: &[Write], out: &mut impl FnMut(&[u8])) {
    out(&[1]);
    out(&position.to_be_bytes());
    out(&(writes.len() as u32).to_be_bytes());
    for w in writes {
        out(&[w.tree as u8, u8::from(w.value.is_some())]);
        out(&(w.key.len() as u32).to_be_bytes());
        out(&w.key);
        if let Some(v) = &w.value {
            out(&(v.len() as u32).to_be_bytes());
            out(v);
        }
    }
}

/// A record's digest: the XXH3 128-bit hash of its bytes, big-endian.
/// It tells two records at one position apart (a leader that committed
/// what the log then refused); nothing trusts it against a forger, which
/// is why a fast hash serves (SHA-256 here cost a fifth of the leader's
/// instructions per task).
pub type Digest = [u8; 16];

/// A record's digest, hashed as its bytes are made (the writer needs only
/// the digest; the log's appender encodes the record itself).
pub(crate) fn digest(position: u64, writes: &[Write]) -> Digest {
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    write_record(position, writes, &mut |bytes| hasher.update(bytes));
    hasher.digest128().to_be_bytes()
}

/// Whether `kept`, the digest a store holds for its last record, names
/// another record than `digest`. A digest of another length was written
/// by an earlier version (a SHA-256) and cannot be compared: it is taken
/// as the same record.
fn differs(kept: &[u8], digest: &Digest) -> bool {
    kept.len() == digest.len() && kept != digest
}

/// Reads a record's bytes in order.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn error(&self, what: &'static str) -> RecordError {
        RecordError { at: self.at, what }
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], RecordError> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.bytes.len());
        let end = end.ok_or_else(|| self.error(what))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], RecordError> {
        let bytes = self.take(N, what)?;
        bytes.try_into().map_err(|_| self.error(what))
    }

    fn sized(&mut self, what: &'static str) -> Result<&'a [u8], RecordError> {
        let len = u32::from_be_bytes(self.array(what)?) as usize;
        self.take(len, what)
    }
}

/// The position of the last record applied to `meta`'s store (0: none).
pub(crate) fn applied(meta: &sled::Tree) -> Result<u64, StoreError> {
    Ok(meta
        .get(APPLIED_KEY)?
        .and_then(|v| <[u8; 8]>::try_from(v.as_ref()).ok())
        .map_or(0, u64::from_be_bytes))
}

/// Applies to `trees` the records of `commits` (in order) past the
/// position already applied, in one transaction with the last one's
/// position and digest; how many it applied. A record at the position
/// applied must be the one applied there (else [`StoreError::Diverged`]);
/// one after a gap is refused ([`StoreError::Behind`]) and the whole call
/// applies nothing.
pub(crate) fn apply(trees: &Trees, commits: &[Commit]) -> Result<usize, StoreError> {
    use sled::transaction::ConflictableTransactionError::Abort;
    let all = trees.all();
    let applied = all.transaction(|t| {
        let done =
            t.8.get(APPLIED_KEY)?
                .and_then(|v| <[u8; 8]>::try_from(v.as_ref()).ok())
                .map_or(0, u64::from_be_bytes);
        let each = [&t.0, &t.1, &t.2, &t.3, &t.4, &t.5, &t.6, &t.7, &t.8, &t.9];
        let mut at = done;
        let mut last = None;
        for commit in commits {
            if commit.position <= at {
                // The record this store holds at its position must be
                // this one: a store that wrote another there (a leader
                // that committed what the log then refused) has left the
                // log.
                if commit.position == done
                    && last.is_none()
                    && t.8
                        .get(DIGEST_KEY)?
                        .is_some_and(|d| differs(&d, &commit.digest()))
                {
                    return Err(Abort(StoreError::Diverged {
                        position: commit.position,
                    }));
                }
                continue;
            }
            if commit.position != at + 1 {
                return Err(Abort(StoreError::Behind {
                    applied: at,
                    position: commit.position,
                }));
            }
            for w in &commit.writes {
                let tree = each[TreeId::ALL.iter().position(|t| *t == w.tree).unwrap_or(0)];
                match &w.value {
                    Some(v) => tree.insert(w.key.clone(), v.clone())?,
                    None => tree.remove(w.key.clone())?,
                };
            }
            at = commit.position;
            last = Some(commit);
        }
        let Some(last) = last else {
            return Ok(0);
        };
        t.8.insert(APPLIED_KEY, &last.position.to_be_bytes()[..])?;
        t.8.insert(DIGEST_KEY, &last.digest()[..])?;
        Ok::<_, sled::transaction::ConflictableTransactionError<StoreError>>((at - done) as usize)
    });
    Ok(applied?)
}

impl super::Store {
    /// The store's position in the log: the last record it wrote or
    /// applied (0: none).
    pub fn log_position(&self) -> Result<u64, StoreError> {
        applied(&self.inner.trees.meta)
    }

    /// Applies a record of another store's commit (a standby following
    /// the log): its writes and its position in one transaction; a record
    /// at or below the position already applied changes nothing (`false`).
    /// Records must come in order, and never beside this store's own
    /// writes.
    pub fn apply_commit(&self, commit: &Commit) -> Result<bool, StoreError> {
        Ok(apply(&self.inner.trees, std::slice::from_ref(commit))? > 0)
    }

    /// Applies the records of `commits`, in order, as [`Store::apply_commit`]
    /// does each but in one transaction: a standby applies what it read of
    /// the log at once rather than a transaction per record. How many it
    /// applied; a record after a gap applies none.
    pub fn apply_commits(&self, commits: &[Commit]) -> Result<usize, StoreError> {
        apply(&self.inner.trees, commits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commit(position: u64, value: &[u8]) -> Commit {
        Commit {
            position,
            writes: vec![Write {
                tree: TreeId::Tasks,
                key: IVec::from(&b"t1"[..]),
                value: Some(IVec::from(value)),
            }],
        }
    }

    #[test]
    fn a_digest_is_the_xxh3_128_of_the_record_bytes() {
        let c = commit(7, b"v");
        let bytes = c.encode();
        assert_eq!(
            c.digest(),
            xxhash_rust::xxh3::xxh3_128(&bytes).to_be_bytes()
        );
        assert_ne!(c.digest(), commit(7, b"w").digest());
        assert_ne!(c.digest(), commit(8, b"v").digest());
    }

    #[test]
    fn only_a_digest_of_the_same_kind_can_differ() {
        let d = commit(1, b"v").digest();
        assert!(!differs(&d, &d));
        assert!(differs(&commit(1, b"w").digest(), &d));
        // An earlier version's SHA-256: not comparable, so not a divergence.
        assert!(!differs(&[0u8; 32], &d));
    }
}
