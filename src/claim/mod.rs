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

pub use decide::{Decision, Delivery, decide};
pub use kv::{Acquired, ClaimError, ClaimErrorKind, Claims, Held};

use serde::{Deserialize, Serialize};

use crate::envelope::{AgentName, TaskId};

/// What the claim bucket holds under a task's key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ClaimValue {
    /// A worker runs `attempt` of the task, from message `stream_seq`.
    Running {
        /// The attempt being run.
        attempt: u32,
        /// The task-stream sequence of the message being run.
        stream_seq: u64,
        /// The worker instance that holds it (for people reading the bucket).
        instance: String,
    },
    /// The task is canceled; no attempt may start.
    Canceled {
        /// The attempt current when it was canceled.
        attempt: u32,
    },
}

impl ClaimValue {
    /// The value as stored.
    pub fn to_bytes(&self) -> bytes::Bytes {
        // A plain enum of numbers and strings always serializes.
        serde_json::to_vec(self).unwrap_or_default().into()
    }
}

/// The bucket key of a task's claim: `<agent>.<task id>`.
pub fn key(agent: &AgentName, task_id: TaskId) -> String {
    format!("{agent}.{task_id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_have_the_documented_wire_form() {
        let running = ClaimValue::Running {
            attempt: 2,
            stream_seq: 41,
            instance: "w-1".into(),
        };
        assert_eq!(
            serde_json::to_value(&running).unwrap(),
            serde_json::json!({"state": "running", "attempt": 2, "stream_seq": 41, "instance": "w-1"})
        );
        let canceled: ClaimValue =
            serde_json::from_str(r#"{"state":"canceled","attempt":1,"by":"newer peer"}"#).unwrap();
        assert_eq!(canceled, ClaimValue::Canceled { attempt: 1 });
    }
}
