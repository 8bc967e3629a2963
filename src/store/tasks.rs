//! Tasks in the store: creation with an idempotency claim, state changes
//! through the state machine, reads by id, correlation and state, and an
//! index consistency check.

use std::ops::Bound;

use serde_json::{Value, json};
use sled::transaction::ConflictableTransactionError;

use super::idempotency::{Claim, Fingerprint};
use super::{Abort, AuditEntry, Store, StoreError, Tx, audit, keys};
use crate::envelope::{CorrelationId, Envelope, TaskId, Timestamp, check_label};
use crate::event::ErrorInfo;
use crate::task::{
    HistoryEntry, Next, TaskEvent, TaskRecord, TaskState, TaskStatus, TransitionError, decide,
};

/// A task to create.
#[derive(Debug, Clone)]
pub struct NewTask {
    /// The envelope; its token, if any, is not stored.
    pub envelope: Envelope,
    /// Whose idempotency keys these are (a principal, an agent): the same key
    /// in two scopes names two requests.
    pub scope: String,
    /// The request's fingerprint, to tell a retry from a conflicting reuse.
    pub fingerprint: Fingerprint,
    /// Who asked for the task.
    pub actor: String,
    /// The trace the request belongs to.
    pub trace_id: Option<String>,
}

/// What [`Store::submit`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Submitted {
    /// A new task was created.
    Created(TaskRecord),
    /// The same request was made before: this is its task.
    Existing(TaskRecord),
}

impl Submitted {
    /// The task, new or existing.
    pub fn record(&self) -> &TaskRecord {
        match self {
            Submitted::Created(r) | Submitted::Existing(r) => r,
        }
    }
}

/// A change asked of a task.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// What happened.
    pub event: TaskEvent,
    /// The attempt the report is about; a report about another attempt than
    /// the task's current one is stale and ignored. `None`: not tied to one.
    pub attempt: Option<u32>,
    /// Who reports it.
    pub actor: String,
    /// Why, in words.
    pub reason: String,
    /// A result to record.
    pub result: Option<Value>,
    /// An error to record.
    pub error: Option<ErrorInfo>,
    /// For a retry: the delay the handler asked for before the next
    /// attempt (the store's retry policy caps it, or chooses one).
    pub retry_after: Option<std::time::Duration>,
}

impl Change {
    /// A change with no result or error, not tied to an attempt.
    pub fn new(event: TaskEvent, actor: impl Into<String>, reason: impl Into<String>) -> Self {
        Change {
            event,
            attempt: None,
            actor: actor.into(),
            reason: reason.into(),
            result: None,
            error: None,
            retry_after: None,
        }
    }
}

/// What [`Store::apply`] did, with the task's status after it (read the
/// whole task with [`Store::get`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Applied {
    /// The task moved; this is its new status.
    Moved(TaskStatus),
    /// The event repeated what was already so; nothing was written.
    Unchanged(TaskStatus),
    /// The event came too late (terminal task) or is about another attempt;
    /// it was recorded in the audit log and otherwise ignored.
    Ignored {
        /// The task, unchanged.
        record: TaskStatus,
        /// Why it was ignored.
        reason: String,
    },
}

impl Applied {
    /// The task's status after the change.
    pub fn record(&self) -> &TaskStatus {
        match self {
            Applied::Moved(r) | Applied::Unchanged(r) | Applied::Ignored { record: r, .. } => r,
        }
    }
}

fn abort(e: StoreError) -> Abort {
    ConflictableTransactionError::Abort(e)
}

fn read_status(tx: &Tx<'_>, id: TaskId) -> Result<TaskStatus, Abort> {
    let key = keys::task(id);
    let bytes = tx
        .tasks
        .get(key)?
        .ok_or_else(|| abort(StoreError::NotFound(id)))?;
    keys::decode_value("tasks", &key, &bytes).map_err(abort)
}

/// The audit entry for an event that was ignored.
fn ignored_entry(record: &TaskStatus, change: &Change, why: &str) -> AuditEntry {
    AuditEntry {
        actor: change.actor.clone(),
        kind: "task.ignored_event".into(),
        task_id: Some(record.task_id),
        correlation_id: Some(record.correlation_id.clone()),
        trace_id: record.trace_id.clone(),
        detail: json!({
            "state": record.state,
            "event": change.event,
            "attempt": change.attempt,
            "reason": change.reason,
            "ignored_because": why,
        }),
    }
}

/// How a submit transaction ended.
enum SubmitOutcome {
    Created,
    Existing(TaskId),
}

/// How an apply transaction ended.
enum ApplyOutcome {
    Moved(TaskStatus),
    Unchanged(TaskStatus),
    Ignored(TaskStatus, String),
}

impl Store {
    /// Creates a task and claims its idempotency key, or returns the task
    /// that already holds the key for the same request. The same key with
    /// another fingerprint is [`StoreError::IdempotencyConflict`].
    pub async fn submit(&self, new: NewTask) -> Result<Submitted, StoreError> {
        check_label(&new.scope, 256).map_err(StoreError::InvalidScope)?;
        let now = Timestamp::now();
        let envelope = new.envelope.without_token();
        let task_id = envelope.header.task_id;
        let attempt = envelope.control.attempt.get();
        let status = TaskStatus {
            task_id,
            correlation_id: envelope.header.correlation_id.clone(),
            agent: envelope.header.to.clone(),
            max_attempts: envelope.control.max_attempts.get(),
            state: TaskState::Submitted,
            attempt,
            result: None,
            error: None,
            trace_id: new.trace_id.clone(),
            published_seq: None,
            retry_at: None,
            created_at: now,
            updated_at: now,
        };
        let record = TaskRecord {
            history: vec![HistoryEntry {
                at: now,
                from: None,
                to: TaskState::Submitted,
                event: None,
                attempt,
                actor: new.actor.clone(),
                reason: "submitted".into(),
            }],
            envelope,
            status,
        };
        let key = record.envelope.control.idempotency_key.clone();
        let idem_key = keys::idempotency(&new.scope, key.as_str());
        let claim = Claim::new(task_id, new.fingerprint.clone(), self.inner.retention);
        let claim_bytes = keys::encode(&claim);
        let status_bytes = keys::encode(&record.status);
        let envelope_bytes = keys::encode(&record.envelope);
        let correlation_key = keys::correlation(record.correlation_id(), task_id);
        let entry = AuditEntry {
            actor: new.actor.clone(),
            kind: "task.submitted".into(),
            task_id: Some(task_id),
            correlation_id: Some(record.correlation_id().clone()),
            trace_id: new.trace_id.clone(),
            detail: json!({
                "agent": record.agent(),
                "action": record.action(),
                "attempt": attempt,
                "max_attempts": record.status.max_attempts,
                "priority": record.envelope.control.priority,
                "idempotency_key": key,
            }),
        };
        let now_secs = now.unix_seconds();
        let outcome = self
            .transact(Box::new(move |tx, head| {
                if let Some(bytes) = tx.idempotency.get(&idem_key)? {
                    let held: Claim =
                        keys::decode_value("idempotency", &idem_key, &bytes).map_err(abort)?;
                    if !held.is_expired(now_secs) {
                        if held.fingerprint == claim.fingerprint {
                            return Ok((head, SubmitOutcome::Existing(held.task_id)));
                        }
                        return Err(abort(StoreError::IdempotencyConflict {
                            key: key.clone(),
                            existing: held.task_id,
                        }));
                    }
                }
                if tx.tasks.get(keys::task(task_id))?.is_some() {
                    return Err(abort(StoreError::DuplicateTask(task_id)));
                }
                tx.tasks
                    .insert(&keys::task(task_id), status_bytes.as_slice())?;
                tx.envelopes
                    .insert(&keys::task(task_id), envelope_bytes.as_slice())?;
                tx.idempotency
                    .insert(idem_key.as_slice(), claim_bytes.as_slice())?;
                tx.by_correlation
                    .insert(correlation_key.as_slice(), &[][..])?;
                tx.by_state
                    .insert(&keys::state(TaskState::Submitted, task_id), &[][..])?;
                let head = audit::append(tx, head, &entry, now)?;
                Ok((head, SubmitOutcome::Created))
            }))
            .await?;
        self.inner.commit.durable().await?;
        match outcome {
            SubmitOutcome::Created => Ok(Submitted::Created(record)),
            SubmitOutcome::Existing(id) => {
                let existing = self.get(id)?.ok_or(StoreError::NotFound(id))?;
                Ok(Submitted::Existing(existing))
            }
        }
    }

    /// Applies one change to a task through the state machine, recording
    /// the transition in its history and in the audit log.
    ///
    /// A change the state machine refuses in a live state is an error
    /// ([`StoreError::Transition`]); one that comes after the task ended, or
    /// that is about another attempt, is audited and returned as
    /// [`Applied::Ignored`].
    pub async fn apply(&self, task_id: TaskId, change: Change) -> Result<Applied, StoreError> {
        let applied = self.apply_deferred(task_id, change).await?;
        self.inner.commit.durable().await?;
        Ok(applied)
    }

    /// [`Store::apply`] without waiting for the flush: the change is made,
    /// in order with every other change, but may not be on disk yet. Call
    /// [`Store::flush`] before telling anyone about it. Lets a caller apply
    /// the next change while this one's flush is under way.
    pub async fn apply_deferred(
        &self,
        task_id: TaskId,
        change: Change,
    ) -> Result<Applied, StoreError> {
        let now = Timestamp::now();
        let policy = self.inner.retry;
        let outcome = self
            .transact(Box::new(move |tx, head| {
                let mut record = read_status(tx, task_id)?;
                let ignore = |record: TaskStatus, why: String| {
                    let entry = ignored_entry(&record, &change, &why);
                    let head = audit::append(tx, head, &entry, now)?;
                    Ok((head, ApplyOutcome::Ignored(record, why)))
                };
                if let Some(attempt) = change.attempt
                    && attempt != record.attempt
                {
                    let why = format!(
                        "report about attempt {attempt}, the task is at attempt {}",
                        record.attempt
                    );
                    return ignore(record, why);
                }
                let next = decide(
                    record.state,
                    record.attempt,
                    record.max_attempts,
                    change.event,
                );
                let (state, attempt) = match next {
                    Ok(Next::Stay) => return Ok((head, ApplyOutcome::Unchanged(record))),
                    Ok(Next::Move { state, attempt }) => (state, attempt),
                    Err(error @ TransitionError::Terminal { .. }) => {
                        return ignore(record, error.to_string());
                    }
                    Err(error @ TransitionError::NotAllowed { .. }) => {
                        return Err(abort(StoreError::Transition { task_id, error }));
                    }
                };
                let from = record.state;
                let retried = attempt != record.attempt;
                if retried {
                    // A retry: the next attempt is published when due.
                    let delay = policy.delay(record.attempt, change.retry_after);
                    record.retry_at = Some(now.after(delay));
                    record.published_seq = None;
                }
                record.state = state;
                record.attempt = attempt;
                record.updated_at = now;
                if change.result.is_some() {
                    record.result.clone_from(&change.result);
                }
                if change.error.is_some() {
                    record.error.clone_from(&change.error);
                } else if state == TaskState::Completed {
                    // An earlier attempt's error stays in the history only.
                    record.error = None;
                }
                tx.tasks
                    .insert(&keys::task(task_id), keys::encode(&record))?;
                tx.by_state.remove(&keys::state(from, task_id))?;
                tx.by_state.insert(&keys::state(state, task_id), &[][..])?;
                let entry = AuditEntry {
                    actor: change.actor.clone(),
                    kind: "task.transition".into(),
                    task_id: Some(task_id),
                    correlation_id: Some(record.correlation_id.clone()),
                    trace_id: record.trace_id.clone(),
                    detail: json!({
                        "from": from,
                        "to": state,
                        "event": change.event,
                        "attempt": attempt,
                        "reason": change.reason,
                        "retry_at": record.retry_at.filter(|_| retried),
                    }),
                };
                let head = audit::append(tx, head, &entry, now)?;
                Ok((head, ApplyOutcome::Moved(record)))
            }))
            .await?;
        Ok(match outcome {
            ApplyOutcome::Moved(r) => {
                if r.state.is_terminal() {
                    self.inner.watchers.wake(task_id);
                }
                Applied::Moved(r)
            }
            ApplyOutcome::Unchanged(r) => Applied::Unchanged(r),
            ApplyOutcome::Ignored(record, reason) => Applied::Ignored { record, reason },
        })
    }

    /// Records that the broker acknowledged the envelope of `attempt` at
    /// stream sequence `seq`, so recovery does not publish it again. Not
    /// audited (no state changes) and not waited for: if a crash loses it,
    /// recovery republishes the attempt, which JetStream or the worker's
    /// record check turns away. Ignored when the task moved on meanwhile.
    pub async fn record_published(
        &self,
        task_id: TaskId,
        attempt: u32,
        seq: u64,
    ) -> Result<(), StoreError> {
        self.transact(Box::new(move |tx, head| {
            let mut record = read_status(tx, task_id)?;
            if record.attempt == attempt && !record.state.is_terminal() {
                record.published_seq = Some(seq);
                tx.tasks
                    .insert(&keys::task(task_id), keys::encode(&record))?;
            }
            Ok((head, ()))
        }))
        .await
    }

    /// A wait for task `id` to end, registered now: read the task after
    /// this, and await [`super::Watch::ended`] only if it is still live.
    pub fn watch(&self, id: TaskId) -> super::watch::Watch {
        self.inner.watchers.watch(id)
    }

    /// The task with this id, if any: its status, its envelope and its
    /// history (from the audit log).
    pub fn get(&self, id: TaskId) -> Result<Option<TaskRecord>, StoreError> {
        match self.status(id)? {
            Some(status) => self.assemble(status).map(Some),
            None => Ok(None),
        }
    }

    /// The status of the task with this id, if any (one small read).
    pub fn status(&self, id: TaskId) -> Result<Option<TaskStatus>, StoreError> {
        let key = keys::task(id);
        match self.inner.tasks.get(key)? {
            Some(bytes) => keys::decode_value("tasks", &key, &bytes).map(Some),
            None => Ok(None),
        }
    }

    /// The envelope of the task with this id, if any (as submitted, attempt 1).
    pub fn envelope(&self, id: TaskId) -> Result<Option<Envelope>, StoreError> {
        let key = keys::task(id);
        match self.inner.envelopes.get(key)? {
            Some(bytes) => keys::decode_value("envelopes", &key, &bytes).map(Some),
            None => Ok(None),
        }
    }

    /// The whole task of a status: its envelope and history added.
    fn assemble(&self, status: TaskStatus) -> Result<TaskRecord, StoreError> {
        let Some(envelope) = self.envelope(status.task_id)? else {
            let key = keys::task(status.task_id);
            return Err(StoreError::Decode {
                tree: "envelopes",
                key: keys::describe("envelopes", &key),
                message: format!("task {} has no envelope", status.task_id),
            });
        };
        let history = self.history(status.task_id)?;
        Ok(TaskRecord {
            envelope,
            status,
            history,
        })
    }

    /// A task's transitions, oldest first, from its audit records.
    fn history(&self, id: TaskId) -> Result<Vec<HistoryEntry>, StoreError> {
        let filter = super::AuditFilter {
            task_id: Some(id),
            correlation_id: None,
        };
        let records = self.audit_list(&filter, 0, usize::MAX)?;
        Ok(records.iter().filter_map(history_entry).collect())
    }

    /// Up to `limit` tasks after task `after` (exclusive), oldest first.
    pub fn list(&self, after: Option<TaskId>, limit: usize) -> Result<Vec<TaskRecord>, StoreError> {
        let start = match after {
            Some(id) => Bound::Excluded(keys::task(id).to_vec()),
            None => Bound::Unbounded,
        };
        let mut out = Vec::new();
        for item in self
            .inner
            .tasks
            .range((start, Bound::Unbounded))
            .take(limit)
        {
            let (key, bytes) = item?;
            out.push(self.assemble(keys::decode_value("tasks", &key, &bytes)?)?);
        }
        Ok(out)
    }

    /// Up to `limit` tasks of one correlation id after task `after`, oldest first.
    pub fn list_by_correlation(
        &self,
        correlation: &CorrelationId,
        after: Option<TaskId>,
        limit: usize,
    ) -> Result<Vec<TaskRecord>, StoreError> {
        let prefix = keys::correlation_prefix(correlation);
        let start = after.map(|id| keys::correlation(correlation, id));
        self.index_range(
            &self.inner.by_correlation,
            "by_correlation",
            &prefix,
            start,
            limit,
            |id| self.get(id),
        )
    }

    /// Up to `limit` tasks in `state` after task `after`, oldest first.
    pub fn list_by_state(
        &self,
        state: TaskState,
        after: Option<TaskId>,
        limit: usize,
    ) -> Result<Vec<TaskRecord>, StoreError> {
        let statuses = self.statuses_by_state(state, after, limit)?;
        statuses.into_iter().map(|s| self.assemble(s)).collect()
    }

    /// [`Store::list_by_state`], statuses only (no envelope or history read).
    pub fn statuses_by_state(
        &self,
        state: TaskState,
        after: Option<TaskId>,
        limit: usize,
    ) -> Result<Vec<TaskStatus>, StoreError> {
        let prefix = [state.code()];
        let start = after.map(|id| keys::state(state, id).to_vec());
        self.index_range(
            &self.inner.by_state,
            "by_state",
            &prefix,
            start,
            limit,
            |id| self.status(id),
        )
    }

    /// Up to `limit` items read by `read` for the task ids of `index`
    /// under `prefix`, after the key `after`.
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
            let id = keys::trailing_task_id(name, &key)?;
            match read(id)? {
                Some(record) => out.push(record),
                None => {
                    return Err(StoreError::Decode {
                        tree: name,
                        key: keys::describe(name, &key),
                        message: format!("indexes task {id}, which does not exist"),
                    });
                }
            }
        }
        Ok(out)
    }
}

/// The history entry an audit record stands for: a creation or a
/// transition (other records, such as ignored events, are not history).
fn history_entry(record: &super::AuditRecord) -> Option<HistoryEntry> {
    let detail = &record.detail;
    let attempt = detail["attempt"]
        .as_u64()
        .and_then(|a| u32::try_from(a).ok())?;
    let (from, to, event, reason) = match record.kind.as_str() {
        "task.submitted" => (None, TaskState::Submitted, None, "submitted".to_string()),
        "task.transition" => (
            Some(serde_json::from_value(detail["from"].clone()).ok()?),
            serde_json::from_value(detail["to"].clone()).ok()?,
            Some(serde_json::from_value(detail["event"].clone()).ok()?),
            detail["reason"].as_str().unwrap_or_default().to_string(),
        ),
        _ => return None,
    };
    Some(HistoryEntry {
        at: record.at,
        from,
        to,
        event,
        attempt,
        actor: record.actor.clone(),
        reason,
    })
}
