//! Publishing envelopes, off the request path.
//!
//! A submission is answered once the store has it; its envelope is handed
//! here and published with bounded pipelining (many sends, then their acks
//! awaited concurrently). When JetStream acknowledges, the stream sequence
//! is recorded on the task; recovery at start publishes only attempts that
//! have none. Retries are scheduled here too: the store records when the
//! next attempt is due (`retry_at`), and this publishes it then. A publish
//! the broker refuses for size fails the task at once; one that fails for
//! any other reason (the stream electing a leader) is tried again after
//! `retry_delay`, doubling per failure of that attempt up to
//! `retry_max_delay`, with jitter, so a stream's outage is not met with a
//! storm of publishes in step.
//!
//! Each publish carries a fresh task token (see `auth`), minted here just
//! before the send: a retry or a republished attempt never reuses one.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::bus::{Bus, BusError};
use crate::envelope::{Envelope, TaskId, Timestamp};
use crate::event::ErrorInfo;
use crate::store::{Change, Store, StoreError};
use crate::task::{TaskRecord, TaskState, Transition};
use crate::task_token::Minter;
use crate::telemetry::context::StoredTrace;
use crate::telemetry::quiet::warn_quietly;
use crate::telemetry::{context, spans};
use tracing::Instrument;

/// An attempt to publish when its time comes.
#[derive(Debug)]
struct Due {
    /// When.
    at: Instant,
    /// Breaks ties in the heap, in arrival order.
    order: u64,
    /// The task.
    task_id: TaskId,
    /// The attempt to publish.
    attempt: u32,
    /// What to publish, when known (a fresh submission); otherwise the
    /// task is read at publish time and skipped if it moved on.
    known: Option<Known>,
    /// Sent by recovery: the broker may hold an earlier copy.
    republished: bool,
    /// Publishes of this attempt that failed so far.
    failures: u32,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.order) == (other.at, other.order)
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Due {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.order).cmp(&(other.at, other.order))
    }
}

/// An attempt's envelope and what its token and trace need.
#[derive(Debug)]
struct Known {
    /// The envelope of the attempt, without a token.
    envelope: Envelope,
    /// The span that created the task: the publish's parent.
    trace: Option<StoredTrace>,
    /// Who asked for it: the token's `sub`.
    requested_by: Option<String>,
}

impl Known {
    fn of(envelope: Envelope, status: &crate::task::TaskStatus) -> Known {
        Known {
            envelope,
            trace: status.trace_parent.clone(),
            requested_by: status.requested_by.clone(),
        }
    }
}

/// Hands attempts to the publishing loop.
#[derive(Clone)]
pub(crate) struct Publisher {
    /// To the loop; bounded, so a flood of submissions waits here.
    tx: mpsc::Sender<Due>,
}

/// How the publishing loop behaves.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PublishSettings {
    /// Publishes sent but not yet acknowledged, at most.
    pub(crate) in_flight: usize,
    /// Delays before a failed publish is tried again.
    pub(crate) retry: crate::backoff::Backoff,
}

impl PublishSettings {
    /// `due` after one more failure, due again after its backoff.
    fn again(&self, due: Due) -> Due {
        Due {
            at: Instant::now() + self.retry.delay_after(due.failures),
            failures: due.failures.saturating_add(1),
            ..due
        }
    }
}

/// The publishing loop's receiving end.
pub(crate) struct PublishQueue(mpsc::Receiver<Due>);

/// A publisher and the queue its loop will read.
pub(crate) fn channel() -> (Publisher, PublishQueue) {
    let (tx, rx) = mpsc::channel(8192);
    (Publisher { tx }, PublishQueue(rx))
}

/// Runs the publishing loop until `stop` fires.
pub(crate) async fn run(
    queue: PublishQueue,
    store: Store,
    bus: Bus,
    settings: PublishSettings,
    again: Publisher,
    minter: Minter,
    stop: CancellationToken,
) {
    let run = Loop {
        store,
        bus,
        settings,
        minter,
        slots: Arc::new(Semaphore::new(settings.in_flight.max(1))),
        again,
    };
    run.run(queue.0, stop).await;
}

impl Publisher {
    /// Publishes a task just stored, as soon as possible.
    pub(crate) async fn now(&self, record: &TaskRecord) {
        let known = Some(Known::of(record.envelope_for_attempt(), &record.status));
        self.send(
            record.task_id(),
            record.status.attempt,
            Instant::now(),
            known,
            false,
        )
        .await;
    }

    /// Publishes `attempt` of a stored task at `at` (now when it is past),
    /// if the task still wants it then.
    pub(crate) async fn at(
        &self,
        task_id: TaskId,
        attempt: u32,
        at: Option<Timestamp>,
        republished: bool,
    ) {
        let when = Instant::now() + at.map(|t| t.remaining()).unwrap_or_default();
        self.send(task_id, attempt, when, None, republished).await;
    }

    async fn send(
        &self,
        task_id: TaskId,
        attempt: u32,
        at: Instant,
        known: Option<Known>,
        republished: bool,
    ) {
        let due = Due {
            at,
            order: 0,
            task_id,
            attempt,
            known,
            republished,
            failures: 0,
        };
        self.queue(due).await;
    }

    async fn queue(&self, due: Due) {
        let task_id = due.task_id;
        if self.tx.send(due).await.is_err() {
            debug!(task_id = %task_id, "publisher stopped; recovery publishes it at the next start");
        }
    }
}

struct Loop {
    store: Store,
    bus: Bus,
    settings: PublishSettings,
    /// Signs each attempt's token.
    minter: Minter,
    /// Bounds publishes awaiting their ack.
    slots: Arc<Semaphore>,
    /// To schedule a failed publish again.
    again: Publisher,
}

impl Loop {
    async fn run(self, mut rx: mpsc::Receiver<Due>, stop: CancellationToken) {
        let mut heap: BinaryHeap<Reverse<Due>> = BinaryHeap::new();
        let mut order = 0u64;
        loop {
            let next = heap.peek().map(|d| d.0.at);
            tokio::select! {
                biased;
                () = stop.cancelled() => return,
                due = rx.recv() => match due {
                    Some(mut due) => {
                        order += 1;
                        due.order = order;
                        heap.push(Reverse(due));
                    }
                    None => return,
                },
                () = sleep_until(next), if next.is_some() => {}
            }
            let now = Instant::now();
            while heap.peek().is_some_and(|d| d.0.at <= now) {
                let Some(Reverse(due)) = heap.pop() else {
                    break;
                };
                if let Some(retry) = self.publish(due).await {
                    order += 1;
                    heap.push(Reverse(Due {
                        order,
                        ..self.settings.again(retry)
                    }));
                }
            }
        }
    }

    /// An attempt still waiting to be published (status first: the
    /// envelope is read only when it is needed).
    fn to_publish(&self, due: &Due) -> Result<Option<Known>, StoreError> {
        let Some(status) = self.store.status(due.task_id)? else {
            return Ok(None);
        };
        if status.state != TaskState::Submitted
            || status.attempt != due.attempt
            || status.published_seq.is_some()
            || status.conversation
        {
            return Ok(None);
        }
        let envelope = self.store.envelope(due.task_id)?;
        Ok(envelope.map(|e| Known::of(status.publishable(e), &status)))
    }

    /// Waits for JetStream's acknowledgement of `due`'s publish, holding
    /// its slot: records the broker's sequence, or queues the attempt
    /// again (marked republished: the broker may have it).
    fn acked(
        &self,
        pending: crate::bus::PendingPublish,
        permit: tokio::sync::OwnedSemaphorePermit,
        due: Due,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let store = self.store.clone();
        let again = self.again.clone();
        let settings = self.settings;
        async move {
            let _permit = permit;
            match pending.await_seq().await {
                Ok(seq) => {
                    if let Err(e) = store.record_published(due.task_id, due.attempt, seq).await {
                        warn_quietly!("orchestrator.publish_unrecorded", task_id = %due.task_id, error = %e, "cannot record the publish");
                    }
                }
                Err(e) => {
                    spans::failed(&tracing::Span::current(), "publish not acknowledged");
                    warn_quietly!("orchestrator.publish_failed", task_id = %due.task_id, error = %e, "publish not acknowledged; will retry");
                    let retry = Due {
                        republished: true,
                        ..due
                    };
                    again.queue(settings.again(retry)).await;
                }
            }
        }
    }

    /// Sends one attempt; returns it when it must be tried again (then it
    /// is read from the store again, so it is skipped if the task moved on).
    async fn publish(&self, mut due: Due) -> Option<Due> {
        let known = match due.known.take() {
            Some(known) => known,
            None => match self.to_publish(&due) {
                Ok(Some(known)) => known,
                Ok(None) => return None,
                Err(e) if crate::service::quarantine::unreadable(&e) => {
                    crate::service::quarantine::set_aside(&self.store, due.task_id, &e.to_string())
                        .await;
                    return None;
                }
                Err(e) => {
                    warn_quietly!("orchestrator.publish_unreadable", task_id = %due.task_id, error = %e, "cannot read the task to publish it");
                    return Some(due);
                }
            },
        };
        let mut envelope = known.envelope;
        let address = self.bus.envelope_address(&envelope);
        let span = spans::publish_task(&envelope, &address.0, &address.1);
        if let Some(parent) = &known.trace {
            context::follow_stored(&span, parent);
        }
        let principal = known.requested_by.as_deref().unwrap_or("unknown");
        match self.minter.mint(&envelope, principal) {
            Ok(token) => envelope.header.token = Some(token),
            Err(e) => {
                // Only an envelope with no canonical form (refused at submit
                // since tokens exist) or a broken key gets here.
                spans::failed(&span, "the task token cannot be signed");
                span.in_scope(|| warn!(task_id = %due.task_id, error = %e, "cannot sign the task token: failing the task"));
                self.fail(&due, "token_unsignable", &e.to_string()).await;
                return None;
            }
        }
        let Ok(permit) = Arc::clone(&self.slots).acquire_owned().await else {
            return None;
        };
        match self
            .bus
            .send_envelope_to(&envelope, address, &span, due.republished)
            .instrument(span.clone())
            .await
        {
            Ok(pending) => {
                // The span ends when JetStream has the message.
                tokio::spawn(self.acked(pending, permit, due).instrument(span));
                None
            }
            Err(e @ BusError::TooLarge { .. }) => {
                spans::failed(&span, "the broker cannot carry this envelope");
                warn!(task_id = %due.task_id, error = %e, "the broker cannot carry this envelope: failing the task");
                self.fail(&due, "payload_too_large", &e.to_string()).await;
                None
            }
            Err(e) => {
                spans::failed(&span, "publish failed");
                warn_quietly!("orchestrator.publish_failed", task_id = %due.task_id, error = %e, "publish failed; will retry");
                Some(due)
            }
        }
    }
}

impl Loop {
    /// Fails the task of an attempt that can never be published.
    async fn fail(&self, due: &Due, code: &'static str, why: &str) {
        let mut change = Change::new(Transition::Fail, "orchestrator", why);
        change.attempt = Some(due.attempt);
        change.error = Some(ErrorInfo::new(code, why, false));
        if let Err(e) = self.store.apply(due.task_id, change).await {
            warn!(task_id = %due.task_id, error = %e, "cannot fail the task");
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
