//! Several `orchestrator run` processes sharing the store's log
//! (`replication.enabled`), against a real nats-server: one leads, the
//! other stands by following the log; the leader SIGKILLed, the standby
//! takes the lease once it lapses, seals the log, recovers as a restart
//! does, and every task acknowledged before the kill completes.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common;
use common::nats::NatsServer;
use common::process::{Proc, free_port};
use common::system::{card, in_process_worker, key_for};
use futures::future::BoxFuture;
use orchestrator::access::ApiKeyEntry;
use orchestrator::task_token::KeyKind;
use orchestrator::worker::{Handler, Outcome, Task};
use serde_json::json;

/// Echoes `n` after a little while, so tasks are in flight at the kill.
struct Slow;

impl Handler for Slow {
    fn handle(&self, task: Task) -> BoxFuture<'static, Outcome> {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Outcome::completed(json!({"n": task.envelope.payload.params["n"]}))
        })
    }
}

/// A node of the pair: its own data directory and port, the shared
/// signing key and API key, replication on with a short lease.
fn node(
    name: &str,
    shared: &Path,
    agents: &Path,
    nats: &str,
    key: &ApiKeyEntry,
    lease_ttl: &str,
) -> (Proc, String) {
    node_at(name, shared, agents, nats, key, lease_ttl, &[], "127.0.0.1")
}

/// [`node`], its command prefixed by `prefix` (`ip netns exec …`),
/// listening on every address and reached at `host`.
#[allow(clippy::too_many_arguments)]
fn node_at(
    name: &str,
    shared: &Path,
    agents: &Path,
    nats: &str,
    key: &ApiKeyEntry,
    lease_ttl: &str,
    prefix: &[&str],
    host: &str,
) -> (Proc, String) {
    let data = shared.join(name);
    std::fs::create_dir_all(&data).unwrap();
    let port = free_port();
    let base = format!("http://{host}:{port}");
    let settings = json!({
        "replication": {"enabled": true, "lease_ttl": lease_ttl, "renew_every": "200ms", "name": name,
                        "snapshot_every": "300ms", "snapshots_kept": 1, "advertise_url": base},
        "api_auth": {"api_keys": [key]}
    });
    let config = data.join("settings.json");
    std::fs::write(&config, settings.to_string()).unwrap();
    let signing = shared.join("keys/signing.pem");
    let bind = if prefix.is_empty() {
        "127.0.0.1"
    } else {
        "0.0.0.0"
    };
    let mut args: Vec<String> = prefix.iter().map(|s| s.to_string()).collect();
    args.push(env!("CARGO_BIN_EXE_orchestrator").to_string());
    for a in [
        "run",
        "--agents",
        agents.to_str().unwrap(),
        "--data-dir",
        data.to_str().unwrap(),
        "--http-addr",
        &format!("{bind}:{port}"),
        "--config",
        config.to_str().unwrap(),
        "--signing-key",
        signing.to_str().unwrap(),
    ] {
        args.push(a.to_string());
    }
    let log = std::fs::File::create(shared.join(format!("{name}.log"))).unwrap();
    let child = std::process::Command::new(&args[0])
        .args(&args[1..])
        .env("NATS_URL", nats)
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    (Proc(child), base)
}

/// What `base`'s `/readyz` says, within `patience`, once it answers
/// with `role` `role`; `None` if it never does.
async fn readyz_as(base: &str, role: &str, patience: Duration) -> Option<serde_json::Value> {
    let deadline = Instant::now() + patience;
    while Instant::now() < deadline {
        if let Ok(r) = reqwest::get(format!("{base}/readyz")).await
            && r.status().is_success()
            && let Ok(said) = r.json::<serde_json::Value>().await
            && said["role"] == role
        {
            return Some(said);
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    None
}

/// Whether `base` leads within `patience`.
async fn leads(base: &str, patience: Duration) -> bool {
    readyz_as(base, "leader", patience).await.is_some()
}

/// Two nodes started in turn, the first leading, the second standing by
/// (and not serving), sharing a signing key, an API key and the agent
/// `slow`.
struct Pair {
    shared: tempfile::TempDir,
    slow: orchestrator::agent::AgentCard,
    key: String,
    entry: ApiKeyEntry,
    a: Proc,
    b_url: String,
    a_url: String,
    _b: Proc,
}

async fn start_pair(nats: &NatsServer, lease_ttl: &str) -> Pair {
    let shared = tempfile::tempdir().unwrap();
    orchestrator::task_token::keys::generate(&shared.path().join("keys"), KeyKind::EdDsa, false)
        .unwrap();
    let agents = shared.path().join("agents");
    let slow = card("slow", &["work"]);
    std::fs::create_dir_all(agents.join("slow")).unwrap();
    std::fs::write(
        agents.join("slow/agent.json"),
        serde_json::to_string(&slow).unwrap(),
    )
    .unwrap();
    let (key, entry) = key_for("admin", &["*"]);
    let (a, a_url) = node("a", shared.path(), &agents, &nats.url(), &entry, lease_ttl);
    assert!(
        leads(&a_url, Duration::from_secs(30)).await,
        "the first node leads"
    );
    let (b, b_url) = node("b", shared.path(), &agents, &nats.url(), &entry, lease_ttl);
    // The standby is ready once it knows whom to forward to.
    let said = readyz_as(&b_url, "standby", Duration::from_secs(30))
        .await
        .expect("the second node stands by");
    assert_eq!(said["leader"]["name"], "a", "{said}");
    assert_eq!(said["leader"]["url"], a_url.as_str(), "{said}");
    Pair {
        shared,
        slow,
        key,
        entry,
        a,
        a_url,
        b_url,
        _b: b,
    }
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
        _b,
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

/// A data directory whose store was written before replication was
/// turned on is moved into the log when it leads (as the log's first
/// snapshot); an empty node that joins loads it before the first commit
/// and leads with every task; a second such store, once the log holds
/// commits, is refused.
#[tokio::test]
async fn a_store_from_before_replication_is_moved_into_the_log() {
    use orchestrator::service::{ServiceError, ServiceSettings};
    let nats = NatsServer::start();
    let bus = orchestrator::bus::Bus::connect_now(&nats.url(), Default::default())
        .await
        .unwrap();
    let settings = |dir: &Path| {
        let mut config = ServiceSettings {
            data_dir: dir.to_path_buf(),
            ..ServiceSettings::default()
        };
        config.replication.enabled = true;
        config.replication.renew_every = Duration::from_millis(100);
        config
    };
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
    let leading = orchestrator::service::lead(&config_a, &bus, &stop, &tell)
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
    let leading = orchestrator::service::lead(&settings(b.path()), &bus, &stop, &tell)
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
    let refused = orchestrator::service::lead(&settings(c.path()), &bus, &stop, &tell)
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

/// Waits until every task of `ids` has completed on `base` with its `n`.
async fn all_completed(http: &reqwest::Client, base: &str, ids: &[String]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    for (n, id) in ids.iter().enumerate() {
        loop {
            let t = common::get_json(http, &format!("{base}/v1/tasks/{id}")).await;
            if t["state"] == "completed" {
                assert_eq!(t["result"], json!({"n": n}));
                break;
            }
            assert!(Instant::now() < deadline, "task {n} stuck: {t:#}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
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
        _b: mut b,
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
        assert!(Instant::now() < deadline, "the fresh node never stood by");
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

/// A standby answers every request by forwarding it to the leader: a
/// submit, a long poll, a stream of server-sent events; its own probes
/// and metrics it answers itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_forwards_every_request_to_the_leader() {
    let nats = NatsServer::start();
    let pair = start_pair(&nats, "2s").await;
    let (stop, worker) = in_process_worker(
        &nats,
        pair.shared.path(),
        pair.slow.clone(),
        Arc::new(Slow),
        2,
    )
    .await;
    let http = common::system::client_with(Some(&pair.key));
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

/// The leader runs in a network namespace and is cut off from the
/// brokers: it cannot renew its lease, steps down and exits non-zero; the
/// submits it took after the cut are refused to their callers and are
/// nowhere once a standby leads (their keys make new tasks there), while
/// every task it acknowledged before is there. Started again once the
/// link is back, it finds its store left the log (it committed what the
/// log never took), sets it aside and stands by. Skipped, with a message,
/// where the machine does not allow network namespaces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_steps_down_and_what_it_took_after_is_nowhere() {
    use common::cluster::NatsCluster;
    let n = 150 + (std::process::id() % 50) as u8;
    let Some(netns) = common::netns::Netns::create(n) else {
        eprintln!(
            "SKIPPED: this machine does not allow network namespaces (needs root and `ip netns`)"
        );
        return;
    };
    let cluster = NatsCluster::start_on("0.0.0.0").await;
    let urls = |host: &str| {
        (0..3)
            .map(|i| format!("nats://{host}:{}", cluster.port(i)))
            .collect::<Vec<_>>()
            .join(",")
    };
    let (local, across) = (urls("127.0.0.1"), urls(&format!("10.{n}.77.1")));
    let shared = tempfile::tempdir().unwrap();
    orchestrator::task_token::keys::generate(&shared.path().join("keys"), KeyKind::EdDsa, false)
        .unwrap();
    let agents = shared.path().join("agents");
    std::fs::create_dir_all(agents.join("slow")).unwrap();
    std::fs::write(
        agents.join("slow/agent.json"),
        serde_json::to_string(&card("slow", &["work"])).unwrap(),
    )
    .unwrap();
    // Three copies of the log and the lease, as on a cluster.
    let (key, entry) = key_for("admin", &["*"]);
    let ns = netns.name.clone();
    let prefix = ["ip", "netns", "exec", ns.as_str()];
    let inside = format!("10.{n}.77.2");
    let start_a = || {
        node_at(
            "a",
            shared.path(),
            &agents,
            &across,
            &entry,
            "3s",
            &prefix,
            &inside,
        )
    };
    let (mut a, a_url) = start_a();
    assert!(
        leads(&a_url, Duration::from_secs(60)).await,
        "the node in the namespace never led:\n{}",
        std::fs::read_to_string(shared.path().join("a.log")).unwrap_or_default()
    );
    let (_b, b_url) = node("b", shared.path(), &agents, &local, &entry, "3s");
    readyz_as(&b_url, "standby", Duration::from_secs(30))
        .await
        .expect("the second node stands by");
    let http = common::system::client_with(Some(&key));
    let submit = |base: String, key: String| {
        let http = http.clone();
        async move {
            let body =
                json!({"to": "slow", "action": "work", "params": {}, "idempotency_key": key});
            http.post(format!("{base}/v1/tasks"))
                .json(&body)
                .send()
                .await
        }
    };
    let mut before = Vec::new();
    for i in 0..20 {
        let answer = submit(a_url.clone(), format!("before-{i}")).await.unwrap();
        assert_eq!(answer.status(), 201);
        let t: serde_json::Value = answer.json().await.unwrap();
        before.push(t["task_id"].as_str().unwrap().to_string());
    }
    netns.link(false);
    let cut = Instant::now();
    // Taken after the cut (sent from inside the namespace, by the CLI):
    // the leader cannot put them in the log.
    let during: Vec<_> = (0..5)
        .map(|i| {
            tokio::process::Command::new("ip")
                .args(["netns", "exec", &ns, env!("CARGO_BIN_EXE_orchestrator")])
                .args([
                    "--json", "tasks", "submit", "--to", "slow", "--action", "work",
                ])
                .args(["--idempotency-key", &format!("during-{i}")])
                .env("ORCH_SERVER", &a_url)
                .env("ORCH_API_KEY", &key)
                .output()
        })
        .collect();
    assert!(
        leads(&b_url, Duration::from_secs(60)).await,
        "the standby never took over"
    );
    eprintln!("cut off: the standby led {:?} after the cut", cut.elapsed());
    for d in during {
        let out = tokio::time::timeout(Duration::from_secs(60), d)
            .await
            .expect("a submit to the cut-off leader never ended")
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            !out.status.success(),
            "a submit taken after the cut was acknowledged: {said}"
        );
        eprintln!("a submit taken after the cut: {}", said.trim());
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = a.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the cut-off leader never stopped"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(!status.success(), "a leader that lost its lease exits 0");
    let said = std::fs::read_to_string(shared.path().join("a.log")).unwrap();
    assert!(said.contains("stepping down"), "{said}");
    // What it acknowledged is on the new leader; what it took after is not.
    for id in &before {
        let t = common::get_json(&http, &format!("{b_url}/v1/tasks/{id}")).await;
        assert_eq!(t["task_id"], id.as_str(), "{t}");
    }
    for i in 0..5 {
        let answer = submit(b_url.clone(), format!("during-{i}")).await.unwrap();
        assert_eq!(
            answer.status(),
            201,
            "a key the cut-off leader took names a task on the new one"
        );
    }
    let verify = common::get_json(&http, &format!("{b_url}/v1/audit/verify")).await;
    assert_eq!(verify["ok"], true, "{verify}");
    // Back on the network, started again: it stands by with a store made
    // from the log, its own set aside.
    netns.link(true);
    let (_a, a_url) = start_a();
    let said = readyz_as(&a_url, "standby", Duration::from_secs(60)).await;
    assert!(
        said.is_some(),
        "the old leader never stood by:\n{}",
        std::fs::read_to_string(shared.path().join("a.log")).unwrap_or_default()
    );
    let aside = std::fs::read_dir(shared.path().join("a"))
        .unwrap()
        .flatten()
        .any(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("store.diverged-")
        });
    assert!(aside, "the store that left the log was not set aside");
}

/// A standby paused while the leader goes on (SIGSTOP: a slow or stalled
/// machine) falls behind the log's trimmed start; resumed just as the
/// leader is killed, it loads the newest snapshot and reads the log to its
/// end before it leads, with every task the leader acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_far_behind_catches_up_before_it_leads() {
    use nix::sys::signal::{Signal, kill};
    use orchestrator::replication::entries_after;
    let nats = NatsServer::start();
    let mut pair = start_pair(&nats, "2s").await;
    let b_pid = nix::unistd::Pid::from_raw(pair._b.0.id() as i32);
    let http = common::system::client_with(Some(&pair.key));
    let bus = orchestrator::bus::Bus::connect_now(&nats.url(), Default::default())
        .await
        .unwrap();
    kill(b_pid, Signal::SIGSTOP).unwrap();
    let paused_at = entries_after(&bus, 0, 0).await.unwrap().last().unwrap().seq;
    let mut ids = Vec::new();
    for n in 0..60 {
        let body = json!({"to": "slow", "action": "work", "params": {"n": n}, "idempotency_key": format!("k{n}")});
        let t = common::post_json(&http, &format!("{}/v1/tasks", pair.a_url), &body).await;
        ids.push(t["task_id"].as_str().unwrap().to_string());
    }
    // The leader's snapshots trim the log past where the standby stopped.
    let deadline = Instant::now() + Duration::from_secs(30);
    while entries_after(&bus, 0, 0).await.unwrap()[0].seq <= paused_at {
        assert!(Instant::now() < deadline, "the log was never trimmed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
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
    let said = std::fs::read_to_string(pair.shared.path().join("b.log")).unwrap();
    assert!(
        said.contains("loading the newest snapshot"),
        "the standby did not load a snapshot:\n{said}"
    );
}
