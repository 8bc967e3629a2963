//! Listing tasks newest first, filtered: what the console's tasks page and
//! `GET /v1/tasks?order=newest` read.
//!
//! Task ids are UUIDv7, so key order is creation order in every tree and
//! index: a listing walks one of them backwards — the state index when a
//! state is asked, the correlation index when a correlation id is, else
//! the tasks tree — checks each task's status (only the few fields a
//! filter needs are decoded), stops at the first task older than `since`,
//! and assembles only the tasks it keeps. So a page costs its own tasks
//! plus those a filter skips on the way (none for state, correlation or
//! `since` alone; the newer tasks of others for an agent, an owner or a
//! trigger).

use std::ops::Bound;

use super::{Store, StoreError, keys};
use crate::envelope::{CorrelationId, TaskId, Timestamp};
use crate::task::{TaskRecord, TaskState};

/// What a listing keeps; every field given must match.
#[derive(Debug, Default, Clone)]
pub struct TaskQuery {
    /// In this state.
    pub state: Option<TaskState>,
    /// For this agent.
    pub agent: Option<String>,
    /// Asked for by this principal.
    pub owner: Option<String>,
    /// Of this request.
    pub correlation: Option<CorrelationId>,
    /// Created at or after this time.
    pub since: Option<Timestamp>,
    /// Started by this trigger (the envelope's `payload.meta.trigger_id`).
    pub trigger: Option<String>,
}

/// The fields of a status a filter reads.
#[derive(serde::Deserialize)]
struct Light {
    state: TaskState,
    agent: String,
    #[serde(default)]
    requested_by: Option<String>,
}

impl Store {
    /// Up to `limit` tasks that `q` keeps, newest first, older than task
    /// `before` when given (the last of the page before).
    pub fn list_newest(
        &self,
        q: &TaskQuery,
        before: Option<TaskId>,
        limit: usize,
    ) -> Result<Vec<TaskRecord>, StoreError> {
        // The oldest key a listing reaches: a v7 id's first six bytes are
        // its creation time in milliseconds.
        let since = q.since.map(|t| {
            let ms = (t.unix_nanos() / 1_000_000).clamp(0, (1 << 48) - 1) as u64;
            let mut floor = [0u8; 16];
            floor[..6].copy_from_slice(&ms.to_be_bytes()[2..]);
            floor
        });
        let (tree, name, prefix): (&sled::Tree, &'static str, Vec<u8>) =
            match (&q.correlation, q.state) {
                (Some(c), _) => (
                    &self.inner.by_correlation,
                    "by_correlation",
                    keys::correlation_prefix(c),
                ),
                (None, Some(s)) => (&self.inner.by_state, "by_state", vec![s.code()]),
                (None, None) => (&self.inner.tasks, "tasks", Vec::new()),
            };
        let upper = match before {
            Some(id) => {
                let mut key = prefix.clone();
                key.extend_from_slice(id.as_bytes());
                Bound::Excluded(key)
            }
            None => match next_prefix(&prefix) {
                Some(end) => Bound::Excluded(end),
                None => Bound::Unbounded,
            },
        };
        let lower = Bound::Included(prefix.clone());
        // A task whose correlation id is its own id is not in the index:
        // it comes in its place among the others.
        let mut own = q
            .correlation
            .as_ref()
            .and_then(|c| c.as_str().parse::<TaskId>().ok())
            .filter(|id| before.is_none_or(|b| *id < b));
        let mut out = Vec::new();
        let mut ids = tree.range((lower, upper)).rev().peekable();
        while out.len() < limit {
            let indexed = match ids.peek() {
                Some(Ok((key, _))) => Some(keys::trailing_task_id(name, key)?),
                Some(Err(_)) => {
                    if let Some(Err(e)) = ids.next() {
                        return Err(e.into());
                    }
                    continue;
                }
                None => None,
            };
            // The own task, once every indexed task newer than it is out.
            let (id, value) = match (own, indexed) {
                (Some(o), Some(i)) if o > i => {
                    own = None;
                    (o, None)
                }
                (Some(o), None) => {
                    own = None;
                    (o, None)
                }
                (_, Some(i)) => {
                    let value = match ids.next() {
                        Some(Ok((_, v))) if name == "tasks" => Some(v),
                        _ => None,
                    };
                    (i, value)
                }
                (None, None) => break,
            };
            if since.is_some_and(|floor| id.as_bytes() < &floor) {
                break;
            }
            if let Some(record) = self.keep(q, id, value)? {
                out.push(record);
            }
        }
        Ok(out)
    }

    /// How many tasks are in `state` (those `owner` asked for, when
    /// given), looking at the newest `cap` of them at most; and whether
    /// more were left unlooked at (the count is then a floor).
    pub fn count_in_state(
        &self,
        state: TaskState,
        owner: Option<&str>,
        cap: usize,
    ) -> Result<(usize, bool), StoreError> {
        let mut n = 0;
        for (seen, item) in self
            .inner
            .by_state
            .scan_prefix([state.code()])
            .rev()
            .enumerate()
        {
            if seen >= cap {
                return Ok((n, true));
            }
            let Some(owner) = owner else {
                item?;
                n += 1;
                continue;
            };
            let (key, _) = item?;
            let id = keys::trailing_task_id("by_state", &key)?;
            let key = keys::task(id);
            let Some(value) = self.inner.tasks.get(key)? else {
                continue;
            };
            if let Ok(light) = keys::decode_value::<Light>("tasks", &key, &value)
                && light.requested_by.as_deref() == Some(owner)
            {
                n += 1;
            }
        }
        Ok((n, false))
    }

    /// The task `id` if `q` keeps it (its status `value`, when the walk
    /// read it already); a task that cannot be read is left out.
    fn keep(
        &self,
        q: &TaskQuery,
        id: TaskId,
        value: Option<sled::IVec>,
    ) -> Result<Option<TaskRecord>, StoreError> {
        let key = keys::task(id);
        let value = match value {
            Some(v) => v,
            None => match self.inner.tasks.get(key)? {
                Some(v) => v,
                None => return Ok(None),
            },
        };
        let decoded = keys::decode_value::<Light>("tasks", &key, &value).map(Some);
        let Some(light) = self.readable(id, decoded)? else {
            return Ok(None);
        };
        let keeps = q.state.is_none_or(|s| light.state == s)
            && q.agent.as_deref().is_none_or(|a| light.agent == a)
            && q.owner
                .as_deref()
                .is_none_or(|o| light.requested_by.as_deref() == Some(o));
        if !keeps {
            return Ok(None);
        }
        let Some(record) = self.get_readable(id)? else {
            return Ok(None);
        };
        if let Some(c) = &q.correlation
            && record.status.correlation_id != *c
        {
            return Ok(None);
        }
        if let Some(t) = &q.trigger
            && record.envelope.payload.meta.trigger_id.as_deref() != Some(t.as_str())
        {
            return Ok(None);
        }
        Ok(Some(record))
    }
}

/// The first key after every key starting with `prefix` (none for the
/// empty prefix, or one of only 0xff bytes).
fn next_prefix(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}
