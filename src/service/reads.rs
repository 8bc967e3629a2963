//! What callers may read, answered as flushed to disk: tasks (their own, or
//! every one with `orch:tasks:read_all`; a task a caller may not see is
//! not found, so its existence is not revealed), the audit trail
//! (`orch:audit:read`) and dead letters (`orch:dlq:manage`).

use crate::access::grants;
use crate::audit::{AuditFilter, AuditRecord, AuditReport};
use crate::envelope::{CorrelationId, TaskId};
use crate::store::StoreError;
use crate::task::{TaskRecord, TaskState};

use super::{Caller, DeadLetter, Orchestrator, ServiceError};

impl Orchestrator {
    /// The task with this id, if the caller may see it.
    pub async fn task(
        &self,
        id: TaskId,
        caller: &Caller,
    ) -> Result<Option<TaskRecord>, ServiceError> {
        let store = &self.inner.store;
        let read = match store.get(id) {
            // Set aside now: the read answers that it was.
            Err(e) if super::quarantine::unreadable(&e) => {
                super::quarantine::set_aside_noted(store).await;
                store.get(id)
            }
            read => read,
        };
        let record = read?.filter(|r| caller.may_see(&r.status));
        store.settled().await?;
        Ok(record)
    }

    /// Up to `limit` tasks the caller may see after `cursor`, filtered by
    /// request and state. A caller without `orch:tasks:read_all` gets its
    /// own tasks, found by walking the list (filter by `correlation_id` to
    /// keep that walk short).
    pub async fn tasks(
        &self,
        correlation: Option<&CorrelationId>,
        state: Option<TaskState>,
        cursor: Option<TaskId>,
        limit: usize,
        caller: &Caller,
    ) -> Result<Vec<TaskRecord>, ServiceError> {
        let store = &self.inner.store;
        let everyone = caller.grants.covers(grants::READ_ALL);
        let keep =
            |r: &TaskRecord| caller.may_see(&r.status) && state.is_none_or(|s| r.status.state == s);
        let records = match (correlation, state) {
            (Some(c), _) => walk(
                |at, n| store.list_by_correlation(c, at, n),
                keep,
                cursor,
                limit,
            )?,
            (None, Some(s)) if everyone => store.list_by_state(s, cursor, limit)?,
            (None, Some(s)) => walk(|at, n| store.list_by_state(s, at, n), keep, cursor, limit)?,
            (None, None) if everyone => store.list(cursor, limit)?,
            (None, None) => walk(|at, n| store.list(at, n), keep, cursor, limit)?,
        };
        store.settled().await?;
        Ok(records)
    }

    /// Up to `limit` tasks that `filter` keeps and the caller may see,
    /// newest first, older than task `before` when given.
    pub async fn tasks_newest(
        &self,
        filter: TaskFilter,
        before: Option<TaskId>,
        limit: usize,
        caller: &Caller,
    ) -> Result<Vec<TaskRecord>, ServiceError> {
        let query = TaskFilter {
            // A caller who may not read every task lists its own, whatever
            // the filter says.
            owner: (!caller.grants.covers(grants::READ_ALL)).then(|| caller.principal.clone()),
            ..filter
        };
        let store = &self.inner.store;
        let records = store.list_newest(&query, before, limit)?;
        store.settled().await?;
        Ok(records)
    }

    /// Up to `limit` audit records after sequence `after`.
    pub async fn audit(
        &self,
        filter: &AuditFilter,
        after: u64,
        limit: usize,
        caller: &Caller,
    ) -> Result<Vec<AuditRecord>, ServiceError> {
        caller.require("reading the audit trail", [grants::AUDIT_READ])?;
        let records = self.inner.store.audit_list(filter, after, limit)?;
        self.inner.store.settled().await?;
        Ok(records)
    }

    /// Checks the audit chain.
    pub fn verify_audit(&self, caller: &Caller) -> Result<AuditReport, ServiceError> {
        caller.require("checking the audit trail", [grants::AUDIT_READ])?;
        Ok(self.inner.store.verify_audit()?)
    }

    /// Up to `limit` dead letters after DLQ sequence `after`.
    pub async fn dead_letters(
        &self,
        after: u64,
        limit: usize,
        caller: &Caller,
    ) -> Result<Vec<DeadLetter>, ServiceError> {
        caller.require("listing dead letters", [grants::DLQ_MANAGE])?;
        Ok(super::dead_letters::list(&self.inner.bus, after, limit).await?)
    }
}

/// Up to `limit` records that `keep` accepts, after `cursor`, fetched in
/// batches: a filtered page must not end early just because one batch held
/// few matches.
fn walk(
    fetch: impl Fn(Option<TaskId>, usize) -> Result<Vec<TaskRecord>, StoreError>,
    keep: impl Fn(&TaskRecord) -> bool,
    mut cursor: Option<TaskId>,
    limit: usize,
) -> Result<Vec<TaskRecord>, StoreError> {
    const BATCH: usize = 256;
    let mut out = Vec::new();
    loop {
        let batch = fetch(cursor, BATCH)?;
        let Some(last) = batch.last() else {
            return Ok(out);
        };
        cursor = Some(last.task_id());
        let exhausted = batch.len() < BATCH;
        out.extend(batch.into_iter().filter(|r| keep(r)));
        if out.len() >= limit {
            out.truncate(limit);
            return Ok(out);
        }
        if exhausted {
            return Ok(out);
        }
    }
}

/// What a listing newest first keeps; every field given must match. Its
/// `owner` is the service's to set (from the caller), never the face's.
pub use crate::store::TaskQuery as TaskFilter;
