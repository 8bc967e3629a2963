//! A new task into the store: the rows it is made of, built by a pure
//! function ([`NewRows::of`]), and the one transaction that writes them,
//! or finds the task that already holds its step or its idempotency key.

use serde_json::json;

use super::idempotency::{Claim, Fingerprint};
use super::tasks::abort;
use super::{Abort, AuditEntry, Store, StoreError, Tx, audit, row_keys};
use crate::envelope::{Envelope, TaskId, Timestamp, check_label};
use crate::task::{HistoryEntry, Submitted, TaskRecord, TaskState, TaskStatus};

/// A task to create.
#[derive(Debug, Clone)]
pub struct NewTask {
    /// The envelope; its token, if any, is not stored.
    pub envelope: Envelope,
    /// Whose idempotency keys these are (a principal, an agent): the same key
    /// in two scopes names two requests.
    pub scope: String,
    /// The request's fingerprint, to tell a retry from a conflicting reuse:
    /// needed only when the task's key is claimed ([`NewTask::claims`]),
    /// and worth computing only then (it hashes the whole request).
    pub fingerprint: Option<Fingerprint>,
    /// Who asked for the task.
    pub actor: String,
    /// The span that created the task (its request's), as W3C trace
    /// context: each publish of the task is its child.
    pub trace: Option<crate::telemetry::context::StoredTrace>,
    /// The workflow step this task is: a step is one task forever, so a
    /// second submit for the same step returns the first task.
    pub step: Option<super::StepLink>,
    /// The orchestrator holds the task's conversation with a model: it is
    /// never published.
    pub conversation: bool,
}

impl NewTask {
    /// Whether a task's idempotency key is claimed, held for the retention
    /// against other requests with the same key. Only a key the caller
    /// gave: the default one, the task's own new id, can never be asked
    /// for again, and claiming it would cost a read, a write and a key
    /// kept for the retention per task. Nor a step's: its link to the step
    /// is what makes a second submit of it return the first (one owner of
    /// that fact).
    pub fn claims(envelope: &Envelope, step: Option<&super::StepLink>) -> bool {
        envelope.has_given_key() && step.is_none()
    }
}

/// Everything a new task writes, built before the transaction (which
/// sled may run more than once) so that it only looks up and inserts.
pub(super) struct NewRows {
    task_id: TaskId,
    /// Its status as stored, but for its audit sequence.
    status: TaskStatus,
    envelope: Vec<u8>,
    /// Its claim on its idempotency key: the key, the fingerprint, the
    /// encoded claim.
    claim: Option<(Vec<u8>, Fingerprint, Vec<u8>)>,
    /// The key the claim is for, to name in a conflict.
    key: crate::envelope::IdempotencyKey,
    /// Its correlation index entry, unless its correlation id is its own.
    correlation: Option<Vec<u8>>,
    /// Its label index entries.
    labels: Vec<Vec<u8>>,
    step: Option<super::StepLink>,
    /// The callback owed from the moment it is stored.
    callback: Option<super::PushDelivery>,
    /// Its creation, the first record of its history.
    entry: AuditEntry,
    now: Timestamp,
}

impl NewRows {
    /// The record of `new`, created `now`, and the rows that store it;
    /// `retention`: how long a claimed key is held.
    pub(super) fn of(
        new: NewTask,
        now: Timestamp,
        retention: std::time::Duration,
    ) -> (TaskRecord, NewRows) {
        let record = record_of(&new, now);
        let task_id = record.task_id();
        let key = record.envelope.control.idempotency_key.clone();
        let claims = NewTask::claims(&record.envelope, new.step.as_ref());
        debug_assert!(
            !claims || new.fingerprint.is_some(),
            "a claimed key needs its fingerprint"
        );
        let claim = new.fingerprint.filter(|_| claims).map(|fingerprint| {
            let claim = Claim::new(task_id, fingerprint, retention);
            let bytes = row_keys::encode(&claim);
            (
                row_keys::idempotency(&new.scope, key.as_str()),
                claim.fingerprint,
                bytes,
            )
        });
        // A task whose correlation id is its own id is found by that id
        // alone: it needs no index entry (one key less per lone task).
        let correlation = (!task_id.is_written_as(record.correlation_id().as_str()))
            .then(|| row_keys::correlation(record.correlation_id(), task_id));
        let entry = creation(&record, &new.actor);
        let control = &record.envelope.control;
        let callback = (control.response_mode == crate::envelope::ResponseMode::Callback
            && control.callback_url.is_some())
        .then(|| {
            super::PushDelivery::new(
                task_id,
                super::CALLBACK.into(),
                super::Target::Callback,
                new.actor.clone(),
                0,
            )
        });
        let rows = NewRows {
            task_id,
            status: record.status.clone(),
            envelope: row_keys::encode(&record.envelope),
            claim,
            key,
            correlation,
            labels: super::labels::of(&record.envelope, Some(&new.actor)),
            step: new.step,
            callback,
            entry,
            now,
        };
        (record, rows)
    }

    /// Writes the rows in `tx`, unless the step is linked to a task
    /// already, or the key is held by a live claim: then that task, or
    /// [`StoreError::IdempotencyConflict`] for another request's key.
    fn write(&self, tx: &Tx<'_>, head: audit::Head) -> Result<(audit::Head, SubmitOutcome), Abort> {
        let task_id = self.task_id;
        if let Some(link) = &self.step
            && let Some(existing) = super::runs::linked_task(tx, link)?
        {
            return Ok((head, SubmitOutcome::Existing(existing)));
        }
        if let Some((idem_key, fingerprint, _)) = &self.claim
            && let Some(bytes) = tx.idempotency.get(idem_key)?
        {
            let held: Claim =
                row_keys::decode_value("idempotency", idem_key, &bytes).map_err(abort)?;
            if !held.is_expired(self.now.unix_seconds()) {
                if held.fingerprint == *fingerprint {
                    return Ok((head, SubmitOutcome::Existing(held.task_id)));
                }
                return Err(abort(StoreError::IdempotencyConflict {
                    key: self.key.clone(),
                    existing: held.task_id,
                }));
            }
        }
        if tx.tasks.get(row_keys::task(task_id))?.is_some() {
            return Err(abort(StoreError::DuplicateTask(task_id)));
        }
        // The creation is the history's first record.
        let stored = TaskStatus {
            audit_seq: Some(head.seq + 1),
            ..self.status.clone()
        };
        tx.tasks
            .insert(&row_keys::task(task_id), row_keys::encode(&stored))?;
        tx.envelopes
            .insert(&row_keys::task(task_id), self.envelope.as_slice())?;
        if let Some((idem_key, _, bytes)) = &self.claim {
            tx.idempotency
                .insert(idem_key.as_slice(), bytes.as_slice())?;
        }
        if let Some(correlation) = &self.correlation {
            tx.by_correlation.insert(correlation.as_slice(), &[][..])?;
        }
        tx.by_state
            .insert(&row_keys::state(TaskState::Submitted, task_id), &[][..])?;
        for label in &self.labels {
            tx.by_label.insert(label.as_slice(), &[][..])?;
        }
        if let Some(link) = &self.step {
            super::runs::link(tx, link, task_id)?;
        }
        if let Some(d) = &self.callback {
            super::outbox::write(tx, d)?;
        }
        let head = audit::append(tx, head, &self.entry, self.now)?;
        Ok((head, SubmitOutcome::Created(head.seq)))
    }
}

/// The record of a task created `now` from `new`: submitted, its first
/// attempt's, its envelope without the token.
fn record_of(new: &NewTask, now: Timestamp) -> TaskRecord {
    let envelope = new.envelope.without_token();
    let attempt = envelope.control.attempt.get();
    let status = TaskStatus {
        task_id: envelope.header.task_id,
        correlation_id: envelope.header.correlation_id.clone(),
        agent: envelope.header.to.clone(),
        max_attempts: envelope.control.max_attempts.get(),
        state: TaskState::Submitted,
        attempt,
        result: None,
        error: None,
        requested_by: Some(new.actor.clone()),
        trace_id: new.trace.as_ref().and_then(|t| t.trace_id()),
        trace_parent: new.trace.clone(),
        conversation: new.conversation,
        published_seq: None,
        retry_at: None,
        progress: None,
        input: None,
        audit_seq: None,
        created_at: now,
        updated_at: now,
    };
    TaskRecord {
        history: vec![HistoryEntry::created(now, attempt, &new.actor)],
        envelope,
        status,
    }
}

/// The audit entry of `record`'s creation by `actor`.
fn creation(record: &TaskRecord, actor: &str) -> AuditEntry {
    let control = &record.envelope.control;
    let mut detail = json!({
        "agent": record.agent(),
        "action": record.action(),
        "attempt": record.status.attempt,
        "max_attempts": record.status.max_attempts,
        "priority": control.priority,
        "idempotency_key": control.idempotency_key,
    });
    // A model's call of an MCP server's tool names the server and tool.
    if let Some(mcp) = &record.envelope.payload.meta.mcp {
        detail["mcp"] = json!(mcp);
    }
    AuditEntry {
        actor: actor.to_string(),
        kind: "task.submitted".into(),
        task_id: Some(record.task_id()),
        correlation_id: Some(record.correlation_id().clone()),
        trace_id: record.status.trace_id.clone(),
        detail,
    }
}

/// How a submit transaction ended.
enum SubmitOutcome {
    /// Created; its creation is this audit record.
    Created(u64),
    Existing(TaskId),
}

impl Store {
    /// Creates a task and claims its idempotency key, or returns the task
    /// that already holds the key for the same request. The same key with
    /// another fingerprint is [`StoreError::IdempotencyConflict`].
    pub async fn submit(&self, new: NewTask) -> Result<Submitted, StoreError> {
        check_label(&new.scope, 256).map_err(StoreError::InvalidScope)?;
        let (record, rows) = NewRows::of(new, Timestamp::now(), self.inner.retention);
        let outcome = self
            .transact(Box::new(move |tx, head| rows.write(tx, head)))
            .await?;
        self.inner.commit.durable().await?;
        match outcome {
            SubmitOutcome::Created(seq) => {
                let mut record = record;
                record.status.audit_seq = Some(seq);
                crate::telemetry::metrics::task_entered(
                    record.agent().as_str(),
                    TaskState::Submitted.as_str(),
                    false,
                    &record.status.created_at,
                );
                self.inner.changes.task(&record.status);
                Ok(Submitted::Created(record))
            }
            SubmitOutcome::Existing(id) => {
                let existing = self.get(id)?.ok_or(StoreError::NotFound(id))?;
                Ok(Submitted::Existing(existing))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::envelope::{ResponseMode, Sender};

    fn new_task(edit: impl FnOnce(&mut Envelope)) -> NewTask {
        let mut envelope = Envelope::new(
            Sender::orchestrator(),
            "echo".parse().unwrap(),
            "greet".parse().unwrap(),
            json!({"name": "ada"}).as_object().cloned().unwrap(),
        );
        edit(&mut envelope);
        NewTask {
            fingerprint: Some(Fingerprint::of(&envelope.payload.params)),
            envelope,
            scope: "alice".into(),
            actor: "alice".into(),
            trace: None,
            step: None,
            conversation: false,
        }
    }

    const HOLD: Duration = Duration::from_secs(60);

    #[test]
    fn a_lone_task_without_a_key_is_its_record_its_state_and_its_creation() {
        let new = new_task(|e| e.header.token = Some(crate::envelope::BearerToken::new("t")));
        let id = new.envelope.header.task_id;
        let now = Timestamp::now();
        let (record, rows) = NewRows::of(new, now, HOLD);
        assert_eq!(record.status.state, TaskState::Submitted);
        assert_eq!(record.status.created_at, now);
        assert_eq!(record.history.len(), 1);
        assert!(
            record.envelope.header.token.is_none(),
            "the token is not stored"
        );
        let stored: Envelope = serde_json::from_slice(&rows.envelope).unwrap();
        assert!(stored.header.token.is_none());
        // Its own correlation and no key of its own: no index entry, no claim.
        assert!(rows.correlation.is_none());
        assert!(rows.claim.is_none());
        assert!(rows.callback.is_none());
        assert_eq!(rows.entry.kind, "task.submitted");
        assert_eq!(rows.entry.task_id, Some(id));
        assert_eq!(rows.entry.detail["agent"], "echo");
        assert_eq!(rows.entry.detail["action"], "greet");
        assert!(!rows.labels.is_empty(), "its labels are indexed");
    }

    #[test]
    fn a_given_key_is_claimed_unless_the_task_is_a_step() {
        let keyed = |e: &mut Envelope| {
            e.control.idempotency_key = "nightly-1".parse().unwrap();
            e.header.correlation_id = "shared".parse().unwrap();
        };
        let (_, rows) = NewRows::of(new_task(keyed), Timestamp::now(), HOLD);
        let (claim_key, fingerprint, _) = rows.claim.expect("the key is claimed");
        assert_eq!(claim_key, row_keys::idempotency("alice", "nightly-1"));
        assert_eq!(fingerprint, Fingerprint::of(&json!({"name": "ada"})));
        assert!(
            rows.correlation.is_some(),
            "a shared correlation is indexed"
        );

        let mut step = new_task(keyed);
        step.step = Some(super::super::StepLink {
            run: crate::run::RunId::new(),
            step: "draft".into(),
        });
        let (_, rows) = NewRows::of(step, Timestamp::now(), HOLD);
        assert!(rows.claim.is_none(), "a step's link is what dedupes it");
    }

    #[test]
    fn a_callback_is_owed_from_the_moment_the_task_is_stored() {
        let (_, rows) = NewRows::of(
            new_task(|e| {
                e.control.response_mode = ResponseMode::Callback;
                e.control.callback_url = Some("https://example.com/hook".into());
            }),
            Timestamp::now(),
            HOLD,
        );
        assert!(rows.callback.is_some());
    }
}
