//! `orchestrator`: a queue-based orchestrator for AI agents, with durable
//! task envelopes.
//!
//! # Layout
//!
//! Layers point one way: `http` calls `service`, which calls `store`, `bus`
//! `claim` and `auth`; `server` wires the service and the HTTP API together above
//! both; the worker talks to the bus and the claims only.
//!
//! - [`codec`]: decoding JSON with typed errors that name the field; strict
//!   for user input, tolerant on the wire.
//! - [`envelope`]: the task envelope (wire format v1) and its ids.
//! - [`event`]: the status and result events workers publish.
//! - [`task`]: task states, the state machine, the retry policy, the task
//!   record and status.
//! - [`store`]: the durable sled store: task statuses, envelopes,
//!   idempotency, indexes, the audit log and its by-task index, waits for a
//!   task's end, format migrations.
//! - [`agent`]: agent cards (`agents/<id>/agent.json`).
//! - [`trigger`]: trigger definitions (`triggers/`).
//! - [`bus`]: the NATS JetStream layout, publishing, pulling, settling.
//! - [`claim`]: the delivery claims that keep two replicas from running one
//!   attempt (a contract between processes, below worker and orchestrator).
//! - [`auth`]: task tokens: key files, the canonical envelope hash, minting
//!   and the worker's checks (a contract between processes, like `claim`).
//! - [`access`]: who may call the HTTP API: API keys, bearer JWTs from an
//!   issuer, scopes (below `service`, which checks them, and `http`).
//! - [`broker`]: finding or starting a local `nats-server`.
//! - [`service`]: the orchestrator: submit, cancel, reads, and its
//!   background work (publisher, event applier, DLQ, reaper, orphan sweep).
//! - [`redact`]: keeping sensitive param values out of error messages,
//!   logs and the audit trail.
//! - [`http`]: the HTTP API over the service, with its bounds.
//! - [`server`]: the orchestrator process: service and HTTP API together.
//! - [`worker`]: the worker service: intake, claims, handlers, reports.

pub mod access;
pub mod agent;
pub mod auth;
pub mod broker;
pub mod bus;
pub mod claim;
pub mod codec;
pub mod envelope;
pub mod event;
pub mod http;
pub mod redact;
pub mod server;
pub mod service;
pub mod store;
pub mod task;
pub mod telemetry;
pub mod trigger;
pub mod worker;
pub mod workflow;

pub use envelope::{Envelope, TaskId};
pub use event::WorkerEvent;
pub use store::{Store, StoreConfig, StoreError};
pub use task::{TaskEvent, TaskRecord, TaskState};
