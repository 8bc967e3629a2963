//! Progress a handler reports while it runs: any number of status messages
//! and artifact chunks per attempt, published as `working` events with a
//! `progress` object, in the order reported, and all of them before the
//! attempt's final report.
//!
//! A handler that reports nothing costs a channel and one more branch in
//! the run loop: the publisher is started by the first report.

use std::num::NonZeroU32;
use std::sync::Arc;

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::task::JoinHandle;
use tracing::Span;

use super::Shared;
use crate::artifact::Artifact;
use crate::codec::Validate as _;
use crate::envelope::Envelope;
use crate::event::Progress;
use crate::telemetry::quiet::warn_quietly;

/// One report: a message, an artifact (or chunk), or both.
#[derive(Debug, Clone, PartialEq)]
pub struct Update {
    /// What the handler is doing, for people.
    pub message: Option<String>,
    /// An artifact, or a chunk of one, produced so far.
    pub artifact: Option<Artifact>,
}

/// Where a handler reports progress. Cheap to clone; reports after the
/// attempt ended go nowhere.
#[derive(Debug, Clone)]
pub struct Reporter {
    tx: Option<UnboundedSender<Update>>,
}

impl Reporter {
    /// A reporter and the receiving end its reports arrive at.
    pub(super) fn channel() -> (Reporter, UnboundedReceiver<Update>) {
        let (tx, rx) = unbounded_channel();
        (Reporter { tx: Some(tx) }, rx)
    }

    /// A reporter whose reports go nowhere: for a handler run outside a
    /// worker (tests, tools).
    pub fn detached() -> Reporter {
        Reporter { tx: None }
    }

    /// Reports a status message. False when it went nowhere (the attempt
    /// is over, or the reporter is detached).
    pub fn message(&self, message: impl Into<String>) -> bool {
        self.report(Update {
            message: Some(message.into()),
            artifact: None,
        })
    }

    /// Reports an artifact, or a chunk of one (`append`, `last_chunk`).
    pub fn artifact(&self, artifact: Artifact) -> bool {
        self.report(Update {
            message: None,
            artifact: Some(artifact),
        })
    }

    /// Reports a message, an artifact or both; an update with neither is
    /// not sent.
    pub fn report(&self, update: Update) -> bool {
        if update.message.is_none() && update.artifact.is_none() {
            return false;
        }
        self.tx.as_ref().is_some_and(|tx| tx.send(update).is_ok())
    }
}

/// Publishes one attempt's progress reports in order, each numbered.
pub(super) struct Publisher {
    tx: UnboundedSender<Update>,
    task: JoinHandle<()>,
}

impl Publisher {
    /// Starts publishing for the attempt of `envelope`.
    pub(super) fn start(
        shared: &Arc<Shared>,
        envelope: &Envelope,
        resumed: bool,
        trace: &Span,
    ) -> Publisher {
        let (tx, mut rx) = unbounded_channel::<Update>();
        let shared = Arc::clone(shared);
        let event = shared.working_event(envelope, resumed);
        let trace = trace.clone();
        // A status message is words, like an error's: scrubbed the same.
        let secrets = shared
            .config
            .sensitive
            .secrets(&envelope.payload.params)
            .and(&shared.config.secrets)
            .and(&crate::redact::Secrets::credentials(
                envelope
                    .header
                    .token
                    .as_ref()
                    .map(|t| t.expose().to_string()),
            ));
        let task = tokio::spawn(async move {
            let mut seq = NonZeroU32::MIN;
            while let Some(update) = rx.recv().await {
                let mut event = event.clone();
                event.at = crate::envelope::Timestamp::now();
                event.progress = Some(Progress {
                    seq,
                    message: update.message.map(|m| secrets.scrub(&m)),
                    artifact: update.artifact,
                });
                if let Err(e) = event.validate() {
                    warn_quietly!("worker.progress_invalid", task_id = %event.task_id, error = %e, "a progress report was not sent");
                    continue;
                }
                if let Err(e) = shared.bus.publish_event(&event, &trace).await {
                    warn_quietly!("worker.report_failed", task_id = %event.task_id, error = %e, "a progress report was not sent");
                }
                seq = seq.saturating_add(1);
            }
        });
        Publisher { tx, task }
    }

    /// Queues a report.
    pub(super) fn send(&self, update: Update) {
        let _ = self.tx.send(update);
    }

    /// Waits until every queued report is published (or given up).
    pub(super) async fn finish(self) {
        drop(self.tx);
        let _ = self.task.await;
    }
}
