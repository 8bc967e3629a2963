//! Opening a store written by an earlier version: each format step is
//! migrated in place on open, and the format marker moves on only once the
//! step is flushed, so a crash during a migration repeats it on the next
//! open (every step is idempotent).

use std::path::Path;

use tracing::info;

use super::{FORMAT, StoreError, audit, keys};

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
    meta.insert("format", FORMAT)?;
    meta.flush()?;
    info!(
        path = %path.display(),
        indexed,
        seconds = started.elapsed().as_secs_f64(),
        "store migrated from format v1 to v2 (audit records indexed by task)"
    );
    Ok(())
}
