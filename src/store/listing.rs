//! Listing tasks newest first, filtered: what the console's tasks page and
//! `GET /v1/tasks?order=newest` read.
//!
//! Task ids are UUIDv7, so key order is creation order in every tree and
//! index: a listing walks one of them backwards — the narrowest one a
//! filter names: the correlation index, the `by_label` index under a
//! trigger, an owner or an agent, the state index, else the tasks tree —
//! checks each task's status against the other filters (only the few
//! fields they need are decoded), stops at the first task older than
//! `since`, and assembles only the tasks it keeps. So a page costs its own
//! tasks plus those a second filter skips on the way (none for any one
//! filter alone).

use std::ops::Bound;

use super::{Store, StoreError, row_keys};
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
    /// Of this skill (the envelope's `payload.action`).
    pub action: Option<String>,
    /// The steps of this workflow run.
    pub run: Option<crate::run::RunId>,
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
        // A run's steps are few: its tasks, newest first.
        if let Some(run) = q.run {
            let mut ids: Vec<TaskId> = self.run_steps(run)?.into_values().collect();
            ids.sort_unstable_by(|a, b| b.cmp(a));
            let mut out = Vec::new();
            for id in ids.into_iter().filter(|id| before.is_none_or(|b| *id < b)) {
                if out.len() == limit || since.is_some_and(|floor| id.as_bytes() < &floor) {
                    break;
                }
                if let Some(record) = self.keep(q, id, None)? {
                    out.push(record);
                }
            }
            return Ok(out);
        }
        // The narrowest walk a filter allows; the other filters are checked
        // on the way.
        use super::labels::{Label, prefix as label};
        let (tree, name, prefix): (&sled::Tree, &'static str, Vec<u8>) =
            match (&q.correlation, &q.trigger, &q.owner, &q.agent, q.state) {
                (Some(c), ..) => (
                    &self.inner.trees.by_correlation,
                    "by_correlation",
                    row_keys::correlation_prefix(c),
                ),
                (None, Some(t), ..) => (
                    &self.inner.trees.by_label,
                    "by_label",
                    label(Label::Trigger, t),
                ),
                (None, None, Some(o), ..) => (
                    &self.inner.trees.by_label,
                    "by_label",
                    label(Label::Owner, o),
                ),
                (None, None, None, Some(a), _) => (
                    &self.inner.trees.by_label,
                    "by_label",
                    label(Label::Agent, a),
                ),
                (None, None, None, None, Some(s)) => {
                    (&self.inner.trees.by_state, "by_state", vec![s.code()])
                }
                (None, None, None, None, None) => (&self.inner.trees.tasks, "tasks", Vec::new()),
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
                Some(Ok((key, _))) => Some(row_keys::trailing_task_id(name, key)?),
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

    /// How many tasks are in `state`, counted up to `cap`.
    pub fn count_in_state(&self, state: TaskState, cap: usize) -> Result<usize, StoreError> {
        let mut n = 0;
        for item in self.inner.trees.by_state.scan_prefix([state.code()]) {
            item?;
            n += 1;
            if n >= cap {
                break;
            }
        }
        Ok(n)
    }

    /// Tasks per state (those `owner` asked for, when given), looking at
    /// `cap` tasks per state at most (the newest `cap` of the owner's in
    /// all); and the states whose count is a floor (more were left
    /// unlooked at).
    pub fn count_by_state(
        &self,
        owner: Option<&str>,
        cap: usize,
    ) -> Result<(std::collections::BTreeMap<TaskState, usize>, Vec<TaskState>), StoreError> {
        let mut counts: std::collections::BTreeMap<TaskState, usize> =
            TaskState::ALL.iter().map(|s| (*s, 0)).collect();
        let mut floors = Vec::new();
        let Some(owner) = owner else {
            for state in TaskState::ALL {
                let mut n = 0;
                for item in self.inner.trees.by_state.scan_prefix([state.code()]) {
                    item?;
                    if n == cap {
                        floors.push(state);
                        break;
                    }
                    n += 1;
                }
                counts.insert(state, n);
            }
            return Ok((counts, floors));
        };
        let prefix = super::labels::prefix(super::labels::Label::Owner, owner);
        for (seen, item) in self
            .inner
            .trees
            .by_label
            .scan_prefix(&prefix)
            .rev()
            .enumerate()
        {
            if seen == cap {
                floors = TaskState::ALL.to_vec();
                break;
            }
            let (key, _) = item?;
            let id = row_keys::trailing_task_id("by_label", &key)?;
            let key = row_keys::task(id);
            let Some(value) = self.inner.trees.tasks.get(key)? else {
                continue;
            };
            if let Ok(light) = row_keys::decode_value::<Light>("tasks", &key, &value) {
                *counts.entry(light.state).or_default() += 1;
            }
        }
        Ok((counts, floors))
    }

    /// The task `id` if `q` keeps it (its status `value`, when the walk
    /// read it already); a task that cannot be read is left out.
    fn keep(
        &self,
        q: &TaskQuery,
        id: TaskId,
        value: Option<sled::IVec>,
    ) -> Result<Option<TaskRecord>, StoreError> {
        let key = row_keys::task(id);
        let value = match value {
            Some(v) => v,
            None => match self.inner.trees.tasks.get(key)? {
                Some(v) => v,
                None => return Ok(None),
            },
        };
        let decoded = row_keys::decode_value::<Light>("tasks", &key, &value).map(Some);
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
        if let Some(a) = &q.action
            && record.envelope.payload.action.as_str() != a
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
