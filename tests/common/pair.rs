//! Orchestrators sharing the store's log (`replication.enabled`) as real
//! processes, for the failover, joining and cut-off tests: a node with
//! its own data directory, the shared signing and API keys, a short
//! lease; a pair started in turn (the first leads, the second stands
//! by); and what their `/readyz` says.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common;
use common::nats::NatsServer;
use common::process::{Proc, free_port};
use common::system::{card, key_for};
use futures::future::BoxFuture;
use orchestrator::access::ApiKeyEntry;
use orchestrator::task_token::KeyKind;
use orchestrator::worker::{Handler, Outcome, Task};
use serde_json::json;

/// Echoes `n` after a little while, so tasks are in flight at the kill.
pub struct Slow;

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
pub fn node(
    name: &str,
    shared: &Path,
    agents: &Path,
    nats: &str,
    key: &ApiKeyEntry,
    lease_ttl: &str,
) -> (Proc, String) {
    let place = Place {
        prefix: &[],
        host: "127.0.0.1",
        snapshot_every: "300ms",
        program: None,
    };
    node_at(name, shared, agents, nats, key, lease_ttl, &place)
}

/// Where and how a node runs: its command's prefix (`ip netns exec …`,
/// then it listens on every address), the host it is reached at, and how
/// often it writes snapshots while it leads.
pub struct Place<'a> {
    pub prefix: &'a [&'a str],
    pub host: &'a str,
    pub snapshot_every: &'a str,
    /// The `orchestrator` binary run (default: this build's).
    pub program: Option<&'a Path>,
}

/// [`node`], run at `place`.
pub fn node_at(
    name: &str,
    shared: &Path,
    agents: &Path,
    nats: &str,
    key: &ApiKeyEntry,
    lease_ttl: &str,
    place: &Place<'_>,
) -> (Proc, String) {
    let (prefix, host) = (place.prefix, place.host);
    let data = shared.join(name);
    std::fs::create_dir_all(&data).unwrap();
    let port = free_port();
    let base = format!("http://{host}:{port}");
    let settings = json!({
        "replication": {"enabled": true, "lease_ttl": lease_ttl, "renew_every": "200ms", "name": name,
                        "snapshot_every": place.snapshot_every, "snapshots_kept": 1, "advertise_url": base},
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
    let program = place
        .program
        .map_or(env!("CARGO_BIN_EXE_orchestrator").to_string(), |p| {
            p.display().to_string()
        });
    args.push(program);
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
pub async fn readyz_as(base: &str, role: &str, patience: Duration) -> Option<serde_json::Value> {
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
pub async fn leads(base: &str, patience: Duration) -> bool {
    readyz_as(base, "leader", patience).await.is_some()
}

/// Two nodes started in turn, the first leading, the second standing by
/// (and not serving), sharing a signing key, an API key and the agent
/// `slow`.
pub struct Pair {
    pub shared: tempfile::TempDir,
    pub slow: orchestrator::agent::AgentCard,
    pub key: String,
    pub entry: ApiKeyEntry,
    pub a: Proc,
    pub b_url: String,
    pub a_url: String,
    pub b: Proc,
}

/// What the nodes share: a directory with the signing key (`keys/`) and
/// the agent `slow` (`agents/`), and an admin API key.
pub struct Shared {
    pub dir: tempfile::TempDir,
    pub slow: orchestrator::agent::AgentCard,
    pub key: String,
    pub entry: ApiKeyEntry,
}

impl Shared {
    pub fn new() -> Shared {
        let dir = tempfile::tempdir().unwrap();
        orchestrator::task_token::keys::generate(&dir.path().join("keys"), KeyKind::EdDsa, false)
            .unwrap();
        let agents = dir.path().join("agents");
        let slow = card("slow", &["work"]);
        std::fs::create_dir_all(agents.join("slow")).unwrap();
        std::fs::write(
            agents.join("slow/agent.json"),
            serde_json::to_string(&slow).unwrap(),
        )
        .unwrap();
        let (key, entry) = key_for("admin", &["*"]);
        Shared {
            dir,
            slow,
            key,
            entry,
        }
    }

    /// Node `name` (see [`node`]).
    pub fn node(&self, name: &str, nats: &NatsServer, lease_ttl: &str) -> (Proc, String) {
        let agents = self.dir.path().join("agents");
        node(
            name,
            self.dir.path(),
            &agents,
            &nats.url(),
            &self.entry,
            lease_ttl,
        )
    }
}

pub async fn start_pair(nats: &NatsServer, lease_ttl: &str) -> Pair {
    let Shared {
        dir: shared,
        slow,
        key,
        entry,
    } = Shared::new();
    let agents = shared.path().join("agents");
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
        b,
    }
}

/// Waits until every task of `ids` has completed on `base` with its `n`.
pub async fn all_completed(http: &reqwest::Client, base: &str, ids: &[String]) {
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
