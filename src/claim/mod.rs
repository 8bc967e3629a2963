//! Delivery claims: the contract between every replica of an agent and the
//! orchestrator about who is running a task's attempt, and whether the task
//! is canceled (DESIGN section 6). It lives below both the worker and the
//! orchestrator because it is a protocol between processes, specified for
//! any language in `docs/worker-protocol.md`.
//!
//! - Bucket `ORCH_DELIVERIES` (a JetStream KV bucket with per-key TTL,
//!   nats-server ≥ 2.11), key = `<agent>.<task id>`: the agent first, so a
//!   least-privilege bus can let each agent write only its own claims.
//! - Value `{"state":"running","attempt":N,"stream_seq":S,"instance":"…"}`
//!   while a worker runs attempt N from stream message S, written with a
//!   per-key TTL (the lease, measured by the broker, never by comparing
//!   host clocks) and renewed by compare-and-swap on the revision.
//! - Value `{"state":"canceled","attempt":N}`, written by the orchestrator
//!   before it broadcasts a cancel: a worker that claims later never starts,
//!   and a running holder's next renewal fails.
//!
//! The decision on each delivery is the pure function [`decide`].

mod decide;
mod kv;
mod value;

pub use decide::{Decision, Delivery, decide};
pub use kv::{Acquired, ClaimError, ClaimErrorKind, Claims, Held};
pub use value::{ClaimValue, key};
