//! What the console's overview shows (`GET /v1/overview`): the caller's
//! tasks by state, the recent failures it may see, the agents and their
//! live replicas; and, for a caller who may read every task, the whole
//! system's last minutes (throughput, latency), the queue on the broker
//! and the dead letters.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use super::{Caller, Orchestrator, ServiceError};
use crate::access::grants;
use crate::store::TaskQuery;
use crate::task::{TaskRecord, TaskState};

/// Tasks looked at per state, at most; past it the count is a floor
/// (`at_least`).
pub const COUNT_CAP: usize = 10_000;
/// The window of the system's figures.
const WINDOW: Duration = Duration::from_secs(300);

/// The overview.
#[derive(Debug, Serialize)]
pub struct Overview {
    /// Tasks per state (the caller's, or every one with
    /// `orch:tasks:read_all`), [`COUNT_CAP`] looked at per state at most
    /// (the caller's newest [`COUNT_CAP`] in all).
    pub tasks_by_state: BTreeMap<TaskState, usize>,
    /// The states with more tasks than were looked at: their count is a
    /// floor.
    pub at_least: Vec<TaskState>,
    /// The minutes the figures below cover.
    pub window_minutes: u64,
    /// Tasks that ended per second (system-wide; `orch:tasks:read_all`).
    pub completed_per_second: Option<f64>,
    /// Latency from creation to end, ms: `p50`, `p99` (system-wide,
    /// estimated from buckets 1.5 times apart).
    pub latency_ms: BTreeMap<&'static str, Option<f64>>,
    /// Task messages on the broker not yet settled: waiting or being
    /// worked on (`orch:tasks:read_all`).
    pub queue_depth: Option<u64>,
    /// Messages in the dead-letter stream (`orch:dlq:manage`).
    pub dead_letters: Option<u64>,
    /// The declared agents and their live replicas.
    pub agents: Vec<AgentLine>,
    /// The newest failed tasks the caller may see (at most 10; the HTTP
    /// face shows them as task views).
    #[serde(skip)]
    pub recent_failures: Vec<TaskRecord>,
}

/// One agent on the overview.
#[derive(Debug, Serialize)]
pub struct AgentLine {
    /// Its name.
    pub name: String,
    /// Its live replicas.
    pub replicas: usize,
}

impl Orchestrator {
    /// The overview `caller` may see.
    pub async fn overview(&self, caller: &Caller) -> Result<Overview, ServiceError> {
        let everyone = caller.grants.covers(grants::READ_ALL);
        let owner = (!everyone).then(|| caller.principal.clone());
        let store = &self.inner.store;
        let (tasks_by_state, at_least) = store.count_by_state(owner.as_deref(), COUNT_CAP)?;
        let failed = TaskQuery {
            state: Some(TaskState::Failed),
            owner: owner.clone(),
            ..TaskQuery::default()
        };
        let recent_failures = store.list_newest(&failed, None, 10)?;
        store.settled().await?;
        let recent = crate::telemetry::recent::recent(WINDOW.as_secs());
        let bus = &self.inner.bus;
        let patience = Duration::from_secs(2);
        let queue_depth = if everyone {
            tokio::time::timeout(patience, bus.tasks_waiting())
                .await
                .ok()
                .and_then(Result::ok)
        } else {
            None
        };
        let dead_letters = if caller.grants.covers(grants::DLQ_MANAGE) {
            tokio::time::timeout(patience, bus.dlq_size())
                .await
                .ok()
                .and_then(Result::ok)
        } else {
            None
        };
        let agents = self
            .agents(&super::AgentFilter {
                tool_only: true,
                ..Default::default()
            })
            .await
            .agents
            .into_iter()
            .map(|a| AgentLine {
                name: a.card.name.to_string(),
                replicas: a.instances.len(),
            })
            .collect();
        Ok(Overview {
            tasks_by_state,
            at_least,
            window_minutes: WINDOW.as_secs() / 60,
            completed_per_second: everyone.then_some(recent.per_second),
            latency_ms: BTreeMap::from([
                ("p50", recent.p50_ms.filter(|_| everyone)),
                ("p99", recent.p99_ms.filter(|_| everyone)),
            ]),
            queue_depth,
            dead_letters,
            agents,
            recent_failures,
        })
    }
}
