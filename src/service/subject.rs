//! What a push delivery, or an A2A client, follows: a task or a run,
//! under one id (a run's id is a task id's bytes), and its changes as they
//! are stored.

use crate::envelope::TaskId;
use crate::run::{RunId, RunRecord};
use crate::service::{Caller, Follow, Orchestrator, RunFollow, ServiceError};
use crate::task::TaskRecord;

/// A task or a run.
pub enum Subject {
    /// A task, as stored.
    Task(Box<TaskRecord>),
    /// A workflow run, as stored.
    Run(Box<RunRecord>),
}

impl Subject {
    /// Whether it has ended: nothing about it changes any more.
    pub fn ended(&self) -> bool {
        match self {
            Subject::Task(t) => t.status.state.is_terminal(),
            Subject::Run(r) => r.state.is_terminal(),
        }
    }
}

/// A subject's changes, as they are stored.
pub enum Following {
    /// A task's.
    Task(Follow),
    /// A run's.
    Run(RunFollow),
}

impl Following {
    /// The subject once it has changed; `None` once it is gone (set
    /// aside as unreadable).
    pub async fn changed(&mut self) -> Result<Option<Subject>, ServiceError> {
        Ok(match self {
            Following::Task(f) => f.changed().await?.map(|t| Subject::Task(Box::new(t))),
            Following::Run(f) => f.changed().await?.map(|r| Subject::Run(Box::new(r))),
        })
    }
}

impl Orchestrator {
    /// The task or run `id` names, if `caller` may see it, and its changes
    /// from now on.
    pub async fn following(
        &self,
        id: TaskId,
        caller: &Caller,
    ) -> Result<Option<(Subject, Following)>, ServiceError> {
        if let Some((t, f)) = self.follow(id, caller).await? {
            return Ok(Some((Subject::Task(Box::new(t)), Following::Task(f))));
        }
        let run = RunId::from_bytes(*id.as_bytes());
        Ok(self
            .follow_run(run, caller)
            .await?
            .map(|(r, f)| (Subject::Run(Box::new(r)), Following::Run(f))))
    }
}
