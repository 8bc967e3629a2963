//! A claim's value in the delivery-claims bucket, and its key: the wire
//! form every worker reads and writes.

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
