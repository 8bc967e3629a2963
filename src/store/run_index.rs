//! The runs' indexes, in the `runs` tree beside the records (see
//! [`super::runs`]): by trigger (`T` trigger `0` run id), by state (`S`
//! state `0` run id) and by both (`B` trigger `0` state `0` run id), each
//! entry empty. They are written with the run, and a state's entries move
//! in the transaction that changes the state. Run ids grow with time, so
//! an index read backwards is newest first.

use super::runs::{RECORD, run_id_at, stored_run};
use super::{Store, StoreError, row_keys};
use crate::run::{RunId, RunRecord, RunState};

const BY_TRIGGER: u8 = b'T';
const BY_STATE: u8 = b'S';
const BY_BOTH: u8 = b'B';

/// The prefix of the index entries of the runs of `trigger` (when given)
/// in `state` (when given); `None` for all runs, which is the records.
fn index_prefix(trigger: Option<&str>, state: Option<RunState>) -> Option<Vec<u8>> {
    let (kind, parts): (u8, Vec<&str>) = match (trigger, state) {
        (None, None) => return None,
        (Some(t), None) => (BY_TRIGGER, vec![t]),
        (None, Some(s)) => (BY_STATE, vec![s.as_str()]),
        (Some(t), Some(s)) => (BY_BOTH, vec![t, s.as_str()]),
    };
    let mut key = vec![kind];
    for part in parts {
        key.extend_from_slice(part.as_bytes());
        key.push(0);
    }
    Some(key)
}

/// The index entries of `record`: by trigger, by state, by both.
pub(super) fn index_keys(record: &RunRecord) -> [Vec<u8>; 3] {
    let (trigger, state) = (Some(record.trigger_id.as_str()), Some(record.state));
    [(trigger, None), (None, state), (trigger, state)].map(|(t, s)| {
        let mut key = index_prefix(t, s).expect("a trigger or a state");
        key.extend_from_slice(record.run_id.as_bytes());
        key
    })
}

/// The run id an index entry ends with.
fn indexed_id(key: &[u8]) -> Result<RunId, StoreError> {
    // `run_id_at` reads the 16 bytes after the first: the separator.
    run_id_at(&key[key.len().saturating_sub(17)..])
}

/// Writes the index entries of every run record (a store from before the
/// indexes); how many runs. Writing an entry twice does no harm. The
/// migration flushes.
pub(super) fn index_all(runs: &sled::Tree) -> Result<u64, StoreError> {
    let mut batch = sled::Batch::default();
    let mut indexed = 0;
    for item in runs.scan_prefix([RECORD]) {
        let (key, bytes) = item?;
        let record: RunRecord = row_keys::decode_value("runs", &key, &bytes)?;
        for key in index_keys(&record) {
            batch.insert(key, &[][..]);
        }
        indexed += 1;
    }
    runs.apply_batch(batch)?;
    Ok(indexed)
}

/// What disagrees between the run records and their indexes: a run
/// missing from an index, an entry for a run that is gone or is not (or no
/// longer) what the entry says.
pub(super) fn check_indexes(runs: &sled::Tree) -> Result<Vec<String>, StoreError> {
    let mut problems = Vec::new();
    for item in runs.scan_prefix([RECORD]) {
        let (key, bytes) = item?;
        let record: RunRecord = match row_keys::decode_value("runs", &key, &bytes) {
            Ok(record) => record,
            Err(e) => {
                problems.push(e.to_string());
                continue;
            }
        };
        for entry in index_keys(&record) {
            if !runs.contains_key(&entry)? {
                problems.push(format!(
                    "run {} ({}, {}) is missing from a run index",
                    record.run_id, record.trigger_id, record.state
                ));
            }
        }
    }
    for prefix in [BY_TRIGGER, BY_STATE, BY_BOTH] {
        for item in runs.scan_prefix([prefix]) {
            let (key, _) = item?;
            let id = indexed_id(&key)?;
            let stored = match stored_run(runs, id) {
                Ok(stored) => stored,
                // Reported with the record itself, above.
                Err(StoreError::Decode { .. }) => continue,
                Err(e) => return Err(e),
            };
            match stored {
                Some(r) if index_keys(&r).iter().any(|k| k.as_slice() == key.as_ref()) => {}
                Some(r) => problems.push(format!(
                    "a run index has a stale entry for run {id} (it is {} of {})",
                    r.state, r.trigger_id
                )),
                None => problems.push(format!("a run index names missing run {id}")),
            }
        }
    }
    Ok(problems)
}

impl Store {
    /// Up to `limit` runs started before run `before` (newest first),
    /// of trigger `trigger` and in `state` when given: read from an index,
    /// so a filter costs what it returns.
    pub fn runs(
        &self,
        trigger: Option<&str>,
        state: Option<RunState>,
        before: Option<RunId>,
        limit: usize,
    ) -> Result<Vec<RunRecord>, StoreError> {
        if trigger.is_some_and(|t| t.contains('\0')) {
            return Ok(Vec::new());
        }
        let prefix = index_prefix(trigger, state).unwrap_or_else(|| vec![RECORD]);
        let mut end = prefix.clone();
        match before {
            Some(id) => end.extend_from_slice(id.as_bytes()),
            // Past every key with the prefix (a run id is 16 bytes).
            None => end.extend_from_slice(&[0xff; 17]),
        }
        let mut out = Vec::new();
        for item in self.inner.trees.runs.range(prefix.clone()..end).rev() {
            if out.len() >= limit {
                break;
            }
            let (key, bytes) = item?;
            let read = if prefix[0] == RECORD {
                row_keys::decode_value("runs", &key, &bytes).map(Some)
            } else {
                self.run(indexed_id(&key)?)
            };
            // A run that cannot be read (or an index entry naming none:
            // `store verify` reports both) is skipped, not an error.
            match read {
                Ok(Some(run)) => out.push(run),
                Ok(None) => {}
                Err(e @ StoreError::Decode { .. }) => {
                    tracing::warn!(error = %e, "skipping a run whose stored record cannot be read");
                }
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::access::Grants;
    use crate::run::{Origin, RunChange};
    use crate::store::{Fingerprint, NewRun, StoreSettings};

    async fn start(store: &Store, trigger: &str) -> RunId {
        let yaml = format!("id: {trigger}\nsteps: [{{id: a, agent: x, action: y}}]");
        let definition: crate::trigger::Trigger = serde_norway::from_str(&yaml).unwrap();
        let record = RunRecord::new(
            RunId::new(),
            &definition,
            json!({}),
            Origin::Request,
            "alice".into(),
            Grants::all(),
        );
        let id = record.run_id;
        let new = NewRun {
            record,
            key: None,
            fingerprint: Fingerprint::of(&id.to_string()),
            schedule: None,
        };
        store.start_run(new).await.unwrap();
        id
    }

    async fn settle(store: &Store, id: RunId, state: RunState) {
        let change = RunChange::Settle {
            from: RunState::Working,
            state,
            result: None,
            error: None,
            gate: None,
        };
        store.change_run(id, change, "test").await.unwrap();
    }

    fn listed(
        store: &Store,
        trigger: Option<&str>,
        state: Option<RunState>,
        before: Option<RunId>,
        limit: usize,
    ) -> Vec<RunId> {
        let runs = store.runs(trigger, state, before, limit).unwrap();
        runs.iter().map(|r| r.run_id).collect()
    }

    /// Each filter reads its index, newest first, pages with `before`, and
    /// a run moves from one state's entries to the next's.
    #[tokio::test]
    async fn runs_are_listed_from_their_indexes_and_move_with_their_state() {
        use RunState::{Completed, Failed, Working};
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&StoreSettings::new(dir.path())).unwrap();
        let a1 = start(&store, "a").await;
        let ab = start(&store, "ab").await;
        let a2 = start(&store, "a").await;
        let a3 = start(&store, "a").await;
        settle(&store, a2, Completed).await;
        settle(&store, ab, Failed).await;

        assert_eq!(listed(&store, None, None, None, 10), [a3, a2, ab, a1]);
        assert_eq!(listed(&store, Some("a"), None, None, 10), [a3, a2, a1]);
        assert_eq!(listed(&store, Some("ab"), None, None, 10), [ab]);
        assert_eq!(listed(&store, None, Some(Working), None, 10), [a3, a1]);
        assert_eq!(listed(&store, None, Some(Completed), None, 10), [a2]);
        assert_eq!(listed(&store, Some("a"), Some(Failed), None, 10), []);
        assert_eq!(listed(&store, Some("ab"), Some(Failed), None, 10), [ab]);
        assert_eq!(listed(&store, Some("a"), None, Some(a3), 1), [a2]);
        assert_eq!(listed(&store, Some("a"), Some(Working), Some(a3), 10), [a1]);
        assert_eq!(listed(&store, Some("a\0"), None, None, 10), []);
        assert!(store.check_indexes().unwrap().ok());

        // A stale entry and a missing one are both reported.
        let [_, by_state, _] = index_keys(&store.run(a1).unwrap().unwrap());
        store.inner.trees.runs.remove(&by_state).unwrap();
        let mut wrong = index_prefix(None, Some(Completed)).unwrap();
        wrong.extend_from_slice(a3.as_bytes());
        store.inner.trees.runs.insert(&wrong, &[][..]).unwrap();
        let report = store.check_indexes().unwrap();
        assert_eq!(report.problems.len(), 2, "{report:?}");
        assert!(report.problems[0].contains("missing from a run index"));
        assert!(report.problems[1].contains("stale entry for run"));
    }
}
