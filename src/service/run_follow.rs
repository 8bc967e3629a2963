//! Runs as records, for a face that shows them in its own words (A2A
//! shows a run as a task): one run, a run once it has settled, every
//! change of a run as it comes, and the runs of a context.

use std::time::Duration;

use super::{Caller, Orchestrator, ServiceError};
use crate::envelope::CorrelationId;
use crate::run::{RunId, RunRecord, RunState};
use crate::store::Watch;

/// A run followed by one caller: [`RunFollow::changed`] answers at each
/// of its changes. Dropping it stops following.
pub struct RunFollow {
    orchestrator: Orchestrator,
    id: RunId,
    caller: Caller,
    watch: Watch,
}

impl RunFollow {
    /// The run after its next change (or the one that came since the last
    /// call); `None` if it is no longer there for the caller.
    pub async fn changed(&mut self) -> Result<Option<RunRecord>, ServiceError> {
        self.watch.changed().await;
        self.orchestrator.run_record(self.id, &self.caller).await
    }
}

impl Orchestrator {
    /// Run `id` as stored, if the caller may see it.
    pub async fn run_record(
        &self,
        id: RunId,
        caller: &Caller,
    ) -> Result<Option<RunRecord>, ServiceError> {
        let store = &self.inner.store;
        let run = store.run(id)?.filter(|r| caller.may_see_run(r));
        store.settled().await?;
        Ok(run)
    }

    /// Run `id` as it is now, if the caller may see it, and a way to wait
    /// for its next changes; a change between the read and the first wait
    /// is not missed.
    pub async fn follow_run(
        &self,
        id: RunId,
        caller: &Caller,
    ) -> Result<Option<(RunRecord, RunFollow)>, ServiceError> {
        let watch = self.inner.store.watch_run(id);
        let Some(run) = self.run_record(id, caller).await? else {
            return Ok(None);
        };
        let follow = RunFollow {
            orchestrator: self.clone(),
            id,
            caller: caller.clone(),
            watch,
        };
        Ok(Some((run, follow)))
    }

    /// Run `id` once its state is one `done` accepts, or as it is when
    /// `within` has passed (whichever comes first), if the caller may see
    /// it.
    pub async fn run_record_when(
        &self,
        id: RunId,
        within: Duration,
        caller: &Caller,
        done: impl Fn(RunState) -> bool,
    ) -> Result<Option<RunRecord>, ServiceError> {
        let Some((run, mut follow)) = self.follow_run(id, caller).await? else {
            return Ok(None);
        };
        if done(run.state) {
            return Ok(Some(run));
        }
        let wait = async {
            loop {
                match follow.changed().await {
                    Ok(Some(r)) if !done(r.state) => {}
                    _ => return,
                }
            }
        };
        let _ = tokio::time::timeout(within, wait).await;
        self.run_record(id, caller).await
    }

    /// Every run the caller may see, in `context` and `state` when given,
    /// newest first.
    pub async fn run_records(
        &self,
        context: Option<&CorrelationId>,
        state: Option<RunState>,
        caller: &Caller,
    ) -> Result<Vec<RunRecord>, ServiceError> {
        const PAGE: usize = 1000;
        let store = &self.inner.store;
        let mut out = Vec::new();
        let mut cursor = None;
        loop {
            let page = store.runs(None, state, cursor, PAGE)?;
            let full = page.len() >= PAGE;
            cursor = page.last().map(|r| r.run_id);
            out.extend(page.into_iter().filter(|r| {
                caller.may_see_run(r) && context.is_none_or(|c| &r.correlation_id == c)
            }));
            if !full {
                break;
            }
        }
        store.settled().await?;
        Ok(out)
    }
}
