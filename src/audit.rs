//! The audit trail's records: what a change asks to be written, a record as
//! stored and listed (hash-chained to the one before), which records a
//! listing returns, and what a check of the whole chain found. The store
//! keeps them (`store::audit`: the chain, its keys and its index); the
//! service and its faces read them.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::envelope::{CorrelationId, TaskId, Timestamp};

/// What a caller asks to be audited.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEntry {
    /// Who did it: a principal, an agent instance, `orchestrator`.
    pub actor: String,
    /// What happened, dotted (`task.submitted`, `task.transition`).
    pub kind: String,
    /// The task concerned, if any.
    pub task_id: Option<TaskId>,
    /// The request concerned, if any.
    pub correlation_id: Option<CorrelationId>,
    /// The trace the action belongs to.
    pub trace_id: Option<String>,
    /// A summary: never secrets, never full parameters.
    pub detail: Value,
}

/// One audit record as stored and listed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// Position in the chain, from 1, without gaps.
    pub seq: u64,
    /// When it was recorded.
    pub at: Timestamp,
    /// Who did it.
    pub actor: String,
    /// What happened.
    pub kind: String,
    /// The task concerned, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<TaskId>,
    /// The request concerned, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<CorrelationId>,
    /// The trace the action belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// A summary of what happened.
    pub detail: Value,
    /// Hex SHA-256 of the previous record (64 zeros for the first).
    pub prev_hash: String,
    /// Hex SHA-256 of this record. Not part of the hashed body.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hash: String,
}

/// The result of checking the whole chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditReport {
    /// Whether every record is present and chained.
    pub ok: bool,
    /// How many records were checked.
    pub records: u64,
    /// The first sequence number found missing, altered or undecodable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_bad_seq: Option<u64>,
    /// What is wrong there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

impl AuditReport {
    /// A chain broken at `seq`, after `records` good records.
    pub(crate) fn broken(records: u64, seq: u64, problem: impl Into<String>) -> Self {
        AuditReport {
            ok: false,
            records,
            first_bad_seq: Some(seq),
            problem: Some(problem.into()),
        }
    }
}

/// Which records a listing returns.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AuditFilter {
    /// Only records about this task.
    pub task_id: Option<TaskId>,
    /// Only records about this request.
    pub correlation_id: Option<CorrelationId>,
}
