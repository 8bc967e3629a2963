//! Tasks in the store: creation with an idempotency claim, and reads by
//! id, correlation and state (changes are in `apply.rs`).

use std::ops::Bound;

use serde::Deserialize;
use sled::transaction::ConflictableTransactionError;
use tracing::warn;

use super::{Abort, Store, StoreError, Tx, row_keys};
use crate::envelope::{CorrelationId, Envelope, TaskId};
use crate::task::{HistoryEntry, Said, TaskRecord, TaskState, TaskStatus};

pub(super) fn abort(e: StoreError) -> Abort {
    ConflictableTransactionError::Abort(e)
}

pub(super) fn read_status(tx: &Tx<'_>, id: TaskId) -> Result<TaskStatus, Abort> {
    let key = row_keys::task(id);
    let bytes = tx
        .tasks
        .get(key)?
        .ok_or_else(|| abort(StoreError::NotFound(id)))?;
    row_keys::decode_value("tasks", &key, &bytes).map_err(abort)
}

impl Store {
    /// A wait for task `id`'s changes, registered now: read the task after
    /// this, then await [`super::Watch::changed`] and read again.
    pub fn watch(&self, id: TaskId) -> super::waiters::Watch {
        self.inner.watchers.watch(id)
    }

    /// The task with this id, if any: its status, its envelope and its
    /// history (from the audit log).
    ///
    /// A task set aside because its records cannot be read is
    /// [`StoreError::Quarantined`]; one whose records cannot be read and
    /// is not set aside yet is [`StoreError::Decode`], and noted for the
    /// quarantine ([`Store::take_unreadable`]).
    pub fn get(&self, id: TaskId) -> Result<Option<TaskRecord>, StoreError> {
        let read = match self.status(id) {
            Ok(Some(status)) => self.assemble(status).map(Some),
            other => other.map(|_| None),
        };
        match read {
            Ok(None) => match self.quarantined(id)? {
                Some(q) => Err(StoreError::Quarantined {
                    task_id: id,
                    reason: q.reason,
                }),
                None => Ok(None),
            },
            Err(e @ StoreError::Decode { .. }) => {
                self.note_unreadable(id, &e);
                Err(e)
            }
            other => other,
        }
    }

    /// [`Store::get`] for listings: a task whose records cannot be read
    /// is skipped (noted for the quarantine), not an error.
    pub(super) fn get_readable(&self, id: TaskId) -> Result<Option<TaskRecord>, StoreError> {
        let read = match self.status(id) {
            Ok(Some(status)) => self.assemble(status).map(Some),
            other => other.map(|_| None),
        };
        self.readable(id, read)
    }

    /// The status of the task with this id, if any (one small read).
    pub fn status(&self, id: TaskId) -> Result<Option<TaskStatus>, StoreError> {
        let key = row_keys::task(id);
        match self.inner.trees.tasks.get(key)? {
            Some(bytes) => row_keys::decode_value("tasks", &key, &bytes).map(Some),
            None => Ok(None),
        }
    }

    /// The state of the task with this id, if any: read from its status
    /// without decoding the rest.
    pub fn state(&self, id: TaskId) -> Result<Option<TaskState>, StoreError> {
        #[derive(serde::Deserialize)]
        struct StateOnly {
            state: TaskState,
        }
        let key = row_keys::task(id);
        match self.inner.trees.tasks.get(key)? {
            Some(bytes) => {
                row_keys::decode_value::<StateOnly>("tasks", &key, &bytes).map(|s| Some(s.state))
            }
            None => Ok(None),
        }
    }

    /// The envelope of the task with this id, if any (as submitted, attempt 1).
    pub fn envelope(&self, id: TaskId) -> Result<Option<Envelope>, StoreError> {
        let key = row_keys::task(id);
        match self.inner.trees.envelopes.get(key)? {
            Some(bytes) => row_keys::decode_value("envelopes", &key, &bytes).map(Some),
            None => Ok(None),
        }
    }

    /// The whole task of a status: its envelope, and its history as of
    /// the same moment: up to the audit record the status names (every
    /// record up to it committed with or before the status). A status
    /// written before statuses named one is read again after the history:
    /// then at least as new, so a transition the history shows (a
    /// completion) finds in the status what it recorded there (the result).
    fn assemble(&self, status: TaskStatus) -> Result<TaskRecord, StoreError> {
        let id = status.task_id;
        let (status, history) = match status.audit_seq {
            Some(upto) => (status, self.history_upto(id, upto)?),
            None => {
                let history = self.history_upto(id, u64::MAX)?;
                (self.status(id)?.unwrap_or(status), history)
            }
        };
        let Some(envelope) = self.envelope(status.task_id)? else {
            let key = row_keys::task(status.task_id);
            return Err(StoreError::Decode {
                tree: "envelopes",
                key: row_keys::describe("envelopes", &key),
                message: format!("task {} has no envelope", status.task_id),
            });
        };
        Ok(TaskRecord {
            envelope,
            status,
            history,
        })
    }

    /// Task `id`'s transitions and reports, oldest first, from its audit
    /// records up to record `upto`.
    fn history_upto(&self, id: TaskId, upto: u64) -> Result<Vec<HistoryEntry>, StoreError> {
        let filter = super::AuditFilter {
            task_id: Some(id),
            correlation_id: None,
        };
        let records = self.audit_list(&filter, 0, usize::MAX)?;
        Ok(records
            .iter()
            .filter(|r| r.seq <= upto)
            .filter_map(history_entry)
            .collect())
    }

    /// Up to `limit` tasks after task `after` (exclusive), oldest first.
    pub fn list(&self, after: Option<TaskId>, limit: usize) -> Result<Vec<TaskRecord>, StoreError> {
        let start = match after {
            Some(id) => Bound::Excluded(row_keys::task(id).to_vec()),
            None => Bound::Unbounded,
        };
        let mut out = Vec::new();
        for item in self.inner.trees.tasks.range((start, Bound::Unbounded)) {
            if out.len() >= limit {
                break;
            }
            let (key, bytes) = item?;
            let id = row_keys::trailing_task_id("tasks", &key)?;
            let read = row_keys::decode_value("tasks", &key, &bytes).and_then(|s| self.assemble(s));
            if let Some(record) = self.readable(id, read.map(Some))? {
                out.push(record);
            }
        }
        Ok(out)
    }

    /// Up to `limit` tasks of one correlation id after task `after`, oldest
    /// first: those in the index, and the task the id names if the id is
    /// that task's own (such a task has no index entry).
    pub fn list_by_correlation(
        &self,
        correlation: &CorrelationId,
        after: Option<TaskId>,
        limit: usize,
    ) -> Result<Vec<TaskRecord>, StoreError> {
        let prefix = row_keys::correlation_prefix(correlation);
        let start = after.map(|id| row_keys::correlation(correlation, id));
        let mut out = self.index_range(
            &self.inner.trees.by_correlation,
            "by_correlation",
            &prefix,
            start,
            limit,
            |id| self.get_readable(id),
        )?;
        let own = correlation
            .as_str()
            .parse::<TaskId>()
            .ok()
            .filter(|id| after.is_none_or(|after| *id > after));
        if let Some(id) = own
            && let Some(record) = self.get_readable(id)?
            && record.status.correlation_id == *correlation
        {
            let at = out.partition_point(|r| r.task_id() < id);
            out.insert(at, record);
            out.truncate(limit);
        }
        Ok(out)
    }

    /// Up to `limit` tasks in `state` after task `after`, oldest first.
    pub fn list_by_state(
        &self,
        state: TaskState,
        after: Option<TaskId>,
        limit: usize,
    ) -> Result<Vec<TaskRecord>, StoreError> {
        self.state_range(state, after, limit, |id| self.get_readable(id))
    }

    /// [`Store::list_by_state`], statuses only (no envelope or history read).
    pub fn statuses_by_state(
        &self,
        state: TaskState,
        after: Option<TaskId>,
        limit: usize,
    ) -> Result<Vec<TaskStatus>, StoreError> {
        self.state_range(state, after, limit, |id| self.readable(id, self.status(id)))
    }

    /// Up to `limit` items `read` for the tasks in `state` after task
    /// `after`, oldest first.
    fn state_range<T>(
        &self,
        state: TaskState,
        after: Option<TaskId>,
        limit: usize,
        read: impl Fn(TaskId) -> Result<Option<T>, StoreError>,
    ) -> Result<Vec<T>, StoreError> {
        let prefix = [state.code()];
        let start = after.map(|id| row_keys::state(state, id).to_vec());
        self.index_range(
            &self.inner.trees.by_state,
            "by_state",
            &prefix,
            start,
            limit,
            read,
        )
    }

    /// Up to `limit` items read by `read` for the task ids of `index`
    /// under `prefix`, after the key `after`. An entry whose task `read`
    /// does not find (unreadable, or a damaged index: `store verify`
    /// reports both) is skipped.
    fn index_range<T>(
        &self,
        index: &sled::Tree,
        name: &'static str,
        prefix: &[u8],
        after: Option<Vec<u8>>,
        limit: usize,
        read: impl Fn(TaskId) -> Result<Option<T>, StoreError>,
    ) -> Result<Vec<T>, StoreError> {
        let start = match after {
            Some(key) => Bound::Excluded(key),
            None => Bound::Included(prefix.to_vec()),
        };
        let mut out = Vec::new();
        for item in index.range((start, Bound::Unbounded)) {
            let (key, _) = item?;
            if !key.starts_with(prefix) || out.len() >= limit {
                break;
            }
            let id = row_keys::trailing_task_id(name, &key)?;
            match read(id)? {
                Some(record) => out.push(record),
                None => {
                    warn!(task_id = %id, index = name, "an index names a task that cannot be read: skipped")
                }
            }
        }
        Ok(out)
    }
}

/// The history entry an audit record stands for: a creation, a transition
/// or a progress report (other records, such as ignored events, are not
/// history).
fn history_entry(record: &super::AuditRecord) -> Option<HistoryEntry> {
    let detail = &record.detail;
    let attempt = detail["attempt"]
        .as_u64()
        .and_then(|a| u32::try_from(a).ok())?;
    let text = |v: &serde_json::Value| v.as_str().map(str::to_string);
    let mut entry = HistoryEntry::created(record.at, attempt, &record.actor);
    match record.kind.as_str() {
        "task.submitted" => {}
        "task.transition" => {
            entry.from = Some(serde_json::from_value(detail["from"].clone()).ok()?);
            entry.to = serde_json::from_value(detail["to"].clone()).ok()?;
            entry.event = Some(serde_json::from_value(detail["event"].clone()).ok()?);
            entry.reason = text(&detail["reason"]).unwrap_or_default();
            entry.said = Said::deserialize(detail).unwrap_or_default();
        }
        "task.progress" => {
            let state: TaskState = serde_json::from_value(detail["state"].clone()).ok()?;
            entry.from = Some(state);
            entry.to = state;
            entry.reason = "progress".to_string();
            entry.progress = Some(crate::event::Progress {
                seq: serde_json::from_value(detail["seq"].clone()).ok()?,
                message: text(&detail["message"]),
                artifact: serde_json::from_value(detail["artifact"].clone()).ok(),
            });
        }
        _ => return None,
    }
    Some(entry)
}
