//! What can go wrong in the store.

use std::path::PathBuf;

use crate::envelope::{IdempotencyKey, TaskId};
use crate::task::TransitionError;

/// A store operation's failure.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StoreError {
    /// The store could not be opened (missing permissions, corrupt or
    /// truncated files).
    #[error("cannot open the store at {path}: {message}")]
    Open {
        /// The store directory.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// Another process has the store open.
    #[error("the store at {path} is in use by another process")]
    Locked {
        /// The store directory.
        path: PathBuf,
    },
    /// The directory holds something that is not this store.
    #[error("{path} is not an orchestrator store ({found})")]
    NotAStore {
        /// The directory.
        path: PathBuf,
        /// What was found instead of the format marker.
        found: String,
    },
    /// A stored record could not be decoded.
    #[error("record `{key}` in tree `{tree}` cannot be decoded: {message}")]
    Decode {
        /// The tree holding it.
        tree: &'static str,
        /// Its key, readable.
        key: String,
        /// The decoder's complaint.
        message: String,
    },
    /// The store's log refused a commit: another process leads it now.
    /// Nothing more is written here; try the request on the leader.
    #[error("this orchestrator no longer leads the store's log ({0}); try another node")]
    NotLeader(String),
    /// The store holds another record than the log at a position: it
    /// committed what the log then refused (it led, and lost the lead),
    /// and must be made again from the log.
    #[error(
        "the store left the log at position {position}: it holds another commit there than the log"
    )]
    Diverged {
        /// The position.
        position: u64,
    },
    /// A record comes after a gap: the store is at `applied` and the
    /// record at `position`, the records between are not in what it reads
    /// (a log trimmed past this store: it must start from a snapshot).
    #[error(
        "the store is at log position {applied} but the next record it is given is at {position}: the records between are gone from the log (trimmed below a snapshot)"
    )]
    Behind {
        /// The store's position.
        applied: u64,
        /// The record's position.
        position: u64,
    },
    /// A snapshot cannot be written or read.
    #[error("store snapshot: {0}")]
    Snapshot(String),
    /// Reading, writing or flushing failed.
    #[error("store I/O failed: {0}")]
    Io(String),
    /// No task has this id.
    #[error("task {0} not found")]
    NotFound(TaskId),
    /// The task's stored records could not be decoded and were set aside.
    #[error("task {task_id}'s stored record cannot be read and was set aside: {reason}")]
    Quarantined {
        /// The task.
        task_id: TaskId,
        /// Why, as recorded when it was set aside.
        reason: String,
    },
    /// A task with this id exists already.
    #[error("task {0} exists already")]
    DuplicateTask(TaskId),
    /// The idempotency key belongs to another request.
    #[error("idempotency key `{key}` was used for a different request (task {existing})")]
    IdempotencyConflict {
        /// The key.
        key: IdempotencyKey,
        /// The task that owns it.
        existing: TaskId,
    },
    /// The state machine refused the change.
    #[error("task {task_id}: {error}")]
    Transition {
        /// The task.
        task_id: TaskId,
        /// Why.
        error: TransitionError,
    },
    /// The idempotency scope is not a valid label.
    #[error("idempotency scope: {0}")]
    InvalidScope(crate::envelope::ParseError),
    /// No run has this id.
    #[error("run {0} not found")]
    RunNotFound(crate::run::RunId),
    /// The run refused the change.
    #[error(transparent)]
    RunRefused(#[from] crate::run::RunRefused),
    /// The run's idempotency key belongs to another request.
    #[error("idempotency key `{key}` was used for a different run request (run {existing})")]
    RunKeyConflict {
        /// The key.
        key: String,
        /// The run that owns it.
        existing: crate::run::RunId,
    },
    /// The message id (or key) names another message.
    #[error(
        "message id `{key}` was used for a different message (other content, target or decision); a message id names one message"
    )]
    MessageConflict {
        /// The id or key.
        key: String,
    },
}

impl StoreError {
    /// A stable machine-readable code, used in API error bodies.
    pub fn code(&self) -> &'static str {
        match self {
            StoreError::Open { .. } | StoreError::Locked { .. } | StoreError::NotAStore { .. } => {
                "store_unavailable"
            }
            StoreError::Decode { .. } => "store_corrupt",
            StoreError::Io(_) => "store_io",
            StoreError::NotLeader(_) => "not_leader",
            StoreError::Diverged { .. } => "store_diverged",
            StoreError::Behind { .. } => "store_behind",
            StoreError::Snapshot(_) => "store_snapshot",
            StoreError::NotFound(_) | StoreError::RunNotFound(_) => "not_found",
            StoreError::Quarantined { .. } => "quarantined",
            StoreError::RunRefused(_) => "invalid_transition",
            StoreError::RunKeyConflict { .. } | StoreError::MessageConflict { .. } => {
                "idempotency_conflict"
            }
            StoreError::DuplicateTask(_) => "duplicate_task",
            StoreError::IdempotencyConflict { .. } => "idempotency_conflict",
            StoreError::Transition { .. } => "invalid_transition",
            StoreError::InvalidScope(_) => "invalid_field",
        }
    }
}

impl From<sled::Error> for StoreError {
    fn from(e: sled::Error) -> Self {
        StoreError::Io(e.to_string())
    }
}

impl From<sled::transaction::TransactionError<StoreError>> for StoreError {
    fn from(e: sled::transaction::TransactionError<StoreError>) -> Self {
        match e {
            sled::transaction::TransactionError::Abort(e) => e,
            sled::transaction::TransactionError::Storage(e) => e.into(),
        }
    }
}
