//! How records are keyed in each sled tree, and decoding with errors that
//! name the tree and the key.
//!
//! Task ids are UUIDv7, whose bytes sort by creation time, so every index
//! lists tasks oldest first. Audit keys are big-endian sequence numbers.

use serde::de::DeserializeOwned;

use super::StoreError;
use crate::envelope::{CorrelationId, TaskId};
use crate::task::TaskState;

/// Separates a variable-length prefix from what follows. Correlation ids,
/// scopes and keys cannot hold control characters, so it never occurs in them.
const SEP: u8 = 0;

pub(crate) fn task(id: TaskId) -> [u8; 16] {
    *id.as_bytes()
}

pub(crate) fn correlation_prefix(correlation: &CorrelationId) -> Vec<u8> {
    let mut key = correlation.as_str().as_bytes().to_vec();
    key.push(SEP);
    key
}

pub(crate) fn correlation(correlation: &CorrelationId, id: TaskId) -> Vec<u8> {
    let mut key = correlation_prefix(correlation);
    key.extend_from_slice(id.as_bytes());
    key
}

pub(crate) fn state(state: TaskState, id: TaskId) -> [u8; 17] {
    let mut key = [0u8; 17];
    key[0] = state.code();
    key[1..].copy_from_slice(id.as_bytes());
    key
}

pub(crate) fn idempotency(scope: &str, key: &str) -> Vec<u8> {
    let mut out = scope.as_bytes().to_vec();
    out.push(SEP);
    out.extend_from_slice(key.as_bytes());
    out
}

pub(crate) fn audit(seq: u64) -> [u8; 8] {
    seq.to_be_bytes()
}

/// Appends `seq` to a task's entry in the audit index (its value: the
/// sequences of the task's records, oldest first, 8 bytes big-endian each;
/// one key per task, whatever its number of records).
pub(crate) fn push_audit_seq(entry: Option<&[u8]>, seq: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(entry.map_or(0, <[u8]>::len) + 8);
    out.extend_from_slice(entry.unwrap_or_default());
    out.extend_from_slice(&seq.to_be_bytes());
    out
}

/// The sequences of an audit index entry, with an error naming the key
/// when the entry is not whole sequences.
pub(crate) fn audit_seqs(key: &[u8], entry: &[u8]) -> Result<Vec<u64>, StoreError> {
    let (seqs, rest) = entry.as_chunks::<8>();
    if !rest.is_empty() || key.len() != 16 {
        return Err(StoreError::Decode {
            tree: "audit_by_task",
            key: describe("audit_by_task", key),
            message: format!(
                "expected a task id (16 bytes) → sequences (8 bytes each), found {} → {} bytes",
                key.len(),
                entry.len()
            ),
        });
    }
    Ok(seqs.iter().map(|s| u64::from_be_bytes(*s)).collect())
}

/// The task id that ends an index key (its last 16 bytes).
pub(crate) fn trailing_task_id(tree: &'static str, key: &[u8]) -> Result<TaskId, StoreError> {
    let start = key
        .len()
        .checked_sub(16)
        .ok_or_else(|| StoreError::Decode {
            tree,
            key: describe(tree, key),
            message: "index key is shorter than a task id".into(),
        })?;
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&key[start..]);
    Ok(TaskId::from_bytes(bytes))
}

/// A key as a person can read it in an error message.
pub(crate) fn describe(tree: &str, key: &[u8]) -> String {
    match (tree, key.len()) {
        ("tasks" | "envelopes" | "audit_by_task", 16) => trailing_task_id("tasks", key)
            .map(|id| id.to_string())
            .unwrap_or_default(),
        ("audit", 8) => {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(key);
            format!("seq {}", u64::from_be_bytes(bytes))
        }
        _ => key
            .iter()
            .map(|&b| match b {
                SEP => "/".to_string(),
                b if b.is_ascii_graphic() || b == b' ' => (b as char).to_string(),
                b => format!("\\x{b:02x}"),
            })
            .collect(),
    }
}

/// Decodes a JSON value stored under `key` in `tree`.
pub(crate) fn decode_value<T: DeserializeOwned>(
    tree: &'static str,
    key: &[u8],
    value: &[u8],
) -> Result<T, StoreError> {
    serde_json::from_slice(value).map_err(|e| StoreError::Decode {
        tree,
        key: describe(tree, key),
        message: e.to_string(),
    })
}

/// Encodes a value for storage. The store's types always serialize.
pub(crate) fn encode<T: serde::Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}
