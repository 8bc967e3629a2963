//! Stores written by earlier versions: each format step is migrated on
//! open, and what was stored reads back the same.

use crate::common;

use common::{envelope, filled_store, new_task, with_raw_sled};
use orchestrator::{Store, StoreSettings};
use serde_json::json;

/// Marks a closed store's files as format `version` (`v1`, `v3`…).
fn set_format(db: &sled::Db, version: &str) {
    let marker = format!("orchestrator-store-{version}");
    let meta = db.open_tree("meta").unwrap();
    meta.insert("format", marker.as_bytes()).unwrap();
}

/// The format marker of a closed store's files.
fn format_of(db: &sled::Db) -> String {
    let meta = db.open_tree("meta").unwrap();
    String::from_utf8(meta.get("format").unwrap().unwrap().to_vec()).unwrap()
}

/// A store of format v1 (each task one record holding its envelope and
/// history, no audit-by-task index) is migrated on open to the current
/// format: statuses and envelopes apart, the index built from the log; the
/// tasks read back whole, their history from the audit log.
#[tokio::test]
async fn a_v1_store_is_migrated_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let (path, ids) = filled_store(dir.path(), 3).await;
    let before: Vec<_> = {
        let store = Store::open(&StoreSettings::new(&path)).unwrap();
        ids.iter()
            .map(|id| store.get(*id).unwrap().unwrap())
            .collect()
    };
    with_raw_sled(&path, |db| {
        let tasks = db.open_tree("tasks").unwrap();
        for record in &before {
            // The v1 shape: envelope, status and history in one value,
            // without the facts v3 copies out of the envelope.
            let mut whole = serde_json::to_value(&record.status).unwrap();
            let fields = whole.as_object_mut().unwrap();
            for copied in ["task_id", "correlation_id", "agent", "max_attempts"] {
                fields.remove(copied);
            }
            fields.insert(
                "envelope".into(),
                serde_json::to_value(&record.envelope).unwrap(),
            );
            fields.insert(
                "history".into(),
                serde_json::to_value(&record.history).unwrap(),
            );
            let whole = serde_json::to_vec(&whole).unwrap();
            tasks.insert(record.task_id().as_bytes(), whole).unwrap();
        }
        db.drop_tree("envelopes").unwrap();
        db.drop_tree("audit_by_task").unwrap();
        set_format(db, "v1");
    });
    let store = Store::open(&StoreSettings::new(&path)).unwrap();
    for record in &before {
        let after = store.get(record.task_id()).unwrap().unwrap();
        // A v1 status never named its audit record.
        let mut expected = record.clone();
        expected.status.audit_seq = None;
        assert_eq!(after, expected);
    }
    let filter = orchestrator::audit::AuditFilter {
        task_id: Some(ids[1]),
        correlation_id: None,
    };
    let records = store.audit_list(&filter, 0, 10).unwrap();
    assert_eq!(records.len(), 1, "{records:?}");
    assert!(store.check_indexes().unwrap().ok());
    drop(store);
    with_raw_sled(&path, |db| {
        assert_eq!(format_of(db), "orchestrator-store-v6")
    });
}

/// A store of format v3 (runs without their indexes by trigger and
/// state, run keys without an expiry) is migrated on open: the runs are
/// listed by trigger and by state again, the index check agrees, and the
/// keys are held for the retention from the migration.
#[tokio::test]
async fn a_v3_store_gets_its_run_indexes_on_open() {
    use orchestrator::run::RunStarted;
    use orchestrator::run::{RunId, RunState};

    let dir = tempfile::tempdir().unwrap();
    let (path, _) = filled_store(dir.path(), 1).await;
    let store = Store::open(&StoreSettings::new(&path)).unwrap();
    let mut ids = Vec::new();
    for (i, trigger) in ["daily", "weekly", "daily"].into_iter().enumerate() {
        let new = common::new_run(trigger, Some(&format!("k{i}")), json!({ "i": i }));
        ids.push(store.start_run(new).await.unwrap().record().run_id);
    }
    drop(store);
    with_raw_sled(&path, |db| {
        let runs = db.open_tree("runs").unwrap();
        // v3 had only `r`, `s`, `k`, `l` and `c` keys, and its run keys
        // no expiry.
        for prefix in [b"T", b"S", b"B"] {
            for key in runs.scan_prefix(prefix).keys() {
                runs.remove(key.unwrap()).unwrap();
            }
        }
        for item in runs.scan_prefix(b"k") {
            let (key, value) = item.unwrap();
            let mut held: serde_json::Value = serde_json::from_slice(&value).unwrap();
            assert!(held.as_object_mut().unwrap().remove("expires_at").is_some());
            runs.insert(key, serde_json::to_vec(&held).unwrap())
                .unwrap();
        }
        set_format(db, "v3");
    });
    let store = Store::open(&StoreSettings::new(&path)).unwrap();
    let listed = |trigger, state| -> Vec<RunId> {
        let runs = store.runs(trigger, state, None, 10).unwrap();
        runs.iter().map(|r| r.run_id).collect()
    };
    assert_eq!(listed(Some("daily"), None), [ids[2], ids[0]]);
    assert_eq!(
        listed(None, Some(RunState::Working)),
        [ids[2], ids[1], ids[0]]
    );
    assert_eq!(listed(Some("weekly"), Some(RunState::Working)), [ids[1]]);
    let report = store.check_indexes().unwrap();
    assert!(report.ok(), "{report:?}");
    // The keys got an expiry a retention from now: still held.
    let again = store
        .start_run(common::new_run("daily", Some("k0"), json!({ "i": 0 })))
        .await
        .unwrap();
    assert!(matches!(again, RunStarted::Existing(ref r) if r.run_id == ids[0]));
    let future =
        orchestrator::envelope::Timestamp::now().after(std::time::Duration::from_secs(3600));
    assert_eq!(store.collect_expired_keys(future).unwrap(), 0);
}

/// A store of format v4 (one audit index key per record, every task in
/// `by_correlation`) is migrated on open: one index key per task, no
/// correlation entry for a task whose correlation id is its own, and the
/// tasks, their histories, their audit records and the correlation listing
/// read back the same.
#[tokio::test]
async fn a_v4_store_gets_one_audit_index_key_per_task() {
    use orchestrator::audit::AuditFilter;
    use orchestrator::store::Change;
    use orchestrator::{TaskRecord, Transition};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let store = Store::open(&StoreSettings::new(&path)).unwrap();
    let lone = envelope("echo", "echo", json!({"n": 1}), "k1");
    let mut child = envelope("echo", "echo", json!({"n": 2}), "k2");
    child.header.correlation_id = lone.header.correlation_id.clone();
    let ids = [lone.header.task_id, child.header.task_id];
    let correlation = lone.header.correlation_id.clone();
    store.submit(new_task(lone)).await.unwrap();
    store.submit(new_task(child)).await.unwrap();
    for event in [Transition::Start, Transition::Complete] {
        let change = Change::new(event, "worker-1", format!("reported {event}"));
        store.apply(ids[0], change).await.unwrap();
    }
    let read = |store: &Store| {
        let tasks: Vec<TaskRecord> = ids
            .iter()
            .map(|id| store.get(*id).unwrap().unwrap())
            .collect();
        let audit: Vec<_> = ids
            .iter()
            .map(|id| {
                let filter = AuditFilter {
                    task_id: Some(*id),
                    correlation_id: None,
                };
                store.audit_list(&filter, 0, 10).unwrap()
            })
            .collect();
        (
            tasks,
            audit,
            common::list_correlated(store, &correlation, 10),
        )
    };
    let before = read(&store);
    assert_eq!(before.1.iter().map(Vec::len).collect::<Vec<_>>(), [3, 1]);
    assert_eq!(before.2, ids);
    drop(store);
    with_raw_sled(&path, |db| {
        // v4: a key per audit record (task id + sequence), and the lone
        // task in `by_correlation` under its own id.
        let index = db.open_tree("audit_by_task").unwrap();
        for item in index.iter() {
            let (key, seqs) = item.unwrap();
            index.remove(&key).unwrap();
            for seq in seqs.chunks(8) {
                index.insert([&key[..], seq].concat(), &[][..]).unwrap();
            }
        }
        let own = [correlation.as_str().as_bytes(), &[0], ids[0].as_bytes()].concat();
        db.open_tree("by_correlation")
            .unwrap()
            .insert(own, &[][..])
            .unwrap();
        set_format(db, "v4");
    });
    let store = Store::open(&StoreSettings::new(&path)).unwrap();
    assert_eq!(read(&store), before);
    let report = store.check_indexes().unwrap();
    assert!(report.ok(), "{report:?}");
    drop(store);
    with_raw_sled(&path, |db| {
        let index = db.open_tree("audit_by_task").unwrap();
        let lengths: Vec<(usize, usize)> = index
            .iter()
            .map(|item| item.map(|(k, v)| (k.len(), v.len())).unwrap())
            .collect();
        assert_eq!(lengths, [(16, 24), (16, 8)]);
        let correlated: Vec<_> = db
            .open_tree("by_correlation")
            .unwrap()
            .iter()
            .keys()
            .collect();
        assert_eq!(correlated.len(), 1, "only the child is indexed");
        assert_eq!(format_of(db), "orchestrator-store-v6");
    });
}

/// A store of format v5 (no `by_label` index) is migrated on open: its
/// tasks are listed by agent, by owner and by trigger again, and the index
/// check agrees (it finds a task missing from the index before).
#[tokio::test]
async fn a_v5_store_gets_its_tasks_indexed_by_agent_owner_and_trigger() {
    use orchestrator::store::TaskQuery;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let store = Store::open(&StoreSettings::new(&path)).unwrap();
    let plain = envelope("echo", "echo", json!({"n": 1}), "k1");
    let mut started = envelope("mail", "send", json!({"n": 2}), "k2");
    started.payload.meta.trigger_id = Some("nightly".into());
    let ids = [plain.header.task_id, started.header.task_id];
    store.submit(new_task(plain)).await.unwrap();
    store.submit(new_task(started)).await.unwrap();
    let listed = |store: &Store, q: TaskQuery| -> Vec<_> {
        store
            .list_newest(&q, None, 10)
            .unwrap()
            .iter()
            .map(|r| r.task_id())
            .collect()
    };
    let by = |agent: Option<&str>, owner: Option<&str>, trigger: Option<&str>| TaskQuery {
        agent: agent.map(String::from),
        owner: owner.map(String::from),
        trigger: trigger.map(String::from),
        ..TaskQuery::default()
    };
    assert_eq!(listed(&store, by(Some("mail"), None, None)), [ids[1]]);
    drop(store);
    with_raw_sled(&path, |db| {
        db.open_tree("by_label").unwrap().clear().unwrap();
        set_format(db, "v5");
    });
    // What a v5 store looks like to the current check.
    {
        with_raw_sled(&path, |db| set_format(db, "v6"));
        let store = Store::open(&StoreSettings::new(&path)).unwrap();
        assert!(!store.check_indexes().unwrap().ok());
        assert!(listed(&store, by(Some("mail"), None, None)).is_empty());
    }
    with_raw_sled(&path, |db| set_format(db, "v5"));
    let store = Store::open(&StoreSettings::new(&path)).unwrap();
    assert_eq!(listed(&store, by(Some("mail"), None, None)), [ids[1]]);
    assert_eq!(listed(&store, by(Some("echo"), None, None)), [ids[0]]);
    assert_eq!(
        listed(&store, by(None, Some("test-principal"), None)),
        [ids[1], ids[0]]
    );
    assert_eq!(listed(&store, by(None, None, Some("nightly"))), [ids[1]]);
    let report = store.check_indexes().unwrap();
    assert!(report.ok(), "{report:?}");
    drop(store);
    with_raw_sled(&path, |db| {
        assert_eq!(format_of(db), "orchestrator-store-v6");
    });
}
