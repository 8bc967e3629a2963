//! The store's handle: what one open store holds (its trees, its one
//! writer and group commit, the waiters and the change feed) and the
//! handle's own small methods; every other method is in the file of what
//! it reads or writes.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::{StoreError, changes, commit, idempotency, waiters, writer};
use crate::envelope::Timestamp;

/// A cheap, cloneable handle to one open store.
#[derive(Clone)]
pub struct Store {
    /// Shared by every clone; the database closes when the last one drops.
    pub(super) inner: Arc<Inner>,
    /// This handle only reads: a standby's copy, served to readers while
    /// its follower applies the leader's commits through another handle.
    pub(super) read_only: bool,
}

pub(super) struct Inner {
    /// Where the store lives, for error messages.
    pub(super) path: PathBuf,
    /// Every tree (their keys: the module's doc).
    pub(super) trees: writer::Trees,
    /// Tasks whose records a reader could not decode, with why, until the
    /// orchestrator takes them to quarantine (`quarantine.rs`).
    pub(super) unreadable:
        std::sync::Mutex<std::collections::BTreeMap<crate::envelope::TaskId, String>>,
    /// Collects expired idempotency keys in the background, through the
    /// writer (not on a standby's store). Dropped first: it keeps the
    /// writer's thread running.
    pub(super) _collector: Option<idempotency::Collector>,
    /// Runs every change, batching those that arrive together into one
    /// transaction. Dropped before `commit`, so its last batch is flushed.
    pub(super) writer: writer::Writer,
    /// Idempotency retention.
    pub(super) retention: Duration,
    /// Delays between attempts.
    pub(super) retry: crate::task::RetryPolicy,
    /// Makes changes durable before they are reported. Dropped before `db`.
    pub(super) commit: commit::GroupCommit,
    /// Where idempotency keys are: tasks' and runs'.
    pub(super) key_spaces: Vec<idempotency::KeySpace>,
    /// Waiters for tasks to end.
    pub(super) watchers: waiters::Watchers,
    /// Every change, for live views.
    pub(super) changes: changes::Changes,
    /// Transactions the writer committed since the store was opened.
    pub(super) commits: Arc<std::sync::atomic::AtomicU64>,
}

impl Store {
    /// A handle to this store that reads and refuses every write
    /// (`NotLeader`): a standby's copy, read while it follows the log.
    pub fn read_only(&self) -> Store {
        Store {
            inner: Arc::clone(&self.inner),
            read_only: true,
        }
    }

    /// How many handles to this store are open (read-only ones too): the
    /// store closes when the last is dropped.
    pub fn handles(&self) -> usize {
        Arc::strong_count(&self.inner)
    }

    /// Refuses a write through a read-only handle.
    fn writable(&self) -> Result<(), StoreError> {
        match self.read_only {
            true => Err(StoreError::NotLeader(
                "this node stands by: its copy of the store only reads, writes go to the leader"
                    .into(),
            )),
            false => Ok(()),
        }
    }

    /// Where the store lives.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Removes idempotency keys (tasks' and runs') that expired before
    /// `now`; returns how many. The store also does this by itself every
    /// `gc_interval`.
    pub fn collect_expired_keys(&self, now: Timestamp) -> Result<usize, StoreError> {
        self.writable()?;
        let writer = self
            .inner
            .writer
            .submitter()
            .ok_or_else(|| StoreError::Io("the store is closing".into()))?;
        idempotency::collect_all(&self.inner.key_spaces, now.unix_seconds(), &writer)
    }

    /// Whether the store holds anything but its format marker: a task, a
    /// run, an audit record, a key.
    pub fn holds_data(&self) -> bool {
        let t = &self.inner.trees;
        [&t.tasks, &t.envelopes, &t.idempotency, &t.audit, &t.runs]
            .iter()
            .any(|t| !t.is_empty())
    }

    /// How many idempotency keys are held (expired ones until collected).
    pub fn claimed_keys(&self) -> usize {
        self.inner.trees.idempotency.len()
    }

    /// How many transactions the store's writer committed since it was
    /// opened. Each holds every change that was waiting when it began, so
    /// under load this grows far slower than the number of changes.
    pub fn transactions(&self) -> u64 {
        self.inner.commits.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Waits until every change made so far is on disk.
    pub async fn flush(&self) -> Result<(), StoreError> {
        self.inner.commit.durable().await
    }

    /// Waits until everything a reader can see now is on disk: call after
    /// a read and before showing it, so nobody is shown a state a crash
    /// could take back. Free when nothing is waiting to be flushed.
    pub async fn settled(&self) -> Result<(), StoreError> {
        self.inner.commit.settled().await
    }

    /// Runs `body` on the writer thread, in the next batch transaction, and
    /// returns its result once that transaction commits (the caller then
    /// waits for the flush). `body` gets the trees and the audit head and
    /// returns the new head (the same one when it audited nothing). To fail,
    /// it aborts with its error before writing anything.
    pub(super) async fn transact<T: Send + 'static>(
        &self,
        body: writer::Body<T>,
    ) -> Result<T, StoreError> {
        self.writable()?;
        // Once the log refused a commit, another process leads it: nothing
        // more is written here.
        if let Some(refused) = self.inner.commit.refused() {
            return Err(refused);
        }
        self.inner.writer.run(body).await
    }
}

pub(super) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
