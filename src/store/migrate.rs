//! Opening a store written by an earlier version: each format step is
//! migrated in place on open, and the format marker moves on only once the
//! step is flushed, so a crash during a migration repeats it on the next
//! open (every step is idempotent).

use std::path::Path;

use tracing::info;

use super::{FORMAT_V2, StoreError, audit, keys};
use crate::task::{TaskRecord, TaskStatus};

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
            batch.insert(&keys::audit_by_task(task, record.seq), &[][..]);
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
        let record: TaskRecord = keys::decode_value("tasks", &key, &bytes)?;
        // The envelope first: a crash between the two writes leaves a
        // record that is still whole, and the next open splits it again.
        envelopes.insert(&key, keys::encode(&record.envelope))?;
        tasks.insert(&key, keys::encode(&record.status()))?;
        split += 1;
    }
    envelopes.flush()?;
    tasks.flush()?;
    meta.insert("format", super::FORMAT)?;
    meta.flush()?;
    info!(
        path = %path.display(),
        split,
        seconds = started.elapsed().as_secs_f64(),
        "store migrated from format v2 to v3 (envelopes apart, history from the audit log)"
    );
    Ok(())
}
