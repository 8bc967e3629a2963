//! What can go wrong in the service, and what kind of trouble each is:
//! the one place that says whether a failure is the caller's (refused
//! input, a missing thing, a conflict) or the system's, so every face
//! (the REST API, and those to come) answers it the same way.

use crate::bus::BusError;
use crate::envelope::{AgentName, TaskId};
use crate::store::StoreError;
use crate::task::TaskState;

/// Why a request to the service was refused, or failed.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// No agent card has this id.
    #[error("no agent `{0}` is known")]
    UnknownAgent(AgentName),
    /// The agent has no such skill.
    #[error("agent `{agent}` has no skill `{action}`")]
    UnknownAction {
        /// The agent.
        agent: AgentName,
        /// The action asked for.
        action: String,
    },
    /// The task ended before the cancel came.
    #[error("task {task_id} is {state} and cannot be canceled")]
    NotCancelable {
        /// The task.
        task_id: TaskId,
        /// Its terminal state.
        state: TaskState,
    },
    /// An answer came for a task that does not wait for input.
    #[error("task {task_id} is {state}: it is not waiting for input")]
    NotWaiting {
        /// The task.
        task_id: TaskId,
        /// Its state.
        state: TaskState,
    },
    /// No trigger has this id.
    #[error("no trigger `{0}` is known")]
    UnknownTrigger(String),
    /// The trigger's input is not what it expects.
    #[error("{0}")]
    BadInput(crate::codec::DecodeError),
    /// The caller lacks scopes the request needs.
    #[error("{what} needs scopes the caller does not hold: {}", missing.join(", "))]
    Forbidden {
        /// What was asked.
        what: String,
        /// The scopes missing.
        missing: Vec<String>,
    },
    /// No dead letter holds this task.
    #[error("no dead letter for task {0}")]
    NoDeadLetter(TaskId),
    /// The dead letter cannot be replayed (it disagrees with the store's
    /// record of its task, or the task is not one that failed).
    #[error("task {task_id} is not replayed: {reason}")]
    ReplayRefused {
        /// The task the letter names.
        task_id: TaskId,
        /// Why.
        reason: String,
    },
    /// Too many tasks wait for a worker to take a new request.
    #[error(
        "{waiting} tasks wait for a worker, the most the orchestrator queues (max_backlog is {max}); try again later"
    )]
    Overloaded {
        /// Tasks waiting (counted up to `max`).
        waiting: usize,
        /// `max_backlog`.
        max: usize,
    },
    /// An idempotency key names an earlier answer or decision with other
    /// content: a key names one.
    #[error("idempotency key `{key}` was used for {earlier}; a key names one answer")]
    KeyReused {
        /// The key.
        key: String,
        /// What it named (`another answer to task …`).
        earlier: String,
    },
    /// The task's envelope is larger than the broker carries.
    #[error(
        "the task's envelope would be {size} bytes; the broker carries at most {max} (its max_payload, less room for headers)"
    )]
    TooLarge {
        /// The envelope's size.
        size: usize,
        /// The largest envelope accepted.
        max: usize,
    },
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The bus failed.
    #[error(transparent)]
    Bus(#[from] BusError),
    /// The store's log or lease failed.
    #[error(transparent)]
    Replication(#[from] crate::replication::ReplicationError),
    /// The token keys cannot be loaded or made (at open only).
    #[error("task token keys: {0}")]
    Keys(#[from] crate::task_token::KeyError),
    /// An agent card's schema does not compile.
    #[error(transparent)]
    InvalidCard(#[from] super::SchemaError),
}

/// What kind of trouble a [`ServiceError`] is, for a face to answer with
/// (the REST API maps each to a status code).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request is well formed but cannot be done as asked (422).
    Invalid,
    /// The caller lacks a scope (403).
    Forbidden,
    /// What was named is not there, or not the caller's to see (404).
    NotFound,
    /// It conflicts with what is there (409).
    Conflict,
    /// It was there and is no longer readable (410).
    Gone,
    /// It is larger than what can be carried (413).
    TooLarge,
    /// A dependency (the broker) is unreachable: try again (503).
    Unavailable,
    /// More is waiting than the orchestrator takes on: try again later
    /// (429).
    Overloaded,
    /// The orchestrator failed; the details are for its log only (500).
    Internal,
}

impl ServiceError {
    /// Whether what failed may succeed later (the store's disk or the
    /// broker): the engine tries such a step again.
    pub(crate) fn is_passing(&self) -> bool {
        matches!(
            self,
            ServiceError::Bus(_) | ServiceError::Store(StoreError::Io(_))
        )
    }

    /// What kind of trouble this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            ServiceError::UnknownAgent(_)
            | ServiceError::UnknownTrigger(_)
            | ServiceError::NoDeadLetter(_) => ErrorKind::NotFound,
            ServiceError::UnknownAction { .. } | ServiceError::BadInput(_) => ErrorKind::Invalid,
            ServiceError::Forbidden { .. } => ErrorKind::Forbidden,
            ServiceError::NotCancelable { .. }
            | ServiceError::NotWaiting { .. }
            | ServiceError::ReplayRefused { .. }
            | ServiceError::KeyReused { .. } => ErrorKind::Conflict,
            ServiceError::TooLarge { .. } => ErrorKind::TooLarge,
            ServiceError::Bus(_) | ServiceError::Replication(_) => ErrorKind::Unavailable,
            ServiceError::Overloaded { .. } => ErrorKind::Overloaded,
            ServiceError::Keys(_) | ServiceError::InvalidCard(_) => ErrorKind::Internal,
            ServiceError::Store(e) => match e {
                StoreError::NotLeader(_) => ErrorKind::Unavailable,
                StoreError::NotFound(_) | StoreError::RunNotFound(_) => ErrorKind::NotFound,
                StoreError::Quarantined { .. } => ErrorKind::Gone,
                StoreError::RunRefused(_)
                | StoreError::IdempotencyConflict { .. }
                | StoreError::RunKeyConflict { .. }
                | StoreError::MessageConflict { .. }
                | StoreError::Transition { .. } => ErrorKind::Conflict,
                _ => ErrorKind::Internal,
            },
        }
    }

    /// A stable snake_case code for the caller.
    pub fn code(&self) -> &'static str {
        match self {
            ServiceError::UnknownAgent(_) => "unknown_agent",
            ServiceError::UnknownAction { .. } => "unknown_action",
            ServiceError::Forbidden { .. } => "insufficient_scope",
            ServiceError::NotCancelable { .. } => "not_cancelable",
            ServiceError::NotWaiting { .. } => "not_waiting_for_input",
            ServiceError::ReplayRefused { .. } => "replay_refused",
            ServiceError::KeyReused { .. } => "idempotency_conflict",
            ServiceError::UnknownTrigger(_) | ServiceError::NoDeadLetter(_) => "not_found",
            ServiceError::BadInput(e) => e.code(),
            ServiceError::Store(e) => e.code(),
            ServiceError::Bus(_) => "bus_unavailable",
            ServiceError::Replication(_) => "log_unavailable",
            ServiceError::Overloaded { .. } => "overloaded",
            ServiceError::TooLarge { .. } => "payload_too_large",
            ServiceError::Keys(_) => "keys_unavailable",
            ServiceError::InvalidCard(_) => "invalid_card",
        }
    }

    /// Why a change to a run was refused, when that is the trouble.
    pub fn run_refused(&self) -> Option<&crate::run::RunRefused> {
        match self {
            ServiceError::Store(crate::store::StoreError::RunRefused(r)) => Some(r),
            _ => None,
        }
    }

    /// The request's field to blame, when one is.
    pub fn field(&self) -> Option<&str> {
        match self {
            ServiceError::UnknownAgent(_) => Some("to"),
            ServiceError::UnknownAction { .. } => Some("action"),
            ServiceError::BadInput(e) => e.field(),
            ServiceError::Store(
                StoreError::IdempotencyConflict { .. } | StoreError::RunKeyConflict { .. },
            )
            | ServiceError::KeyReused { .. } => Some("idempotency_key"),
            _ => None,
        }
    }
}
