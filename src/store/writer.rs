//! The store's single writer: every change runs on one thread, and changes
//! that arrive together share one sled transaction.
//!
//! A sled transaction over several trees costs tens of microseconds however
//! little it writes, and audited changes must be serialized anyway (each
//! extends the one hash chain). So callers hand their change to this thread
//! as a job; the thread takes every job waiting (up to [`MAX_BATCH`]), runs
//! them in order inside one transaction, and answers each once it commits.
//! Jobs in a batch see each other's writes. A job that fails for its own
//! reasons (an idempotency conflict, a refused transition) must fail before
//! it writes anything; it gets its error and the rest of the batch commits.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use sled::Transactional;
use sled::transaction::ConflictableTransactionError;
use tokio::sync::oneshot;

use super::audit::Head;
use super::log::{self, Commit, CommitSink, TreeId, Write};
use super::tx::TreeTx;
use super::{Abort, StoreError, Tx};

/// The most jobs one transaction takes.
const MAX_BATCH: usize = 512;

/// The most jobs waiting for the writer; more wait for room.
const QUEUE: usize = 8192;

/// What a job does inside the batch's transaction: given the trees and the
/// audit head, it returns the new head and its result, or aborts with its
/// own error (having written nothing).
pub(crate) type Body<T> = Box<dyn Fn(&Tx<'_>, Head) -> Result<(Head, T), Abort> + Send>;

/// A change waiting for the writer, with the caller's result type erased.
trait Job: Send {
    /// Runs the change; keeps its own outcome; returns the head after it.
    fn run(&self, tx: &Tx<'_>, head: Head) -> Result<Head, Abort>;
    /// Answers the caller: with its outcome if the batch committed.
    fn finish(self: Box<Self>, batch: Result<(), StoreError>);
}

struct Typed<T> {
    body: Body<T>,
    /// The outcome of the last run (a retried transaction runs jobs again).
    outcome: RefCell<Option<Result<T, StoreError>>>,
    reply: oneshot::Sender<Result<T, StoreError>>,
}

impl<T: Send> Job for Typed<T> {
    fn run(&self, tx: &Tx<'_>, head: Head) -> Result<Head, Abort> {
        match (self.body)(tx, head) {
            Ok((next, value)) => {
                *self.outcome.borrow_mut() = Some(Ok(value));
                Ok(next)
            }
            Err(ConflictableTransactionError::Abort(e)) => {
                *self.outcome.borrow_mut() = Some(Err(e));
                Ok(head)
            }
            Err(other) => Err(other),
        }
    }

    fn finish(self: Box<Self>, batch: Result<(), StoreError>) {
        let outcome = match batch {
            Ok(()) => self
                .outcome
                .into_inner()
                .unwrap_or_else(|| Err(StoreError::Io("a change was not run".into()))),
            Err(e) => Err(e),
        };
        // The caller may have gone away; its change stands either way.
        let _ = self.reply.send(outcome);
    }
}

/// The trees the writer changes.
#[derive(Clone)]
pub(crate) struct Trees {
    pub(crate) tasks: sled::Tree,
    pub(crate) envelopes: sled::Tree,
    pub(crate) idempotency: sled::Tree,
    pub(crate) by_correlation: sled::Tree,
    pub(crate) by_state: sled::Tree,
    pub(crate) by_label: sled::Tree,
    pub(crate) audit: sled::Tree,
    pub(crate) audit_by_task: sled::Tree,
    pub(crate) meta: sled::Tree,
    pub(crate) runs: sled::Tree,
}

/// The trees, in [`TreeId::ALL`]'s order.
type All<'a> = (
    &'a sled::Tree,
    &'a sled::Tree,
    &'a sled::Tree,
    &'a sled::Tree,
    &'a sled::Tree,
    &'a sled::Tree,
    &'a sled::Tree,
    &'a sled::Tree,
    &'a sled::Tree,
    &'a sled::Tree,
);

impl Trees {
    /// The tree `id` names.
    pub(crate) fn tree(&self, id: TreeId) -> &sled::Tree {
        match id {
            TreeId::Tasks => &self.tasks,
            TreeId::Envelopes => &self.envelopes,
            TreeId::Idempotency => &self.idempotency,
            TreeId::ByCorrelation => &self.by_correlation,
            TreeId::ByState => &self.by_state,
            TreeId::ByLabel => &self.by_label,
            TreeId::Audit => &self.audit,
            TreeId::AuditByTask => &self.audit_by_task,
            TreeId::Meta => &self.meta,
            TreeId::Runs => &self.runs,
        }
    }

    /// Tree `id`'s entries in key order, but for `meta`'s log position
    /// keys (what a store holds, whatever log position it is at).
    pub(crate) fn entries(
        &self,
        id: TreeId,
    ) -> impl Iterator<Item = Result<(sled::IVec, sled::IVec), sled::Error>> {
        self.tree(id).iter().filter(move |e| {
            !(id == TreeId::Meta
                && e.as_ref()
                    .is_ok_and(|(k, _)| k == log::APPLIED_KEY || k == log::DIGEST_KEY))
        })
    }

    /// Every tree, in [`TreeId::ALL`]'s order, for one transaction over
    /// them all.
    pub(crate) fn all(&self) -> All<'_> {
        (
            &self.tasks,
            &self.envelopes,
            &self.idempotency,
            &self.by_correlation,
            &self.by_state,
            &self.by_label,
            &self.audit,
            &self.audit_by_task,
            &self.meta,
            &self.runs,
        )
    }
}

/// A way to hand the writer a change from a thread that is not async (the
/// key collector's); it keeps the writer thread running while it lives.
#[derive(Clone)]
pub(crate) struct Submit {
    jobs: mpsc::SyncSender<Box<dyn Job>>,
}

impl Submit {
    /// Runs `body` in the next batch, waiting on this thread for the
    /// commit (not the flush).
    pub(crate) fn run_blocking<T: Send + 'static>(&self, body: Body<T>) -> Result<T, StoreError> {
        let (job, answer) = job(body);
        self.jobs
            .send(job)
            .map_err(|_| StoreError::Io("the store is closing".into()))?;
        futures::executor::block_on(answer)
            .map_err(|_| StoreError::Io("the store writer stopped".into()))?
    }
}

/// A job for `body`, and where its outcome will come.
fn job<T: Send + 'static>(
    body: Body<T>,
) -> (Box<dyn Job>, oneshot::Receiver<Result<T, StoreError>>) {
    let (reply, answer) = oneshot::channel();
    let job = Box::new(Typed {
        body,
        outcome: RefCell::new(None),
        reply,
    });
    (job, answer)
}

/// Handle to the writer thread; dropping it lets the thread finish the jobs
/// already sent, then joins it.
pub(crate) struct Writer {
    /// Where jobs go; `None` once closing.
    jobs: Option<mpsc::SyncSender<Box<dyn Job>>>,
    /// The writer thread.
    thread: Option<JoinHandle<()>>,
    /// The committed audit head, for readers (`verify`).
    head: Arc<Mutex<Head>>,
}

impl Writer {
    /// Starts the writer thread over `trees`, the audit chain at `head`;
    /// each commit counted in `commits` and, with a `sink`, handed to it
    /// as a record, its position then in `recorded`.
    pub(crate) fn start(
        trees: Trees,
        head: Head,
        commits: Arc<AtomicU64>,
        sink: Option<(CommitSink, Arc<AtomicU64>)>,
    ) -> Result<Self, StoreError> {
        let (jobs, rx) = mpsc::sync_channel::<Box<dyn Job>>(QUEUE);
        let shared = Arc::new(Mutex::new(head));
        let for_thread = Arc::clone(&shared);
        let recorder = match sink {
            Some((sink, recorded)) => {
                let position = log::applied(&trees.meta)?;
                recorded.store(position, Ordering::SeqCst);
                Some(Recorder {
                    position,
                    sink,
                    recorded,
                })
            }
            None => None,
        };
        let thread = std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || write_loop(&trees, &rx, head, &for_thread, &commits, recorder))
            .map_err(|e| StoreError::Io(format!("cannot start the store writer: {e}")))?;
        Ok(Writer {
            jobs: Some(jobs),
            thread: Some(thread),
            head: shared,
        })
    }

    /// Runs `body` in the next batch and returns its result once committed
    /// (not yet flushed: the caller waits for that).
    pub(crate) async fn run<T: Send + 'static>(&self, body: Body<T>) -> Result<T, StoreError> {
        let (job, answer) = job(body);
        // The queue is bounded: a full one holds the caller back here,
        // off the async runtime's threads.
        let Some(jobs) = self.jobs.clone() else {
            return Err(StoreError::Io("the store is closing".into()));
        };
        let sent = match jobs.try_send(job) {
            Ok(()) => Ok(()),
            Err(mpsc::TrySendError::Full(job)) => {
                tokio::task::spawn_blocking(move || jobs.send(job))
                    .await
                    .map_err(|_| ())
                    .and_then(|r| r.map_err(|_| ()))
            }
            Err(mpsc::TrySendError::Disconnected(_)) => Err(()),
        };
        if sent.is_err() {
            return Err(StoreError::Io("the store is closing".into()));
        }
        answer
            .await
            .map_err(|_| StoreError::Io("the store writer stopped".into()))?
    }

    /// A handle for threads that are not async; `None` once closing.
    pub(crate) fn submitter(&self) -> Option<Submit> {
        self.jobs.clone().map(|jobs| Submit { jobs })
    }

    /// The audit head as of the last commit.
    pub(crate) fn head(&self) -> Head {
        *self.head.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Where the writer's commits go as records, and the last one's position
/// (kept for the writer, and shared for the store's waits).
struct Recorder {
    position: u64,
    sink: CommitSink,
    recorded: Arc<AtomicU64>,
}

fn write_loop(
    trees: &Trees,
    rx: &mpsc::Receiver<Box<dyn Job>>,
    mut head: Head,
    shared: &Mutex<Head>,
    commits: &AtomicU64,
    mut recorder: Option<Recorder>,
) {
    let writes: RefCell<Vec<Write>> = RefCell::new(Vec::new());
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        crate::telemetry::metrics::store_transaction(batch.len());
        let next_position = recorder.as_ref().map(|r| r.position + 1);
        let committed = trees.all().transaction(
            |(
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
            )| {
                // A transaction run again (a conflict) records afresh.
                writes.borrow_mut().clear();
                let kept = next_position.map(|_| &writes);
                let tree = |t, id| TreeTx::new(t, id, kept);
                let tx = Tx {
                    tasks: tree(tasks, TreeId::Tasks),
                    envelopes: tree(envelopes, TreeId::Envelopes),
                    idempotency: tree(idempotency, TreeId::Idempotency),
                    by_correlation: tree(by_correlation, TreeId::ByCorrelation),
                    by_state: tree(by_state, TreeId::ByState),
                    by_label: tree(by_label, TreeId::ByLabel),
                    audit: tree(audit, TreeId::Audit),
                    audit_by_task: tree(audit_by_task, TreeId::AuditByTask),
                    meta: tree(meta, TreeId::Meta),
                    runs: tree(runs, TreeId::Runs),
                };
                let next = batch.iter().try_fold(head, |h, job| job.run(&tx, h))?;
                // The position goes in the same batch as the writes: a
                // replica applying this record writes it the same way.
                if let Some(position) = next_position
                    && !writes.borrow().is_empty()
                {
                    let digest = log::digest(position, &writes.borrow());
                    meta.insert(log::APPLIED_KEY, &position.to_be_bytes()[..])?;
                    meta.insert(log::DIGEST_KEY, &digest[..])?;
                }
                Ok(next)
            },
        );
        let result = match committed {
            Ok(next) => {
                head = next;
                *shared.lock().unwrap_or_else(PoisonError::into_inner) = next;
                commits.fetch_add(1, Ordering::SeqCst);
                if let Some(r) = recorder.as_mut()
                    && !writes.borrow().is_empty()
                {
                    r.position += 1;
                    r.sink.send(Commit {
                        position: r.position,
                        writes: writes.take(),
                    });
                    r.recorded.store(r.position, Ordering::SeqCst);
                }
                Ok(())
            }
            Err(e) => Err(StoreError::from(e)),
        };
        for job in batch {
            job.finish(result.clone());
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.jobs.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
