//! Several `orchestrator run` processes sharing the store's log
//! (`replication.enabled`), against a real nats-server: one leads, the
//! other stands by following the log and forwarding requests to it; the
//! leader SIGKILLed, the standby takes the lease once it lapses, seals the
//! log, recovers as a restart does, and every task acknowledged before the
//! kill completes; a leader stopped by a signal hands over at once; a
//! standby far behind catches up before it leads.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common;
use common::nats::NatsServer;
use common::pair::{Pair, Shared, Slow, all_completed, leads, start_pair};
use common::system::in_process_worker;
use serde_json::json;

/// A lone node takes the lease before it serves anything: the first
/// answer on its address is the leader's, never a standby's (which would
/// answer `no_leader` to every API call meanwhile).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_node_answers_first_as_the_leader() {
    let nats = NatsServer::start();
    let shared = Shared::new();
    let (_a, a_url) = shared.node("a", &nats, "5s");
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    let first = loop {
        if let Ok(r) = http.get(format!("{a_url}/readyz")).send().await {
            break r.json::<serde_json::Value>().await.unwrap();
        }
        assert!(Instant::now() < deadline, "the node never answered");
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    assert_eq!(first["role"], "leader", "its first answer: {first}");
    // Its commits go through the log, and /metrics says how long appends
    // take.
    let client = common::system::client_with(Some(&shared.key));
    let body = json!({"to": "slow", "action": "work", "params": {"n": 0}, "idempotency_key": "k0"});
    let t = common::post_json(&client, &format!("{a_url}/v1/tasks"), &body).await;
    assert!(t["task_id"].is_string(), "{t}");
    let metrics = http.get(format!("{a_url}/metrics")).send().await.unwrap();
    let text = metrics.text().await.unwrap();
    let appends = text
        .lines()
        .find_map(|l| l.strip_prefix("orch_store_log_append_seconds_count "))
        .and_then(|n| n.trim().parse::<u64>().ok());
    assert!(
        appends.is_some_and(|n| n > 0),
        "no appends counted:\n{text}"
    );
}

/// A leader killed and started again on its own data directory, with no
/// standby, leads again at once: the lease names the directory, and the
/// process that held it is gone (it held the directory's lock). With a
/// one-minute lease, waiting for it to lapse would take a minute; the
/// tasks acknowledged before the kill then complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_started_again_on_its_directory_leads_at_once() {
    let nats = NatsServer::start();
    let shared = Shared::new();
    let (mut a, a_url) = shared.node("a", &nats, "60s");
    assert!(leads(&a_url, Duration::from_secs(30)).await, "a leads");
    let http = common::system::client_with(Some(&shared.key));
    let mut ids = Vec::new();
    for n in 0..10 {
        let body = json!({"to": "slow", "action": "work", "params": {"n": n}, "idempotency_key": format!("k{n}")});
        let t = common::post_json(&http, &format!("{a_url}/v1/tasks"), &body).await;
        ids.push(
            t["task_id"]
                .as_str()
                .unwrap_or_else(|| panic!("{t}"))
                .to_string(),
        );
    }
    a.kill();
    let killed = Instant::now();
    let (_a, a_url) = shared.node("a", &nats, "60s");
    assert!(
        leads(&a_url, Duration::from_secs(40)).await,
        "started again, it did not take its own lease before it lapsed"
    );
    eprintln!("led again {:?} after SIGKILL", killed.elapsed());
    let (stop, worker) = in_process_worker(
        &nats,
        shared.dir.path(),
        shared.slow.clone(),
        Arc::new(Slow),
        4,
    )
    .await;
    all_completed(&http, &a_url, &ids).await;
    stop.cancel();
    let _ = worker.await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_takes_over_from_a_killed_leader_and_no_task_is_lost() {
    let nats = NatsServer::start();
    let Pair {
        shared,
        slow,
        key,
        mut a,
        a_url,
        b_url,
        b: _b,
        ..
    } = start_pair(&nats, "2s").await;
    let (stop, worker) = in_process_worker(&nats, shared.path(), slow, Arc::new(Slow), 4).await;
    let http = common::system::client_with(Some(&key));
    let mut ids = Vec::new();
    for n in 0..60 {
        // Half through the standby, which forwards them.
        let base = if n % 2 == 0 { &a_url } else { &b_url };
        let body = json!({"to": "slow", "action": "work", "params": {"n": n}, "idempotency_key": format!("k{n}")});
        let t = common::post_json(&http, &format!("{base}/v1/tasks"), &body).await;
        let id = t["task_id"].as_str().unwrap_or_else(|| panic!("{t}"));
        ids.push(id.to_string());
    }
    a.kill();
    let killed = Instant::now();
    assert!(
        leads(&b_url, Duration::from_secs(30)).await,
        "the standby never took over"
    );
    let failover = killed.elapsed();
    eprintln!("failover: {failover:?} from SIGKILL to the standby leading (/readyz role leader)");
    // Every task acknowledged by the dead leader completes on the new one,
    // and a retried submit names the same task.
    all_completed(&http, &b_url, &ids).await;
    let body = json!({"to": "slow", "action": "work", "params": {"n": 7}, "idempotency_key": "k7"});
    let again = common::post_json(&http, &format!("{b_url}/v1/tasks"), &body).await;
    assert_eq!(again["task_id"], ids[7]);
    let verify = common::get_json(&http, &format!("{b_url}/v1/audit/verify")).await;
    assert_eq!(verify["ok"], true, "{verify}");
    stop.cancel();
    let _ = worker.await;
}

/// A leader stopped by SIGTERM gives its lease up once it has stopped: the
/// standby takes over at once, not after the lease (a minute here) lapses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_stops_gives_its_lease_up() {
    let nats = NatsServer::start();
    // Kept whole: its directories live as long as it does.
    let mut pair = start_pair(&nats, "60s").await;
    let (a, b_url) = (&mut pair.a, pair.b_url.clone());
    let pid = nix::unistd::Pid::from_raw(a.0.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = a.0.wait().unwrap();
    assert!(
        status.success(),
        "a leader stopped by SIGTERM exits 0: {status}"
    );
    assert!(
        leads(&b_url, Duration::from_secs(30)).await,
        "the standby waited for the lease to lapse"
    );
}

/// A pair with a 2 s lease, a worker of `slow` running two at a time (its
/// stop and its task), and a client with the pair's key.
async fn working_pair(
    nats: &NatsServer,
) -> (
    Pair,
    (
        tokio_util::sync::CancellationToken,
        tokio::task::JoinHandle<()>,
    ),
    reqwest::Client,
) {
    let pair = start_pair(nats, "2s").await;
    let worker = in_process_worker(
        nats,
        pair.shared.path(),
        pair.slow.clone(),
        Arc::new(Slow),
        2,
    )
    .await;
    let http = common::system::client_with(Some(&pair.key));
    (pair, worker, http)
}

/// A standby answers every request by forwarding it to the leader: a
/// submit, a long poll, a stream of server-sent events; its own probes
/// and metrics it answers itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_forwards_every_request_to_the_leader() {
    let nats = NatsServer::start();
    let (pair, (stop, worker), http) = working_pair(&nats).await;
    let b = &pair.b_url;
    // A stream opened through the standby hears what the leader does.
    let mut changes = http.get(format!("{b}/v1/changes")).send().await.unwrap();
    assert_eq!(changes.status(), 200);
    assert_eq!(changes.headers()["orch-forwarded-to"], "a");
    assert_eq!(changes.headers()["content-type"], "text/event-stream");
    let submitted = http
        .post(format!("{b}/v1/tasks"))
        .json(&json!({"to": "slow", "action": "work", "params": {"n": 0}, "idempotency_key": "f1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(submitted.status(), 201);
    assert_eq!(submitted.headers()["orch-forwarded-to"], "a");
    let id = submitted.json::<serde_json::Value>().await.unwrap()["task_id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut heard = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !heard.contains(&id) {
        let left = deadline.saturating_duration_since(Instant::now());
        let chunk = tokio::time::timeout(left, changes.chunk())
            .await
            .expect("the forwarded stream said nothing of the task")
            .unwrap()
            .expect("the forwarded stream ended");
        heard.push_str(&String::from_utf8_lossy(&chunk));
    }
    // A long poll through the standby answers when the task ends there.
    let t = common::get_json(&http, &format!("{b}/v1/tasks/{id}?wait=20s")).await;
    assert_eq!(t["state"], "completed", "{t}");
    // The caller's credential goes through: without it, the leader's 401.
    let anonymous = reqwest::get(format!("{b}/v1/tasks/{id}")).await.unwrap();
    assert_eq!(anonymous.status(), 401);
    // Its own metrics, not forwarded.
    let metrics = reqwest::get(format!("{b}/metrics")).await.unwrap();
    assert_eq!(metrics.status(), 200);
    assert!(metrics.headers().get("orch-forwarded-to").is_none());
    stop.cancel();
    let _ = worker.await;
}

/// A read sent with `orch-read: local` is answered by the standby from
/// its own copy of the store, saying how current the copy is; without it,
/// a read is forwarded, and so is every write, wait and stream with it.
/// The copy is let go when the standby takes over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_answers_reads_from_its_copy_when_asked() {
    let nats = NatsServer::start();
    let (mut pair, (stop, worker), http) = working_pair(&nats).await;
    let (a, b) = (pair.a_url.clone(), pair.b_url.clone());
    let body = json!({"to": "slow", "action": "work", "params": {"n": 0}, "idempotency_key": "r1"});
    let id = common::post_json(&http, &format!("{a}/v1/tasks"), &body).await["task_id"]
        .as_str()
        .unwrap()
        .to_string();
    let done = common::get_json(&http, &format!("{a}/v1/tasks/{id}?wait=20s")).await;
    assert_eq!(done["state"], "completed", "{done}");
    let local = |path: &str| {
        http.get(format!("{b}{path}"))
            .header("orch-read", "local")
            .send()
    };
    // The copy follows the log about once a second.
    let deadline = Instant::now() + Duration::from_secs(20);
    let read = loop {
        let read = local(&format!("/v1/tasks/{id}")).await.unwrap();
        assert!(read.headers().get("orch-forwarded-to").is_none());
        if read.status() == 200 {
            break read;
        }
        assert_eq!(read.status(), 404, "not yet in the copy, or there");
        assert!(Instant::now() < deadline, "the copy never had the task");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let header = |name: &str| read.headers()[name].to_str().unwrap().to_string();
    assert_eq!(header("orch-read-from"), "b");
    assert!(header("orch-log-position").parse::<u64>().unwrap() > 0);
    assert!(header("orch-behind-ms").parse::<u64>().is_ok());
    assert!(header("orch-current-at").ends_with('Z'));
    let t: serde_json::Value = read.json().await.unwrap();
    assert_eq!(t["state"], "completed", "{t}");
    let listed: serde_json::Value = local("/v1/tasks").await.unwrap().json().await.unwrap();
    assert_eq!(listed["tasks"][0]["task_id"], id.as_str(), "{listed}");
    // Without the header, with a wait, or a write: the leader's.
    let forwarded = http.get(format!("{b}/v1/tasks/{id}")).send().await.unwrap();
    assert_eq!(forwarded.headers()["orch-forwarded-to"], "a");
    let waits = local(&format!("/v1/tasks/{id}?wait=1s")).await.unwrap();
    assert_eq!(waits.headers()["orch-forwarded-to"], "a");
    let write = http
        .post(format!("{b}/v1/tasks"))
        .header("orch-read", "local")
        .json(&json!({"to": "slow", "action": "work", "params": {"n": 1}, "idempotency_key": "r2"}))
        .send()
        .await
        .unwrap();
    assert_eq!(write.status(), 201);
    assert_eq!(write.headers()["orch-forwarded-to"], "a");
    // The copy's reads check credentials as the leader's do.
    let anonymous = reqwest::Client::new()
        .get(format!("{b}/v1/tasks/{id}"))
        .header("orch-read", "local")
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    assert_eq!(anonymous.headers()["orch-read-from"], "b");
    // Taking over, the standby lets its copy go and leads with it.
    pair.a.kill();
    assert!(
        leads(&b, Duration::from_secs(30)).await,
        "the standby never took over"
    );
    let t = common::get_json(&http, &format!("{b}/v1/tasks/{id}")).await;
    assert_eq!(t["state"], "completed", "{t}");
    stop.cancel();
    let _ = worker.await;
}

/// A standby paused while the leader goes on (SIGSTOP: a slow or stalled
/// machine) falls behind the log's trimmed start; resumed just as the
/// leader is killed, it loads the newest snapshot and reads the log to its
/// end before it leads, with every task the leader acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_far_behind_catches_up_before_it_leads() {
    use nix::sys::signal::{Signal, kill};
    let nats = NatsServer::start();
    let mut pair = start_pair(&nats, "2s").await;
    let http = common::system::client_with(Some(&pair.key));
    let (b_pid, ids) = fall_behind(&nats, &pair, &http).await;
    kill(b_pid, Signal::SIGCONT).unwrap();
    pair.a.kill();
    assert!(
        leads(&pair.b_url, Duration::from_secs(30)).await,
        "the standby never took over"
    );
    for id in &ids {
        let t = common::get_json(&http, &format!("{}/v1/tasks/{id}", pair.b_url)).await;
        assert_eq!(t["task_id"], id.as_str(), "{t}");
    }
    said_it_loaded(&pair);
}

/// A standby resumed far behind loads the newest snapshot and answers
/// its reads from that new copy, not from the copy it had before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_far_behind_reads_from_the_snapshot_it_loads() {
    use nix::sys::signal::{Signal, kill};
    let nats = NatsServer::start();
    let pair = start_pair(&nats, "2s").await;
    let http = common::system::client_with(Some(&pair.key));
    let (b_pid, ids) = fall_behind(&nats, &pair, &http).await;
    kill(b_pid, Signal::SIGCONT).unwrap();
    let last = ids.last().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let read = http
            .get(format!("{}/v1/tasks/{last}", pair.b_url))
            .header("orch-read", "local")
            .send()
            .await
            .unwrap_or_else(|e| {
                let said = std::fs::read_to_string(pair.shared.path().join("b.log"));
                panic!(
                    "the standby did not answer ({e}):\n{}",
                    said.unwrap_or_default()
                )
            });
        // While it loads, it has no copy to offer: the read is forwarded.
        let local = read.headers().get("orch-read-from").is_some();
        if local && read.status() == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the standby's reads never saw what it loaded"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    said_it_loaded(&pair);
}

/// Pauses the standby (SIGSTOP: a slow or stalled machine) and submits
/// 60 tasks to the leader until its snapshots trimmed the log past where
/// the standby stopped; the standby's pid and the tasks.
async fn fall_behind(
    nats: &NatsServer,
    pair: &Pair,
    http: &reqwest::Client,
) -> (nix::unistd::Pid, Vec<String>) {
    use nix::sys::signal::{Signal, kill};
    use orchestrator::replication::entries_after;
    let b_pid = nix::unistd::Pid::from_raw(pair.b.0.id() as i32);
    let bus = orchestrator::bus::Bus::connect_now(&nats.url(), Default::default())
        .await
        .unwrap();
    kill(b_pid, Signal::SIGSTOP).unwrap();
    let paused_at = entries_after(&bus, 0, 0).await.unwrap().last().unwrap().seq;
    let mut ids = Vec::new();
    for n in 0..60 {
        let body = json!({"to": "slow", "action": "work", "params": {"n": n}, "idempotency_key": format!("k{n}")});
        let t = common::post_json(http, &format!("{}/v1/tasks", pair.a_url), &body).await;
        ids.push(t["task_id"].as_str().unwrap().to_string());
    }
    // The leader's snapshots trim the log past where the standby stopped.
    let deadline = Instant::now() + Duration::from_secs(30);
    while entries_after(&bus, 0, 0).await.unwrap()[0].seq <= paused_at {
        assert!(Instant::now() < deadline, "the log was never trimmed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (b_pid, ids)
}

/// The standby's log says it loaded a snapshot.
fn said_it_loaded(pair: &Pair) {
    let said = std::fs::read_to_string(pair.shared.path().join("b.log")).unwrap();
    assert!(
        said.contains("loading the newest snapshot"),
        "the standby did not load a snapshot:\n{said}"
    );
}

/// A leader whose binary was replaced since it started (an upgrade) and
/// that then loses its lease (paused past it, SIGSTOP, while the standby
/// takes over) starts again from the binary now at its path and stands
/// by: the running one's path reads `<path> (deleted)`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_binary_was_replaced_stands_by_again() {
    use common::pair::{Place, node_at, readyz_as};
    use nix::sys::signal::{Signal, kill};
    let nats = NatsServer::start();
    let shared = Shared::new();
    let program = shared.dir.path().join("bin/orchestrator");
    std::fs::create_dir_all(program.parent().unwrap()).unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_orchestrator"), &program).unwrap();
    let place = Place {
        prefix: &[],
        host: "127.0.0.1",
        snapshot_every: "1h",
        program: Some(&program),
    };
    let agents = shared.dir.path().join("agents");
    let (a, a_url) = node_at(
        "a",
        shared.dir.path(),
        &agents,
        &nats.url(),
        &shared.entry,
        "2s",
        &place,
    );
    assert!(leads(&a_url, Duration::from_secs(30)).await, "a leads");
    let (_b, b_url) = shared.node("b", &nats, "2s");
    readyz_as(&b_url, "standby", Duration::from_secs(30))
        .await
        .expect("b stands by");
    // Replaced as a package manager does: a new file in the old one's place.
    std::fs::remove_file(&program).unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_orchestrator"), &program).unwrap();
    let a_pid = nix::unistd::Pid::from_raw(a.0.id() as i32);
    kill(a_pid, Signal::SIGSTOP).unwrap();
    assert!(
        leads(&b_url, Duration::from_secs(30)).await,
        "the standby never took over"
    );
    kill(a_pid, Signal::SIGCONT).unwrap();
    let said = readyz_as(&a_url, "standby", Duration::from_secs(60)).await;
    assert!(
        said.is_some(),
        "the old leader never stood by again:\n{}",
        std::fs::read_to_string(shared.dir.path().join("a.log")).unwrap_or_default()
    );
}
