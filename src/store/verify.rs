//! `store verify`'s index check: every index agrees with the tasks and
//! the audit log, and names nothing that is gone.

use serde::{Deserialize, Serialize};

use super::idempotency::Claim;
use super::log::TreeId;
use super::{Store, StoreError, audit, row_keys};
use crate::envelope::{Envelope, TaskId};
use crate::task::TaskStatus;

/// The result of [`Store::check_indexes`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexReport {
    /// Tasks checked.
    pub tasks: u64,
    /// What disagrees (at most 100 entries).
    pub problems: Vec<String>,
}

impl IndexReport {
    /// Whether every index agrees with the tasks.
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }

    fn problem(&mut self, text: String) {
        if self.problems.len() < 100 {
            self.problems.push(text);
        }
    }
}

impl Store {
    /// Checks that every task's status and envelope can be read, that
    /// every task is in both indexes under its current correlation id and
    /// state, that every index entry names an existing task that matches
    /// it, that every idempotency claim names a task (or a quarantined
    /// one), and that the run records can be read and their indexes agree
    /// with them.
    pub fn check_indexes(&self) -> Result<IndexReport, StoreError> {
        let inner = &self.inner;
        let mut report = IndexReport::default();
        for item in inner.trees.tasks.iter() {
            let (key, bytes) = item?;
            report.tasks += 1;
            let record: TaskStatus = match row_keys::decode_value("tasks", &key, &bytes) {
                Ok(record) => record,
                Err(e) => {
                    report.problem(e.to_string());
                    continue;
                }
            };
            let id = record.task_id;
            if row_keys::task(id).as_slice() != key.as_ref() {
                report.problem(format!("task stored under another id's key: {id}"));
            }
            match inner.trees.envelopes.get(&key)? {
                None => report.problem(format!("task {id} has no envelope")),
                Some(bytes) => {
                    match row_keys::decode_value::<Envelope>("envelopes", &key, &bytes) {
                        Err(e) => report.problem(e.to_string()),
                        Ok(envelope) => {
                            for label in
                                super::labels::of(&envelope, record.requested_by.as_deref())
                            {
                                if !inner.trees.by_label.contains_key(&label)? {
                                    report.problem(format!("task {id} is missing from by_label"));
                                    break;
                                }
                            }
                        }
                    }
                }
            }
            let own = id.is_written_as(record.correlation_id.as_str());
            let indexed = inner
                .trees
                .by_correlation
                .contains_key(row_keys::correlation(&record.correlation_id, id))?;
            if indexed == own {
                report.problem(if own {
                    format!("task {id} is in by_correlation under its own id")
                } else {
                    format!("task {id} is missing from by_correlation")
                });
            }
            if !inner
                .trees
                .by_state
                .contains_key(row_keys::state(record.state, id))?
            {
                report.problem(format!(
                    "task {id} is missing from by_state ({})",
                    record.state
                ));
            }
        }
        for item in inner.trees.by_correlation.iter() {
            let (key, _) = item?;
            let id = row_keys::trailing_task_id("by_correlation", &key)?;
            let Some(status) = self.readable_status(id)? else {
                continue;
            };
            match status {
                Some(r) if row_keys::correlation(&r.correlation_id, id) == key.as_ref() => {}
                Some(_) => report.problem(format!("by_correlation has a stale entry for {id}")),
                None => report.problem(format!("by_correlation names missing task {id}")),
            }
        }
        for item in inner.trees.by_label.iter() {
            let (key, _) = item?;
            let id = row_keys::trailing_task_id("by_label", &key)?;
            if let Some(None) = self.readable_status(id)? {
                report.problem(format!("by_label names missing task {id}"));
            }
        }
        for item in inner.trees.by_state.iter() {
            let (key, _) = item?;
            let id = row_keys::trailing_task_id("by_state", &key)?;
            let Some(status) = self.readable_status(id)? else {
                continue;
            };
            match status {
                Some(r) if row_keys::state(r.state, id).as_slice() == key.as_ref() => {}
                Some(r) => report.problem(format!(
                    "by_state has a stale entry for {id} (task is {})",
                    r.state
                )),
                None => report.problem(format!("by_state names missing task {id}")),
            }
        }
        for item in inner.trees.idempotency.iter() {
            let (key, bytes) = item?;
            let claim: Claim = match row_keys::decode_value("idempotency", &key, &bytes) {
                Ok(claim) => claim,
                Err(e) => {
                    report.problem(e.to_string());
                    continue;
                }
            };
            let gone = matches!(self.readable_status(claim.task_id)?, Some(None));
            if gone && self.quarantined(claim.task_id)?.is_none() {
                report.problem(format!(
                    "idempotency key {} names missing task {}",
                    row_keys::describe("idempotency", &key),
                    claim.task_id
                ));
            }
        }
        self.check_audit_index(&mut report)?;
        for problem in super::run_index::check_indexes(&self.inner.trees.runs)? {
            report.problem(problem);
        }
        Ok(report)
    }

    /// The status of task `id` as a check sees it: `None` when it cannot
    /// be read (reported where its record is checked), `Some(None)` when
    /// there is none.
    fn readable_status(&self, id: TaskId) -> Result<Option<Option<TaskStatus>>, StoreError> {
        match self.status(id) {
            Ok(status) => Ok(Some(status)),
            Err(StoreError::Decode { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Every audit record about a task is in the by-task index, and every
    /// index entry names only such records, oldest first.
    fn check_audit_index(&self, report: &mut IndexReport) -> Result<(), StoreError> {
        let inner = &self.inner;
        for item in inner.trees.audit.iter() {
            let (key, value) = item?;
            let (_, record) = audit::decode_stored(&key, &value)?;
            let Some(task) = record.task_id else {
                continue;
            };
            let key = row_keys::task(task);
            let listed = match inner.trees.audit_by_task.get(key)? {
                Some(entry) => {
                    row_keys::audit_seqs(&key, &entry).is_ok_and(|seqs| seqs.contains(&record.seq))
                }
                None => false,
            };
            if !listed {
                report.problem(format!(
                    "audit record {} is missing from audit_by_task",
                    record.seq
                ));
            }
        }
        for item in inner.trees.audit_by_task.iter() {
            let (key, entry) = item?;
            let task = row_keys::trailing_task_id("audit_by_task", &key)?;
            let seqs = match row_keys::audit_seqs(&key, &entry) {
                Ok(seqs) => seqs,
                Err(e) => {
                    report.problem(e.to_string());
                    continue;
                }
            };
            if !seqs.is_sorted_by(|a, b| a < b) {
                report.problem(format!(
                    "audit_by_task lists task {task}'s records out of order"
                ));
            }
            for seq in seqs {
                let found = match inner.trees.audit.get(row_keys::audit(seq))? {
                    Some(value) => {
                        audit::decode_stored(&row_keys::audit(seq), &value)?
                            .1
                            .task_id
                    }
                    None => None,
                };
                if found != Some(task) {
                    report.problem(format!(
                        "audit_by_task names record {seq} for task {task}, which is not about it"
                    ));
                }
            }
        }
        Ok(())
    }
}

impl Store {
    /// Where this store and `other` differ, entry by entry, every tree
    /// but the log's own position keys: how many differences there are,
    /// and the first `limit` described.
    pub fn differences(
        &self,
        other: &Store,
        limit: usize,
    ) -> Result<(u64, Vec<String>), StoreError> {
        let mut found = 0u64;
        let mut said = Vec::new();
        for id in TreeId::ALL {
            let tree = id.name();
            let mut differ = |key: &[u8], how: &str| {
                found += 1;
                if said.len() < limit {
                    said.push(format!("`{tree}` {}: {how}", shown(key)));
                }
            };
            let (mut mine, mut theirs) =
                (self.inner.trees.entries(id), other.inner.trees.entries(id));
            let (mut a, mut b) = (mine.next().transpose()?, theirs.next().transpose()?);
            loop {
                match (&a, &b) {
                    (None, None) => break,
                    (Some((ka, va)), Some((kb, vb))) if ka == kb => {
                        if va != vb {
                            differ(ka, "another value");
                        }
                        a = mine.next().transpose()?;
                        b = theirs.next().transpose()?;
                    }
                    (Some((ka, _)), Some((kb, _))) if ka < kb => {
                        differ(ka, "only in this store");
                        a = mine.next().transpose()?;
                    }
                    (Some((ka, _)), None) => {
                        differ(ka, "only in this store");
                        a = mine.next().transpose()?;
                    }
                    (_, Some((kb, _))) => {
                        differ(kb, "missing from this store");
                        b = theirs.next().transpose()?;
                    }
                }
            }
        }
        Ok((found, said))
    }
}

/// A key as text when it is printable, else as hex.
fn shown(key: &[u8]) -> String {
    match std::str::from_utf8(key) {
        Ok(text) if text.chars().all(|c| c.is_ascii_graphic() || c == ' ') => format!("`{text}`"),
        _ => key.iter().map(|b| format!("{b:02x}")).collect(),
    }
}
