//! Reading a pull consumer message by message, forever: the pull is
//! reopened whenever it fails or ends (a request the server lost and whose
//! heartbeats stopped, a broker restart), so a reader never stalls on a
//! broken pull. One mechanism for the workers and the orchestrator.

use std::time::Duration;

use async_nats::jetstream::Message;
use async_nats::jetstream::consumer::{PullConsumer, pull};
use futures::StreamExt;

use crate::backoff::Backoff;
use crate::telemetry::quiet::warn_quietly;

/// The first wait after a failed pull, and the longest.
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// How a pull asks for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PullSettings {
    /// Messages asked for at once (and kept ready).
    pub prefetch: usize,
    /// How long one request waits for messages before it is renewed. A
    /// process that dies leaves its requests behind, and JetStream hands
    /// messages to them until they expire; those then wait out the ack
    /// wait, so shorter is better for quick recovery.
    pub expires: Duration,
}

impl PullSettings {
    /// The orchestrator's own consumers: many at once, 2 s requests.
    pub fn short() -> Self {
        PullSettings {
            prefetch: 256,
            expires: Duration::from_secs(2),
        }
    }
}

/// A self-healing continuous pull.
pub struct Puller {
    /// The consumer pulled from.
    consumer: PullConsumer,
    /// How to pull.
    settings: PullSettings,
    /// The open pull, if any.
    stream: Option<pull::Stream>,
    /// Waits between pulls that keep failing (a stream electing its
    /// leader answers every pull with an error at once).
    backoff: Backoff,
}

impl Puller {
    /// A puller for `consumer`; nothing is requested before [`Puller::next`].
    pub fn new(consumer: PullConsumer, settings: PullSettings) -> Self {
        Puller {
            consumer,
            settings,
            stream: None,
            backoff: Backoff::new(RETRY_FIRST, RETRY_MAX),
        }
    }

    /// The next message. Cancel-safe: a message not yet returned stays
    /// buffered for the next call.
    pub async fn next(&mut self) -> Message {
        loop {
            let stream = match &mut self.stream {
                Some(stream) => stream,
                None => match self.open().await {
                    Some(stream) => self.stream.insert(stream),
                    None => {
                        tokio::time::sleep(self.backoff.next_delay()).await;
                        continue;
                    }
                },
            };
            match stream.next().await {
                Some(Ok(msg)) => {
                    self.backoff.reset();
                    return msg;
                }
                Some(Err(e)) => {
                    warn_quietly!("bus.pull_failed", consumer = %self.consumer.cached_info().name, error = %e, "pull failed; pulling anew");
                    self.stream = None;
                    tokio::time::sleep(self.backoff.next_delay()).await;
                }
                None => self.stream = None,
            }
        }
    }

    /// Takes what was pulled but not handed out, within `wait`, so it can be
    /// given back (`Nak`) rather than wait out the ack wait.
    pub async fn drain(&mut self, wait: Duration) -> Vec<Message> {
        let mut out = Vec::new();
        if let Some(stream) = &mut self.stream {
            while let Ok(Some(Ok(msg))) = tokio::time::timeout(wait, stream.next()).await {
                out.push(msg);
            }
        }
        self.stream = None;
        out
    }

    async fn open(&self) -> Option<pull::Stream> {
        let expires = self.settings.expires.max(Duration::from_secs(1));
        let opened = self
            .consumer
            .stream()
            .max_messages_per_batch(self.settings.prefetch.max(1))
            .expires(expires)
            // A request the server lost shows as missing heartbeats, and
            // `next` then opens a fresh pull.
            .heartbeat(expires / 4)
            .messages()
            .await;
        match opened {
            Ok(stream) => Some(stream),
            Err(e) => {
                warn_quietly!("bus.pull_refused", consumer = %self.consumer.cached_info().name, error = %e, "cannot pull");
                None
            }
        }
    }
}
