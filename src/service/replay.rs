//! Replaying a dead-lettered task: a new task rebuilt from the store's
//! own record of the old one, never from the letter.

use super::dead_letters;
use super::{Caller, DeadLetter, Orchestrator, ServiceError, TaskRequest};
use crate::envelope::TaskId;
use crate::task::{Submitted, TaskState};

impl Orchestrator {
    /// Runs a dead-lettered task again, as a new task rebuilt from the
    /// store's own record of it (same agent, action, params and meta; the
    /// old task as its cause; a derived idempotency key), never from the
    /// letter: anyone who may dead-letter can write a letter. Only a task
    /// that ended `failed` or `rejected` is replayed, from a letter on its
    /// own agent's dead-letter subject whose envelope (when readable) is
    /// addressed to that agent; a letter that disagrees is refused and
    /// audited (`dlq.replay_refused`). The old task stays as it ended
    /// (terminal states are final); the letter is removed once the new task
    /// is stored.
    pub async fn replay(
        &self,
        task_id: TaskId,
        caller: &Caller,
    ) -> Result<Submitted, ServiceError> {
        caller.require(
            "replaying a dead letter",
            [crate::access::grants::DLQ_MANAGE],
        )?;
        let letters = dead_letters::letters_of(&self.inner.bus, task_id).await?;
        if letters.is_empty() {
            return Err(ServiceError::NoDeadLetter(task_id));
        }
        let record = match self.inner.store.get(task_id)? {
            Some(record) => record,
            None => {
                let why = "no task of this orchestrator has that id".to_string();
                return Err(self.refuse_replay(task_id, &letters, &why, caller).await);
            }
        };
        if !matches!(record.status.state, TaskState::Failed | TaskState::Rejected) {
            let why = format!(
                "the task is {}; only a task that failed or was rejected is replayed",
                record.status.state
            );
            return Err(self.refuse_replay(task_id, &letters, &why, caller).await);
        }
        let (agreeing, disagreeing): (Vec<_>, Vec<_>) = letters
            .into_iter()
            .partition(|l| l.disagrees_with(&record).is_none());
        for letter in &disagreeing {
            let why = letter.disagrees_with(&record).unwrap_or_default();
            self.inner
                .store
                .audit(dead_letters::refused_entry(
                    task_id,
                    letter,
                    &why,
                    &caller.principal,
                ))
                .await?;
        }
        let Some(letter) = agreeing.first() else {
            let why = disagreeing
                .first()
                .and_then(|l| l.disagrees_with(&record))
                .unwrap_or_default();
            return Err(ServiceError::ReplayRefused {
                task_id,
                reason: why,
            });
        };
        let old = &record.envelope;
        let key = format!("{}:replay:{}", old.control.idempotency_key, letter.seq);
        let request = TaskRequest {
            to: old.header.to.clone(),
            action: old.payload.action.clone(),
            params: old.payload.params.clone(),
            idempotency_key: key.parse().ok(),
            priority: Some(old.control.priority),
            response_mode: Some(old.control.response_mode),
            required_scopes: old.control.required_scopes.clone(),
            callback_url: old.control.callback_url.clone(),
            deadline: None,
            max_attempts: Some(old.control.max_attempts),
            correlation_id: Some(old.header.correlation_id.clone()),
        };
        let submitted = self
            .submit_with(
                request,
                old.payload.meta.clone(),
                Some(task_id),
                None,
                caller,
            )
            .await?;
        let new_id = submitted.record().task_id();
        self.inner
            .store
            .audit(dead_letters::replay_entry(
                task_id,
                new_id,
                letter.seq,
                &caller.principal,
            ))
            .await?;
        dead_letters::remove(&self.inner.bus, letter.seq).await?;
        Ok(submitted)
    }

    /// Audits every letter of `task_id` as refused for `why`; the error.
    async fn refuse_replay(
        &self,
        task_id: TaskId,
        letters: &[DeadLetter],
        why: &str,
        caller: &Caller,
    ) -> ServiceError {
        for letter in letters {
            let entry = dead_letters::refused_entry(task_id, letter, why, &caller.principal);
            if let Err(e) = self.inner.store.audit(entry).await {
                return e.into();
            }
        }
        ServiceError::ReplayRefused {
            task_id,
            reason: why.to_string(),
        }
    }
}
