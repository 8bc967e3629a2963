//! Changes to stored tasks: a worker's report or an operator's request,
//! taken through the state machine and recorded in the task's status, the
//! state index and the audit log.
//!
//! Changes to one task that arrive together (a `working` report and the
//! result, read from a backlog) are made as one job: the status is written
//! once for all of them, each transition still gets its audit record.

use serde_json::{Value, json};
use sled::transaction::ConflictableTransactionError;

use super::tasks::{abort, read_status};
use super::{Abort, AuditEntry, Store, StoreError, Tx, audit, row_keys};
use crate::envelope::{AgentName, TaskId, Timestamp};
use crate::event::{ErrorInfo, Progress};
use crate::task::{
    Next, RetryPolicy, Said, TaskState, TaskStatus, Transition, TransitionError, decide,
};

/// A change asked of a task.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// What happened.
    pub event: Transition,
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
    /// For a worker's report: the agent it came from (the one its subject
    /// names). Only the agent the task was sent to may move it; a report
    /// from another is audited and ignored.
    pub reporter: Option<AgentName>,
    /// For a worker's report: who ran the attempt (`instance`) and whether
    /// it was told it resumed (`resumed`), kept in the audit record.
    pub run: Option<Value>,
    /// What it says beside its states (words, artifacts, a reply, an
    /// answer's input and key), kept in the audit record.
    pub said: Said,
    /// A progress report of a running attempt: kept as a `task.progress`
    /// audit record (the task's history), once per `seq`.
    pub progress: Option<Progress>,
}

impl Change {
    /// A change with no result or error, not tied to an attempt.
    pub fn new(event: Transition, actor: impl Into<String>, reason: impl Into<String>) -> Self {
        Change {
            event,
            attempt: None,
            actor: actor.into(),
            reason: reason.into(),
            result: None,
            error: None,
            retry_after: None,
            reporter: None,
            run: None,
            said: Said::default(),
            progress: None,
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

/// How an apply transaction ended.
enum ApplyOutcome {
    Moved(TaskStatus),
    /// The state stayed, a progress report was kept.
    Noted(TaskStatus),
    Unchanged(TaskStatus),
    Ignored(TaskStatus, String),
}

impl ApplyOutcome {
    fn status(&self) -> &TaskStatus {
        match self {
            ApplyOutcome::Moved(r)
            | ApplyOutcome::Noted(r)
            | ApplyOutcome::Unchanged(r)
            | ApplyOutcome::Ignored(r, _) => r,
        }
    }

    /// Whether the task's status was changed (and must be written).
    fn wrote(&self) -> bool {
        matches!(self, ApplyOutcome::Moved(_) | ApplyOutcome::Noted(_))
    }
}

impl Store {
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
        let mut outcomes = self.apply_all_deferred(task_id, vec![change]).await?;
        outcomes
            .pop()
            .unwrap_or_else(|| Err(StoreError::Io("a change was not run".into())))
    }

    /// Several changes to one task, in order, as one job (see
    /// [`Store::apply_deferred`]): the task's status is written once, at
    /// the end, whatever the number of changes. Each change has its own
    /// outcome, as if applied alone; the outer error is the store's.
    pub async fn apply_all_deferred(
        &self,
        task_id: TaskId,
        changes: Vec<Change>,
    ) -> Result<Vec<Result<Applied, StoreError>>, StoreError> {
        let now = Timestamp::now();
        let policy = self.inner.retry;
        let outcomes = self
            .transact(Box::new(move |tx, mut head| {
                let mut outcomes = Vec::with_capacity(changes.len());
                let mut status = None;
                for change in &changes {
                    let current = match status.take() {
                        Some(status) => status,
                        None => match read_status(tx, task_id) {
                            Ok(status) => status,
                            Err(ConflictableTransactionError::Abort(e)) => {
                                outcomes.push(Err(e));
                                continue;
                            }
                            Err(other) => return Err(other),
                        },
                    };
                    match apply_one(tx, head, current.clone(), change, now, policy) {
                        Ok((next, outcome)) => {
                            head = next;
                            status = Some(outcome.status().clone());
                            outcomes.push(Ok(outcome));
                        }
                        // Refused before it wrote anything: its own error,
                        // and the next change starts from the same status.
                        Err(ConflictableTransactionError::Abort(e)) => {
                            status = Some(current);
                            outcomes.push(Err(e));
                        }
                        Err(other) => return Err(other),
                    }
                }
                // Written once, after every change: in a batch sled keeps
                // only the last value of a key anyway, this skips encoding
                // the ones between.
                if let Some(status) = status.filter(|_| {
                    outcomes
                        .iter()
                        .any(|o| o.as_ref().is_ok_and(ApplyOutcome::wrote))
                }) {
                    tx.tasks
                        .insert(&row_keys::task(task_id), row_keys::encode(&status))?;
                }
                Ok((head, outcomes))
            }))
            .await?;
        Ok(outcomes
            .into_iter()
            .map(|outcome| {
                outcome.map(|o| match o {
                    ApplyOutcome::Moved(r) => {
                        crate::telemetry::metrics::task_entered(
                            r.agent.as_str(),
                            r.state.as_str(),
                            r.state.is_terminal(),
                            &r.created_at,
                        );
                        self.inner.watchers.wake(task_id, r.state.is_terminal());
                        self.inner.changes.task(&r);
                        Applied::Moved(r)
                    }
                    ApplyOutcome::Noted(r) => {
                        self.inner.watchers.wake(task_id, false);
                        self.inner.changes.task(&r);
                        Applied::Unchanged(r)
                    }
                    ApplyOutcome::Unchanged(r) => Applied::Unchanged(r),
                    ApplyOutcome::Ignored(record, reason) => Applied::Ignored { record, reason },
                })
            })
            .collect())
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
                    .insert(&row_keys::task(task_id), row_keys::encode(&record))?;
            }
            Ok((head, ()))
        }))
        .await
    }
}

/// Applies `change` to a task whose status is `record`: the state index and
/// the audit log are written here, the status by the caller. Refusals come
/// before any write.
fn apply_one(
    tx: &Tx<'_>,
    head: audit::Head,
    mut record: TaskStatus,
    change: &Change,
    now: Timestamp,
    policy: RetryPolicy,
) -> Result<(audit::Head, ApplyOutcome), Abort> {
    let task_id = record.task_id;
    let ignore = |record: TaskStatus, why: String| {
        let entry = ignored_entry(&record, change, &why);
        let head = audit::append(tx, head, &entry, now)?;
        Ok((head, ApplyOutcome::Ignored(record, why)))
    };
    if let Some(why) = not_for(&record, change) {
        return ignore(record, why);
    }
    let next = decide(
        record.state,
        record.attempt,
        record.max_attempts,
        change.event,
    );
    let (state, attempt) = match next {
        Ok(Next::Stay) => {
            return match &change.progress {
                Some(progress) if record.state == TaskState::Working => {
                    note_progress(tx, head, record, change, progress, now)
                }
                _ => Ok((head, ApplyOutcome::Unchanged(record))),
            };
        }
        Ok(Next::Move { state, attempt }) => (state, attempt),
        Err(error @ TransitionError::Terminal { .. }) => {
            return ignore(record, error.to_string());
        }
        Err(error @ TransitionError::NotAllowed { .. }) => {
            return Err(abort(StoreError::Transition { task_id, error }));
        }
    };
    let from = record.state;
    let retried = moved(&mut record, change, (state, attempt), now, policy);
    tx.by_state.remove(&row_keys::state(from, task_id))?;
    tx.by_state
        .insert(&row_keys::state(state, task_id), &[][..])?;
    let entry = transition_entry(&record, change, from, retried);
    let head = audit::append(tx, head, &entry, now)?;
    record.audit_seq = Some(head.seq);
    match &change.progress {
        // The attempt's first report may carry progress: the start, then it.
        Some(progress) if state == TaskState::Working => {
            match note_progress(tx, head, record, change, progress, now)? {
                (head, ApplyOutcome::Noted(record) | ApplyOutcome::Unchanged(record)) => {
                    Ok((head, ApplyOutcome::Moved(record)))
                }
                (head, other) => Ok((head, other)),
            }
        }
        _ => Ok((head, ApplyOutcome::Moved(record))),
    }
}

/// Why `change` is not about `record`'s task as it stands (another agent
/// reported it, or another attempt), if it is not.
fn not_for(record: &TaskStatus, change: &Change) -> Option<String> {
    if let Some(reporter) = &change.reporter
        && *reporter != record.agent
    {
        return Some(format!(
            "reported by agent `{reporter}`; the task was sent to `{}`",
            record.agent
        ));
    }
    match change.attempt {
        Some(attempt) if attempt != record.attempt => Some(format!(
            "report about attempt {attempt}, the task is at attempt {}",
            record.attempt
        )),
        _ => None,
    }
}

/// Moves `record` to `state` at `attempt` for `change`: whether that is a
/// retry (a new attempt, published when due; an answer's at once).
fn moved(
    record: &mut TaskStatus,
    change: &Change,
    (state, attempt): (TaskState, u32),
    now: Timestamp,
    policy: RetryPolicy,
) -> bool {
    let retried = attempt != record.attempt;
    if retried {
        record.retry_at = (change.event != Transition::Answer)
            .then(|| now.after(policy.delay(record.attempt, change.retry_after)));
        record.published_seq = None;
        record.progress = None;
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
    if let Some(input) = &change.said.input {
        record.input = Some(input.clone());
    }
    retried
}

/// The audit entry of `record`'s move from `from` by `change`.
fn transition_entry(
    record: &TaskStatus,
    change: &Change,
    from: TaskState,
    retried: bool,
) -> AuditEntry {
    let mut detail = json!({
        "from": from,
        "to": record.state,
        "event": change.event,
        "attempt": record.attempt,
        "reason": change.reason,
        "retry_at": record.retry_at.filter(|_| retried),
    });
    if let Some(run) = &change.run {
        detail["run"] = run.clone();
    }
    if let (Some(detail), Value::Object(said)) = (detail.as_object_mut(), json!(change.said)) {
        detail.extend(said);
    }
    AuditEntry {
        actor: change.actor.clone(),
        kind: "task.transition".into(),
        task_id: Some(record.task_id),
        correlation_id: Some(record.correlation_id.clone()),
        trace_id: record.trace_id.clone(),
        detail,
    }
}

/// Keeps a progress report of the running attempt as a `task.progress`
/// audit record, unless one with its `seq` (or a later one) was kept
/// already: a redelivered report is not shown twice.
fn note_progress(
    tx: &Tx<'_>,
    head: audit::Head,
    mut record: TaskStatus,
    change: &Change,
    progress: &Progress,
    now: Timestamp,
) -> Result<(audit::Head, ApplyOutcome), Abort> {
    let seq = progress.seq.get();
    let instance = change
        .run
        .as_ref()
        .and_then(|r| r["instance"].as_str())
        .map(str::to_string);
    if record
        .progress
        .as_ref()
        .is_some_and(|m| m.instance == instance && seq <= m.seq)
    {
        return Ok((head, ApplyOutcome::Unchanged(record)));
    }
    record.progress = Some(crate::task::ProgressMark { instance, seq });
    let entry = AuditEntry {
        actor: change.actor.clone(),
        kind: "task.progress".into(),
        task_id: Some(record.task_id),
        correlation_id: Some(record.correlation_id.clone()),
        trace_id: record.trace_id.clone(),
        detail: json!({
            "state": record.state,
            "attempt": record.attempt,
            "seq": seq,
            "message": progress.message,
            "artifact": progress.artifact,
        }),
    };
    let head = audit::append(tx, head, &entry, now)?;
    record.audit_seq = Some(head.seq);
    Ok((head, ApplyOutcome::Noted(record)))
}
