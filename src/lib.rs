//! `orchestrator`: a queue-based orchestrator for AI agents, with durable
//! task envelopes.
//!
//! # Layout
//!
//! Layers point one way, top to bottom: a module uses modules of its own
//! layer or below, never above, and no two use each other.
//!
//! 1. `server` wires the service and the HTTP API together (the binary's
//!    `cli` starts processes and parses flags).
//! 2. Faces: `http` calls `service` only (never `store`, `bus` or
//!    `claim`); `worker` is a process of its own, on `bus`, `claim`,
//!    `task_token` and `agent`.
//! 3. `service`: the orchestrator.
//! 4. Infrastructure: `store` (sled), `bus` (NATS), `broker`.
//! 5. Domain, read from files at most: `run`, `llm`, `trigger`,
//!    `access`, `agent`, `task`, `audit`.
//! 6. Contracts between processes and their context: `claim`, `task_token`,
//!    `telemetry`.
//! 7. Wire formats and their helpers: `event`, `artifact`, `envelope`,
//!    `codec`, `redact`, `backoff`, `target`, `source`, `files`.
//!
//! # Words
//!
//! One name per thing (`docs/concepts.md`, "The words in the code"): a
//! *trigger* is a workflow's definition, a *run* one execution of it; an
//! *attempt* is one try at a task; a *task token* is the JWT an envelope
//! carries, a *caller* who calls the API; a *delivery* is JetStream's, a
//! *push delivery* what the outbox owes an outside address; an *event* is
//! what a worker reports, a *transition* what the state machine takes, a
//! *trigger event* what starts a run, a *change* what the store tells live
//! views; every configuration type is a `*Settings`.
//!
//! # Modules
//!
//! - [`codec`]: decoding JSON with typed errors that name the field; strict
//!   for user input, tolerant on the wire; the nesting bound.
//! - [`envelope`]: the task envelope (wire format v1) and its ids.
//! - [`event`]: the status, progress and result events workers publish.
//! - [`artifact`]: artifacts and their parts, as events carry them.
//! - [`task`]: task states, the state machine, the retry policy, the task
//!   record and status, a submission's outcome.
//! - [`audit`]: the audit trail's records, filters and chain report.
//! - [`source`]: definition files: the line of a field, problems at
//!   file and line, reading strictly with every problem found, "did you
//!   mean".
//! - [`agent`]: agents in every format (`agent.json`, `registry.json`,
//!   PromptPacks, AgentCards) read into one model, the catalog of them.
//! - [`trigger`]: trigger definitions (`triggers/`) and `validate`.
//! - [`run`]: workflow runs: their record and the pure plan of what a
//!   run does next.
//! - [`llm`]: agents that are prompts for a model: a conversation's first
//!   request, the tools a card offers, the pure plan of what a
//!   conversation does next, the `llm` settings.
//! - [`redact`]: keeping sensitive param values out of error messages,
//!   logs and the audit trail.
//! - [`files`]: files written with the modes they need, whatever the
//!   umask (data and secrets private, a public key readable).
//! - [`backoff`]: delays with jitter between tries of what keeps failing.
//! - [`target`]: which addresses a push notification or callback may go
//!   to.
//! - [`store`]: the durable sled store: task statuses, envelopes,
//!   idempotency, indexes, the audit log and its by-task index, runs,
//!   waits for a task's end, quarantine of unreadable records, format
//!   migrations.
//! - [`bus`]: the NATS JetStream layout, publishing, pulling, settling,
//!   dead-lettering, the least-privilege users.
//! - [`claim`]: the delivery claims that keep two replicas from running one
//!   attempt (a contract between processes, below worker and orchestrator).
//! - [`task_token`]: task tokens: key files, the canonical envelope hash, minting
//!   and the worker's checks (a contract between processes, like `claim`).
//! - [`access`]: who may call the HTTP API: API keys, bearer JWTs from an
//!   issuer, scopes, one namespace per kind of principal.
//! - [`broker`]: finding or starting a local `nats-server`, or a local
//!   cluster of them.
//! - [`telemetry`]: logs, traces (OTLP, W3C context on messages) and
//!   Prometheus metrics.
//! - [`replication`]: the store's commits through a replicated JetStream
//!   log: the leader's fenced appender and reading the log back (being
//!   built: no standby takes over yet).
//! - [`service`]: the orchestrator: submit, cancel, reads, runs, replays,
//!   the registry, and its background work (publisher, event applier, DLQ,
//!   reaper, orphan sweep, workflow engine, schedules, event triggers, hot
//!   reload, quarantine); its errors say what kind of trouble they are.
//! - [`http`]: the HTTP API over the service, with its bounds (per
//!   principal, per body, per connection).
//! - [`server`]: the orchestrator process: service and HTTP API together.
//! - [`worker`]: the worker service: intake, claims, handlers, reports.

pub mod access;
pub mod agent;
pub mod artifact;
pub mod audit;
pub mod backoff;
pub mod broker;
pub mod bus;
pub mod claim;
pub mod codec;
pub mod envelope;
pub mod event;
pub mod files;
#[cfg(test)]
mod fuzz;
pub mod http;
pub mod llm;
pub mod redact;
pub mod replication;
pub mod run;
pub mod server;
pub mod service;
pub mod source;
pub mod store;
pub mod target;
pub mod task;
pub mod task_token;
pub mod telemetry;
pub mod trigger;
pub mod worker;

pub use envelope::{Envelope, TaskId};
pub use event::WorkerEvent;
pub use store::{Store, StoreError, StoreSettings};
pub use task::{TaskRecord, TaskState, Transition};
