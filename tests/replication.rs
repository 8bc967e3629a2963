//! The store's commits through a JetStream log, against a real
//! nats-server: every change reported is in the log, and a leader whose
//! append is refused (another process appended since) stops writing and
//! says so.

use crate::common::nats::NatsServer;
use crate::common::{envelope, new_task, sled_trees};
use crate::store_log::live;
use orchestrator::bus::{Bus, BusSettings};
use orchestrator::replication::{Appender, ReplicationError, catch_up, entries_after};
use orchestrator::{Store, StoreError, StoreSettings};
use serde_json::json;

async fn bus(nats: &NatsServer) -> Bus {
    Bus::connect_now(&nats.url(), BusSettings::default())
        .await
        .unwrap()
}

/// A store at `path` whose commits go to partition 0 of the log.
async fn leading(bus: &Bus, path: &std::path::Path) -> (Store, Appender) {
    leading_in(bus, 0, path).await
}

/// A store at `path` whose commits go to partition `partition`.
async fn leading_in(bus: &Bus, partition: u32, path: &std::path::Path) -> (Store, Appender) {
    let (appender, sink) = Appender::start(bus, partition, 0).await.unwrap();
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
    // The seal first, then fewer messages than commits when appends
    // went together.
    assert!(entries[0].commits.is_empty() && entries[0].position == 0);
    let commits: Vec<_> = entries.iter().flat_map(|e| e.commits.clone()).collect();
    assert_eq!(commits.len() as u64, position);
    assert!(entries.len() <= commits.len() + 1);
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
            orchestrator::replication::encode_frame(1, &[]).into(),
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

#[tokio::test]
async fn a_standby_that_followed_the_log_takes_over_and_fences_the_leader() {
    let nats = NatsServer::start();
    let bus = bus(&nats).await;
    let dir = tempfile::tempdir().unwrap();
    let (a_path, b_path) = (dir.path().join("a"), dir.path().join("b"));
    let (a, _a_log) = leading(&bus, &a_path).await;
    live(&a).await;
    // The standby follows: its store is the leader's, commit for commit.
    let standby = Store::open(&StoreSettings::new(&b_path)).unwrap();
    let seq = catch_up(&bus, 0, &standby, 0).await.unwrap().seq;
    assert_eq!(standby.log_position().unwrap(), a.log_position().unwrap());
    // More on the leader; the standby catches up from where it was.
    let more = envelope("echo", "echo", json!({"n": "more"}), "more");
    a.submit(new_task(more)).await.unwrap();
    catch_up(&bus, 0, &standby, seq).await.unwrap();
    let position = standby.log_position().unwrap();
    assert_eq!(position, a.log_position().unwrap());
    drop(standby);
    // It takes over: its first append seals the log.
    let (b_log, sink) = Appender::start(&bus, 0, position).await.unwrap();
    let b = Store::open(&StoreSettings {
        commits: Some(sink),
        ..StoreSettings::new(&b_path)
    })
    .unwrap();
    // The old leader, still running, is refused from then on, before the
    // new one wrote anything.
    let on_a = envelope("echo", "echo", json!({"n": "a"}), "on-a");
    let refused = a.submit(new_task(on_a)).await.unwrap_err();
    assert!(matches!(refused, StoreError::NotLeader(_)), "{refused:?}");
    let on_b = envelope("echo", "echo", json!({"n": "b"}), "on-b");
    b.submit(new_task(on_b)).await.unwrap();
    // The old leader's store holds, at the new leader's next position, a
    // commit the log refused: following the log, it finds it has left it.
    let diverged = catch_up(&bus, 0, &a, 0).await.unwrap_err();
    assert!(
        matches!(
            diverged,
            ReplicationError::Apply {
                source: StoreError::Diverged { .. },
                ..
            }
        ),
        "{diverged:?}"
    );
    // The resubmitted key from before the takeover names the same task on
    // the new leader.
    let again = envelope("echo", "echo", json!({"n": "more"}), "more");
    assert!(matches!(
        b.submit(new_task(again)).await.unwrap(),
        orchestrator::task::Submitted::Existing(_)
    ));
    assert!(b.verify_audit().unwrap().ok);
    // The log alone makes the new leader's store.
    b.flush().await.unwrap();
    drop(b);
    drop(b_log);
    let c_path = dir.path().join("c");
    let c = Store::open(&StoreSettings::new(&c_path)).unwrap();
    catch_up(&bus, 0, &c, 0).await.unwrap();
    c.flush().await.unwrap();
    drop(c);
    assert!(sled_trees(&b_path) == sled_trees(&c_path));
}

#[tokio::test]
async fn one_process_holds_a_partitions_lease_until_it_lapses() {
    use orchestrator::replication::{Holder, Leases, Taken};
    let nats = NatsServer::start();
    let bus = bus(&nats).await;
    let ttl = std::time::Duration::from_secs(1);
    let leases = Leases::open(&bus, ttl).await.unwrap();
    let holder = |name: &str| Holder {
        holder: name.into(),
        address: Some(format!("http://{name}:8080")),
        since: orchestrator::envelope::Timestamp::now(),
        node: Some(format!("dir-{name}")),
    };
    let Taken::Held(mut a) = leases.take(0, &holder("a")).await.unwrap() else {
        panic!("the first taker holds the lease");
    };
    match leases.take(0, &holder("b")).await.unwrap() {
        Taken::Elsewhere(Some(h)) => assert_eq!(h.holder, "a"),
        _ => panic!("a second taker is told who holds it"),
    }
    // Another partition's lease is another lease.
    assert!(matches!(
        leases.take(1, &holder("b")).await.unwrap(),
        Taken::Held(_)
    ));
    // Renewed, it stays; left, it lapses and another takes it, at a later
    // epoch; the first cannot renew it then.
    for _ in 0..3 {
        tokio::time::sleep(ttl / 3).await;
        assert!(a.renew().await.unwrap());
    }
    assert!(matches!(
        leases.take(0, &holder("b")).await.unwrap(),
        Taken::Elsewhere(_)
    ));
    let mut b = None;
    for _ in 0..50 {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        if let Taken::Held(lease) = leases.take(0, &holder("b")).await.unwrap() {
            b = Some(lease);
            break;
        }
    }
    let b = b.expect("the lapsed lease is taken by another");
    assert!(b.epoch() > a.epoch());
    assert!(
        !a.renew().await.unwrap(),
        "a lease another took is not renewed"
    );
    // Given up, it is taken at once.
    b.release().await.unwrap();
    let Taken::Held(mut c) = leases.take(0, &holder("c")).await.unwrap() else {
        panic!("a lease given up is taken at once");
    };
    // A process started again on the holder's data directory takes it at
    // once (the one that held it is gone), at a later epoch; the old
    // holder cannot renew it then.
    let again = Holder {
        holder: "c, started again".into(),
        ..holder("c")
    };
    let Taken::Held(d) = leases.take(0, &again).await.unwrap() else {
        panic!("the lease of this data directory is taken over");
    };
    assert!(d.epoch() > c.epoch());
    assert!(!c.renew().await.unwrap());
}

/// The leader's snapshot trims the log below it; a store with nothing
/// (a lost disk) cannot follow the trimmed log from its start, and is
/// made from the newest snapshot and the log after it, byte for byte the
/// leader's.
#[tokio::test]
async fn a_store_joins_a_trimmed_log_from_a_snapshot() {
    use orchestrator::replication::{restore, restore_or_newer, snapshots, take};
    let nats = NatsServer::start();
    let bus = bus(&nats).await;
    let dir = tempfile::tempdir().unwrap();
    let (leader, replica) = (dir.path().join("leader"), dir.path().join("replica"));
    let (store, appender) = leading(&bus, &leader).await;
    live(&store).await;
    let first = take(&bus, 0, &store, dir.path(), 1).await.unwrap().unwrap();
    assert_eq!(first.position, store.log_position().unwrap());
    // Nothing committed since: no second snapshot of the same position.
    assert!(
        take(&bus, 0, &store, dir.path(), 1)
            .await
            .unwrap()
            .is_none()
    );
    // The log starts at the snapshot's message now.
    let kept = entries_after(&bus, 0, 0).await.unwrap();
    assert_eq!(kept[0].seq, first.after_seq, "the log was not trimmed");
    for n in 0..3 {
        let env = envelope("echo", "echo", json!({"later": n}), &format!("later{n}"));
        store.submit(new_task(env)).await.unwrap();
    }
    let second = take(&bus, 0, &store, dir.path(), 1).await.unwrap().unwrap();
    assert!(second.position > first.position);
    assert_eq!(snapshots(&bus, 0).await.unwrap(), vec![second.clone()]);
    let env = envelope("echo", "echo", json!({"last": true}), "last");
    store.submit(new_task(env)).await.unwrap();
    drop(store);
    drop(appender);

    let settings = StoreSettings::new(&replica);
    let empty = Store::open(&settings).unwrap();
    let behind = catch_up(&bus, 0, &empty, 0).await.unwrap_err();
    assert!(
        matches!(
            behind,
            ReplicationError::Apply {
                source: StoreError::Behind { applied: 0, .. },
                ..
            }
        ),
        "{behind}"
    );
    drop(empty);
    // The first snapshot, listed before the second replaced it, is gone:
    // a joining node that picked it loads the newest instead.
    let gone = restore(&bus, &first, &settings).await.unwrap_err();
    assert!(matches!(gone, ReplicationError::Snapshots { .. }), "{gone}");
    let newest = restore_or_newer(&bus, 0, &first, &settings).await.unwrap();
    assert_eq!(newest, second);
    let joined = Store::open(&settings).unwrap();
    assert_eq!(joined.log_position().unwrap(), second.position);
    catch_up(&bus, 0, &joined, newest.after_seq).await.unwrap();
    joined.flush().await.unwrap();
    drop(joined);
    assert!(
        sled_trees(&leader) == sled_trees(&replica),
        "the snapshot and the log after it make the leader's store"
    );
}

/// `store verify --against-log` on a stopped node's data directory: the
/// store is the log's view (from the snapshot and the records after it);
/// one entry changed behind the log's back is found and named.
#[tokio::test]
async fn store_verify_checks_a_store_against_the_log() {
    use orchestrator::replication::take;
    let nats = NatsServer::start();
    let bus = bus(&nats).await;
    let data = tempfile::tempdir().unwrap();
    let path = data.path().join("store");
    let (store, appender) = leading(&bus, &path).await;
    live(&store).await;
    take(&bus, 0, &store, data.path(), 2)
        .await
        .unwrap()
        .unwrap();
    let env = envelope("echo", "echo", json!({"after": true}), "after");
    store.submit(new_task(env)).await.unwrap();
    drop(store);
    drop(appender);
    let verify = || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_orchestrator"))
            .args(["--json", "store", "verify", "--against-log", "--data-dir"])
            .arg(data.path())
            .args(["--nats-url", &nats.url()])
            .output()
            .unwrap();
        let said: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        (out.status.code(), said)
    };
    let (code, said) = verify();
    assert_eq!(code, Some(0), "{said:#}");
    assert_eq!(said["log"]["differing"], 0, "{said:#}");
    assert!(said["log"]["snapshot"].is_string(), "{said:#}");
    assert!(said["log"]["records"].as_u64().unwrap() >= 1, "{said:#}");
    // One task's record changed where the log never saw it.
    {
        let db = sled::open(&path).unwrap();
        let tasks = db.open_tree("tasks").unwrap();
        let (key, value) = tasks.first().unwrap().unwrap();
        let mut changed = value.to_vec();
        changed.push(b' ');
        tasks.insert(key, changed).unwrap();
        db.flush().unwrap();
    }
    let (code, said) = verify();
    assert_eq!(code, Some(1), "{said:#}");
    assert_eq!(said["ok"], false);
    assert_eq!(said["log"]["differing"], 1, "{said:#}");
    assert!(
        said["log"]["differences"][0]
            .as_str()
            .unwrap()
            .starts_with("`tasks`"),
        "{said:#}"
    );
}

/// Two partitions led by one process: each store's commits go to its own
/// subject, numbered from 1; a successor fencing one leaves the other
/// writing; a snapshot trims only its own partition's log; each log makes
/// its own store again.
#[tokio::test]
async fn two_partitions_on_one_leader_stay_independent() {
    use orchestrator::replication::take;
    let nats = NatsServer::start();
    let bus = bus(&nats).await;
    let dir = tempfile::tempdir().unwrap();
    let path0 = dir.path().join("p0");
    let (zero, _appender0) = leading_in(&bus, 0, &path0).await;
    let (one, appender1) = leading_in(&bus, 1, &dir.path().join("p1")).await;
    tokio::join!(live(&zero), live(&one));
    for (partition, store) in [(0, &zero), (1, &one)] {
        let commits: Vec<u64> = entries_after(&bus, partition, 0)
            .await
            .unwrap()
            .iter()
            .flat_map(|e| e.commits.iter().map(|c| c.position))
            .collect();
        let position = store.log_position().unwrap();
        assert_eq!(
            commits,
            (1..=position).collect::<Vec<_>>(),
            "partition {partition}"
        );
    }
    // Partition 0's snapshot trims partition 0's log only.
    let first_of_one = entries_after(&bus, 1, 0).await.unwrap()[0].seq;
    take(&bus, 0, &zero, dir.path(), 1).await.unwrap().unwrap();
    assert!(entries_after(&bus, 0, 0).await.unwrap()[0].seq > 1);
    assert_eq!(
        entries_after(&bus, 1, 0).await.unwrap()[0].seq,
        first_of_one
    );
    // A successor on partition 1 fences its leader there, not partition 0's.
    bus.jetstream()
        .publish(
            bus.names().store_subject(1),
            orchestrator::replication::encode_frame(one.log_position().unwrap(), &[]).into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    let refused = one
        .submit(new_task(envelope("echo", "echo", json!({}), "fenced")))
        .await
        .unwrap_err();
    assert!(matches!(refused, StoreError::NotLeader(_)), "{refused:?}");
    assert!(appender1.acked().refused.is_some());
    zero.submit(new_task(envelope("echo", "echo", json!({}), "goes on")))
        .await
        .unwrap();
    // Each log makes its own store again: partition 1's without the
    // commit it refused.
    let position = one.log_position().unwrap();
    drop(one);
    let remade = Store::open(&StoreSettings::new(dir.path().join("again1"))).unwrap();
    catch_up(&bus, 1, &remade, 0).await.unwrap();
    assert_eq!(remade.log_position().unwrap(), position - 1);
    drop(remade);
    let position = zero.log_position().unwrap();
    let settings = StoreSettings::new(dir.path().join("again0"));
    let newest = orchestrator::replication::snapshots(&bus, 0)
        .await
        .unwrap()
        .pop()
        .unwrap();
    orchestrator::replication::restore(&bus, &newest, &settings)
        .await
        .unwrap();
    let remade = Store::open(&settings).unwrap();
    catch_up(&bus, 0, &remade, newest.after_seq).await.unwrap();
    assert_eq!(remade.log_position().unwrap(), position);
    drop(remade);
    zero.flush().await.unwrap();
    drop(zero);
    assert!(
        sled_trees(&path0) == sled_trees(&settings.path),
        "partition 0's snapshot and log make its store"
    );
}

/// Commits larger than the broker takes in one message go in parts, and
/// batches larger than a message in several; a leader that died half way
/// through a commit's parts leaves them unfinished, and its successor and
/// every reader pass over them.
#[tokio::test]
async fn commits_larger_than_a_message_go_in_parts() {
    let nats = NatsServer::start();
    let bus = bus(&nats).await;
    let limit = bus.max_payload();
    let dir = tempfile::tempdir().unwrap();
    let (leader, replica) = (dir.path().join("leader"), dir.path().join("replica"));
    let (store, appender) = leading(&bus, &leader).await;
    // Two and a half messages' worth in one task.
    let big = "x".repeat(limit * 5 / 2);
    let submit = store.submit(new_task(envelope(
        "echo",
        "echo",
        json!({"big": big}),
        "big",
    )));
    tokio::time::timeout(std::time::Duration::from_secs(30), submit)
        .await
        .expect("a commit larger than a message was never appended")
        .unwrap();
    // Many at once, so batches outgrow a message.
    let mut at_once = Vec::new();
    for i in 0..48 {
        let store = store.clone();
        let params = json!({"i": i, "pad": "y".repeat(limit / 16)});
        at_once.push(tokio::spawn(async move {
            store
                .submit(new_task(envelope("echo", "echo", params, &format!("k{i}"))))
                .await
        }));
    }
    for s in at_once {
        s.await.unwrap().unwrap();
    }
    let position = store.log_position().unwrap();
    assert_eq!(appender.acked().position, position);
    let entries = entries_after(&bus, 0, 0).await.unwrap();
    let commits: Vec<u64> = entries
        .iter()
        .flat_map(|e| e.commits.iter().map(|c| c.position))
        .collect();
    assert_eq!(commits, (1..=position).collect::<Vec<_>>());
    let last_seq = entries.last().unwrap().seq;
    assert!(
        last_seq > entries.len() as u64,
        "the big commit was not sent in parts"
    );
    // A leader dies after the first part of its next commit.
    drop(store);
    drop(appender);
    bus.jetstream()
        .publish(
            bus.names().store_subject(0),
            orchestrator::replication::encode_part(position + 1, 0, 2, b"half").into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    // Its successor's store is at the last whole commit: it takes over.
    let remade = Store::open(&StoreSettings::new(&replica)).unwrap();
    let seq = catch_up(&bus, 0, &remade, 0).await.unwrap().seq;
    assert_eq!(seq, last_seq, "the unfinished commit was read as one");
    assert_eq!(remade.log_position().unwrap(), position);
    let (_successor, _sink) = Appender::start(&bus, 0, position).await.unwrap();
    catch_up(&bus, 0, &remade, seq).await.unwrap();
    remade.flush().await.unwrap();
    drop(remade);
    assert!(
        sled_trees(&leader) == sled_trees(&replica),
        "the log in parts makes the store again"
    );
}

/// A leader's lease that lapsed with no one taking it (its entry gone, as
/// when renewals fail through a broker election longer than the lease) is
/// taken again, and the leader goes on writing; once another process
/// sealed the log, its append refused, the leader steps down.
#[tokio::test]
async fn a_lapsed_lease_no_one_took_is_taken_again() {
    use orchestrator::service::ServiceSettings;
    use std::time::Duration;
    let nats = NatsServer::start();
    let bus = bus(&nats).await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = ServiceSettings {
        data_dir: dir.path().to_path_buf(),
        ..ServiceSettings::default()
    };
    config.replication.enabled = true;
    config.replication.lease_ttl = Duration::from_secs(1);
    config.replication.renew_every = Duration::from_millis(100);
    let stop = tokio_util::sync::CancellationToken::new();
    let (tell, _leader) = tokio::sync::watch::channel(None);
    let leading = orchestrator::service::lead(&config, &bus, &stop, &tell, &Default::default())
        .await
        .unwrap()
        .expect("leads");
    let store = Store::open(&StoreSettings {
        commits: Some(leading.commits.clone()),
        ..config.store_settings()
    })
    .unwrap();
    let lost = tokio_util::sync::CancellationToken::new();
    let _kept = leading.keep(&config, lost.clone());
    let kv = bus.jetstream().get_key_value("ORCH_LEASES").await.unwrap();
    // Gone, as if it had lapsed: taken again at once.
    kv.purge("store.0").await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!lost.is_cancelled(), "the leader stepped down");
    let env = envelope("echo", "echo", json!({}), "after-lapse");
    store.submit(new_task(env)).await.unwrap();
    // Another process seals the log (it led meanwhile, say, and gave the
    // lease up): this leader's next append is refused, and it steps down
    // though the lease is free to keep, leaving it to a node that can
    // write.
    let position = store.log_position().unwrap();
    let (_other, _sink) = Appender::start(&bus, 0, position).await.unwrap();
    let env = envelope("echo", "echo", json!({}), "after-seal");
    let refused = store.submit(new_task(env)).await.unwrap_err();
    assert!(matches!(refused, StoreError::NotLeader(_)), "{refused}");
    tokio::time::timeout(Duration::from_secs(10), lost.cancelled())
        .await
        .expect("a leader whose append was refused kept the lease");
}
