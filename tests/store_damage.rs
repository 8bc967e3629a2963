//! What the store does with damaged, foreign or busy files: a clear error
//! naming the path or the record, never a panic, never a silent loss.

mod common;

use std::path::{Path, PathBuf};

use common::{envelope, new_task, with_raw_sled};
use orchestrator::{Store, StoreConfig, StoreError, TaskId};
use serde_json::json;

/// A store at `dir/s` holding `n` acknowledged tasks; returns its path and ids.
async fn filled_store(dir: &Path, n: usize) -> (PathBuf, Vec<TaskId>) {
    let path = dir.join("s");
    let store = Store::open(&StoreConfig::new(&path)).unwrap();
    let mut ids = Vec::new();
    for i in 0..n {
        let env = envelope(
            "echo",
            "echo",
            json!({"i": i, "pad": "x".repeat(2000)}),
            &format!("k{i}"),
        );
        ids.push(env.header.task_id);
        store.submit(new_task(env)).await.unwrap();
    }
    (path, ids)
}

fn open_err(path: &Path) -> StoreError {
    match Store::open(&StoreConfig::new(path)) {
        Ok(_) => panic!("a damaged store at {} opened", path.display()),
        Err(e) => e,
    }
}

fn assert_names_path(err: &StoreError, path: &Path) {
    let text = err.to_string();
    assert!(text.contains(&path.display().to_string()), "{text}");
}

/// A truncated data file is refused: sled alone would silently open the
/// readable prefix and lose acknowledged tasks.
#[tokio::test]
async fn a_truncated_store_is_refused_naming_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = filled_store(dir.path(), 100).await;
    let db_file = path.join("db");
    let len = std::fs::metadata(&db_file).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&db_file)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let err = open_err(&path);
    assert_eq!(err.code(), "store_unavailable");
    assert_names_path(&err, &path);
    assert!(err.to_string().contains("corrupt or truncated"), "{err}");
}

/// Garbage in the middle of the data file is refused.
#[tokio::test]
async fn a_corrupted_store_is_refused_naming_its_path() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = filled_store(dir.path(), 100).await;
    let db_file = path.join("db");
    let len = std::fs::metadata(&db_file).unwrap().len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&db_file)
        .unwrap();
    file.write_all_at(&[0xFF; 64], len / 3).unwrap();
    let err = open_err(&path);
    assert_names_path(&err, &path);
}

/// A data file replaced by random bytes is refused, not reset to empty.
#[tokio::test]
async fn a_data_file_of_garbage_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = filled_store(dir.path(), 10).await;
    let db_file = path.join("db");
    let len = std::fs::metadata(&db_file).unwrap().len() as usize;
    let garbage: Vec<u8> = (0..len).map(|i| (i * 7919 % 251) as u8).collect();
    std::fs::write(&db_file, garbage).unwrap();
    let err = open_err(&path);
    assert_names_path(&err, &path);
}

/// A store whose commit mark was removed is refused, and so is a directory
/// holding some other sled database.
#[tokio::test]
async fn foreign_or_incomplete_stores_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = filled_store(dir.path(), 3).await;
    std::fs::remove_file(path.join("commit.mark")).unwrap();
    let err = open_err(&path);
    assert!(matches!(err, StoreError::NotAStore { .. }), "{err:?}");
    assert_names_path(&err, &path);

    let other = dir.path().join("other");
    with_raw_sled(&other, |db| {
        db.insert("something", "else").unwrap();
    });
    let err = open_err(&other);
    assert!(matches!(err, StoreError::NotAStore { .. }), "{err:?}");
}

/// A store held open elsewhere is refused with a clear error (after a
/// short wait for the holder to let go).
#[tokio::test]
async fn a_store_in_use_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let _held = Store::open(&StoreConfig::new(&path)).unwrap();
    let err = open_err(&path);
    assert!(matches!(err, StoreError::Locked { .. }), "{err:?}");
    assert_names_path(&err, &path);
    assert!(err.to_string().contains("in use"), "{err}");
}

/// A task record that fails to decode is reported with its tree and key.
#[tokio::test]
async fn an_undecodable_record_is_reported_with_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let (path, ids) = filled_store(dir.path(), 3).await;
    with_raw_sled(&path, |db| {
        let tasks = db.open_tree("tasks").unwrap();
        tasks
            .insert(ids[1].as_bytes(), &b"{\"envelope\": 12"[..])
            .unwrap();
    });
    let store = Store::open(&StoreConfig::new(&path)).unwrap();
    let err = store.get(ids[1]).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, StoreError::Decode { tree: "tasks", .. }),
        "{err:?}"
    );
    assert!(text.contains(&ids[1].to_string()), "{text}");
    assert!(store.get(ids[0]).unwrap().is_some());
    assert!(store.check_indexes().is_err());
}

/// An altered audit record is found by verify, at its sequence number.
#[tokio::test]
async fn verify_finds_an_altered_audit_record() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = filled_store(dir.path(), 5).await;
    with_raw_sled(&path, |db| {
        let audit = db.open_tree("audit").unwrap();
        let key = 3u64.to_be_bytes();
        let value = audit.get(key).unwrap().unwrap().to_vec();
        let text = String::from_utf8_lossy(&value[32..]).replace("test-principal", "someone-else");
        let mut altered = value[..32].to_vec();
        altered.extend_from_slice(text.as_bytes());
        audit.insert(key, altered).unwrap();
    });
    let store = Store::open(&StoreConfig::new(&path)).unwrap();
    let report = store.verify_audit().unwrap();
    assert!(!report.ok);
    assert_eq!(report.first_bad_seq, Some(3));
    assert_eq!(report.records, 2);
    assert!(report.problem.unwrap().contains("altered"));
}

/// A removed audit record is found by verify as missing.
#[tokio::test]
async fn verify_finds_a_missing_audit_record() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = filled_store(dir.path(), 5).await;
    with_raw_sled(&path, |db| {
        db.open_tree("audit")
            .unwrap()
            .remove(2u64.to_be_bytes())
            .unwrap();
    });
    let store = Store::open(&StoreConfig::new(&path)).unwrap();
    let report = store.verify_audit().unwrap();
    assert_eq!((report.ok, report.first_bad_seq), (false, Some(2)));
    assert!(report.problem.unwrap().contains("missing"));
}

/// Removing the newest audit records is noticed too: the acknowledged head
/// is gone, so the store refuses to open.
#[tokio::test]
async fn a_removed_tail_of_the_audit_log_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = filled_store(dir.path(), 5).await;
    with_raw_sled(&path, |db| {
        db.open_tree("audit")
            .unwrap()
            .remove(5u64.to_be_bytes())
            .unwrap();
    });
    let err = open_err(&path);
    assert!(err.to_string().contains("audit record 5"), "{err}");
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
        let store = Store::open(&StoreConfig::new(&path)).unwrap();
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
        db.open_tree("meta")
            .unwrap()
            .insert("format", &b"orchestrator-store-v1"[..])
            .unwrap();
    });
    let store = Store::open(&StoreConfig::new(&path)).unwrap();
    for record in &before {
        let after = store.get(record.task_id()).unwrap().unwrap();
        assert_eq!(&after, record);
    }
    let filter = orchestrator::store::AuditFilter {
        task_id: Some(ids[1]),
        correlation_id: None,
    };
    let records = store.audit_list(&filter, 0, 10).unwrap();
    assert_eq!(records.len(), 1, "{records:?}");
    assert!(store.check_indexes().unwrap().ok());
    drop(store);
    with_raw_sled(&path, |db| {
        let format = db
            .open_tree("meta")
            .unwrap()
            .get("format")
            .unwrap()
            .unwrap();
        assert_eq!(format.as_ref(), b"orchestrator-store-v4");
    });
}

/// A store of format v3 (runs without their indexes by trigger and
/// state, run keys without an expiry) is migrated on open: the runs are
/// listed by trigger and by state again, the index check agrees, and the
/// keys are held for the retention from the migration.
#[tokio::test]
async fn a_v3_store_gets_its_run_indexes_on_open() {
    use orchestrator::store::RunStarted;
    use orchestrator::workflow::{RunId, RunState};

    let dir = tempfile::tempdir().unwrap();
    let (path, _) = filled_store(dir.path(), 1).await;
    let store = Store::open(&StoreConfig::new(&path)).unwrap();
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
        db.open_tree("meta")
            .unwrap()
            .insert("format", &b"orchestrator-store-v3"[..])
            .unwrap();
    });
    let store = Store::open(&StoreConfig::new(&path)).unwrap();
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

/// `store verify` finds an audit record missing from the by-task index.
#[tokio::test]
async fn verify_finds_a_missing_audit_index_entry() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = filled_store(dir.path(), 3).await;
    with_raw_sled(&path, |db| {
        let index = db.open_tree("audit_by_task").unwrap();
        let (key, _) = index.first().unwrap().unwrap();
        index.remove(key).unwrap();
    });
    let store = Store::open(&StoreConfig::new(&path)).unwrap();
    let report = store.check_indexes().unwrap();
    assert!(!report.ok());
    assert!(
        report.problems[0].contains("missing from audit_by_task"),
        "{report:?}"
    );
}
