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
//! `quarantine.rs`; the outbox's deliveries: see `deliveries.rs`), and `runs` (workflow runs, their
//! step links, keys and indexes: see `runs.rs` and `run_index.rs`). A [`crate::task::TaskRecord`] is
//! assembled from the first two and the task's audit records.

mod apply;
mod audit;
mod changes;
mod commit;
mod error;
mod idempotency;
mod labels;
mod listing;
mod mark;
mod messages;
mod migrate;
mod outbox;
mod quarantine;
mod row_keys;
mod run_index;
mod runs;
mod submit;
mod tasks;
mod verify;
mod waiters;
mod writer;

use crate::audit::{AuditEntry, AuditFilter, AuditRecord, AuditReport};
pub use apply::{Applied, Change};
pub use changes::Changed;
pub use error::StoreError;
pub use idempotency::Fingerprint;
pub use listing::TaskQuery;
pub use messages::MessageClaim;
pub use outbox::{CALLBACK, GaveUp, PushAuth, PushDelivery, PushTarget, Target};
pub use quarantine::Quarantined;
pub use runs::{NewRun, ScheduleCursor, StepLink};
pub use submit::NewTask;
pub use verify::IndexReport;
pub use waiters::Watch;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::envelope::Timestamp;

/// The format marker written in `meta` when a store is created.
const FORMAT: &[u8] = b"orchestrator-store-v6";

/// The store's format, as `orchestrator version` names it (`v6`).
pub fn format_name() -> &'static str {
    std::str::from_utf8(FORMAT)
        .ok()
        .and_then(|f| f.strip_prefix("orchestrator-store-"))
        .unwrap_or("unknown")
}

/// Earlier formats, migrated on open: v1 had no audit-by-task index; v2
/// kept each task's envelope and history in its record; v3 had no run
/// indexes; v4 kept an audit index key per record and indexed every task
/// by correlation id; v5 had no `by_label` index.
const FORMAT_V1: &[u8] = b"orchestrator-store-v1";
const FORMAT_V2: &[u8] = b"orchestrator-store-v2";
const FORMAT_V3: &[u8] = b"orchestrator-store-v3";
const FORMAT_V4: &[u8] = b"orchestrator-store-v4";
const FORMAT_V5: &[u8] = b"orchestrator-store-v5";

/// Every format a store may be found in, oldest first: format `n` is at
/// `n - 1`, and a store in format `n` runs every migration after it.
const FORMATS: [&[u8]; 6] = [
    FORMAT_V1, FORMAT_V2, FORMAT_V3, FORMAT_V4, FORMAT_V5, FORMAT,
];

/// How a store is opened.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreSettings {
    /// The directory holding the sled database.
    pub path: PathBuf,
    /// How long an idempotency key stays claimed (default 24 h).
    pub idempotency_retention: Duration,
    /// How often expired keys are collected (default 10 min).
    pub gc_interval: Duration,
    /// sled's page cache size in bytes (default 8 MiB: sled's own default
    /// of 1 GiB would dwarf the orchestrator's memory budget; 32 MiB is
    /// about 10 % faster and 24 MiB larger at 100,000 tasks).
    pub cache_bytes: u64,
    /// When the next attempt runs after a retryable failure: the store owns
    /// the attempt number, so it also decides this.
    pub retry: crate::task::RetryPolicy,
}

impl StoreSettings {
    /// The defaults, for the store of the data directory `data_dir`
    /// (its `store/` subdirectory).
    pub fn in_data_dir(data_dir: impl AsRef<Path>) -> Self {
        StoreSettings::new(data_dir.as_ref().join("store"))
    }

    /// The defaults, for a store at `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        StoreSettings {
            path: path.into(),
            idempotency_retention: Duration::from_secs(24 * 3600),
            gc_interval: Duration::from_secs(600),
            cache_bytes: 8 * 1024 * 1024,
            retry: crate::task::RetryPolicy::default(),
        }
    }
}

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
    /// Opens (or creates) the store described by `config`.
    ///
    /// Fails with a message naming the path when the directory cannot be
    /// created, another process holds the store, the files are corrupt or
    /// truncated, or the directory holds some other sled database.
    pub fn open(config: &StoreSettings) -> Result<Store, StoreError> {
        let path = config.path.clone();
        crate::files::private_dir(&path).map_err(|e| StoreError::Open {
            path: path.clone(),
            message: e.to_string(),
        })?;
        let db = open_db(&path, config.cache_bytes)?;
        // Every task's params and push credentials: its owner's alone,
        // also when sled wrote its files under a looser umask.
        crate::files::make_private(&path).map_err(|e| StoreError::Open {
            path: path.clone(),
            message: format!("cannot make it private: {e}"),
        })?;
        // Before any tree is opened (which creates it): is this database new?
        let fresh = db.is_empty() && db.tree_names().len() == 1;
        let open_tree = |name: &str| {
            db.open_tree(name).map_err(|e| StoreError::Open {
                path: path.clone(),
                message: format!("tree `{name}`: {e}"),
            })
        };
        let tasks = open_tree("tasks")?;
        let envelopes = open_tree("envelopes")?;
        let meta = open_tree("meta")?;
        let audit = open_tree("audit")?;
        let audit_by_task = open_tree("audit_by_task")?;
        let by_correlation = open_tree("by_correlation")?;
        let runs = open_tree("runs")?;
        let by_label = open_tree("by_label")?;
        let head = audit::read_head(&meta)?;
        let mark = match mark::CommitMark::open(&path)? {
            Some((mark, marked)) => {
                let version = check_format(&path, &meta)?;
                check_against_mark(&path, &audit, head, marked)?;
                if version < 2 {
                    migrate::v1_to_v2(&path, &audit, &audit_by_task, &meta)?;
                }
                if version < 3 {
                    migrate::v2_to_v3(&path, &tasks, &envelopes, &meta)?;
                }
                if version < 4 {
                    migrate::v3_to_v4(&path, &runs, &meta, config.idempotency_retention)?;
                }
                if version < 5 {
                    migrate::v4_to_v5(&path, &audit_by_task, &by_correlation, &meta)?;
                }
                if version < 6 {
                    migrate::v5_to_v6(&path, &tasks, &envelopes, &by_label, &meta)?;
                }
                mark
            }
            None if fresh => {
                let mark = mark::CommitMark::create(&path)?;
                meta.insert("format", FORMAT)?;
                meta.flush()?;
                mark
            }
            None => {
                return Err(StoreError::NotAStore {
                    path: path.clone(),
                    found: format!("data without its {}", mark::FILE_NAME),
                });
            }
        };
        let idempotency = open_tree("idempotency")?;
        let by_state = open_tree("by_state")?;
        let key_spaces = vec![
            idempotency::KeySpace {
                tree: idempotency.clone(),
                name: "idempotency",
                prefix: b"",
            },
            idempotency::KeySpace {
                tree: runs.clone(),
                name: "runs",
                prefix: runs::KEYS,
            },
            idempotency::KeySpace {
                tree: runs.clone(),
                name: "runs",
                prefix: messages::MESSAGES,
            },
        ];
        let collector = idempotency::Collector::start(key_spaces.clone(), config.gc_interval)?;
        let commits = Arc::new(std::sync::atomic::AtomicU64::new(0));
        Ok(Store {
            inner: Arc::new(Inner {
                writer: writer::Writer::start(
                    writer::Trees {
                        tasks: tasks.clone(),
                        envelopes: envelopes.clone(),
                        idempotency: idempotency.clone(),
                        by_correlation: by_correlation.clone(),
                        by_state: by_state.clone(),
                        by_label: by_label.clone(),
                        audit: audit.clone(),
                        audit_by_task: audit_by_task.clone(),
                        meta: meta.clone(),
                        runs: runs.clone(),
                    },
                    head,
                    Arc::clone(&commits),
                )?,
                commit: commit::GroupCommit::start(
                    db.clone(),
                    meta.clone(),
                    mark,
                    Arc::clone(&commits),
                )?,
                commits,
                key_spaces,
                _collector: collector,
                path,
                tasks,
                envelopes,
                idempotency,
                by_correlation,
                by_state,
                by_label,
                audit,
                audit_by_task,
                runs,
                meta,
                unreadable: std::sync::Mutex::default(),
                retention: config.idempotency_retention,
                retry: config.retry,
                watchers: waiters::Watchers::default(),
                changes: changes::Changes::default(),
            }),
        })
    }

    /// Opens the store described by `config` only if one is there: for
    /// maintenance commands, which must never create one (a mistyped
    /// directory is an error, not an empty store that checks out).
    pub fn open_existing(config: &StoreSettings) -> Result<Store, StoreError> {
        if !config.path.join(mark::FILE_NAME).is_file() {
            let found = if config.path.exists() {
                format!("no {} in it", mark::FILE_NAME)
            } else {
                "no such directory".to_string()
            };
            return Err(StoreError::NotAStore {
                path: config.path.clone(),
                found,
            });
        }
        Store::open(config)
    }

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

/// How long [`Store::open`] waits for another holder of the store's lock.
/// sled releases its lock from background threads shortly after a store is
/// dropped, so a store closed and reopened in one process may need a moment.
const LOCK_WAIT: Duration = Duration::from_secs(3);

/// Opens sled, turning its errors (and its panics on some corrupt files)
/// into errors that name the path.
fn open_db(path: &Path, cache_bytes: u64) -> Result<sled::Db, StoreError> {
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    loop {
        if held_by_another(path) {
            if std::time::Instant::now() >= deadline {
                return Err(StoreError::Locked {
                    path: path.to_path_buf(),
                });
            }
            std::thread::sleep(Duration::from_millis(25));
            continue;
        }
        let config = sled::Config::new().path(path).cache_capacity(cache_bytes);
        let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || config.open()));
        let error = match opened {
            Ok(Ok(db)) => return Ok(db),
            Ok(Err(e)) => e,
            Err(panic) => {
                let message = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "sled panicked while reading it".into());
                return Err(StoreError::Open {
                    path: path.to_path_buf(),
                    message: format!("the store files are corrupt: {message}"),
                });
            }
        };
        return Err(StoreError::Open {
            path: path.to_path_buf(),
            message: error.to_string(),
        });
    }
}

/// Whether another holder has the lock sled takes on the store's `db`
/// file (an exclusive `flock`, the same kind `File::try_lock` asks for):
/// asked of the file itself rather than read from sled's error text.
fn held_by_another(path: &Path) -> bool {
    match std::fs::File::open(path.join("db")) {
        Ok(file) => matches!(file.try_lock(), Err(std::fs::TryLockError::WouldBlock)),
        Err(_) => false,
    }
}

/// Checks the format marker of a store that has a commit mark; returns
/// its version (this format's, or one that is migrated on open).
fn check_format(path: &Path, meta: &sled::Tree) -> Result<usize, StoreError> {
    match meta.get("format")? {
        Some(found) if let Some(at) = FORMATS.iter().position(|f| *f == found.as_ref()) => {
            Ok(at + 1)
        }
        Some(found) => Err(StoreError::NotAStore {
            path: path.to_path_buf(),
            found: String::from_utf8_lossy(&found).into_owned(),
        }),
        None => Err(StoreError::Open {
            path: path.to_path_buf(),
            message: "the store files are corrupt or truncated: the format marker is gone".into(),
        }),
    }
}

/// Refuses a store that lost writes the commit mark says were flushed.
fn check_against_mark(
    path: &Path,
    audit: &sled::Tree,
    head: audit::Head,
    marked: audit::Head,
) -> Result<(), StoreError> {
    let corrupt = |message: String| StoreError::Open {
        path: path.to_path_buf(),
        message: format!("the store files are corrupt or truncated: {message}"),
    };
    if head.seq < marked.seq {
        return Err(corrupt(format!(
            "{} audit records were acknowledged, the log now ends at {}",
            marked.seq, head.seq
        )));
    }
    if marked.seq == 0 {
        return Ok(());
    }
    match audit.get(row_keys::audit(marked.seq))? {
        Some(value) if value.len() >= 32 && value[..32] == marked.hash => Ok(()),
        Some(_) => Err(corrupt(format!(
            "audit record {} differs from the one acknowledged",
            marked.seq
        ))),
        None => Err(corrupt(format!(
            "acknowledged audit record {} is missing",
            marked.seq
        ))),
    }
}
