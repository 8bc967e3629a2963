//! The orchestrator's background work, one room: recovery at start, then
//! every loop (the publisher, the applier of workers' events, the
//! dead-letter handler, the orphan sweep, the reaper, the workflow engine's
//! driver, schedules, event triggers, readiness, the push outbox's sender,
//! the watches of trigger and agent files, and a replicated store's
//! snapshots), until told to stop.

pub(in crate::service) mod applier;
mod background;
pub(in crate::service) mod dead_letters;
mod event_triggers;
mod orphans;
pub(in crate::service) mod publisher;
mod push;
mod readiness;
pub(in crate::service) mod reaper;
mod reload;
mod schedules;
mod snapshots;
mod start;

use publisher::PublishQueue;
use reaper::DeadlineQueue;

pub use background::Background;
pub use push::PushBodies;

/// The receiving ends of the loops' queues, made at open so submissions
/// can be taken before the loops run.
pub(crate) struct Queues {
    pub(crate) publish: PublishQueue,
    pub(crate) deadlines: DeadlineQueue,
    pub(crate) runs: crate::service::engine::EngineQueue,
}
