//! Group commit: many writers, one flush.
//!
//! A writer that must not tell anyone about its change before it is on disk
//! calls [`GroupCommit::durable`] after writing. One background thread
//! flushes sled whenever writers are waiting; every writer whose change was
//! made before a flush began is released by that flush. Under load one
//! `fsync` covers many changes. After each flush the thread records the
//! audit head it covered in the commit mark (see `mark.rs`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;

use tokio::sync::watch;

use super::StoreError;
use super::audit;
use super::mark::CommitMark;

/// The flusher's progress, as writers see it.
#[derive(Debug, Clone, Default)]
struct Flushed {
    /// Every ticket up to this one is on disk.
    upto: u64,
    /// The last failed flush: tickets up to `.0` were not made durable.
    failed: Option<(u64, Arc<str>)>,
}

/// What writers and the flusher thread share.
struct Shared {
    /// Tickets handed out so far: one per change waiting to be durable.
    requested: AtomicU64,
    /// `(work pending, closing)`, guarded for the condition variable.
    wake: Mutex<(bool, bool)>,
    /// Wakes the flusher thread.
    cv: Condvar,
    /// Published after each flush.
    flushed: watch::Sender<Flushed>,
    /// The writer's count of committed batches.
    commits: Arc<AtomicU64>,
    /// How many committed batches the last successful flush covered.
    flushed_commits: AtomicU64,
}

/// Handle to the flusher thread; dropping it flushes once more and stops it.
pub(crate) struct GroupCommit {
    /// State shared with the flusher thread.
    shared: Arc<Shared>,
    /// The flusher thread, joined on drop.
    thread: Option<JoinHandle<()>>,
}

impl GroupCommit {
    /// Starts the flusher thread for `db`.
    pub(crate) fn start(
        db: sled::Db,
        meta: sled::Tree,
        mut mark: CommitMark,
        commits: Arc<AtomicU64>,
    ) -> Result<Self, StoreError> {
        let shared = Arc::new(Shared {
            requested: AtomicU64::new(0),
            wake: Mutex::new((false, false)),
            cv: Condvar::new(),
            flushed: watch::channel(Flushed::default()).0,
            flushed_commits: AtomicU64::new(commits.load(Ordering::SeqCst)),
            commits,
        });
        let for_thread = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("store-flush".into())
            .spawn(move || flush_loop(&db, &meta, &mut mark, &for_thread))
            .map_err(|e| StoreError::Io(format!("cannot start the flush thread: {e}")))?;
        Ok(GroupCommit {
            shared,
            thread: Some(thread),
        })
    }

    /// Waits until every change committed so far is on disk; returns at
    /// once when the last flush covered them all (a reader's wait, so it
    /// never shows what a crash could take back).
    pub(crate) async fn settled(&self) -> Result<(), StoreError> {
        let committed = self.shared.commits.load(Ordering::SeqCst);
        if self.shared.flushed_commits.load(Ordering::SeqCst) >= committed {
            return Ok(());
        }
        self.durable().await
    }

    /// Waits until every change this caller made before the call is on disk.
    pub(crate) async fn durable(&self) -> Result<(), StoreError> {
        let ticket = self.shared.requested.fetch_add(1, Ordering::SeqCst) + 1;
        let mut rx = self.shared.flushed.subscribe();
        {
            let mut wake = self
                .shared
                .wake
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            wake.0 = true;
        }
        self.shared.cv.notify_one();
        loop {
            {
                let state = rx.borrow_and_update();
                if let Some((upto, message)) = &state.failed
                    && *upto >= ticket
                {
                    return Err(StoreError::Io(format!("flush failed: {message}")));
                }
                if state.upto >= ticket {
                    return Ok(());
                }
            }
            if rx.changed().await.is_err() {
                return Err(StoreError::Io("the flush thread stopped".into()));
            }
        }
    }
}

fn flush_loop(db: &sled::Db, meta: &sled::Tree, mark: &mut CommitMark, shared: &Shared) {
    let mut marked = audit::Head::default();
    loop {
        let closing = {
            let mut wake = shared.wake.lock().unwrap_or_else(PoisonError::into_inner);
            while !wake.0 && !wake.1 {
                wake = shared.cv.wait(wake).unwrap_or_else(PoisonError::into_inner);
            }
            wake.0 = false;
            wake.1
        };
        // Every ticket counted here, and the audit head read here, belong to
        // changes written before these reads, so the flush below covers them.
        let target = shared.requested.load(Ordering::SeqCst);
        let commits = shared.commits.load(Ordering::SeqCst);
        let head = audit::read_head(meta);
        let result = db.flush();
        let flushed = result.is_ok();
        if flushed {
            shared.flushed_commits.fetch_max(commits, Ordering::SeqCst);
        }
        shared.flushed.send_modify(|f| match result {
            Ok(_) => f.upto = f.upto.max(target),
            Err(e) => f.failed = Some((target, Arc::from(e.to_string()))),
        });
        // The mark is written after the writers are released: it only has to
        // lag behind what is on disk, never run ahead of it.
        if let (true, Ok(head)) = (flushed, head)
            && head.seq > marked.seq
        {
            match mark.write(head) {
                Ok(()) => marked = head,
                Err(e) => {
                    // A store that cannot keep its mark cannot prove what it
                    // acknowledged: every later write fails until a restart.
                    let message = format!("cannot write {}: {e}", mark.path().display());
                    shared
                        .flushed
                        .send_modify(|f| f.failed = Some((u64::MAX, Arc::from(message))));
                }
            }
        }
        if closing {
            return;
        }
    }
}

impl Drop for GroupCommit {
    fn drop(&mut self) {
        {
            let mut wake = self
                .shared
                .wake
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            wake.1 = true;
        }
        self.shared.cv.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
