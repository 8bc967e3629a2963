//! The store's commits through a JetStream log, against a real
//! nats-server: every change reported is in the log, and a leader whose
//! append is refused (another process appended since) stops writing and
//! says so.

use crate::common::nats::NatsServer;
use crate::common::{envelope, new_task, sled_trees};
use crate::store_log::live;
use orchestrator::bus::{Bus, BusSettings};
use orchestrator::replication::{Appender, ReplicationError, entries_after};
use orchestrator::{Store, StoreError, StoreSettings};
use serde_json::json;

async fn bus(nats: &NatsServer) -> Bus {
    Bus::connect_now(&nats.url(), BusSettings::default())
        .await
        .unwrap()
}

/// A store at `path` whose commits go to partition 0 of the log.
async fn leading(bus: &Bus, path: &std::path::Path) -> (Store, Appender) {
    let (appender, sink) = Appender::start(bus, 0, 0).await.unwrap();
    let settings = StoreSettings {
        commits: Some(sink),
        ..StoreSettings::new(path)
    };
    (Store::open(&settings).unwrap(), appender)
}

#[tokio::test]
async fn every_change_reported_is_in_the_log() {
    let nats = NatsServer::start();
    let bus = bus(&nats).await;
    let dir = tempfile::tempdir().unwrap();
    let (leader, replica) = (dir.path().join("leader"), dir.path().join("replica"));
    let (store, appender) = leading(&bus, &leader).await;
    live(&store).await;
    let position = store.log_position().unwrap();
    assert!(position > 0);
    // Reported, so the log holds it: nothing waits for the appender now.
    assert_eq!(appender.acked().position, position);
    drop(store);
    drop(appender);
    let entries = entries_after(&bus, 0, 0).await.unwrap();
    // Fewer messages than commits when appends went together.
    let commits: Vec<_> = entries.iter().flat_map(|e| e.commits.clone()).collect();
    assert_eq!(commits.len() as u64, position);
    assert!(entries.len() <= commits.len());
    let remade = Store::open(&StoreSettings::new(&replica)).unwrap();
    for c in &commits {
        assert!(remade.apply_commit(c).unwrap());
    }
    remade.flush().await.unwrap();
    drop(remade);
    assert!(
        sled_trees(&leader) == sled_trees(&replica),
        "the log makes the store again"
    );
    // A second leader must start where the log ends.
    let other = Store::open(&StoreSettings::new(dir.path().join("empty"))).unwrap();
    let refused = Appender::start(&bus, 0, other.log_position().unwrap()).await;
    assert!(matches!(
        refused,
        Err(ReplicationError::NotAtEnd { store: 0, log }) if log == position
    ));
}

#[tokio::test]
async fn a_leader_another_appended_after_stops_and_says_so() {
    let nats = NatsServer::start();
    let bus = bus(&nats).await;
    let dir = tempfile::tempdir().unwrap();
    let (store, appender) = leading(&bus, &dir.path().join("s")).await;
    let first = envelope("echo", "echo", json!({"n": 1}), "k1");
    store.submit(new_task(first)).await.unwrap();
    let before = entries_after(&bus, 0, 0).await.unwrap();
    // Another process appends to the same partition, as a successor would.
    bus.jetstream()
        .publish(
            bus.names().store_subject(0),
            orchestrator::replication::encode_frame(&[]).into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    // The next change is committed here but refused by the log: its
    // caller is told to go elsewhere, and so is every later one.
    let second = envelope("echo", "echo", json!({"n": 2}), "k2");
    let refused = store.submit(new_task(second)).await.unwrap_err();
    assert!(matches!(refused, StoreError::NotLeader(_)), "{refused:?}");
    assert_eq!(refused.code(), "not_leader");
    let third = envelope("echo", "echo", json!({"n": 3}), "k3");
    let later = store.submit(new_task(third)).await.unwrap_err();
    assert!(matches!(later, StoreError::NotLeader(_)), "{later:?}");
    assert!(appender.acked().refused.is_some());
    // Nothing it committed after the successor's append is in the log.
    let after = entries_after(&bus, 0, 0).await.unwrap();
    assert_eq!(after.len(), before.len() + 1);
    assert!(
        after.last().unwrap().commits.is_empty(),
        "the successor's append is the last"
    );
}

#[tokio::test]
async fn a_change_is_not_reported_while_the_log_cannot_take_it() {
    let mut nats = NatsServer::start();
    let bus = bus(&nats).await;
    let dir = tempfile::tempdir().unwrap();
    let (store, appender) = leading(&bus, &dir.path().join("s")).await;
    nats.kill();
    let pending = tokio::spawn({
        let store = store.clone();
        async move {
            let env = envelope("echo", "echo", json!({"n": 1}), "k1");
            store.submit(new_task(env)).await
        }
    });
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;
    assert!(!pending.is_finished(), "reported while the log was down");
    assert_eq!(appender.acked().position, 0);
    nats.restart();
    let submitted = tokio::time::timeout(std::time::Duration::from_secs(30), pending)
        .await
        .expect("reported once the log is back")
        .unwrap();
    assert!(submitted.is_ok(), "{submitted:?}");
    let position = store.log_position().unwrap();
    let logged: usize = entries_after(&bus, 0, 0)
        .await
        .unwrap()
        .iter()
        .map(|e| e.commits.len())
        .sum();
    assert_eq!(logged as u64, position, "appended once, though sent again");
}
