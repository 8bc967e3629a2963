//! Answering a task that waits for input (`input_required`): the answer
//! is recorded with the transition (audited with the caller), and the next
//! attempt is published with it as `payload.input`.

use serde_json::{Map, Value};

use super::{Caller, Orchestrator, ServiceError};
use crate::envelope::TaskId;
use crate::store::{Applied, Change, StoreError};
use crate::task::{Said, TaskRecord, TaskState, Transition};

impl Orchestrator {
    /// Gives the input task `task_id` waits for: the task goes back to
    /// `submitted` at its next attempt, which runs with `input`. The caller
    /// must be the task's requester (or hold `orch:tasks:cancel_all`); a
    /// task that does not wait for input is refused
    /// ([`ServiceError::NotWaiting`]), unless `key` names an answer this
    /// caller gave it before: then the task as it is now (the same answer
    /// sent again).
    pub async fn answer_task(
        &self,
        task_id: TaskId,
        input: Map<String, Value>,
        key: Option<&str>,
        caller: &Caller,
    ) -> Result<TaskRecord, ServiceError> {
        // Stored with the task and read back: no deeper than params.
        crate::codec::check_depth("input", input.values(), 1).map_err(ServiceError::BadInput)?;
        match self.inner.store.status(task_id)? {
            Some(status) if caller.may_cancel(&status) => {
                if status.state != TaskState::InputRequired {
                    return self.answered_before(task_id, &input, key, caller, status.state);
                }
            }
            Some(status) if caller.may_see(&status) => {
                return Err(ServiceError::Forbidden {
                    what: "answering another principal's task".into(),
                    missing: vec![crate::access::grants::CANCEL_ALL.into()],
                });
            }
            _ => return Err(ServiceError::Store(StoreError::NotFound(task_id))),
        }
        let change = Change {
            said: Said {
                input: Some(input.clone()),
                answer_key: key.map(str::to_string),
                ..Said::default()
            },
            ..Change::new(Transition::Answer, caller.principal.as_str(), "input given")
        };
        let status = match self.inner.store.apply(task_id, change).await {
            Ok(Applied::Moved(status)) => status,
            Ok(Applied::Unchanged(status) | Applied::Ignored { record: status, .. }) => {
                return Err(ServiceError::NotWaiting {
                    task_id,
                    state: status.state,
                });
            }
            // Moved on meanwhile (answered, canceled, timed out).
            Err(StoreError::Transition { .. }) => {
                let state = self
                    .inner
                    .store
                    .status(task_id)?
                    .map_or(TaskState::Failed, |s| s.state);
                return self.answered_before(task_id, &input, key, caller, state);
            }
            Err(e) => return Err(e.into()),
        };
        self.inner
            .publisher
            .at(status.task_id, status.attempt, None, false)
            .await;
        self.inner
            .store
            .get(task_id)?
            .ok_or(ServiceError::Store(StoreError::NotFound(task_id)))
    }

    /// The task, if `caller` gave it the answer `input` keyed `key`
    /// before (the same key with another answer is
    /// [`ServiceError::KeyReused`]); else the refusal of an answer to a
    /// task in `state`.
    fn answered_before(
        &self,
        task_id: TaskId,
        input: &Map<String, Value>,
        key: Option<&str>,
        caller: &Caller,
        state: TaskState,
    ) -> Result<TaskRecord, ServiceError> {
        if let Some(key) = key
            && let Some(record) = self.inner.store.get(task_id)?
            && let Some(earlier) = record.history.iter().find(|h| {
                h.event == Some(Transition::Answer)
                    && h.said.answer_key.as_deref() == Some(key)
                    && h.actor == caller.principal
            })
        {
            if earlier.said.input.as_ref() != Some(input) {
                return Err(ServiceError::KeyReused {
                    key: key.to_string(),
                    earlier: format!("another answer to task {task_id}"),
                });
            }
            return Ok(record);
        }
        Err(ServiceError::NotWaiting { task_id, state })
    }
}
