//! Joining the store's log: a node whose disk was lost starts empty and
//! loads the newest snapshot; a store written before replication is moved
//! into the log as its first snapshot.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common;
use common::nats::NatsServer;
use common::pair::{Pair, Slow, all_completed, leads, node, start_pair};
use common::system::in_process_worker;
use orchestrator::service::ServiceSettings;
use serde_json::json;

/// A node on `dir` sharing the store's log, trying the lease often.
fn settings(dir: &Path) -> ServiceSettings {
    let mut config = ServiceSettings {
        data_dir: dir.to_path_buf(),
        ..ServiceSettings::default()
    };
    config.replication.enabled = true;
    config.replication.renew_every = Duration::from_millis(100);
    config
}

/// A data directory whose store was written before replication was
/// turned on is moved into the log when it leads (as the log's first
/// snapshot); an empty node that joins loads it before the first commit
/// and leads with every task; a second such store, once the log holds
/// commits, is refused.
#[tokio::test]
async fn a_store_from_before_replication_is_moved_into_the_log() {
    use orchestrator::service::ServiceError;
    let nats = NatsServer::start();
    let bus = orchestrator::bus::Bus::connect_now(&nats.url(), Default::default())
        .await
        .unwrap();
    let old_store = |dir: &Path, key: &str| {
        let store = orchestrator::Store::open(&settings(dir).store_settings()).unwrap();
        let env = common::envelope("echo", "echo", json!({"key": key}), key);
        futures::executor::block_on(store.submit(common::new_task(env))).unwrap();
    };
    let (a, b, c) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    old_store(a.path(), "a");
    let stop = tokio_util::sync::CancellationToken::new();
    let (tell, _leader) = tokio::sync::watch::channel(None);
    let config_a = settings(a.path());
    let leading = orchestrator::service::lead(&config_a, &bus, &stop, &tell, &Default::default())
        .await
        .unwrap()
        .expect("the old store leads");
    // One commit after the move.
    let logged = orchestrator::StoreSettings {
        commits: Some(leading.commits.clone()),
        ..config_a.store_settings()
    };
    let store = orchestrator::Store::open(&logged).unwrap();
    let env = common::envelope("echo", "echo", json!({"after": true}), "after");
    store.submit(common::new_task(env)).await.unwrap();
    drop(store);
    leading
        .keep(&config_a, tokio_util::sync::CancellationToken::new())
        .release()
        .await;
    // An empty node loads the moved store, then the commit, and leads.
    let leading =
        orchestrator::service::lead(&settings(b.path()), &bus, &stop, &tell, &Default::default())
            .await
            .unwrap()
            .expect("the empty node leads");
    drop(leading);
    assert!(
        common::sled_trees(&a.path().join("store")) == common::sled_trees(&b.path().join("store")),
        "the node that joined holds what the old store and the log do"
    );
    // A second old store cannot join a log that holds commits.
    old_store(c.path(), "c");
    let refused =
        orchestrator::service::lead(&settings(c.path()), &bus, &stop, &tell, &Default::default())
            .await
            .err()
            .expect("refused");
    assert!(
        matches!(
            &refused,
            ServiceError::Store(orchestrator::StoreError::Open { .. })
        ),
        "{refused:?}"
    );
    assert!(
        refused
            .to_string()
            .contains("already holds another store's commits"),
        "{refused}"
    );
}

/// A leader's store ahead of the log, its own appender having written the
/// log's last message: a commit it made but never appended (it stopped
/// first) and one the broker lost after acknowledging it (a power cut
/// before the broker's fsync). Leading again, the store becomes the
/// snapshot at its own position and the log goes on from there: both
/// tasks stay, and a standby behind that snapshot loads it and leads with
/// them. A store ahead of a log another appended to last is set aside
/// instead: what it holds past the log was never acknowledged.
#[tokio::test]
async fn a_store_ahead_of_the_log_goes_on_from_itself_when_no_one_appended_since() {
    let nats = NatsServer::start();
    let bus = orchestrator::bus::Bus::connect_now(&nats.url(), Default::default())
        .await
        .unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let (tell, _leader) = tokio::sync::watch::channel(None);
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let config_a = settings(a.path());
    let lead = |config: ServiceSettings| {
        let (bus, stop, tell) = (bus.clone(), stop.clone(), tell.clone());
        async move {
            orchestrator::service::lead(&config, &bus, &stop, &tell, &Default::default())
                .await
                .unwrap()
                .expect("leads")
        }
    };
    let open = |config: &ServiceSettings, leading: &orchestrator::service::Leading| {
        orchestrator::Store::open(&orchestrator::StoreSettings {
            commits: Some(leading.commits.clone()),
            ..config.store_settings()
        })
        .unwrap()
    };
    let submit = |store: &orchestrator::Store, key: &str| {
        let env = common::envelope("echo", "echo", json!({"key": key}), key);
        let id = env.header.task_id;
        let store = store.clone();
        async move { (id, store.submit(common::new_task(env)).await) }
    };
    let leading = lead(config_a.clone()).await;
    let store = open(&config_a, &leading);
    let (lost, said) = submit(&store, "lost").await;
    said.expect("acknowledged: in the log");
    // A standby follows that far.
    let follower = orchestrator::Store::open(&settings(b.path()).store_settings()).unwrap();
    orchestrator::replication::catch_up(&bus, 0, &follower, 0)
        .await
        .unwrap();
    assert!(follower.get(lost).unwrap().is_some());
    drop(follower);
    // The leader stops appending; a commit made then is never in the log.
    drop(leading);
    let (unsent, said) = submit(&store, "unsent").await;
    assert!(
        said.is_err(),
        "a commit the log never took was acknowledged"
    );
    drop(store);
    // The broker loses its last acknowledged append.
    let stream = bus
        .jetstream()
        .get_stream(bus.names().store_stream())
        .await
        .unwrap();
    let last = stream.get_info().await.unwrap().state.last_sequence;
    stream.delete_message(last).await.unwrap();
    // Leading again, on its own directory: both stay.
    let leading = lead(config_a.clone()).await;
    let store = open(&config_a, &leading);
    for id in [lost, unsent] {
        assert!(store.get(id).unwrap().is_some(), "task {id} was lost");
    }
    drop(store);
    leading
        .keep(&config_a, tokio_util::sync::CancellationToken::new())
        .release()
        .await;
    // The standby, behind a log that went on from a snapshot past it,
    // loads the snapshot and leads with both.
    let config_b = settings(b.path());
    let leading = lead(config_b.clone()).await;
    let store = open(&config_b, &leading);
    for id in [lost, unsent] {
        assert!(
            store.get(id).unwrap().is_some(),
            "task {id} missing on the standby"
        );
    }
    let (after, said) = submit(&store, "after").await;
    said.unwrap();
    drop(store);
    leading
        .keep(&config_b, tokio_util::sync::CancellationToken::new())
        .release()
        .await;
    let leading = lead(config_a.clone()).await;
    let store = open(&config_a, &leading);
    assert!(store.get(after).unwrap().is_some());
    drop(store);
    drop(leading);
    assert!(
        common::sled_trees(&a.path().join("store")) == common::sled_trees(&b.path().join("store")),
        "the two nodes differ"
    );
    // A gives the lease up and then commits one more, never appended; b
    // leads (its seal is the log's last message) and gives the lease up:
    // a's store is ahead of a log another appended to last, so it is set
    // aside and made from the log, without the commit never acknowledged.
    let leading = lead(config_a.clone()).await;
    let store = open(&config_a, &leading);
    leading
        .keep(&config_a, tokio_util::sync::CancellationToken::new())
        .release()
        .await;
    let (never, said) = submit(&store, "never").await;
    assert!(
        said.is_err(),
        "a commit the log never took was acknowledged"
    );
    drop(store);
    let leading = lead(config_b.clone()).await;
    leading
        .keep(&config_b, tokio_util::sync::CancellationToken::new())
        .release()
        .await;
    let leading = lead(config_a.clone()).await;
    drop(leading);
    let store = orchestrator::Store::open(&config_a.store_settings()).unwrap();
    assert!(
        store.get(never).unwrap().is_none(),
        "a commit never acknowledged stayed"
    );
    assert!(store.get(after).unwrap().is_some());
    let aside = std::fs::read_dir(a.path()).unwrap().flatten().any(|e| {
        e.file_name()
            .to_string_lossy()
            .starts_with("store.diverged-")
    });
    assert!(aside, "the store ahead of another's log was not set aside");
}

/// The leader killed and its data directory deleted (a lost disk or VM):
/// the standby takes over, and a fresh process in the old one's place
/// finds the log trimmed below the leaders' snapshots, loads the newest,
/// follows the log from it, and takes over in turn with every task, key
/// and audit record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_lost_its_disk_joins_from_a_snapshot_and_takes_over() {
    use orchestrator::replication::{entries_after, snapshots};
    let nats = NatsServer::start();
    let pair = start_pair(&nats, "2s").await;
    let Pair {
        shared,
        slow,
        key,
        entry,
        mut a,
        a_url,
        b_url,
        mut b,
    } = pair;
    let (stop, worker) = in_process_worker(&nats, shared.path(), slow, Arc::new(Slow), 4).await;
    let http = common::system::client_with(Some(&key));
    let submit = |n: usize, base: String| {
        let http = http.clone();
        async move {
            let body = json!({"to": "slow", "action": "work", "params": {"n": n}, "idempotency_key": format!("k{n}")});
            let t = common::post_json(&http, &format!("{base}/v1/tasks"), &body).await;
            t["task_id"]
                .as_str()
                .unwrap_or_else(|| panic!("{t}"))
                .to_string()
        }
    };
    let mut ids = Vec::new();
    for n in 0..30 {
        ids.push(submit(n, a_url.clone()).await);
    }
    a.kill();
    std::fs::remove_dir_all(shared.path().join("a")).unwrap();
    assert!(
        leads(&b_url, Duration::from_secs(30)).await,
        "the standby never took over"
    );
    for n in 30..40 {
        ids.push(submit(n, b_url.clone()).await);
    }
    all_completed(&http, &b_url, &ids).await;
    // The new leader's snapshots trim the log: the start is gone.
    let bus = orchestrator::bus::Bus::connect_now(&nats.url(), Default::default())
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let first = entries_after(&bus, 0, 0).await.unwrap()[0].seq;
        if first > 1 && !snapshots(&bus, 0).await.unwrap().is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "the log was never trimmed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let agents = shared.path().join("agents");
    let (_fresh, fresh_url) = node("a", shared.path(), &agents, &nats.url(), &entry, "2s");
    let log = shared.path().join("a.log");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("another orchestrator leads the store")
    {
        assert!(
            Instant::now() < deadline,
            "the fresh node never stood by:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(
        said.contains("loading the newest snapshot"),
        "the fresh node did not load a snapshot:\n{said}"
    );
    b.kill();
    assert!(
        leads(&fresh_url, Duration::from_secs(30)).await,
        "the fresh node never took over"
    );
    all_completed(&http, &fresh_url, &ids).await;
    let again = submit(7, fresh_url.clone()).await;
    assert_eq!(again, ids[7], "a retried key names the task made before");
    let more = submit(40, fresh_url.clone()).await;
    ids.push(more);
    all_completed(&http, &fresh_url, &ids).await;
    let verify = common::get_json(&http, &format!("{fresh_url}/v1/audit/verify")).await;
    assert_eq!(verify["ok"], true, "{verify}");
    stop.cancel();
    let _ = worker.await;
}
