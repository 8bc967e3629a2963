//! The worker service: pulls one agent's envelopes, runs them through its
//! handler, and reports back. Its protocol on the bus is specified for any
//! language in `docs/worker-protocol.md`; this is the Rust implementation.
//!
//! - Takes only as many messages as it has free slots, high before normal
//!   before low ([`intake`]).
//! - Claims each delivery in the shared claim bucket ([`crate::claim`]):
//!   duplicates, superseded attempts and canceled tasks are settled without
//!   running; a lease lost while running cancels the handler.
//! - Reports `working` only when the handler outlives `working_after`, then
//!   one final event per attempt; the final event is the attempt's record,
//!   so the message is then acked with a plain ack.
//! - A retryable failure is reported as such; the orchestrator decides
//!   whether and when the next attempt runs.
//! - Malformed envelopes are copied to the dead-letter stream; unknown
//!   actions are rejected; the worker keeps serving.
//! - Stops a task on a cancel broadcast or a cancel mark; on shutdown,
//!   stops taking work, lets running tasks finish within a grace period,
//!   then releases the rest.
//!
//! The pipeline is this folder: `intake`, `acquire`, `delivery`, `attempt`,
//! `progress`, `outcome`, `notes`, beside the process that runs them
//! (`process`: the [`Worker`]; `shared`: what its deliveries share;
//! `beside`: the heartbeat, readiness and cancel listener; `settings`);
//! what runs a task is a [`Handler`], and the kinds a card names (command,
//! A2A, HTTP, LLM, echo) are in `handlers`.

mod acquire;
mod attempt;
mod beside;
mod delivery;
mod handler;
mod handlers;
mod intake;
mod notes;
mod outcome;
mod process;
mod progress;
mod settings;
mod shared;

pub use handler::{Handler, Task};
pub use handlers::{
    CommandHandler, EXIT_RETRY, EchoHandler, HandlerError, PROGRESS_FD, RemoteHandler, handler_for,
};
pub use notes::{NoteError, Notes};
pub use outcome::{Outcome, event_for, report};
pub use process::Worker;
pub use progress::{Reporter, Update};
pub use settings::{WorkerError, WorkerSettings};
use shared::{Shared, Stops, lock};
