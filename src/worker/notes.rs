//! A handler's note on its task: a small JSON value the broker keeps beside
//! the task's claim (`<agent>.<task id>.note` in the claim bucket), so that
//! what a handler must find again after its worker died (the remote task an
//! `a2a` handler follows) survives the worker. `docs/worker-protocol.md`
//! documents the key.

use serde_json::Value;

use crate::claim::Claims;
use crate::envelope::{AgentName, TaskId};

/// Where a task's note is kept.
#[derive(Clone, Default)]
pub struct Notes {
    at: Option<(Claims, AgentName, TaskId)>,
}

impl std::fmt::Debug for Notes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.at {
            Some((_, agent, task)) => write!(f, "Notes({agent}.{task})"),
            None => f.write_str("Notes(none)"),
        }
    }
}

impl Notes {
    /// The note of `task` of `agent`, in the claim bucket.
    pub(crate) fn new(claims: Claims, agent: AgentName, task: TaskId) -> Self {
        Notes {
            at: Some((claims, agent, task)),
        }
    }

    /// For a handler run outside a worker: nothing is kept.
    pub fn none() -> Self {
        Notes::default()
    }

    /// The note, if one was left.
    pub async fn get(&self) -> Result<Option<Value>, String> {
        let Some((claims, agent, task)) = &self.at else {
            return Ok(None);
        };
        match claims.note(agent, *task).await.map_err(|e| e.to_string())? {
            Some(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| format!("the task's note is not JSON: {e}")),
            None => Ok(None),
        }
    }

    /// Leaves `value` as the note; returns once the broker stored it.
    pub async fn set(&self, value: &Value) -> Result<(), String> {
        let Some((claims, agent, task)) = &self.at else {
            return Ok(());
        };
        let bytes = serde_json::to_vec(value).unwrap_or_default().into();
        claims
            .set_note(agent, *task, bytes)
            .await
            .map_err(|e| e.to_string())
    }
}
