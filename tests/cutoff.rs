//! A leader cut off from the brokers by a network namespace: it steps
//! down, what it took after the cut is nowhere, and started again it sets
//! its diverged store aside and stands by.

use std::time::{Duration, Instant};

use crate::common;
use common::pair::{Place, leads, node_at, readyz_as};
use common::system::{card, key_for};
use orchestrator::task_token::KeyKind;
use serde_json::json;

/// The leader runs in a network namespace and is cut off from the
/// brokers: it cannot renew its lease, steps down and starts again; the
/// submits it took after the cut are refused to their callers and are
/// nowhere once a standby leads (their keys make new tasks there), while
/// every task it acknowledged before is there. Once the link is back, the
/// same process finds its store left the log (it committed what the
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
    // No snapshot trims the log during the test: the old leader, started
    // again, must meet its own diverging commit in the log, not a snapshot
    // (which would replace its store without a word about it).
    let place_a = Place {
        prefix: &prefix,
        host: &inside,
        snapshot_every: "1h",
        program: None,
    };
    let (mut a, a_url) = node_at("a", shared.path(), &agents, &across, &entry, "3s", &place_a);
    assert!(
        leads(&a_url, Duration::from_secs(60)).await,
        "the node in the namespace never led:\n{}",
        std::fs::read_to_string(shared.path().join("a.log")).unwrap_or_default()
    );
    let place_b = Place {
        prefix: &[],
        host: "127.0.0.1",
        snapshot_every: "1h",
        program: None,
    };
    let (_b, b_url) = node_at("b", shared.path(), &agents, &local, &entry, "3s", &place_b);
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
    // It steps down and starts again (the same process), to stand by.
    let deadline = Instant::now() + Duration::from_secs(60);
    let log = shared.path().join("a.log");
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("starting again, to stand by")
    {
        assert!(
            Instant::now() < deadline,
            "the cut-off leader never stepped down:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(said.contains("stepping down"), "{said}");
    assert!(
        a.0.try_wait().unwrap().is_none(),
        "a leader that lost its lease exited instead of standing by again"
    );
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
    // Back on the network, the same process stands by with a store made
    // from the log, its own set aside.
    netns.link(true);
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
