//! The leader's appender: every commit the store's writer hands it goes
//! to the log before the store reports it. Commits that wait while an
//! append is on its way go together in the next message (group commit
//! over the log). Each append states the subject sequence it follows
//! (`Nats-Expected-Last-Subject-Sequence`), so once another process has
//! appended, this one's next append is refused: the appender then marks
//! the store refused (every waiting and later write fails with
//! `StoreError::NotLeader`) and stops. An appender starts by sealing the
//! log: a message with no commits after the last one, so a predecessor
//! still running is refused from then on. An append that got no answer is
//! sent again with the same `Nats-Msg-Id` (`<partition>.<appender>.<first
//! position>`, the appender a fresh id), which the broker's duplicate
//! window answers with the first copy's sequence.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::context::PublishErrorKind;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use super::ReplicationError;
use crate::backoff::Backoff;
use crate::bus::Bus;
use crate::store::{Acked, Commit, CommitSink};

/// The commits waiting for the next append.
#[derive(Default)]
struct Queue {
    pending: Mutex<Vec<Commit>>,
    wake: Notify,
}

/// A running appender; dropping it stops it (commits not yet appended are
/// then never reported: their callers get `StoreError::NotLeader`).
pub struct Appender {
    stop: CancellationToken,
    acked: watch::Receiver<Acked>,
    id: String,
}

impl Appender {
    /// Starts appending partition `partition`'s commits after the log's
    /// end, where a store at position `store_position` must be; the sink
    /// to open that store with.
    pub async fn start(
        bus: &Bus,
        partition: u32,
        store_position: u64,
    ) -> Result<(Appender, CommitSink), ReplicationError> {
        super::provision(bus).await?;
        let end = super::follow::last(bus, partition).await?;
        let last_seq = end.seq;
        // A store ahead of the log goes on from the snapshot
        // `carry_over` made at its position, or not at all.
        let carried = store_position > end.position
            && super::snapshots(bus, partition)
                .await?
                .last()
                .is_some_and(|s| s.position == store_position && s.after_seq == end.after);
        if end.position != store_position && !carried {
            return Err(ReplicationError::NotAtEnd {
                store: store_position,
                log: end.position,
            });
        }
        let appender = uuid::Uuid::now_v7().simple().to_string();
        let queue = Arc::new(Queue::default());
        let (tell, acked) = watch::channel(Acked {
            position: store_position,
            refused: None,
        });
        let stop = CancellationToken::new();
        let into = Arc::clone(&queue);
        let sink = CommitSink::acknowledged(
            move |c| {
                into.pending
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(c);
                into.wake.notify_one();
            },
            acked.clone(),
        );
        let mut run = Run {
            limit: bus.max_payload().saturating_sub(HEADER_ROOM),
            bus: bus.clone(),
            subject: bus.names().store_subject(partition),
            partition,
            appender: appender.clone(),
            last_seq,
            queue,
            tell,
            stop: stop.clone(),
        };
        match run.append(store_position, &[]).await {
            Appended::At(_) => {}
            Appended::Refused(_) | Appended::Stopped => {
                return Err(ReplicationError::Overtaken { after: last_seq });
            }
        }
        tokio::spawn(run.appending());
        Ok((
            Appender {
                stop,
                acked,
                id: appender,
            },
            sink,
        ))
    }

    /// This appender's id, in its messages' `Nats-Msg-Id`s: kept beside
    /// the store it appends for, so that store, when it finds itself ahead
    /// of the log, can tell whether anyone appended after it.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// How far the log has taken the store's commits.
    pub fn acked(&self) -> Acked {
        self.acked.borrow().clone()
    }
}

impl Drop for Appender {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Room left in a message for its headers (the message id and the
/// expected sequence).
const HEADER_ROOM: usize = 4096;

/// The appending task's state.
struct Run {
    /// The most bytes of one message's payload.
    limit: usize,
    bus: Bus,
    subject: String,
    partition: u32,
    /// This appender's id, in its messages' ids.
    appender: String,
    /// The subject sequence of the last message this appender knows of.
    last_seq: u64,
    queue: Arc<Queue>,
    tell: watch::Sender<Acked>,
    stop: CancellationToken,
}

/// How an append ended.
enum Appended {
    /// Stored at this stream sequence.
    At(u64),
    /// Refused: another process appended since.
    Refused(String),
    /// The appender is stopping.
    Stopped,
}

impl Run {
    async fn appending(mut self) {
        loop {
            // Stopped: nothing more is appended, though commits wait (they
            // are then never reported).
            if self.stop.is_cancelled() {
                return;
            }
            let batch = std::mem::take(
                &mut *self
                    .queue
                    .pending
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner),
            );
            let Some(last) = batch.last().map(|c| c.position) else {
                tokio::select! {
                    biased;
                    () = self.stop.cancelled() => return,
                    () = self.queue.wake.notified() => continue,
                }
            };
            let started = std::time::Instant::now();
            match self.append(last, &batch).await {
                Appended::At(_) => {
                    crate::telemetry::metrics::store_log_appended(started.elapsed(), batch.len());
                }
                Appended::Refused(why) => {
                    tracing::warn!(partition = self.partition, position = batch[0].position, %why, "the store's log refused an append: another orchestrator leads it; this one writes nothing more");
                    self.tell.send_modify(|a| a.refused = Some(Arc::from(why)));
                    return;
                }
                Appended::Stopped => return,
            }
        }
    }

    /// Appends `batch` after `last_seq`, in as many messages as it takes
    /// (the seal at `position` for an empty batch), moving `last_seq` on
    /// and telling the store each position the log holds; the sequence of
    /// the last.
    async fn append(&mut self, position: u64, batch: &[Commit]) -> Appended {
        for message in super::frame::messages(position, batch, self.limit) {
            let held = message.position;
            match self.append_one(message).await {
                Appended::At(seq) => {
                    self.last_seq = seq;
                    self.tell.send_if_modified(|a| {
                        let moved = held > a.position;
                        a.position = a.position.max(held);
                        moved
                    });
                }
                other => return other,
            }
        }
        Appended::At(self.last_seq)
    }

    /// Appends one message after `last_seq`, trying again while the
    /// broker does not answer.
    async fn append_one(&self, message: super::frame::Message) -> Appended {
        let payload = bytes::Bytes::from(message.payload);
        let mut headers = HeaderMap::new();
        headers.insert(
            "Nats-Expected-Last-Subject-Sequence",
            self.last_seq.to_string().as_str(),
        );
        headers.insert(
            "Nats-Msg-Id",
            format!("{}.{}.{}", self.partition, self.appender, message.id).as_str(),
        );
        let backoff = Backoff::new(Duration::from_millis(20), Duration::from_secs(1));
        let js = self.bus.jetstream();
        for failures in 0u32.. {
            let sent = js
                .publish_with_headers(self.subject.clone(), headers.clone(), payload.clone())
                .await;
            let outcome = match sent {
                Ok(ack) => ack.await,
                Err(e) => Err(e),
            };
            match outcome {
                Ok(ack) => return Appended::At(ack.sequence),
                Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => {
                    return Appended::Refused(format!(
                        "the log's subject {} has moved past sequence {}",
                        self.subject, self.last_seq
                    ));
                }
                Err(e) => {
                    tracing::warn!(partition = self.partition, error = %e, "appending to the store's log failed; trying again");
                }
            }
            tokio::select! {
                () = tokio::time::sleep(backoff.delay_after(failures)) => {}
                () = self.stop.cancelled() => return Appended::Stopped,
            }
        }
        Appended::Stopped
    }
}
