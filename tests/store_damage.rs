//! What the store does with damaged, foreign or busy files: a clear error
//! naming the path or the record, never a panic, never a silent loss.

use crate::common;

use std::path::Path;

use common::{filled_store, with_raw_sled};
use orchestrator::{Store, StoreError, StoreSettings};

fn open_err(path: &Path) -> StoreError {
    match Store::open(&StoreSettings::new(path)) {
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
    let _held = Store::open(&StoreSettings::new(&path)).unwrap();
    let err = open_err(&path);
    assert!(matches!(err, StoreError::Locked { .. }), "{err:?}");
    assert_names_path(&err, &path);
    assert!(err.to_string().contains("in use"), "{err}");
}

/// A task record that fails to decode is reported with its tree and key,
/// skipped by listings, and once quarantined reads as such, with the
/// indexes consistent again.
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
    let store = Store::open(&StoreSettings::new(&path)).unwrap();
    let err = store.get(ids[1]).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, StoreError::Decode { tree: "tasks", .. }),
        "{err:?}"
    );
    assert!(text.contains(&ids[1].to_string()), "{text}");
    assert!(store.get(ids[0]).unwrap().is_some());
    let report = store.check_indexes().unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains(&ids[1].to_string())),
        "{report:?}"
    );

    let listed: Vec<_> = store
        .list(None, 10)
        .unwrap()
        .iter()
        .map(|r| r.task_id())
        .collect();
    assert_eq!(listed, vec![ids[0], ids[2]]);
    let noted: Vec<_> = store
        .take_unreadable()
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(noted, vec![ids[1]]);
    let set_aside = store.quarantine(ids[1], "test").await.unwrap().unwrap();
    assert_eq!(set_aside.trees, vec!["tasks", "envelopes"]);
    assert!(store.quarantine(ids[1], "again").await.unwrap().is_none());
    let err = store.get(ids[1]).unwrap_err();
    assert!(matches!(err, StoreError::Quarantined { .. }), "{err:?}");
    assert!(store.check_indexes().unwrap().ok());
    assert!(store.verify_audit().unwrap().ok);
    let (listed, raw) = &store.quarantined_tasks().unwrap()[0];
    assert_eq!(listed.task_id, ids[1]);
    assert_eq!(raw["tasks"], b"{\"envelope\": 12");
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
    let store = Store::open(&StoreSettings::new(&path)).unwrap();
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
    let store = Store::open(&StoreSettings::new(&path)).unwrap();
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
    let store = Store::open(&StoreSettings::new(&path)).unwrap();
    let report = store.check_indexes().unwrap();
    assert!(!report.ok());
    assert!(
        report.problems[0].contains("missing from audit_by_task"),
        "{report:?}"
    );
}
