//! Group commit: many writers, one flush.
//!
//! A writer that must not tell anyone about its change before it is on disk
//! calls [`GroupCommit::durable`] after writing. One background thread
//! flushes sled whenever writers are waiting; every writer whose change was
//! made before a flush began is released by that flush. Under load one
//! `fsync` covers many changes. After each flush the audit head it covered
//! is handed to a second thread that records it in the commit mark (see
//! `mark.rs`): the mark's own `fsync` runs beside the next flush instead of
//! in front of it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;

use tokio::sync::watch;

use super::StoreError;
use super::audit;
use super::log::LogWatch;
use super::mark::MarkSink;

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
    /// With a log: a change is durable once the log holds it too.
    log: Option<LogWatch>,
    /// The flusher thread, joined on drop.
    thread: Option<JoinHandle<()>>,
}

impl GroupCommit {
    /// Starts the flusher thread for `db`.
    pub(crate) fn start(
        db: sled::Db,
        meta: sled::Tree,
        mark: impl MarkSink,
        commits: Arc<AtomicU64>,
        log: Option<LogWatch>,
    ) -> Result<Self, StoreError> {
        let shared = Arc::new(Shared {
            requested: AtomicU64::new(0),
            wake: Mutex::new((false, false)),
            cv: Condvar::new(),
            flushed: watch::channel(Flushed::default()).0,
            flushed_commits: AtomicU64::new(commits.load(Ordering::SeqCst)),
            commits,
        });
        let marker = Marker::start(mark, shared.flushed.clone())?;
        let for_thread = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("store-flush".into())
            .spawn(move || flush_loop(&db, &meta, &marker, &for_thread))
            .map_err(|e| StoreError::Io(format!("cannot start the flush thread: {e}")))?;
        Ok(GroupCommit {
            shared,
            log,
            thread: Some(thread),
        })
    }

    /// Waits until every change committed so far is on disk; returns at
    /// once when the last flush covered them all (a reader's wait, so it
    /// never shows what a crash could take back).
    pub(crate) async fn settled(&self) -> Result<(), StoreError> {
        let committed = self.shared.commits.load(Ordering::SeqCst);
        if self.shared.flushed_commits.load(Ordering::SeqCst) >= committed
            && self.log.as_ref().is_none_or(LogWatch::caught_up)
        {
            return Ok(());
        }
        self.durable().await
    }

    /// The error every change gets once the store's log refused one.
    pub(crate) fn refused(&self) -> Option<StoreError> {
        self.log.as_ref().and_then(LogWatch::refused)
    }

    /// Waits until every change this caller made before the call is on
    /// disk, and in the log when the store has one.
    pub(crate) async fn durable(&self) -> Result<(), StoreError> {
        let want = self.log.as_ref().map(LogWatch::recorded);
        self.flushed().await?;
        match (&self.log, want) {
            (Some(log), Some(want)) => log.reached(want).await,
            _ => Ok(()),
        }
    }

    /// Waits until every change this caller made before the call is on disk.
    async fn flushed(&self) -> Result<(), StoreError> {
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

fn flush_loop(db: &sled::Db, meta: &sled::Tree, marker: &Marker, shared: &Shared) {
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
        let started = std::time::Instant::now();
        let result = db.flush();
        let flushed = result.is_ok();
        if flushed {
            let before = shared.flushed_commits.fetch_max(commits, Ordering::SeqCst);
            crate::telemetry::metrics::store_flushed(
                started.elapsed(),
                commits.saturating_sub(before),
            );
        }
        shared.flushed.send_modify(|f| match result {
            Ok(_) => f.upto = f.upto.max(target),
            Err(e) => f.failed = Some((target, Arc::from(e.to_string()))),
        });
        // The mark is written after the writers are released, and on its own
        // thread: it only has to lag behind what is on disk, never run ahead.
        if let (true, Ok(head)) = (flushed, head) {
            marker.offer(head);
        }
        if closing {
            return;
        }
    }
}

/// What the flusher and the marker thread share: `(newest head not yet
/// written, closing)`, and the marker's wake-up.
type MarkerState = (Mutex<(Option<audit::Head>, bool)>, Condvar);

/// The thread that writes the commit mark. It keeps only the newest head
/// offered: a mark that skips heads still never runs ahead of the disk.
struct Marker {
    /// Shared with the marker thread.
    state: Arc<MarkerState>,
    /// The marker thread, joined on drop after it wrote the last head.
    thread: Option<JoinHandle<()>>,
}

impl Marker {
    fn start(mut sink: impl MarkSink, flushed: watch::Sender<Flushed>) -> Result<Self, StoreError> {
        let state: Arc<MarkerState> = Arc::new((Mutex::new((None, false)), Condvar::new()));
        let for_thread = Arc::clone(&state);
        let thread = std::thread::Builder::new()
            .name("store-mark".into())
            .spawn(move || {
                let (lock, cv) = &*for_thread;
                let mut marked = audit::Head::default();
                loop {
                    let (head, closing) = {
                        let mut s = lock.lock().unwrap_or_else(PoisonError::into_inner);
                        while s.0.is_none() && !s.1 {
                            s = cv.wait(s).unwrap_or_else(PoisonError::into_inner);
                        }
                        (s.0.take(), s.1)
                    };
                    if let Some(head) = head.filter(|h| h.seq > marked.seq) {
                        if let Err(e) = sink.write(head) {
                            // A store that cannot keep its mark cannot prove
                            // what it acknowledged: every later write fails
                            // until a restart.
                            let message = format!("cannot write {}: {e}", sink.describe());
                            flushed.send_modify(|f| {
                                f.failed = Some((u64::MAX, Arc::from(message)));
                            });
                            return;
                        }
                        marked = head;
                    }
                    if closing {
                        return;
                    }
                }
            })
            .map_err(|e| StoreError::Io(format!("cannot start the mark thread: {e}")))?;
        Ok(Marker {
            state,
            thread: Some(thread),
        })
    }

    /// Hands `head` (covered by a finished flush) to the marker thread.
    fn offer(&self, head: audit::Head) {
        let (lock, cv) = &*self.state;
        lock.lock().unwrap_or_else(PoisonError::into_inner).0 = Some(head);
        cv.notify_one();
    }
}

impl Drop for Marker {
    fn drop(&mut self) {
        let (lock, cv) = &*self.state;
        lock.lock().unwrap_or_else(PoisonError::into_inner).1 = true;
        cv.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
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

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;
    use crate::store::audit::{HEAD_KEY, Head};

    /// A mark that tells when a write begins and finishes it only when let.
    struct HeldMark {
        began: mpsc::Sender<u64>,
        go: mpsc::Receiver<()>,
        written: Arc<Mutex<Vec<u64>>>,
    }

    impl MarkSink for HeldMark {
        fn write(&mut self, head: Head) -> std::io::Result<()> {
            let _ = self.began.send(head.seq);
            let _ = self.go.recv();
            self.written.lock().unwrap().push(head.seq);
            Ok(())
        }

        fn describe(&self) -> String {
            "held mark".into()
        }
    }

    #[tokio::test]
    async fn a_slow_mark_does_not_hold_up_the_next_flushes() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new().path(dir.path()).open().unwrap();
        let meta = db.open_tree("meta").unwrap();
        let (began_tx, began) = mpsc::channel();
        let (go, go_rx) = mpsc::channel();
        let written = Arc::new(Mutex::new(Vec::new()));
        let mark = HeldMark {
            began: began_tx,
            go: go_rx,
            written: Arc::clone(&written),
        };
        let commit = GroupCommit::start(
            db.clone(),
            meta.clone(),
            mark,
            Arc::new(AtomicU64::new(0)),
            None,
        )
        .unwrap();
        // Bound after `commit`, so a failing test drops it first and the
        // held mark lets go instead of blocking the flusher's join.
        let go = go;
        let set_head = |seq: u64| {
            let head = Head {
                seq,
                hash: [seq as u8; 32],
            };
            meta.insert(HEAD_KEY, &head.encode()[..]).unwrap();
        };

        set_head(1);
        commit.durable().await.unwrap();
        // The mark's first write is under way and held there.
        assert_eq!(began.recv_timeout(Duration::from_secs(10)).unwrap(), 1);
        for seq in 2..=4 {
            set_head(seq);
            let flushed = tokio::time::timeout(Duration::from_secs(10), commit.durable()).await;
            assert!(
                matches!(flushed, Ok(Ok(()))),
                "flush {seq} waited for the mark"
            );
        }

        // Let the mark go: on close it ends at the newest flushed head.
        for _ in 0..4 {
            let _ = go.send(());
        }
        drop(commit);
        let written = written.lock().unwrap().clone();
        assert_eq!(written.first(), Some(&1));
        assert_eq!(written.last(), Some(&4), "{written:?}");
        assert!(written.windows(2).all(|w| w[0] < w[1]), "{written:?}");
    }
}
