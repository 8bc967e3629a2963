//! Opening a store written by an earlier version: each format step is
//! migrated in place on open, and the format marker moves on only once the
//! step is flushed, so a crash during a migration repeats it on the next
//! open (every step is idempotent).

use std::path::Path;

use tracing::info;

use super::{FORMAT_V2, FORMAT_V3, FORMAT_V4, StoreError, audit, row_keys};
use serde::Deserialize;
use serde_json::Value;

use crate::envelope::{Envelope, TaskId, Timestamp};
use crate::event::ErrorInfo;
use crate::task::{TaskState, TaskStatus};

/// v1 → v2: builds the audit-by-task index from the audit log.
pub(super) fn v1_to_v2(
    path: &Path,
    log: &sled::Tree,
    by_task: &sled::Tree,
    meta: &sled::Tree,
) -> Result<(), StoreError> {
    let started = std::time::Instant::now();
    let mut indexed = 0u64;
    let mut batch = sled::Batch::default();
    for item in log.iter() {
        let (key, value) = item?;
        let (_, record) = audit::decode_stored(&key, &value)?;
        if let Some(task) = record.task_id {
            batch.insert(&v2_index_key(task, record.seq), &[][..]);
            indexed += 1;
            if indexed.is_multiple_of(10_000) {
                by_task.apply_batch(std::mem::take(&mut batch))?;
            }
        }
    }
    by_task.apply_batch(batch)?;
    by_task.flush()?;
    meta.insert("format", FORMAT_V2)?;
    meta.flush()?;
    info!(
        path = %path.display(),
        indexed,
        seconds = started.elapsed().as_secs_f64(),
        "store migrated from format v1 to v2 (audit records indexed by task)"
    );
    Ok(())
}

/// v2 → v3: each task record (envelope, status and history in one value,
/// rewritten on every change) becomes a small status in `tasks` and its
/// envelope in `envelopes`; the history is the audit log's, which has
/// every transition already. A record already split is left alone, so a
/// repeated migration does no harm.
pub(super) fn v2_to_v3(
    path: &Path,
    tasks: &sled::Tree,
    envelopes: &sled::Tree,
    meta: &sled::Tree,
) -> Result<(), StoreError> {
    let started = std::time::Instant::now();
    let mut split = 0u64;
    for item in tasks.iter() {
        let (key, bytes) = item?;
        if serde_json::from_slice::<TaskStatus>(&bytes).is_ok() {
            continue;
        }
        let whole: WholeRecord = row_keys::decode_value("tasks", &key, &bytes)?;
        let (envelope, status) = whole.split();
        // The envelope first: a crash between the two writes leaves a
        // record that is still whole, and the next open splits it again.
        envelopes.insert(&key, row_keys::encode(&envelope))?;
        tasks.insert(&key, row_keys::encode(&status))?;
        split += 1;
    }
    envelopes.flush()?;
    tasks.flush()?;
    meta.insert("format", FORMAT_V3)?;
    meta.flush()?;
    info!(
        path = %path.display(),
        split,
        seconds = started.elapsed().as_secs_f64(),
        "store migrated from format v2 to v3 (envelopes apart, history from the audit log)"
    );
    Ok(())
}

/// v3 → v4: indexes the runs by trigger, by state and by both, and gives
/// the runs' idempotency keys (kept for good in v3) an expiry `retention`
/// from now.
pub(super) fn v3_to_v4(
    path: &Path,
    runs: &sled::Tree,
    meta: &sled::Tree,
    retention: std::time::Duration,
) -> Result<(), StoreError> {
    let started = std::time::Instant::now();
    let indexed = super::run_index::index_all(runs)?;
    let expires_at = Timestamp::now().after(retention).unix_seconds();
    let stamped = super::runs::stamp_keys(runs, expires_at)?;
    runs.flush()?;
    meta.insert("format", FORMAT_V4)?;
    meta.flush()?;
    info!(
        path = %path.display(),
        indexed,
        stamped,
        seconds = started.elapsed().as_secs_f64(),
        "store migrated from format v3 to v4 (runs indexed by trigger and state, run keys expire)"
    );
    Ok(())
}

/// v4 → v5: one audit index key per task instead of one per record (its
/// value lists the task's sequences), and no `by_correlation` entry for a
/// task whose correlation id is its own id. Each task's keys change in one
/// batch, so a repeated migration finds each task either done or not begun.
pub(super) fn v4_to_v5(
    path: &Path,
    by_task: &sled::Tree,
    by_correlation: &sled::Tree,
    meta: &sled::Tree,
) -> Result<(), StoreError> {
    let started = std::time::Instant::now();
    let mut merged = 0u64;
    let mut batch = sled::Batch::default();
    let mut pending = 0usize;
    // Entries are ordered by task, then sequence: a task's records end
    // where the next task's begin. A task's new key sorts before its old
    // ones, so the walk never meets what it wrote.
    let mut current: Option<(TaskId, Vec<u8>)> = None;
    for item in by_task.iter() {
        let (key, _) = item?;
        if key.len() == 16 {
            continue;
        }
        let (task, seq) = v2_index_key_parts(&key)?;
        match &mut current {
            Some((t, seqs)) if *t == task => seqs.extend_from_slice(&seq.to_be_bytes()),
            _ => {
                let next = (task, seq.to_be_bytes().to_vec());
                if let Some((done, seqs)) = current.replace(next) {
                    batch.insert(&row_keys::task(done), seqs);
                    merged += 1;
                    if pending >= 10_000 {
                        by_task.apply_batch(std::mem::take(&mut batch))?;
                        pending = 0;
                    }
                }
            }
        }
        batch.remove(key);
        pending += 1;
    }
    if let Some((done, seqs)) = current {
        batch.insert(&row_keys::task(done), seqs);
        merged += 1;
    }
    by_task.apply_batch(batch)?;
    let mut unindexed = 0u64;
    let mut batch = sled::Batch::default();
    for item in by_correlation.iter() {
        let (key, _) = item?;
        let task = row_keys::trailing_task_id("by_correlation", &key)?;
        if key.as_ref() == row_keys::correlation(&task.into(), task) {
            batch.remove(key);
            unindexed += 1;
        }
    }
    by_correlation.apply_batch(batch)?;
    by_task.flush()?;
    by_correlation.flush()?;
    meta.insert("format", super::FORMAT_V5)?;
    meta.flush()?;
    info!(
        path = %path.display(),
        merged,
        unindexed,
        seconds = started.elapsed().as_secs_f64(),
        "store migrated from format v4 to v5 (one audit index key per task, lone tasks not indexed by correlation)"
    );
    Ok(())
}

/// The audit index key of formats v2 to v4: the task, then the record's
/// sequence (one key per record).
fn v2_index_key(task: TaskId, seq: u64) -> [u8; 24] {
    let mut key = [0u8; 24];
    key[..16].copy_from_slice(task.as_bytes());
    key[16..].copy_from_slice(&seq.to_be_bytes());
    key
}

fn v2_index_key_parts(key: &[u8]) -> Result<(TaskId, u64), StoreError> {
    let malformed = || StoreError::Decode {
        tree: "audit_by_task",
        key: row_keys::describe("audit_by_task", key),
        message: "index key is not a task id and a sequence (24 bytes)".into(),
    };
    let (task, seq) = key.split_first_chunk::<16>().ok_or_else(malformed)?;
    let seq: [u8; 8] = seq.try_into().map_err(|_| malformed())?;
    Ok((TaskId::from_bytes(*task), u64::from_be_bytes(seq)))
}

/// The part of a v1/v2 history entry migration keeps.
#[derive(Deserialize)]
struct FirstEntry {
    actor: String,
}

/// A task record of formats v1 and v2: the envelope, the status and the
/// history in one value (of the history only who asked is kept: the audit log has the rest).
#[derive(Deserialize)]
struct WholeRecord {
    envelope: Envelope,
    state: TaskState,
    attempt: u32,
    /// Only its first entry is kept: who asked for the task.
    #[serde(default)]
    history: Vec<FirstEntry>,
    #[serde(default)]
    result: Option<Value>,
    #[serde(default)]
    error: Option<ErrorInfo>,
    #[serde(default)]
    trace_id: Option<String>,
    #[serde(default)]
    trace_parent: Option<crate::telemetry::context::StoredTrace>,
    #[serde(default)]
    published_seq: Option<u64>,
    #[serde(default)]
    retry_at: Option<Timestamp>,
    created_at: Timestamp,
    updated_at: Timestamp,
}

impl WholeRecord {
    fn split(self) -> (Envelope, TaskStatus) {
        let header = &self.envelope.header;
        let status = TaskStatus {
            task_id: header.task_id,
            correlation_id: header.correlation_id.clone(),
            agent: header.to.clone(),
            max_attempts: self.envelope.control.max_attempts.get(),
            state: self.state,
            attempt: self.attempt,
            result: self.result,
            error: self.error,
            requested_by: self.history.first().map(|h| h.actor.clone()),
            trace_id: self.trace_id,
            trace_parent: self.trace_parent,
            conversation: false,
            published_seq: self.published_seq,
            retry_at: self.retry_at,
            progress: None,
            input: None,
            audit_seq: None,
            created_at: self.created_at,
            updated_at: self.updated_at,
        };
        (self.envelope, status)
    }
}

/// v5 → v6: every task in the `by_label` index, under its agent, its
/// owner and its trigger. Keys are only added, and the format changes
/// last, so a repeated migration writes the same keys again. A task whose
/// records cannot be read is left out (`store verify` names it).
pub(super) fn v5_to_v6(
    path: &Path,
    tasks: &sled::Tree,
    envelopes: &sled::Tree,
    by_label: &sled::Tree,
    meta: &sled::Tree,
) -> Result<(), StoreError> {
    #[derive(serde::Deserialize)]
    struct Owner {
        #[serde(default)]
        requested_by: Option<String>,
    }
    let started = std::time::Instant::now();
    let (mut indexed, mut unreadable) = (0u64, 0u64);
    let mut batch = sled::Batch::default();
    let mut pending = 0usize;
    for item in tasks.iter() {
        let (key, bytes) = item?;
        let owner = row_keys::decode_value::<Owner>("tasks", &key, &bytes);
        let envelope = match envelopes.get(&key)? {
            Some(e) => {
                row_keys::decode_value::<crate::envelope::Envelope>("envelopes", &key, &e).ok()
            }
            None => None,
        };
        let (Ok(owner), Some(envelope)) = (owner, envelope) else {
            unreadable += 1;
            continue;
        };
        for label in super::labels::of(&envelope, owner.requested_by.as_deref()) {
            batch.insert(label, &[][..]);
            pending += 1;
        }
        indexed += 1;
        if pending >= 10_000 {
            by_label.apply_batch(std::mem::take(&mut batch))?;
            pending = 0;
        }
    }
    by_label.apply_batch(batch)?;
    by_label.flush()?;
    meta.insert("format", super::FORMAT)?;
    meta.flush()?;
    info!(
        path = %path.display(),
        indexed,
        unreadable,
        seconds = started.elapsed().as_secs_f64(),
        "store migrated from format v5 to v6 (tasks indexed by agent, owner and trigger)"
    );
    Ok(())
}
