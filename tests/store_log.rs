//! The store's commits as log records: a store made again from the records
//! of another's commits is the same store, byte for byte, and a record
//! applied twice changes nothing.

use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::common::{envelope, new_run, new_task, sled_trees};
use orchestrator::audit::AuditEntry;
use orchestrator::event::ErrorInfo;
use orchestrator::store::{Change, Commit, CommitSink};
use orchestrator::{Store, StoreSettings, Transition};
use serde_json::json;

/// A store at `path` whose commits are collected in the returned list.
fn recorded_store(path: &Path) -> (Store, Arc<Mutex<Vec<Commit>>>) {
    let commits = Arc::new(Mutex::new(Vec::new()));
    let into = Arc::clone(&commits);
    let settings = StoreSettings {
        commits: Some(CommitSink::new(move |c| into.lock().unwrap().push(c))),
        ..StoreSettings::new(path)
    };
    (Store::open(&settings).unwrap(), commits)
}

/// A life of a store (also the replication tests'): tasks submitted side by side (so batches hold
/// several), moved through their states, one failed and retried, one
/// resubmitted with its key, an audit entry, a run, expired keys
/// collected.
pub async fn live(store: &Store) {
    let mut submits = Vec::new();
    for i in 0..24 {
        let store = store.clone();
        submits.push(tokio::spawn(async move {
            let env = envelope("echo", "echo", json!({"i": i}), &format!("k{i}"));
            let id = env.header.task_id;
            store.submit(new_task(env)).await.unwrap();
            id
        }));
    }
    let mut ids = Vec::new();
    for s in submits {
        ids.push(s.await.unwrap());
    }
    let change = |event| Change::new(event, "worker-1", "reported");
    for id in &ids[..12] {
        store.apply(*id, change(Transition::Start)).await.unwrap();
        let done = Change {
            result: Some(json!({"ok": true})),
            ..change(Transition::Complete)
        };
        store.apply(*id, done).await.unwrap();
    }
    let failed = Change {
        error: Some(ErrorInfo::new("boom", "it broke", true)),
        ..change(Transition::Fail)
    };
    store
        .apply(ids[12], change(Transition::Start))
        .await
        .unwrap();
    store.apply(ids[12], failed).await.unwrap();
    let again = envelope("echo", "echo", json!({"i": 3}), "k3");
    store.submit(new_task(again)).await.unwrap();
    store
        .audit(AuditEntry {
            actor: "alice".into(),
            kind: "test.note".into(),
            task_id: None,
            correlation_id: None,
            trace_id: None,
            detail: json!({"n": 1}),
        })
        .await
        .unwrap();
    store
        .start_run(new_run("summarize", Some("r1"), json!({"q": "x"})))
        .await
        .unwrap();
    // Keys past their retention, collected: removals like any other commit.
    let later =
        orchestrator::envelope::Timestamp::now().after(std::time::Duration::from_secs(48 * 3600));
    assert!(store.collect_expired_keys(later).unwrap() > 0);
    store.flush().await.unwrap();
}

#[tokio::test]
async fn a_store_made_again_from_its_commits_is_the_same_store() {
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = (dir.path().join("first"), dir.path().join("second"));
    let (store, commits) = recorded_store(&first);
    live(&store).await;
    let position = store.log_position().unwrap();
    drop(store);
    let commits = std::mem::take(&mut *commits.lock().unwrap());
    // One record per commit, numbered from 1 with no gap, and fewer than
    // the changes (batches hold several).
    assert_eq!(commits.len() as u64, position);
    let numbers: Vec<u64> = commits.iter().map(|c| c.position).collect();
    assert_eq!(numbers, (1..=position).collect::<Vec<_>>());

    let replica = Store::open(&StoreSettings::new(&second)).unwrap();
    for c in &commits {
        // Through its wire form, as the log carries it.
        let read = Commit::decode(&c.encode()).unwrap();
        assert_eq!(&read, c);
        assert!(
            replica.apply_commit(&read).unwrap(),
            "record {}",
            c.position
        );
    }
    assert_eq!(replica.log_position().unwrap(), position);
    // Applied again (a replica that restarts before it saved where it
    // was), nothing changes.
    for c in &commits {
        assert!(!replica.apply_commit(c).unwrap(), "record {}", c.position);
    }
    replica.flush().await.unwrap();
    drop(replica);
    let (made, remade) = (sled_trees(&first), sled_trees(&second));
    assert_eq!(made.len(), remade.len());
    for ((name, pairs), (name_again, pairs_again)) in made.iter().zip(&remade) {
        assert_eq!(name, name_again);
        assert!(
            pairs == pairs_again,
            "tree {} differs: {} pairs made, {} made again",
            String::from_utf8_lossy(name),
            pairs.len(),
            pairs_again.len()
        );
    }
    // What the replica holds reads as the first store's did.
    let replica = Store::open(&StoreSettings::new(&second)).unwrap();
    assert!(
        replica.verify_audit().unwrap().ok,
        "the audit chain verifies"
    );
}

#[tokio::test]
async fn without_a_sink_no_position_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&StoreSettings::new(dir.path().join("s"))).unwrap();
    live(&store).await;
    assert_eq!(store.log_position().unwrap(), 0);
}

#[test]
fn a_record_that_is_not_one_is_refused_where_it_breaks() {
    let commit = Commit::decode(&[1, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0]).unwrap();
    assert_eq!(commit.position, 7);
    let good = commit.encode();
    // Another version, cut short, a byte too many.
    let mut other = good.clone();
    other[0] = 2;
    assert_eq!(Commit::decode(&other).unwrap_err().at, 1);
    assert_eq!(Commit::decode(&good[..5]).unwrap_err().at, 1);
    let mut longer = good.clone();
    longer.push(0);
    let e = Commit::decode(&longer).unwrap_err();
    assert_eq!((e.at, e.what), (13, "the end of the record"));
    // One write of an unknown tree, and one whose key runs past the end.
    let mut bad_tree = good[..9].to_vec();
    bad_tree.extend_from_slice(&[0, 0, 0, 1, 42, 1]);
    assert_eq!(Commit::decode(&bad_tree).unwrap_err().what, "a known tree");
    let mut short_key = good[..9].to_vec();
    short_key.extend_from_slice(&[0, 0, 0, 1, 1, 0, 0, 0, 0, 9, b'k']);
    assert_eq!(Commit::decode(&short_key).unwrap_err().what, "the key");
}

/// Every tree of the store at `path` but the log's own keys in `meta`.
fn trees_but_position(path: &Path) -> Vec<crate::common::Dumped> {
    let mut trees = sled_trees(path);
    for (name, pairs) in &mut trees {
        if name == b"meta" {
            pairs.retain(|(k, _)| k != b"log_applied" && k != b"log_digest");
        }
    }
    trees
}

/// A snapshot that holds entries of commits after its position (it was
/// read while the writer went on), loaded and followed by every record
/// after that position, makes the store again byte for byte.
#[tokio::test]
async fn a_snapshot_and_the_records_after_it_make_the_store_again() {
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = (dir.path().join("first"), dir.path().join("second"));
    let (store, commits) = recorded_store(&first);
    live(&store).await;
    let at = store.log_position().unwrap();
    // Stated as of half way: records at..half are in it already, as when
    // they commit while the snapshot is read.
    let stated = at / 2;
    let mut bytes = Vec::new();
    let size = store.write_snapshot(stated, &mut bytes).unwrap();
    assert_eq!((size.position, size.bytes), (stated, bytes.len() as u64));
    // One stated at its own position is the store as it is.
    let mut exact = Vec::new();
    store.write_snapshot(at, &mut exact).unwrap();
    drop(store);
    let third = StoreSettings::new(dir.path().join("third"));
    Store::restore_snapshot(&third, &exact[..]).unwrap();
    assert_eq!(
        Store::open(&third).unwrap().log_position().unwrap(),
        at,
        "a loaded store is at its snapshot's position"
    );
    assert!(
        trees_but_position(&first) == trees_but_position(&third.path),
        "the store made from a snapshot differs"
    );
    let mut commits_before = std::mem::take(&mut *commits.lock().unwrap());
    let (store, commits) = recorded_store(&first);
    // More after it.
    let env = envelope("echo", "echo", json!({"after": true}), "after");
    let id = env.header.task_id;
    store.submit(new_task(env)).await.unwrap();
    let change = Change::new(Transition::Start, "worker-1", "reported");
    store.apply(id, change).await.unwrap();
    store.flush().await.unwrap();
    let end = store.log_position().unwrap();
    drop(store);

    let settings = StoreSettings::new(&second);
    // What is there is replaced.
    let old = Store::open(&settings).unwrap();
    live(&old).await;
    drop(old);
    assert_eq!(
        Store::restore_snapshot(&settings, &bytes[..]).unwrap(),
        size
    );
    let replica = Store::open(&settings).unwrap();
    assert_eq!(replica.log_position().unwrap(), stated);
    commits_before.append(&mut commits.lock().unwrap());
    for c in commits_before.iter().filter(|c| c.position > stated) {
        assert!(replica.apply_commit(c).unwrap(), "record {}", c.position);
    }
    assert_eq!(replica.log_position().unwrap(), end);
    replica.flush().await.unwrap();
    drop(replica);
    assert!(
        trees_but_position(&first) == trees_but_position(&second),
        "the store made from the snapshot and the records differs"
    );
    assert_eq!(sled_trees(&first), sled_trees(&second));
    let replica = Store::open(&settings).unwrap();
    assert!(replica.verify_audit().unwrap().ok);
    assert!(replica.check_indexes().unwrap().ok());
}

/// A record after a gap is refused (the log was trimmed past the store),
/// not applied as if the records between did not matter.
#[tokio::test]
async fn a_record_after_a_gap_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (store, commits) = recorded_store(&dir.path().join("first"));
    live(&store).await;
    drop(store);
    let commits = std::mem::take(&mut *commits.lock().unwrap());
    let replica = Store::open(&StoreSettings::new(dir.path().join("second"))).unwrap();
    replica.apply_commit(&commits[0]).unwrap();
    let err = replica.apply_commit(&commits[2]).unwrap_err();
    assert!(
        matches!(
            err,
            orchestrator::StoreError::Behind {
                applied: 1,
                position: 3
            }
        ),
        "{err}"
    );
    assert_eq!(replica.log_position().unwrap(), 1);
}

/// Records applied many to a transaction make the same store as one by
/// one; a batch that overlaps what is applied applies only the rest; a
/// batch with a gap applies nothing; a batch meeting a store that wrote
/// another record at its position is refused as diverged.
#[tokio::test]
async fn records_applied_together_make_the_same_store() {
    let dir = tempfile::tempdir().unwrap();
    let (store, commits) = recorded_store(&dir.path().join("first"));
    live(&store).await;
    store.flush().await.unwrap();
    drop(store);
    let commits = std::mem::take(&mut *commits.lock().unwrap());
    let n = commits.len();
    assert!(n > 4, "{n} commits");
    let replica = Store::open(&StoreSettings::new(dir.path().join("second"))).unwrap();
    // A gap inside the batch: nothing of it is applied.
    let gapped: Vec<_> = commits[..3].iter().chain(&commits[4..]).cloned().collect();
    let err = replica.apply_commits(&gapped).unwrap_err();
    assert!(
        matches!(
            err,
            orchestrator::StoreError::Behind {
                applied: 3,
                position: 5
            }
        ),
        "{err}"
    );
    assert_eq!(replica.log_position().unwrap(), 0);
    assert_eq!(replica.apply_commits(&commits[..3]).unwrap(), 3);
    // Overlapping what it holds: only the rest.
    assert_eq!(replica.apply_commits(&commits[1..]).unwrap(), n - 3);
    assert_eq!(replica.apply_commits(&commits).unwrap(), 0);
    assert_eq!(replica.log_position().unwrap(), n as u64);
    replica.flush().await.unwrap();
    drop(replica);
    assert_eq!(
        sled_trees(&dir.path().join("first")),
        sled_trees(&dir.path().join("second"))
    );
    // A store that holds another record at its position has left the log.
    let (other, others) = recorded_store(&dir.path().join("other"));
    let env = envelope("echo", "echo", json!({"other": true}), "other");
    other.submit(new_task(env)).await.unwrap();
    drop(other);
    let left = Store::open(&StoreSettings::new(dir.path().join("left"))).unwrap();
    assert!(left.apply_commit(&others.lock().unwrap()[0]).unwrap());
    let err = left.apply_commits(&commits[..2]).unwrap_err();
    assert!(
        matches!(err, orchestrator::StoreError::Diverged { position: 1 }),
        "{err}"
    );
    assert_eq!(left.log_position().unwrap(), 1);
}

/// A snapshot cut short, changed, followed by more or of another kind is
/// refused, and the store it was to replace stays as it was.
#[tokio::test]
async fn a_damaged_snapshot_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&StoreSettings::new(dir.path().join("first"))).unwrap();
    live(&store).await;
    let mut bytes = Vec::new();
    store.write_snapshot(3, &mut bytes).unwrap();
    let settings = StoreSettings::new(dir.path().join("second"));
    let old = Store::open(&settings).unwrap();
    let env = envelope("echo", "echo", json!({}), "kept");
    old.submit(new_task(env)).await.unwrap();
    drop(old);
    let before = sled_trees(&settings.path);
    let mut flipped = bytes.clone();
    flipped[40] ^= 1;
    let mut longer = bytes.clone();
    longer.push(0);
    for (what, damaged) in [
        ("cut short", &bytes[..bytes.len() - 1]),
        ("a byte changed", &flipped[..]),
        ("a byte more", &longer[..]),
        ("not a snapshot", &b"ORCHSNAQ\x01"[..]),
    ] {
        let err = Store::restore_snapshot(&settings, damaged).unwrap_err();
        assert!(
            matches!(err, orchestrator::StoreError::Snapshot(_)),
            "{what}: {err}"
        );
    }
    assert_eq!(sled_trees(&settings.path), before);
}
