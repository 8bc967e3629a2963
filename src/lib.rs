//! `orchestrator`: a queue-based orchestrator for AI agents, with durable
//! task envelopes.
//!
//! # Layout
//!
//! - [`codec`]: decoding JSON with typed errors that name the field; strict
//!   for user input, tolerant on the wire.
//! - [`envelope`]: the task envelope (wire format v1) and its ids.
//! - [`event`]: the status and result events workers publish.
//! - [`task`]: task states, the state machine, the task record.
//! - [`store`]: the durable sled store: tasks, idempotency, indexes, audit.

pub mod agent;
pub mod broker;
pub mod bus;
pub mod claim;
pub mod codec;
pub mod envelope;
pub mod event;
pub mod http;
pub mod server;
pub mod service;
pub mod store;
pub mod task;
pub mod trigger;
pub mod worker;

pub use envelope::{Envelope, TaskId};
pub use event::WorkerEvent;
pub use store::{Store, StoreConfig, StoreError};
pub use task::{TaskEvent, TaskRecord, TaskState};
