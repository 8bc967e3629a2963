//! A handler's note on its task: a small JSON value the broker keeps beside
//! the task's claim (`<agent>.<task id>.note` in the claim bucket), so that
//! what a handler must find again after its worker died (the remote task an
//! `a2a` handler follows) survives the worker. `docs/worker-protocol.md`
//! documents the key.

use serde_json::Value;

use crate::claim::Claims;
use crate::envelope::{AgentName, TaskId};

/// Where one agent's notes are kept: made once per worker, shared by its
/// tasks' [`Notes`].
pub(crate) struct Shelf {
    claims: Claims,
    agent: AgentName,
}

impl Shelf {
    /// The notes of `agent`'s tasks, in the claim bucket.
    pub(crate) fn new(claims: Claims, agent: AgentName) -> std::sync::Arc<Shelf> {
        std::sync::Arc::new(Shelf { claims, agent })
    }
}

/// Where a task's note is kept.
#[derive(Clone, Default)]
pub struct Notes {
    at: Option<(std::sync::Arc<Shelf>, TaskId)>,
}

impl std::fmt::Debug for Notes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.at {
            Some((shelf, task)) => write!(f, "Notes({}.{task})", shelf.agent),
            None => f.write_str("Notes(none)"),
        }
    }
}

impl Notes {
    /// The note of `task`, on `shelf`.
    pub(crate) fn new(shelf: &std::sync::Arc<Shelf>, task: TaskId) -> Self {
        Notes {
            at: Some((std::sync::Arc::clone(shelf), task)),
        }
    }

    /// For a handler run outside a worker: nothing is kept.
    pub fn none() -> Self {
        Notes::default()
    }

    /// The note, if one was left.
    pub async fn get(&self) -> Result<Option<Value>, NoteError> {
        let Some((shelf, task)) = &self.at else {
            return Ok(None);
        };
        match shelf.claims.note(&shelf.agent, *task).await? {
            Some(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(NoteError::NotJson),
            None => Ok(None),
        }
    }

    /// Leaves `value` as the note; returns once the broker stored it.
    pub async fn set(&self, value: &Value) -> Result<(), NoteError> {
        let Some((shelf, task)) = &self.at else {
            return Ok(());
        };
        let bytes = serde_json::to_vec(value).unwrap_or_default().into();
        shelf
            .claims
            .set_note(&shelf.agent, *task, bytes)
            .await
            .map_err(NoteError::from)
    }
}

/// Why a task's note could not be read or left.
#[derive(Debug, thiserror::Error)]
pub enum NoteError {
    /// The claims bucket could not be reached.
    #[error(transparent)]
    Claims(#[from] crate::claim::ClaimError),
    /// The note is not JSON (left by something else).
    #[error("the task's note is not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
}
