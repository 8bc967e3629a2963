//! What every delivery in hand shares: the bus, the card, the handler,
//! the claims, the tasks running; when they must stop.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{Handler, WorkerSettings, notes, report};
use crate::agent::AgentCard;
use crate::bus::Bus;
use crate::claim::Claims;
use crate::envelope::TaskId;

/// When the deliveries in hand must stop: what waits for a claim (or to
/// report a refusal) is handed back as soon as the worker stops taking
/// work; what runs, only past the grace period.
#[derive(Clone)]
pub(super) struct Stops {
    /// The worker stops taking work.
    pub(super) shutdown: CancellationToken,
    /// The grace period is over.
    pub(super) hard_stop: CancellationToken,
}

pub(super) struct Shared {
    /// The bus: events, dead letters, the registry.
    pub(super) bus: Bus,
    /// The agent this worker serves.
    pub(super) card: AgentCard,
    /// The agent's directory (handlers run there).
    pub(super) dir: PathBuf,
    /// What runs each task.
    pub(super) handler: Arc<dyn Handler>,
    /// The settings in force.
    pub(super) config: WorkerSettings,
    /// This process's id in the registry and in claims.
    pub(super) instance: String,
    /// The shared delivery claims (their lease is the consumer's ack wait).
    pub(super) claims: Claims,
    /// Where handlers keep their tasks' notes (beside the claims).
    pub(super) notes: Arc<notes::Shelf>,
    /// Cancel tokens of the tasks running here.
    pub(super) running: Mutex<HashMap<TaskId, CancellationToken>>,
}

impl Shared {
    /// How long a claim's lease lasts: the consumer's ack wait.
    pub(super) fn lease(&self) -> Duration {
        self.claims.lease()
    }

    /// How often a message in hand gets an in-progress ack, and a running
    /// task's claim a renewal: three times a lease.
    pub(super) fn beat(&self) -> Duration {
        (self.lease() / 3).max(Duration::from_millis(100))
    }

    /// Marks `event` as this instance's, told `resumed` or not.
    pub(super) fn stamp(&self, event: &mut crate::event::WorkerEvent, resumed: bool) {
        event.instance = Some(self.instance.clone());
        event.resumed = resumed;
    }

    /// The `working` report of `envelope`'s attempt, as this instance's.
    pub(super) fn working_event(
        &self,
        envelope: &crate::envelope::Envelope,
        resumed: bool,
    ) -> crate::event::WorkerEvent {
        let mut event = report(
            envelope,
            envelope.control.attempt.get(),
            crate::event::ReportedState::Working,
        );
        self.stamp(&mut event, resumed);
        event
    }

    /// The delay before a message is tried again after the bus failed.
    pub(super) fn retry_delay(&self) -> Duration {
        self.bus.settings().retry_delay
    }

    /// How soon a renewal that could not reach the bucket is tried again:
    /// the retry delay, at most a sixth of a lease (so several tries fit
    /// in what is left of it).
    pub(super) fn renew_retry(&self) -> Duration {
        self.retry_delay()
            .min(self.lease() / 6)
            .max(Duration::from_millis(50))
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
