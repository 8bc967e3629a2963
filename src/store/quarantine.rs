//! Task records that cannot be decoded are set aside, not fatal.
//!
//! A reader that meets a task whose status or envelope does not decode
//! (written by a version that accepted too deep a value, or damaged)
//! skips it, logs a warning and notes it; the orchestrator then
//! quarantines it: one transaction moves the task's raw records out of
//! `tasks` and `envelopes` into `meta` (under `quarantine/<task id>/<tree>`,
//! byte for byte, beside a `quarantine/<task id>` record saying when and
//! why), removes its index entries, and audits `task.quarantined`. From
//! then on the task reads as quarantined, listings do not hold it, and
//! `store verify` lists it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::json;
use tracing::warn;

use super::{AuditEntry, Store, StoreError, audit, row_keys};
use crate::envelope::{CorrelationId, TaskId, Timestamp};
use crate::task::{TaskState, TaskStatus};

/// Where quarantined records are kept in `meta`.
const PREFIX: &str = "quarantine/";

/// The trees a task's own records live in (indexes are rebuilt from them).
const TREES: [&str; 2] = ["tasks", "envelopes"];

/// The raw records set aside for one task, by the tree they came from.
pub type RawRecords = BTreeMap<String, Vec<u8>>;

/// A task whose records were set aside.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Quarantined {
    /// The task.
    pub task_id: TaskId,
    /// When its records were set aside.
    pub at: Timestamp,
    /// Why: the decoder's complaint.
    pub reason: String,
    /// The trees its records were moved from.
    pub trees: Vec<String>,
}

fn record_key(id: TaskId) -> String {
    format!("{PREFIX}{id}")
}

fn raw_key(id: TaskId, tree: &str) -> String {
    format!("{PREFIX}{id}/{tree}")
}

impl Store {
    /// Notes that a reader met task `id`'s unreadable record: logged, and
    /// kept for [`Store::take_unreadable`] (once per task until taken).
    pub(super) fn note_unreadable(&self, id: TaskId, error: &StoreError) {
        if let std::collections::btree_map::Entry::Vacant(entry) =
            super::lock(&self.inner.unreadable).entry(id)
        {
            warn!(task_id = %id, error = %error, "skipping a task whose stored record cannot be read");
            entry.insert(error.to_string());
        }
    }

    /// `result`, with an unreadable record noted and read as absent.
    pub fn readable<T>(
        &self,
        id: TaskId,
        result: Result<Option<T>, StoreError>,
    ) -> Result<Option<T>, StoreError> {
        match result {
            Err(e @ StoreError::Decode { .. }) => {
                self.note_unreadable(id, &e);
                Ok(None)
            }
            other => other,
        }
    }

    /// The tasks readers found unreadable since the last call, with why:
    /// for the orchestrator to quarantine.
    pub fn take_unreadable(&self) -> Vec<(TaskId, String)> {
        std::mem::take(&mut *super::lock(&self.inner.unreadable))
            .into_iter()
            .collect()
    }

    /// Task `id`'s `by_label` keys, from what of it can still be read:
    /// its envelope, and its owner from its status or its creation's audit
    /// record; else its agent and owner from its status (an entry left
    /// behind names a task no listing finds, and is skipped).
    fn labels_of(&self, id: TaskId) -> Result<Vec<Vec<u8>>, StoreError> {
        use super::labels::{Label, key};
        let k = row_keys::task(id);
        let status = match self.inner.trees.tasks.get(k)? {
            Some(b) => row_keys::decode_value::<TaskStatus>("tasks", &k, &b).ok(),
            None => None,
        };
        let envelope = match self.inner.trees.envelopes.get(k)? {
            Some(b) => {
                row_keys::decode_value::<crate::envelope::Envelope>("envelopes", &k, &b).ok()
            }
            None => None,
        };
        // Who asked for it: its status says, else its creation's record.
        let owner = match status.as_ref().and_then(|s| s.requested_by.clone()) {
            Some(o) => Some(o),
            None => self.submitted(id)?.map(|r| r.actor),
        };
        let owner = owner.as_deref();
        Ok(match (&envelope, &status) {
            (Some(e), _) => super::labels::of(e, owner),
            (None, Some(s)) => {
                let mut keys = vec![key(Label::Agent, s.agent.as_str(), id)];
                keys.extend(owner.map(|o| key(Label::Owner, o, id)));
                keys
            }
            (None, None) => Vec::new(),
        })
    }

    /// Sets task `id`'s records aside (see the module's description), once
    /// flushed; `None` when it has none left (quarantined already, or
    /// never stored). Whoever waits for the task's end is woken: it will
    /// not end otherwise.
    pub async fn quarantine(
        &self,
        id: TaskId,
        reason: &str,
    ) -> Result<Option<Quarantined>, StoreError> {
        // Its index entries: the correlation id from its status, or, when
        // that is what cannot be read, from its first audit record.
        let key = row_keys::task(id);
        let correlation = match self.inner.trees.tasks.get(key)? {
            Some(bytes) => match row_keys::decode_value::<TaskStatus>("tasks", &key, &bytes) {
                Ok(status) => Some(status.correlation_id),
                Err(_) => self.submitted_correlation(id)?,
            },
            None => None,
        };
        let labels = self.labels_of(id)?;
        let at = Timestamp::now();
        let reason = reason.to_string();
        let moved = self
            .transact(Box::new(move |tx, head| {
                let mut trees = Vec::new();
                for (name, tree) in TREES.iter().zip([&tx.tasks, &tx.envelopes]) {
                    if let Some(bytes) = tree.remove(&key)? {
                        tx.meta.insert(raw_key(id, name).as_bytes(), bytes)?;
                        trees.push(name.to_string());
                    }
                }
                if trees.is_empty() {
                    return Ok((head, None));
                }
                for state in TaskState::ALL {
                    tx.by_state.remove(&row_keys::state(state, id))?;
                }
                if let Some(c) = &correlation {
                    tx.by_correlation.remove(row_keys::correlation(c, id))?;
                }
                for label in &labels {
                    tx.by_label.remove(label.as_slice())?;
                }
                let record = Quarantined {
                    task_id: id,
                    at,
                    reason: reason.clone(),
                    trees,
                };
                tx.meta
                    .insert(record_key(id).as_bytes(), row_keys::encode(&record))?;
                let entry = AuditEntry {
                    actor: "orchestrator".into(),
                    kind: "task.quarantined".into(),
                    task_id: Some(id),
                    correlation_id: correlation.clone(),
                    trace_id: None,
                    detail: json!({"reason": reason, "trees": record.trees}),
                };
                let head = audit::append(tx, head, &entry, at)?;
                Ok((head, Some(record)))
            }))
            .await?;
        self.inner.commit.durable().await?;
        if moved.is_some() {
            self.inner.watchers.wake(id, true);
        }
        Ok(moved)
    }

    /// The correlation id task `id` was submitted with, from its audit
    /// records.
    fn submitted_correlation(&self, id: TaskId) -> Result<Option<CorrelationId>, StoreError> {
        Ok(self.submitted(id)?.and_then(|r| r.correlation_id))
    }

    /// Task `id`'s first audit record: its creation.
    fn submitted(&self, id: TaskId) -> Result<Option<crate::audit::AuditRecord>, StoreError> {
        let filter = super::AuditFilter {
            task_id: Some(id),
            correlation_id: None,
        };
        Ok(self.audit_list(&filter, 0, 1)?.into_iter().next())
    }

    /// Task `id`'s quarantine record, if it was set aside.
    pub fn quarantined(&self, id: TaskId) -> Result<Option<Quarantined>, StoreError> {
        let key = record_key(id);
        match self.inner.trees.meta.get(key.as_bytes())? {
            Some(bytes) => row_keys::decode_value("meta", key.as_bytes(), &bytes).map(Some),
            None => Ok(None),
        }
    }

    /// Every quarantined task, oldest id first, with the raw records set
    /// aside (by tree).
    pub fn quarantined_tasks(&self) -> Result<Vec<(Quarantined, RawRecords)>, StoreError> {
        let mut out: Vec<(Quarantined, RawRecords)> = Vec::new();
        for item in self.inner.trees.meta.scan_prefix(PREFIX.as_bytes()) {
            let (key, bytes) = item?;
            let name = String::from_utf8_lossy(&key[PREFIX.len()..]).into_owned();
            match name.split_once('/') {
                None => out.push((
                    row_keys::decode_value("meta", &key, &bytes)?,
                    RawRecords::new(),
                )),
                Some((_, tree)) => {
                    if let Some((_, raw)) = out.last_mut() {
                        raw.insert(tree.to_string(), bytes.to_vec());
                    }
                }
            }
        }
        Ok(out)
    }
}
