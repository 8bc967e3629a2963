//! Idempotency claims: scope + key → the task that owns them.
//!
//! A claim is made in the same sled transaction that creates the task, so a
//! claim never points at a task that does not exist; the transaction reads
//! the key and writes it only if it is free or expired, which is a
//! compare-and-swap that also covers the task and its indexes.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use sled::IVec;

use super::log::TreeId;
use super::writer::Submit;
use super::{StoreError, row_keys};
use crate::envelope::{TaskId, Timestamp};

/// A digest of a request, to tell a retry (same request) from a conflicting
/// reuse of the same idempotency key (another request).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Fingerprint(String);

impl Fingerprint {
    /// SHA-256 of the canonical JSON of `request` (map keys sorted, as
    /// `serde_json` writes its maps).
    pub fn of<T: Serialize>(request: &T) -> Self {
        let bytes = serde_json::to_vec(request).unwrap_or_default();
        Fingerprint(hex::encode(Sha256::digest(&bytes)))
    }
}

/// What the idempotency tree holds for one claimed key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Claim {
    /// The task that owns the key.
    pub(crate) task_id: TaskId,
    /// The request that claimed it.
    pub(crate) fingerprint: Fingerprint,
    /// Unix seconds after which the key is free again.
    pub(crate) expires_at: i64,
}

impl Claim {
    pub(crate) fn new(task_id: TaskId, fingerprint: Fingerprint, retention: Duration) -> Self {
        Claim {
            task_id,
            fingerprint,
            expires_at: Timestamp::now().after(retention).unix_seconds(),
        }
    }

    pub(crate) fn is_expired(&self, now: i64) -> bool {
        expired(self.expires_at, now)
    }
}

/// Whether a key that expires at `expires_at` is free at `now` (Unix
/// seconds): the one rule for tasks' and runs' keys.
pub(crate) fn expired(expires_at: i64, now: i64) -> bool {
    expires_at <= now
}

/// What the collector reads of a claimed key's value: a task's [`Claim`]
/// or a run's key, both with `expires_at`.
#[derive(Deserialize)]
struct Expiry {
    expires_at: i64,
}

/// Where claimed keys are kept: a tree (named for errors) and the prefix
/// of its claim keys.
#[derive(Clone)]
pub(crate) struct KeySpace {
    pub(crate) tree: sled::Tree,
    pub(crate) id: TreeId,
    pub(crate) name: &'static str,
    pub(crate) prefix: &'static [u8],
}

/// The most expired claims one transaction removes.
const CHUNK: usize = 1024;

/// Removes every claim in `space` that expired before `now` (Unix
/// seconds) through the store's writer (so the removals are commits like
/// any other, in the store's log when it has one); returns how many were
/// removed. A claim is removed only if it still holds the expired value,
/// so a claim made again meanwhile is kept.
pub(crate) fn collect_expired(
    space: &KeySpace,
    now: i64,
    writer: &Submit,
) -> Result<usize, StoreError> {
    let mut removed = 0;
    let mut expired_claims: Vec<(IVec, IVec)> = Vec::new();
    for item in space.tree.scan_prefix(space.prefix) {
        let (key, value) = item.map_err(StoreError::from)?;
        let claim: Expiry = row_keys::decode_value(space.name, &key, &value)?;
        if expired(claim.expires_at, now) {
            expired_claims.push((key, value));
        }
        if expired_claims.len() == CHUNK {
            removed += remove(space.id, std::mem::take(&mut expired_claims), writer)?;
        }
    }
    if !expired_claims.is_empty() {
        removed += remove(space.id, expired_claims, writer)?;
    }
    Ok(removed)
}

/// Removes the `claims` of tree `id` that still hold their value, in one
/// transaction; how many were.
fn remove(id: TreeId, claims: Vec<(IVec, IVec)>, writer: &Submit) -> Result<usize, StoreError> {
    writer.run_blocking(Box::new(move |tx, head| {
        let tree = tx.tree(id);
        let mut removed = 0;
        for (key, value) in &claims {
            if tree.get(key)?.as_ref() == Some(value) {
                tree.remove(key.clone())?;
                removed += 1;
            }
        }
        Ok((head, removed))
    }))
}

/// Sweeps every space in turn; one that fails (an undecodable key) does
/// not keep the others from being swept. How many keys were removed, or
/// the first failure.
pub(crate) fn collect_all(
    spaces: &[KeySpace],
    now: i64,
    writer: &Submit,
) -> Result<usize, StoreError> {
    let mut removed = 0;
    let mut failed = None;
    for space in spaces {
        match collect_expired(space, now, writer) {
            Ok(n) => removed += n,
            Err(e) => {
                failed.get_or_insert(e);
            }
        }
    }
    failed.map_or(Ok(removed), Err)
}

/// The background collector: wakes every `interval` and collects expired
/// claims until it is dropped.
pub(crate) struct Collector {
    /// `true` once the store is closing, guarded for the condition variable.
    stop: std::sync::Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
    /// The collector thread, joined on drop.
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Collector {
    /// Starts collecting the claims of `spaces` every `interval`, through
    /// `writer`.
    pub(crate) fn start(
        spaces: Vec<KeySpace>,
        interval: Duration,
        writer: Submit,
    ) -> Result<Self, StoreError> {
        use std::sync::{Arc, Condvar, Mutex, PoisonError};
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let for_thread = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("store-idem-gc".into())
            .spawn(move || {
                let (lock, cv) = &*for_thread;
                let mut stopped = lock.lock().unwrap_or_else(PoisonError::into_inner);
                loop {
                    // Checked before each wait too: a store dropped before
                    // this thread first took the lock has already notified,
                    // and waiting would hold up the drop a whole interval.
                    if *stopped {
                        return;
                    }
                    let (guard, _) = cv
                        .wait_timeout(stopped, interval)
                        .unwrap_or_else(PoisonError::into_inner);
                    stopped = guard;
                    if *stopped {
                        return;
                    }
                    // A failed pass is retried at the next interval; the
                    // claims stay expired meanwhile, so nothing is wrong.
                    let _ = collect_all(&spaces, Timestamp::now().unix_seconds(), &writer);
                }
            })
            .map_err(|e| StoreError::Io(format!("cannot start the key collector: {e}")))?;
        Ok(Collector {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let (lock, cv) = &*self.stop;
        *lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = true;
        cv.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store closed right after it opened: the collector is stopped before
    /// its thread first waits. Its drop must not sit out the interval.
    #[test]
    fn a_collector_dropped_at_once_stops_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new().path(dir.path()).open().unwrap();
        let tree = db.open_tree("idempotency").unwrap();
        for _ in 0..20 {
            let (done, finished) = std::sync::mpsc::channel();
            let (tree, db) = (tree.clone(), db.clone());
            std::thread::spawn(move || {
                let (_writer, submit) = writer_over(&db);
                drop(
                    Collector::start(vec![space(tree)], Duration::from_secs(3600), submit).unwrap(),
                );
                let _ = done.send(());
            });
            assert!(
                finished.recv_timeout(Duration::from_secs(20)).is_ok(),
                "dropping the collector waited for its interval"
            );
        }
    }

    /// A writer over `db`'s trees, and a way to hand it changes.
    fn writer_over(db: &sled::Db) -> (super::super::writer::Writer, Submit) {
        let tree = |name: &str| db.open_tree(name).unwrap();
        let trees = super::super::writer::Trees {
            tasks: tree("tasks"),
            envelopes: tree("envelopes"),
            idempotency: tree("idempotency"),
            by_correlation: tree("by_correlation"),
            by_state: tree("by_state"),
            by_label: tree("by_label"),
            audit: tree("audit"),
            audit_by_task: tree("audit_by_task"),
            meta: tree("meta"),
            runs: tree("runs"),
        };
        let writer = super::super::writer::Writer::start(
            trees,
            super::super::audit::Head::default(),
            std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0)),
            None,
        )
        .unwrap();
        let submit = writer.submitter().unwrap();
        (writer, submit)
    }

    fn space(tree: sled::Tree) -> KeySpace {
        KeySpace {
            tree,
            id: TreeId::Idempotency,
            name: "idempotency",
            prefix: b"",
        }
    }

    #[test]
    fn fingerprints_ignore_map_key_order_but_not_values() {
        let a: serde_json::Value = serde_json::from_str(r#"{"a":1,"b":2}"#).unwrap();
        let b: serde_json::Value = serde_json::from_str(r#"{"b":2,"a":1}"#).unwrap();
        let c: serde_json::Value = serde_json::from_str(r#"{"a":1,"b":3}"#).unwrap();
        assert_eq!(Fingerprint::of(&a), Fingerprint::of(&b));
        assert_ne!(Fingerprint::of(&a), Fingerprint::of(&c));
    }

    #[test]
    fn collection_removes_only_expired_claims() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let tree = db.open_tree("idempotency").unwrap();
        let fp = Fingerprint::of(&1);
        let old = Claim {
            task_id: TaskId::new(),
            fingerprint: fp.clone(),
            expires_at: 100,
        };
        let fresh = Claim {
            task_id: TaskId::new(),
            fingerprint: fp,
            expires_at: 300,
        };
        tree.insert("old", serde_json::to_vec(&old).unwrap())
            .unwrap();
        tree.insert("fresh", serde_json::to_vec(&fresh).unwrap())
            .unwrap();
        let (_writer, submit) = writer_over(&db);
        assert_eq!(
            collect_expired(&space(tree.clone()), 200, &submit).unwrap(),
            1
        );
        assert!(tree.get("old").unwrap().is_none());
        assert!(tree.get("fresh").unwrap().is_some());
    }

    #[test]
    fn a_space_that_fails_does_not_keep_the_others_from_being_swept() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let broken = db.open_tree("idempotency").unwrap();
        broken.insert("scope\0bad-key", &b"{not json"[..]).unwrap();
        let runs = db.open_tree("runs").unwrap();
        runs.insert("kold", &br#"{"expires_at": 100}"#[..]).unwrap();
        runs.insert("r-not-a-key", &b"a run record"[..]).unwrap();
        let spaces = [
            space(broken),
            KeySpace {
                tree: runs.clone(),
                id: TreeId::Runs,
                name: "runs",
                prefix: b"k",
            },
        ];
        let (_writer, submit) = writer_over(&db);
        let err = collect_all(&spaces, 200, &submit).unwrap_err();
        assert!(err.to_string().contains("bad-key"), "{err}");
        assert!(
            runs.get("kold").unwrap().is_none(),
            "the runs' key was swept"
        );
        assert!(
            runs.get("r-not-a-key").unwrap().is_some(),
            "only under the prefix"
        );
    }

    #[test]
    fn a_claim_that_fails_to_decode_is_reported_with_its_key() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let tree = db.open_tree("idempotency").unwrap();
        tree.insert("scope\0bad-key", &b"{not json"[..]).unwrap();
        let (_writer, submit) = writer_over(&db);
        let err = collect_expired(&space(tree), 0, &submit).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("idempotency") && text.contains("bad-key"),
            "{text}"
        );
    }
}
