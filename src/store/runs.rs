//! Workflow runs in the store, in the one `runs` tree, by key prefix:
//!
//! | key | value | |
//! |---|---|---|
//! | `r` run id | [`RunRecord`] | the run's own facts |
//! | `s` run id, step id | task id | which task a step is: written in the transaction that creates the task, so a step is one task forever |
//! | `k` scope `0` key | [`RunKey`] | a run's idempotency key (runs start once per key) |
//! | `l` run id | nothing | the runs not yet ended, for resuming them on start |
//! | `c` trigger id | [`ScheduleCursor`] | how far a schedule has been handled: written with the run it starts, so a time starts one run |
//! | `T`, `S`, `B` … run id | nothing | the indexes by trigger, state and both ([`super::run_index`]) |
//!
//! Every change is audited (kind `run.*`, the run's correlation id) and
//! flushed before it is reported, like a task's.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::idempotency::{Fingerprint, expired};
use super::run_index::index_keys;
use super::tasks::abort;
use super::{Abort, AuditEntry, Store, StoreError, Tx, audit, row_keys};
use crate::envelope::{TaskId, Timestamp};
use crate::run::{RunChange, RunId, RunRecord, RunStarted};

pub(super) const RECORD: u8 = b'r';
const STEP: u8 = b's';
const KEY: u8 = b'k';
/// The prefix of the runs' idempotency keys, for the key collector.
pub(super) const KEYS: &[u8] = &[KEY];
const LIVE: u8 = b'l';
const CURSOR: u8 = b'c';

fn cursor_key(trigger: &str) -> Vec<u8> {
    let mut key = vec![CURSOR];
    key.extend_from_slice(trigger.as_bytes());
    key
}

pub(super) fn record_key(id: RunId) -> [u8; 17] {
    prefixed(RECORD, id)
}

fn live_key(id: RunId) -> [u8; 17] {
    prefixed(LIVE, id)
}

/// A run's id where the watchers take a task's.
fn as_task_id(id: RunId) -> TaskId {
    TaskId::from_bytes(*id.as_bytes())
}

fn prefixed(prefix: u8, id: RunId) -> [u8; 17] {
    let mut key = [0u8; 17];
    key[0] = prefix;
    key[1..].copy_from_slice(id.as_bytes());
    key
}

fn step_key(id: RunId, step: &str) -> Vec<u8> {
    let mut key = prefixed(STEP, id).to_vec();
    key.extend_from_slice(step.as_bytes());
    key
}

fn run_key(scope: &str, key: &str) -> Vec<u8> {
    let mut out = vec![KEY];
    out.extend(row_keys::idempotency(scope, key));
    out
}

pub(super) fn run_id_at(key: &[u8]) -> Result<RunId, StoreError> {
    let bytes: [u8; 16] = key
        .get(1..17)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| StoreError::Decode {
            tree: "runs",
            key: row_keys::describe("runs", key),
            message: "a run key without its run id".into(),
        })?;
    Ok(RunId::from_bytes(bytes))
}

/// Gives every run key without an expiry (a store from before keys
/// expired) `expires_at`; how many. A key stamped already is left alone.
/// The migration flushes.
pub(super) fn stamp_keys(runs: &sled::Tree, expires_at: i64) -> Result<u64, StoreError> {
    let mut stamped = 0;
    for item in runs.scan_prefix(KEYS) {
        let (key, bytes) = item?;
        let mut held: RunKey = row_keys::decode_value("runs", &key, &bytes)?;
        if held.expires_at == 0 {
            held.expires_at = expires_at;
            runs.insert(key, row_keys::encode(&held))?;
            stamped += 1;
        }
    }
    Ok(stamped)
}

/// Which step of which run a task is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepLink {
    /// The run.
    pub run: RunId,
    /// The step's id.
    pub step: String,
}

impl StepLink {
    pub(super) fn key(&self) -> Vec<u8> {
        step_key(self.run, &self.step)
    }
}

/// What a run's idempotency key holds. Like a task's key, it is free
/// again after the store's idempotency retention.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct RunKey {
    run_id: RunId,
    fingerprint: Fingerprint,
    /// Unix seconds after which the key is free again (0 in a store from
    /// before keys expired, until the migration to v4 sets it).
    #[serde(default)]
    expires_at: i64,
}

/// A run to start.
#[derive(Debug, Clone)]
pub struct NewRun {
    /// The run, in its first state.
    pub record: RunRecord,
    /// Its idempotency key and the key's scope (the starter, or the
    /// schedule or subject): the same key starts one run.
    pub key: Option<(String, String)>,
    /// The request, to tell a repeat from a conflicting reuse of the key.
    pub fingerprint: Fingerprint,
    /// For a scheduled run: its trigger's schedule cursor after it, written
    /// in the same transaction.
    pub schedule: Option<ScheduleCursor>,
}

/// How far a trigger's schedule has been handled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleCursor {
    /// The last time handled (a run started, or none by policy).
    pub slot: Timestamp,
    /// The last run the schedule started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunId>,
    /// A time that came while that run was unfinished, waiting for it to
    /// end (`overlap: queue`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued: Option<Timestamp>,
}

/// Run `id`'s record in the `runs` tree, if any.
pub(super) fn stored_run(runs: &sled::Tree, id: RunId) -> Result<Option<RunRecord>, StoreError> {
    let key = record_key(id);
    match runs.get(key)? {
        Some(bytes) => row_keys::decode_value("runs", &key, &bytes).map(Some),
        None => Ok(None),
    }
}

fn read_run(tx: &Tx<'_>, id: RunId) -> Result<RunRecord, Abort> {
    let key = record_key(id);
    let bytes = tx
        .runs
        .get(key)?
        .ok_or_else(|| abort(StoreError::RunNotFound(id)))?;
    row_keys::decode_value("runs", &key, &bytes).map_err(abort)
}

/// The task a step link names, inside a transaction.
pub(super) fn linked_task(tx: &Tx<'_>, link: &StepLink) -> Result<Option<TaskId>, Abort> {
    let key = link.key();
    match tx.runs.get(&key)? {
        Some(bytes) => decode_task_id(&key, &bytes).map(Some).map_err(abort),
        None => Ok(None),
    }
}

/// Records `link` → `task` (in the task's creating transaction).
pub(super) fn link(tx: &Tx<'_>, link: &StepLink, task: TaskId) -> Result<(), Abort> {
    tx.runs.insert(link.key(), &task.as_bytes()[..])?;
    Ok(())
}

fn decode_task_id(key: &[u8], bytes: &[u8]) -> Result<TaskId, StoreError> {
    let id: [u8; 16] = bytes.try_into().map_err(|_| StoreError::Decode {
        tree: "runs",
        key: row_keys::describe("runs", key),
        message: "a step link that is not a task id".into(),
    })?;
    Ok(TaskId::from_bytes(id))
}

fn entry(record: &RunRecord, actor: &str, kind: &str, mut detail: serde_json::Value) -> AuditEntry {
    detail["run_id"] = json!(record.run_id);
    detail["trigger_id"] = json!(record.trigger_id);
    AuditEntry {
        actor: actor.to_string(),
        kind: kind.to_string(),
        task_id: None,
        correlation_id: Some(record.correlation_id.clone()),
        trace_id: record.trace.as_ref().and_then(|t| t.trace_id()),
        detail,
    }
}

impl Store {
    /// Stores a new run (and claims its key), or returns the run that holds
    /// the key for the same request; the key with another request is
    /// [`StoreError::RunKeyConflict`].
    pub async fn start_run(&self, new: NewRun) -> Result<RunStarted, StoreError> {
        let now = Timestamp::now();
        let record = new.record;
        let id = record.run_id;
        let bytes = row_keys::encode(&record);
        let claim = new.key.as_ref().map(|(scope, key)| {
            let value = RunKey {
                run_id: id,
                fingerprint: new.fingerprint.clone(),
                expires_at: now.after(self.inner.retention).unix_seconds(),
            };
            (run_key(scope, key), key.clone(), row_keys::encode(&value))
        });
        let started = entry(
            &record,
            &record.started_by,
            "run.started",
            json!({
                "origin": record.origin,
                "definition_hash": record.definition_hash,
                "idempotency_key": new.key.as_ref().map(|(_, k)| k),
            }),
        );
        let fingerprint = new.fingerprint;
        let indexed = index_keys(&record);
        // A callback is owed from the moment the run is stored.
        let callback = record.callback_url.is_some().then(|| {
            super::PushDelivery::new(
                as_task_id(id),
                super::CALLBACK.into(),
                super::Target::Callback,
                record.started_by.clone(),
                0,
            )
        });
        let cursor = new
            .schedule
            .map(|c| (cursor_key(&record.trigger_id), row_keys::encode(&c)));
        let existing = self
            .transact(Box::new(move |tx, head| {
                if let Some((key, name, value)) = &claim {
                    let held = tx.runs.get(key)?;
                    let held = held
                        .map(|b| row_keys::decode_value::<RunKey>("runs", key, &b))
                        .transpose()
                        .map_err(abort)?;
                    // An expired key is free: it starts a new run.
                    let now_secs = now.unix_seconds();
                    if let Some(held) = held.filter(|h| !expired(h.expires_at, now_secs)) {
                        if held.fingerprint != fingerprint {
                            return Err(abort(StoreError::RunKeyConflict {
                                key: name.clone(),
                                existing: held.run_id,
                            }));
                        }
                        return Ok((head, Some(held.run_id)));
                    }
                    tx.runs.insert(key.as_slice(), value.as_slice())?;
                }
                tx.runs.insert(&record_key(id), bytes.as_slice())?;
                tx.runs.insert(&live_key(id), &[][..])?;
                for key in &indexed {
                    tx.runs.insert(key.as_slice(), &[][..])?;
                }
                if let Some((key, value)) = &cursor {
                    tx.runs.insert(key.as_slice(), value.as_slice())?;
                }
                if let Some(d) = &callback {
                    super::outbox::write(tx, d)?;
                }
                let head = audit::append(tx, head, &started, now)?;
                Ok((head, None))
            }))
            .await?;
        self.inner.commit.durable().await?;
        match existing {
            Some(id) => Ok(RunStarted::Existing(
                self.run(id)?.ok_or(StoreError::RunNotFound(id))?,
            )),
            None => {
                self.inner.changes.run(&record);
                Ok(RunStarted::Created(record))
            }
        }
    }

    /// Applies `change` to run `id` as `actor` (audited, flushed); the run
    /// as it is after. A refused change is [`StoreError::RunRefused`].
    pub async fn change_run(
        &self,
        id: RunId,
        change: RunChange,
        actor: &str,
    ) -> Result<RunRecord, StoreError> {
        let now = Timestamp::now();
        let actor = actor.to_string();
        let record = self
            .transact(Box::new(move |tx, head| {
                let mut record = read_run(tx, id)?;
                let [_, by_state, by_both] = index_keys(&record);
                let before = record.state;
                let (kind, detail) = record
                    .apply(&change, now)
                    .map_err(|e| abort(StoreError::RunRefused(e)))?;
                tx.runs
                    .insert(&record_key(id), row_keys::encode(&record).as_slice())?;
                if record.state != before {
                    // The trigger never changes: only the state's entries move.
                    let [_, new_state, new_both] = index_keys(&record);
                    tx.runs.remove(by_state)?;
                    tx.runs.remove(by_both)?;
                    tx.runs.insert(new_state, &[][..])?;
                    tx.runs.insert(new_both, &[][..])?;
                }
                if record.state.is_terminal() {
                    tx.runs.remove(&live_key(id))?;
                }
                let head = audit::append(tx, head, &entry(&record, &actor, kind, detail), now)?;
                Ok((head, record))
            }))
            .await?;
        self.inner.commit.durable().await?;
        self.inner
            .watchers
            .wake(as_task_id(id), record.state.is_terminal());
        self.inner.changes.run(&record);
        Ok(record)
    }

    /// A wait for run `id`'s changes, registered now (woken as a task's
    /// wait is; a run and a task never share an id).
    pub fn watch_run(&self, id: RunId) -> super::waiters::Watch {
        self.inner.watchers.watch(as_task_id(id))
    }

    /// Trigger `trigger`'s schedule cursor, if its schedule has run.
    pub fn schedule_cursor(&self, trigger: &str) -> Result<Option<ScheduleCursor>, StoreError> {
        let key = cursor_key(trigger);
        match self.inner.trees.runs.get(&key)? {
            Some(bytes) => row_keys::decode_value("runs", &key, &bytes).map(Some),
            None => Ok(None),
        }
    }

    /// Moves trigger `trigger`'s schedule cursor without starting a run (a
    /// time skipped or queued by policy), audited as `kind` by `actor`.
    pub async fn set_schedule_cursor(
        &self,
        trigger: &str,
        cursor: ScheduleCursor,
        actor: &str,
        kind: &str,
    ) -> Result<(), StoreError> {
        let now = Timestamp::now();
        let key = cursor_key(trigger);
        let value = row_keys::encode(&cursor);
        let entry = AuditEntry {
            actor: actor.to_string(),
            kind: kind.to_string(),
            task_id: None,
            correlation_id: None,
            trace_id: None,
            detail: json!({ "trigger_id": trigger, "cursor": cursor }),
        };
        self.transact(Box::new(move |tx, head| {
            tx.runs.insert(key.as_slice(), value.as_slice())?;
            let head = audit::append(tx, head, &entry, now)?;
            Ok((head, ()))
        }))
        .await?;
        self.inner.commit.durable().await
    }

    /// The run with this id, if any.
    pub fn run(&self, id: RunId) -> Result<Option<RunRecord>, StoreError> {
        stored_run(&self.inner.trees.runs, id)
    }

    /// The tasks of run `id`'s steps that have started, by step id.
    pub(super) fn run_steps(&self, id: RunId) -> Result<BTreeMap<String, TaskId>, StoreError> {
        let prefix = prefixed(STEP, id);
        let mut out = BTreeMap::new();
        for item in self.inner.trees.runs.scan_prefix(prefix) {
            let (key, value) = item?;
            let step = String::from_utf8_lossy(&key[prefix.len()..]).into_owned();
            out.insert(step, decode_task_id(&key, &value)?);
        }
        Ok(out)
    }

    /// The statuses of the tasks of run `id`'s steps that have started,
    /// by step id.
    pub fn run_tasks(
        &self,
        id: RunId,
    ) -> Result<BTreeMap<String, crate::task::TaskStatus>, StoreError> {
        let mut out = BTreeMap::new();
        for (step, task_id) in self.run_steps(id)? {
            // A step whose task cannot be read (or was quarantined) is
            // left out: submitting it again finds the linked task and
            // fails the step with why.
            if let Some(status) = self.readable(task_id, self.status(task_id))? {
                out.insert(step, status);
            }
        }
        Ok(out)
    }

    /// What the tasks of run `id`'s steps that have started did, by step
    /// id: [`Store::run_tasks`] for a plan, which reads no more.
    pub fn run_step_tasks(
        &self,
        id: RunId,
    ) -> Result<BTreeMap<String, crate::run::StepTask>, StoreError> {
        let mut out = BTreeMap::new();
        for (step, task_id) in self.run_steps(id)? {
            let key = row_keys::task(task_id);
            let read = match self.inner.trees.tasks.get(key)? {
                Some(bytes) => row_keys::decode_value("tasks", &key, &bytes).map(Some),
                None => Ok(None),
            };
            if let Some(task) = self.readable(task_id, read)? {
                out.insert(step, task);
            }
        }
        Ok(out)
    }

    /// The runs that have not ended, oldest first.
    pub fn live_runs(&self) -> Result<Vec<RunId>, StoreError> {
        self.inner
            .trees
            .runs
            .scan_prefix([LIVE])
            .map(|item| run_id_at(&item?.0))
            .collect()
    }
}
