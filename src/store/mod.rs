//! The durable store: tasks with their history, idempotency claims, indexes
//! and the audit log, in one sled database behind the small [`Store`] handle.
//!
//! Rules (DESIGN section 5):
//! - every method that reports a change returns only once the change is
//!   flushed to disk (group commit: one flush serves many writers);
//! - changes that touch several trees are one sled transaction, so indexes
//!   always agree with tasks and every transition has its audit record;
//! - records that fail to decode are reported with their tree and key.
//!
//! Trees: `tasks` (task id → [`crate::task::TaskStatus`], rewritten on
//! each change), `envelopes` (task id → envelope, written once),
//! `idempotency` (scope/key → claim), `by_correlation` and `by_state`
//! (index keys → nothing; a task whose correlation id is its own id is not
//! in `by_correlation`), `by_label` (a task's agent, owner and trigger →
//! nothing: see `labels.rs`), `audit` (sequence → chained record),
//! `audit_by_task` (task id → its records' sequences: a task's history) and
//! `meta` (format marker, audit head, quarantined records: see
//! `quarantine.rs`; the outbox's push deliveries: see `outbox.rs`), and `runs` (workflow runs, their
//! step links, keys and indexes: see `runs.rs` and `run_index.rs`). A [`crate::task::TaskRecord`] is
//! assembled from the first two and the task's audit records.

mod apply;
mod audit;
mod changes;
mod commit;
mod error;
mod format;
mod idempotency;
mod labels;
mod listing;
mod mark;
mod messages;
mod migrate;
mod open;
mod outbox;
mod quarantine;
mod row_keys;
mod run_index;
mod runs;
mod settings;
mod submit;
mod tasks;
mod verify;
mod waiters;
mod writer;

use crate::audit::{AuditEntry, AuditFilter, AuditRecord, AuditReport};
pub use apply::{Applied, Change};
pub use changes::Changed;
pub use error::StoreError;
pub use format::format_name;
pub use idempotency::Fingerprint;
pub use listing::TaskQuery;
pub use messages::MessageClaim;
pub use outbox::{CALLBACK, GaveUp, PushAuth, PushDelivery, PushTarget, Target};
pub use quarantine::Quarantined;
pub use runs::{NewRun, ScheduleCursor, StepLink};
pub use settings::StoreSettings;
pub use submit::NewTask;
pub use verify::IndexReport;
pub use waiters::Watch;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::envelope::Timestamp;
use format::{FORMAT, FORMAT_V2, FORMAT_V3, FORMAT_V4, FORMAT_V5, check_format};

/// A cheap, cloneable handle to one open store.
#[derive(Clone)]
pub struct Store {
    /// Shared by every clone; the database closes when the last one drops.
    inner: Arc<Inner>,
}

struct Inner {
    /// Where the store lives, for error messages.
    path: PathBuf,
    /// task id → task status.
    tasks: sled::Tree,
    /// task id → envelope (written once).
    envelopes: sled::Tree,
    /// scope/key → idempotency claim.
    idempotency: sled::Tree,
    /// correlation id / task id → nothing.
    by_correlation: sled::Tree,
    /// state code / task id → nothing.
    by_state: sled::Tree,
    by_label: sled::Tree,
    /// sequence → chained audit record.
    audit: sled::Tree,
    /// task id / sequence → nothing: each task's audit records.
    audit_by_task: sled::Tree,
    /// Workflow runs (see `runs.rs` for its keys).
    runs: sled::Tree,
    /// Format marker, audit head, quarantined records.
    meta: sled::Tree,
    /// Tasks whose records a reader could not decode, with why, until the
    /// orchestrator takes them to quarantine (`quarantine.rs`).
    unreadable: std::sync::Mutex<std::collections::BTreeMap<crate::envelope::TaskId, String>>,
    /// Runs every change, batching those that arrive together into one
    /// transaction. Dropped before `commit`, so its last batch is flushed.
    writer: writer::Writer,
    /// Idempotency retention.
    retention: Duration,
    /// Delays between attempts.
    retry: crate::task::RetryPolicy,
    /// Makes changes durable before they are reported. Dropped before `db`.
    commit: commit::GroupCommit,
    /// Where idempotency keys are: tasks' and runs'.
    key_spaces: Vec<idempotency::KeySpace>,
    /// Collects expired idempotency keys in the background.
    _collector: idempotency::Collector,
    /// Waiters for tasks to end.
    watchers: waiters::Watchers,
    /// Every change, for live views.
    changes: changes::Changes,
    /// Transactions the writer committed since the store was opened.
    commits: Arc<std::sync::atomic::AtomicU64>,
}

impl Store {
    /// Where the store lives.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Appends one record to the audit log and returns it once durable.
    pub async fn audit(&self, entry: AuditEntry) -> Result<AuditRecord, StoreError> {
        let at = Timestamp::now();
        let record = self
            .transact(Box::new(move |tx, head| {
                audit::append_record(tx, head, &entry, at)
            }))
            .await?;
        self.inner.commit.durable().await?;
        Ok(record)
    }

    /// Up to `limit` audit records after sequence `after` (0 = from the
    /// start) that match `filter`, oldest first.
    pub fn audit_list(
        &self,
        filter: &AuditFilter,
        after: u64,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        audit::list(
            &self.inner.audit,
            &self.inner.audit_by_task,
            filter,
            after,
            limit,
        )
    }

    /// Checks the whole audit chain; reports the first missing, altered or
    /// undecodable record.
    pub fn verify_audit(&self) -> Result<AuditReport, StoreError> {
        let head = self.inner.writer.head();
        audit::verify(&self.inner.audit, head)
    }

    /// Removes idempotency keys (tasks' and runs') that expired before
    /// `now`; returns how many. The store also does this by itself every
    /// `gc_interval`.
    pub fn collect_expired_keys(&self, now: Timestamp) -> Result<usize, StoreError> {
        idempotency::collect_all(&self.inner.key_spaces, now.unix_seconds())
    }

    /// How many idempotency keys are held (expired ones until collected).
    pub fn claimed_keys(&self) -> usize {
        self.inner.idempotency.len()
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
    async fn transact<T: Send + 'static>(&self, body: writer::Body<T>) -> Result<T, StoreError> {
        self.inner.writer.run(body).await
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// How a transaction body gives up: with a [`StoreError`] or on a conflict.
type Abort = sled::transaction::ConflictableTransactionError<StoreError>;

/// Every tree, inside one transaction.
struct Tx<'a> {
    /// task id → task status.
    tasks: &'a sled::transaction::TransactionalTree,
    /// task id → envelope (written once).
    envelopes: &'a sled::transaction::TransactionalTree,
    /// scope/key → idempotency claim.
    idempotency: &'a sled::transaction::TransactionalTree,
    /// correlation id / task id → nothing.
    by_correlation: &'a sled::transaction::TransactionalTree,
    /// state code / task id → nothing.
    by_state: &'a sled::transaction::TransactionalTree,
    /// kind, value / task id → nothing: tasks by agent, owner, trigger.
    by_label: &'a sled::transaction::TransactionalTree,
    /// sequence → chained audit record.
    audit: &'a sled::transaction::TransactionalTree,
    /// task id / sequence → nothing: each task's audit records.
    audit_by_task: &'a sled::transaction::TransactionalTree,
    /// format marker and audit head.
    meta: &'a sled::transaction::TransactionalTree,
    /// Workflow runs, their step links, keys and the live set.
    runs: &'a sled::transaction::TransactionalTree,
}
