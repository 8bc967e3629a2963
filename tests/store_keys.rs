//! What a task keeps in the store: sled holds one page-table entry in
//! memory per page of every tree, so keys per task are memory per task
//! (`docs/store.md`).

use crate::common;

use common::{envelope, list_correlated, new_task, submit_correlated, temp_store, with_raw_sled};
use orchestrator::envelope::CorrelationId;
use orchestrator::store::Change;
use orchestrator::{Store, StoreSettings, Transition};
use serde_json::json;

/// Keys in every tree but `meta`, by tree, of the store at `path`.
fn keys_by_tree(path: &std::path::Path) -> Vec<(String, usize)> {
    let mut counts = Vec::new();
    with_raw_sled(path, |db| {
        for name in db.tree_names() {
            let name = String::from_utf8_lossy(&name).into_owned();
            if name == "meta" || name == "__sled__default" {
                continue;
            }
            let len = db.open_tree(&name).unwrap().len();
            if len > 0 {
                counts.push((name, len));
            }
        }
    });
    counts.sort();
    counts
}

/// A task submitted alone (no idempotency key, its own id as correlation
/// id) and completed keeps eight keys: its status, its envelope, its state
/// index entry, its agent's and its owner's `by_label` entries, two audit
/// records and one audit index entry listing both.
#[tokio::test]
async fn a_lone_completed_task_keeps_eight_keys() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let store = Store::open(&StoreSettings::new(&path)).unwrap();
    let mut lone = envelope("echo", "echo", json!({}), "unused");
    lone.control.idempotency_key = lone.header.task_id.into();
    let id = lone.header.task_id;
    assert_eq!(lone.header.correlation_id, CorrelationId::from(id));
    store.submit(new_task(lone)).await.unwrap();
    // A handler done before the `working` threshold reports only its result.
    let change = Change::new(Transition::Complete, "worker-1", "reported complete");
    store.apply(id, change).await.unwrap();
    assert!(store.check_indexes().unwrap().ok());
    drop(store);
    let expected = [
        ("audit", 2),
        ("audit_by_task", 1),
        ("by_label", 2),
        ("by_state", 1),
        ("envelopes", 1),
        ("tasks", 1),
    ];
    let expected: Vec<_> = expected.iter().map(|(t, n)| (t.to_string(), *n)).collect();
    assert_eq!(keys_by_tree(&path), expected);
}

/// A task whose correlation id is its own has no `by_correlation` entry,
/// yet listing that id finds it, in creation order among the tasks that
/// carry its id, page by page.
#[tokio::test]
async fn a_correlation_listing_includes_the_task_it_names() {
    let (_dir, store) = temp_store();
    let root = envelope("echo", "echo", json!({"n": 0}), "k0");
    let correlation = root.header.correlation_id.clone();
    let mut ids = vec![root.header.task_id];
    store.submit(new_task(root)).await.unwrap();
    ids.extend(submit_correlated(&store, &correlation, 1..4).await);
    store
        .submit(new_task(envelope("echo", "echo", json!({}), "other")))
        .await
        .unwrap();
    assert_eq!(list_correlated(&store, &correlation, 10), ids);
    assert_eq!(list_correlated(&store, &correlation, 2), ids);
    // A correlation id naming a task that does not carry it lists only
    // the tasks that do.
    let other: CorrelationId = ids[1].to_string().parse().unwrap();
    assert!(
        store
            .list_by_correlation(&other, None, 10)
            .unwrap()
            .is_empty()
    );
}
