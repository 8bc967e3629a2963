//! Taking work from the agent's three consumers, highest priority first,
//! and never more than the worker has free slots for.
//!
//! A message pulled but not started would wait out its ack wait in a local
//! buffer and then be redelivered while this worker still holds it; so the
//! worker asks for exactly as many messages as it can start
//! ([`Intake::ready`]: `no_wait` fetches, high, then normal, then low).
//! When nothing is ready it waits with one long poll of one message per
//! priority ([`Intake::next_waiting`]); a message that arrives on a long
//! poll while every slot is busy is kept aside and kept alive with
//! in-progress acks until a slot frees, so at most three messages are ever
//! held unstarted.
//!
//! When the bus fails (a stream electing its leader answers every fetch
//! at once with an error), the next look waits a backoff with jitter
//! instead of spinning, and the warnings are rate-limited.

use std::time::Duration;

use async_nats::jetstream::Message;
use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::consumer::pull::Batch;
use futures::StreamExt;
use futures::future::select_all;

use crate::backoff::Backoff;
use crate::telemetry::quiet::warn_quietly;

/// The agent's consumers and the long polls open on them.
pub(crate) struct Intake {
    /// High, normal, low.
    consumers: Vec<PullConsumer>,
    /// One open long poll per priority, when waiting.
    waiters: Vec<Option<Batch>>,
    /// How long a long poll waits before it is renewed.
    expires: Duration,
    /// Whether a fetch or poll failed since the last wait.
    failed: bool,
    /// The waits after failures.
    backoff: Backoff,
}

impl Intake {
    /// An intake over `consumers`, highest priority first.
    /// After failures it waits as `backoff` says.
    pub(crate) fn new(consumers: Vec<PullConsumer>, expires: Duration, backoff: Backoff) -> Self {
        let waiters = consumers.iter().map(|_| None).collect();
        Intake {
            consumers,
            waiters,
            expires: expires.max(Duration::from_secs(1)),
            failed: false,
            backoff,
        }
    }

    /// Up to `n` messages that are ready now, highest priority first.
    pub(crate) async fn ready(&mut self, n: usize) -> Vec<Message> {
        let mut out = Vec::new();
        let mut worked = true;
        for consumer in &self.consumers {
            let want = n.saturating_sub(out.len());
            if want == 0 {
                break;
            }
            worked &= fetch_now(consumer, want, self.expires, &mut out).await;
        }
        self.failed = !worked;
        if worked {
            self.backoff.reset();
        }
        out
    }

    /// Opens a long poll for one message on every priority that has none.
    pub(crate) async fn arm(&mut self) {
        for (consumer, waiter) in self.consumers.iter().zip(self.waiters.iter_mut()) {
            if waiter.is_some() {
                continue;
            }
            match consumer
                .batch()
                .max_messages(1)
                .expires(self.expires)
                .messages()
                .await
            {
                Ok(batch) => *waiter = Some(batch),
                Err(e) => {
                    self.failed = true;
                    warn_quietly!("worker.poll_refused", error = %e, "cannot open a long poll");
                }
            }
        }
    }

    /// Whether any long poll is open.
    pub(crate) fn waiting(&self) -> bool {
        self.waiters.iter().any(Option::is_some)
    }

    /// The next message from an open long poll; a poll that ends (expired,
    /// failed) is closed, and `None` is returned so the caller can decide
    /// whether to open another. After a failure (or with no poll open) it
    /// first waits the next backoff and returns `None`.
    pub(crate) async fn next_waiting(&mut self) -> Option<Message> {
        if std::mem::take(&mut self.failed) || !self.waiting() {
            tokio::time::sleep(self.backoff.next_delay()).await;
            return None;
        }
        let polls = self.waiters.iter_mut().enumerate().filter_map(|(i, w)| {
            w.as_mut()
                .map(|b| Box::pin(async move { (i, b.next().await) }))
        });
        // A backstop for a poll that neither delivers nor ends: after twice
        // its expiry every poll is closed and opened anew.
        let Ok(((index, item), _, _)) =
            tokio::time::timeout(self.expires * 2, select_all(polls)).await
        else {
            warn_quietly!(
                "worker.poll_silent",
                "long polls went silent; opening new ones"
            );
            self.close();
            return None;
        };
        match item {
            Some(Ok(msg)) => {
                self.backoff.reset();
                Some(msg)
            }
            Some(Err(e)) => {
                warn_quietly!("worker.poll_failed", error = %e, "long poll failed");
                self.waiters[index] = None;
                self.failed = true;
                None
            }
            None => {
                self.waiters[index] = None;
                None
            }
        }
    }

    /// Closes every long poll (shutdown).
    pub(crate) fn close(&mut self) {
        for waiter in &mut self.waiters {
            *waiter = None;
        }
    }
}

/// Adds to `out` up to `want` messages `consumer` has ready now; whether
/// the fetch worked (a failure is logged, rate-limited). A fetch whose
/// request the server lost (a broker restart) would never answer: it gets
/// `patience`, and whatever arrived by then is kept.
async fn fetch_now(
    consumer: &PullConsumer,
    want: usize,
    patience: Duration,
    out: &mut Vec<Message>,
) -> bool {
    let deadline = tokio::time::Instant::now() + patience;
    let fetched = async {
        let opened =
            tokio::time::timeout_at(deadline, consumer.fetch().max_messages(want).messages());
        let mut batch = opened
            .await
            .map_err(|_| None)?
            .map_err(|e| Some(e.to_string()))?;
        loop {
            match tokio::time::timeout_at(deadline, batch.next()).await {
                Ok(Some(Ok(msg))) => out.push(msg),
                Ok(None) => return Ok(()),
                Ok(Some(Err(e))) => return Err(Some(e.to_string())),
                Err(_) => return Err(None),
            }
        }
    };
    match fetched.await {
        Ok(()) => true,
        Err(Some(e)) => {
            warn_quietly!("worker.fetch_failed", error = %e, "fetch failed");
            false
        }
        Err(None) => {
            warn_quietly!(
                "worker.fetch_unanswered",
                "a fetch went unanswered; trying again"
            );
            false
        }
    }
}
