//! Opening a store: the directory, the lock, the format, the commit mark,
//! the migrations.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::{
    FORMAT, Inner, Store, StoreError, StoreSettings, audit, changes, check_format, commit,
    idempotency, mark, messages, migrate, row_keys, runs, waiters, writer,
};

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
                id: super::log::TreeId::Idempotency,
                name: "idempotency",
                prefix: b"",
            },
            idempotency::KeySpace {
                tree: runs.clone(),
                id: super::log::TreeId::Runs,
                name: "runs",
                prefix: runs::KEYS,
            },
            idempotency::KeySpace {
                tree: runs.clone(),
                id: super::log::TreeId::Runs,
                name: "runs",
                prefix: messages::MESSAGES,
            },
        ];
        let commits = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let recorded = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let log_watch = config.commits.as_ref().and_then(|sink| {
            sink.acked().map(|acked| super::log::LogWatch {
                recorded: Arc::clone(&recorded),
                acked,
            })
        });
        let trees = writer::Trees {
            tasks,
            envelopes,
            idempotency,
            by_correlation,
            by_state,
            by_label,
            audit,
            audit_by_task,
            meta,
            runs,
        };
        let writer = writer::Writer::start(
            trees.clone(),
            head,
            Arc::clone(&commits),
            config.commits.clone().map(|sink| (sink, recorded)),
        )?;
        // The collector's removals are commits: they go through the writer.
        let submit = writer
            .submitter()
            .ok_or_else(|| StoreError::Io("the store writer stopped".into()))?;
        let collector = match config.collect_keys {
            true => Some(idempotency::Collector::start(
                key_spaces.clone(),
                config.gc_interval,
                submit,
            )?),
            false => None,
        };
        Ok(Store {
            inner: Arc::new(Inner {
                _collector: collector,
                writer,
                commit: commit::GroupCommit::start(
                    db.clone(),
                    trees.meta.clone(),
                    mark,
                    Arc::clone(&commits),
                    log_watch,
                )?,
                commits,
                key_spaces,
                path,
                trees,
                unreadable: std::sync::Mutex::default(),
                retention: config.idempotency_retention,
                retry: config.retry,
                watchers: waiters::Watchers::default(),
                changes: changes::Changes::default(),
            }),
            read_only: false,
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
