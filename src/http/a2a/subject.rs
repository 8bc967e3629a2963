//! What an A2A task is here: one of our tasks (a skill of an agent) or a
//! workflow run (a trigger). Both have ids from one space, a context (the
//! correlation id), a state A2A names, events with generations, and a
//! way to follow them; the operations and streams take either.

use a2a::Task;
use serde_json::Value;

use super::error::A2aError;
use super::wire::Event;
use super::{runs, wire};
use crate::envelope::TaskId;
use crate::run::RunId;
use crate::service::{Caller, Following, Orchestrator, Subject};
use crate::task::TaskState;

/// A subject (`crate::service::Subject`) as an A2A task.
impl Subject {
    /// Its id, as a task id (a run's is from the same space).
    pub(super) fn id(&self) -> TaskId {
        match self {
            Subject::Task(t) => t.task_id(),
            Subject::Run(r) => TaskId::from_bytes(*r.run_id.as_bytes()),
        }
    }

    /// Its context: the correlation id.
    pub(super) fn context(&self) -> &str {
        match self {
            Subject::Task(t) => t.correlation_id().as_str(),
            Subject::Run(r) => r.correlation_id.as_str(),
        }
    }

    /// Where it stands, in a task's words.
    pub(in crate::http) fn state(&self) -> TaskState {
        match self {
            Subject::Task(t) => t.status.state,
            Subject::Run(r) => runs::state(r.state),
        }
    }

    /// When it last changed, in nanoseconds (the order of `ListTasks`).
    pub(super) fn updated_nanos(&self) -> i128 {
        match self {
            Subject::Task(t) => t.status.updated_at.unix_nanos(),
            Subject::Run(r) => r.updated_at.unix_nanos(),
        }
    }

    /// It as an A2A task: history cut to the last `history_length`
    /// messages when given, artifacts when `artifacts`.
    pub(super) fn task(&self, history_length: Option<usize>, artifacts: bool) -> Task {
        match self {
            Subject::Task(t) => wire::task(t, history_length, artifacts),
            Subject::Run(r) => runs::task(r, history_length, artifacts),
        }
    }

    /// Its events, oldest first, numbered from 1.
    pub(super) fn events(&self) -> Vec<Event> {
        match self {
            Subject::Task(t) => wire::events(t),
            Subject::Run(r) => runs::events(r),
        }
    }

    /// The generation it has reached: the id of its last event.
    pub(super) fn generation(&self) -> u64 {
        match self {
            Subject::Task(t) => wire::generation(t),
            Subject::Run(r) => runs::events(r).last().map_or(0, |e| e.id),
        }
    }
}

/// A task or a run followed by one caller.
pub(super) fn task_id(id: &str) -> Result<TaskId, A2aError> {
    id.parse().map_err(|_| A2aError::task_not_found(id))
}

/// The task or run with id `id`, if the caller may see it.
pub(super) async fn find(o: &Orchestrator, id: &str, caller: &Caller) -> Result<Subject, A2aError> {
    let task = task_id(id)?;
    if let Some(t) = o.task(task, caller).await? {
        return Ok(Subject::Task(Box::new(t)));
    }
    let run = RunId::from_bytes(*task.as_bytes());
    o.run_record(run, caller)
        .await?
        .map(|r| Subject::Run(Box::new(r)))
        .ok_or_else(|| A2aError::task_not_found(id))
}

/// The task or run with id `id` as it is now, if the caller may see it,
/// and a way to wait for its changes.
pub(super) async fn follow(
    o: &Orchestrator,
    id: &str,
    caller: &Caller,
) -> Result<(Subject, Following), A2aError> {
    o.following(task_id(id)?, caller)
        .await?
        .ok_or_else(|| A2aError::task_not_found(id))
}

/// The task or run `id` as it is now, if the caller may see it, and a
/// way to wait for its changes.
/// For the outbox: the first of `subject`'s events after `after`, as a
/// push sends it (a `StreamResponse`, in 0.3's words when `v03`).
pub(in crate::http) fn pushed_after(
    subject: &Subject,
    after: u64,
    v03: bool,
) -> Option<(u64, Value)> {
    let e = subject.events().into_iter().find(|e| e.id > after)?;
    let body = super::to_json(&e.body);
    let body = if v03 {
        super::v03::stream03(body, e.state.is_some_and(super::wire::closes))
    } else {
        body
    };
    Some((e.id, body))
}
