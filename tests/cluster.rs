//! The orchestrator and its workers on a real three-node NATS JetStream
//! cluster, every piece its own process: a node SIGKILLed under load (the
//! leader of the task stream, of the claims bucket, of the events stream),
//! a claims bucket away for a minute, processes started with their first
//! URL down, and a worker cut off by a network partition longer than its
//! lease. No task may fail or be dead-lettered without running, none may
//! be lost, and a task runs twice only when its first run's result was in
//! flight, the second told it resumed, both on the audit record.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::cluster::NatsCluster;
use common::netns::Netns;
use common::process::{Proc, admin_client, free_port, orchestrator, run_args};
use serde_json::{Value, json};

/// The agent `work`: each run appends `<task id> <attempt> <resumed> <worker
/// pid>` to `runs.log`, takes `sleep` seconds, and returns.
fn work_agent(agents: &Path, ack_wait: &str, sleep: &str) -> PathBuf {
    let dir = agents.join("work");
    std::fs::create_dir_all(&dir).unwrap();
    let card = json!({
        "name": "work", "version": "1.0.0", "description": "logs each run",
        "skills": [{"id": "run", "description": "run once"}],
        "invocation": {"type": "command", "command": ["sh", "run.sh"], "timeout": "60s"},
        "delivery": {"ackWait": ack_wait, "concurrency": 8}
    });
    std::fs::write(dir.join("agent.json"), card.to_string()).unwrap();
    let script = format!(
        "cat > /dev/null\necho \"$ORCH_TASK_ID $ORCH_ATTEMPT $ORCH_RESUMED $PPID\" >> runs.log\nsleep {sleep}\necho '{{\"ok\": true}}'\n"
    );
    std::fs::write(dir.join("run.sh"), script).unwrap();
    dir
}

/// An orchestrator and two workers of `work`, each given the cluster's
/// URLs in its own order.
struct Deployment {
    base: String,
    http: reqwest::Client,
    agent: PathBuf,
    data: tempfile::TempDir,
    _agents: tempfile::TempDir,
    logs: tempfile::TempDir,
    _orchestrator: Proc,
    workers: Vec<Proc>,
    worker_metrics: Vec<String>,
    config: PathBuf,
}

impl Deployment {
    /// Starts the orchestrator on `urls` with `bus.replicas: replicas`, and
    /// one worker per entry of `worker_urls`.
    async fn start(
        urls: &str,
        worker_urls: &[String],
        replicas: usize,
        ack_wait: &str,
        sleep: &str,
    ) -> Deployment {
        Deployment::start_with(urls, worker_urls, replicas, ack_wait, sleep, json!({})).await
    }

    /// [`Deployment::start`], with the members of `extra` in the settings
    /// file too.
    async fn start_with(
        urls: &str,
        worker_urls: &[String],
        replicas: usize,
        ack_wait: &str,
        sleep: &str,
        extra: Value,
    ) -> Deployment {
        let agents = tempfile::tempdir().unwrap();
        let agent = work_agent(agents.path(), ack_wait, sleep);
        let data = tempfile::tempdir().unwrap();
        let logs = tempfile::tempdir().unwrap();
        let config = logs.path().join("settings.json");
        let mut settings = json!({"bus": {"replicas": replicas, "retry_delay": "500ms"}, "ready_stall_after": "0s"});
        if let (Some(settings), Some(extra)) = (settings.as_object_mut(), extra.as_object()) {
            settings.extend(extra.clone());
        }
        std::fs::write(&config, settings.to_string()).unwrap();
        let port = free_port();
        let base = format!("http://127.0.0.1:{port}");
        let args = run_args(
            agents.path(),
            data.path(),
            port,
            &["--config", config.to_str().unwrap()],
        );
        let log = logs.path().join("orchestrator.log");
        let orchestrator = orchestrator(&args, urls, &log);
        let deadline = Instant::now() + Duration::from_secs(60);
        while reqwest::get(format!("{base}/readyz"))
            .await
            .map_or(true, |r| !r.status().is_success())
        {
            assert!(
                Instant::now() < deadline,
                "the orchestrator never became ready:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let http = admin_client(data.path());
        let mut deployment = Deployment {
            base,
            http,
            agent,
            data,
            _agents: agents,
            logs,
            _orchestrator: orchestrator,
            workers: Vec::new(),
            worker_metrics: Vec::new(),
            config,
        };
        for urls in worker_urls {
            deployment.add_worker(urls, &[]).await;
        }
        deployment
    }

    /// Starts one more worker on `urls`, its command prefixed by `prefix`
    /// (`ip netns exec …`).
    async fn add_worker(&mut self, urls: &str, prefix: &[&str]) {
        let n = self.workers.len();
        let metrics_port = free_port();
        let metrics = format!("http://127.0.0.1:{metrics_port}");
        let bin = env!("CARGO_BIN_EXE_orchestrator");
        let mut command: Vec<String> = prefix.iter().map(|s| s.to_string()).collect();
        command.extend(
            [
                bin,
                "worker",
                "--agent",
                self.agent.to_str().unwrap(),
                "--data-dir",
                self.data.path().to_str().unwrap(),
                "--config",
                self.config.to_str().unwrap(),
                "--metrics-addr",
                &format!("0.0.0.0:{metrics_port}"),
            ]
            .iter()
            .map(|s| s.to_string()),
        );
        let log = std::fs::File::create(self.logs.path().join(format!("worker-{n}.log"))).unwrap();
        let child = std::process::Command::new(&command[0])
            .args(&command[1..])
            .env("NATS_URL", urls)
            .env("RUST_LOG", "info")
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.workers.push(Proc(child));
        self.worker_metrics.push(metrics);
    }

    /// Submits `n` tasks at about `per_second`, returning their ids.
    async fn load(&self, tag: &str, n: usize, per_second: u64) -> Vec<String> {
        let mut ids = Vec::new();
        let every = Duration::from_millis(1000 / per_second.max(1));
        for i in 0..n {
            let body =
                json!({"to": "work", "action": "run", "idempotency_key": format!("{tag}-{i}")});
            let task =
                common::post_json(&self.http, &format!("{}/v1/tasks", self.base), &body).await;
            let id = task["task_id"]
                .as_str()
                .unwrap_or_else(|| panic!("not submitted: {task}"));
            ids.push(id.to_string());
            tokio::time::sleep(every).await;
        }
        ids
    }

    /// Waits until every task in `ids` has ended; their final states.
    async fn wait_all(&self, ids: &[String], timeout: Duration) -> BTreeMap<String, String> {
        let deadline = Instant::now() + timeout;
        let mut states = BTreeMap::new();
        for id in ids {
            loop {
                let task =
                    common::get_json(&self.http, &format!("{}/v1/tasks/{id}", self.base)).await;
                let state = task["state"].as_str().unwrap_or("").to_string();
                if matches!(
                    state.as_str(),
                    "completed" | "failed" | "canceled" | "rejected"
                ) {
                    states.insert(id.clone(), state);
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "task {id} did not end in time: {task:#}\n{}",
                    self.tail_logs()
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        states
    }

    /// The dead letters there are.
    async fn dead_letters(&self) -> Vec<Value> {
        let page = common::get_json(&self.http, &format!("{}/v1/dlq", self.base)).await;
        page["dead_letters"].as_array().cloned().unwrap_or_default()
    }

    /// The audit records of one task.
    async fn audit(&self, task: &str) -> Vec<Value> {
        let url = format!("{}/v1/audit?task_id={task}&limit=500", self.base);
        let page = common::get_json(&self.http, &url).await;
        page["records"].as_array().cloned().unwrap_or_default()
    }

    /// Every run the agent logged: per task, `(resumed, worker pid)`.
    fn runs(&self) -> BTreeMap<String, Vec<(bool, String)>> {
        let text = std::fs::read_to_string(self.agent.join("runs.log")).unwrap_or_default();
        let mut runs: BTreeMap<String, Vec<(bool, String)>> = BTreeMap::new();
        for line in text.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            runs.entry(f[0].to_string())
                .or_default()
                .push((f[2] == "1", f[3].to_string()));
        }
        runs
    }

    /// The log lines at WARN of process log `name`.
    fn warnings(&self, name: &str) -> usize {
        let text = std::fs::read_to_string(self.logs.path().join(name)).unwrap_or_default();
        text.lines().filter(|l| l.contains("WARN")).count()
    }

    fn tail_logs(&self) -> String {
        let mut out = String::new();
        for entry in std::fs::read_dir(self.logs.path()).unwrap().flatten() {
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(15)..].join("\n");
            out += &format!("--- {}\n{tail}\n", entry.path().display());
        }
        out
    }

    /// `/readyz` of the orchestrator: its status and body.
    async fn readyz(&self, base: &str) -> (u16, Value) {
        match reqwest::get(format!("{base}/readyz")).await {
            Ok(r) => (r.status().as_u16(), r.json().await.unwrap_or(Value::Null)),
            Err(e) => (0, json!({"error": e.to_string()})),
        }
    }
}

/// Waits (up to 60 s) until `url` answers 200; its last answer if not.
async fn ready_within(url: &str) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let last = match reqwest::get(url).await {
            Ok(r) if r.status().is_success() => return Ok(()),
            Ok(r) => format!("{}: {}", r.status(), r.text().await.unwrap_or_default()),
            Err(e) => e.to_string(),
        };
        if Instant::now() > deadline {
            return Err(last);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits (up to 60 s) until `url` answers 200; panics with its last answer.
async fn wait_ready(url: &str) {
    if let Err(last) = ready_within(url).await {
        panic!("{url} never became ready: {last}");
    }
}

/// Checks what point 3 of the cluster issue asks, for `ids`: every task
/// completed, nothing dead-lettered, each ran at least once, and a task
/// that ran more than once was told it resumed on every run but its
/// first claim's. Returns
/// how many ran more than once.
async fn check_nothing_failed(d: &Deployment, ids: &[String], what: &str) -> usize {
    let states = d.wait_all(ids, Duration::from_secs(180)).await;
    let not_completed: Vec<_> = states.iter().filter(|(_, s)| *s != "completed").collect();
    assert!(
        not_completed.is_empty(),
        "{what}: tasks that did not complete: {not_completed:?}\n{}",
        d.tail_logs()
    );
    let letters = d.dead_letters().await;
    assert!(letters.is_empty(), "{what}: dead letters: {letters:#?}");
    let runs = d.runs();
    let mut repeated = 0;
    for id in ids {
        let task_runs = runs.get(id).map(Vec::as_slice).unwrap_or_default();
        assert!(
            !task_runs.is_empty(),
            "{what}: task {id} completed without running"
        );
        if task_runs.len() > 1 {
            repeated += 1;
            // Only the first claim runs fresh. (The log's order is not
            // the claims': two workers' scripts append in whatever order
            // they get there.)
            let fresh = task_runs.iter().filter(|(resumed, _)| !*resumed).count();
            assert!(
                fresh <= 1,
                "{what}: task {id} ran again without being told it resumed: {task_runs:?}"
            );
        }
    }
    eprintln!(
        "{what}: {} tasks, {} completed, 0 failed, 0 dead-lettered, {repeated} ran twice (each told it resumed)",
        ids.len(),
        states.len()
    );
    repeated
}

/// Waits until each of `streams` has a leader again.
async fn wait_leaders(cluster: &NatsCluster, streams: &[&str]) {
    for stream in streams {
        cluster.wait_leader_of(stream).await;
    }
}

const STREAMS: [&str; 4] = [
    "ORCH_TASKS",
    "ORCH_EVENTS",
    "KV_ORCH_DELIVERIES",
    "KV_ORCH_AGENTS",
];

/// With `bus.replicas: 3`, the node leading the task stream, then the one
/// leading the claims bucket, then the one leading the events stream, is
/// SIGKILLed while tasks flow, and restarted a few seconds later: every
/// task completes, none is dead-lettered, and only a run whose result was
/// in flight repeats, told it resumed. With two nodes down there is no
/// quorum: `/readyz` of the orchestrator and of a worker says which
/// streams have no leader, and turns ready again once the nodes are back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_kills_under_load_fail_no_task() {
    let mut cluster = NatsCluster::start().await;
    let (u0, u1, u2) = (cluster.url(0), cluster.url(1), cluster.url(2));
    let d = Deployment::start(
        &cluster.urls(),
        &[format!("{u1},{u2},{u0}"), format!("{u2},{u0},{u1}")],
        3,
        "5s",
        "0.05",
    )
    .await;
    for target in ["ORCH_TASKS", "KV_ORCH_DELIVERIES", "ORCH_EVENTS"] {
        let load = d.load(target, 90, 30);
        let kill = async {
            tokio::time::sleep(Duration::from_millis(800)).await;
            let leader = cluster.wait_leader_of(target).await;
            cluster.kill(leader).await;
            tokio::time::sleep(Duration::from_secs(3)).await;
            cluster.restart(leader).await.unwrap();
            leader
        };
        let (ids, leader) = tokio::join!(load, kill);
        eprintln!("{target}: killed its leader n{leader} under load, restarted it 3 s later");
        check_nothing_failed(&d, &ids, &format!("leader of {target} killed")).await;
        wait_leaders(&cluster, &STREAMS).await;
    }

    // No quorum: nothing has a leader, and readiness says so.
    cluster.kill(1).await;
    cluster.kill(2).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let (orch, worker) = loop {
        let orch = d.readyz(&d.base).await;
        let worker = d.readyz(&d.worker_metrics[1]).await;
        let named = orch.1["unserved"].to_string().contains("ORCH_TASKS")
            && worker.1["unserved"]
                .as_array()
                .is_some_and(|u| !u.is_empty());
        if orch.0 == 503 && worker.0 == 503 && named {
            break (orch.1, worker.1);
        }
        assert!(
            Instant::now() < deadline,
            "still ready without a quorum: {orch:?} {worker:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let unserved = orch["unserved"].to_string();
    assert!(unserved.contains("ORCH_TASKS"), "{orch:#}");
    assert!(
        worker["unserved"].as_array().is_some_and(|u| !u.is_empty()),
        "{worker:#}"
    );
    cluster.restart(1).await.unwrap();
    cluster.restart(2).await.unwrap();
    wait_leaders(&cluster, &STREAMS).await;
    wait_ready(&format!("{}/readyz", d.base)).await;
    wait_ready(&format!("{}/readyz", d.worker_metrics[1])).await;

    // A process given three URLs starts with the first one down: the other
    // workers stop, and a new one, first URL dead, runs what comes.
    let mut d = d;
    cluster.kill(0).await;
    wait_leaders(&cluster, &STREAMS).await;
    for mut w in d.workers.drain(..) {
        w.kill();
    }
    d.add_worker(&format!("{u0},{u1},{u2}"), &[]).await;
    let url = format!("{}/readyz", d.worker_metrics[2]);
    if let Err(last) = ready_within(&url).await {
        panic!("{url} never became ready: {last}\n{}", d.tail_logs());
    }
    let ids = d.load("first-down", 10, 50).await;
    check_nothing_failed(&d, &ids, "a worker started with its first URL down").await;
}

/// With `bus.replicas: 1` and the claims bucket on a node of its own, that
/// node is killed for a minute while tasks arrive: workers keep the
/// messages and wait (`orch_worker_waits_total{reason="claims_unavailable"}`
/// counts it), no task spends its deliveries into the dead-letter stream,
/// and every task completes once the node is back. The logs stay quiet
/// through the minute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claims_bucket_away_for_a_minute_fails_no_task() {
    let mut cluster = NatsCluster::start().await;
    let urls = cluster.urls();
    let mut d = Deployment::start(&urls, &[], 1, "5s", "0.05").await;
    // The bucket is made again on a node that holds neither the task nor
    // the events stream (by its server tag), before any worker starts: so
    // only the bucket goes away.
    let tasks = cluster.wait_leader_of("ORCH_TASKS").await;
    let events = cluster.wait_leader_of("ORCH_EVENTS").await;
    let node = (0..3).find(|i| *i != tasks && *i != events).unwrap();
    let js = async_nats::jetstream::new(async_nats::connect(cluster.url(node)).await.unwrap());
    // A JetStream API request can time out while the cluster is busy
    // (the clean-clone CI run met one): asked again, as a client would.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match js.delete_stream("KV_ORCH_DELIVERIES").await {
            Ok(_) => break,
            // A request that timed out may have done its work.
            Err(e)
                if matches!(
                    e.kind(),
                    async_nats::jetstream::context::DeleteStreamErrorKind::JetStream(j)
                        if j.error_code() == async_nats::jetstream::ErrorCode::STREAM_NOT_FOUND
                ) =>
            {
                break;
            }
            Err(e) if std::time::Instant::now() < deadline => {
                eprintln!("deleting the claims bucket, again: {e}");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) => panic!("the claims bucket was not deleted: {e}"),
        }
    }
    let config = async_nats::jetstream::kv::Config {
        bucket: "ORCH_DELIVERIES".into(),
        history: 1,
        max_age: Duration::from_secs(7 * 24 * 3600),
        storage: async_nats::jetstream::stream::StorageType::File,
        limit_markers: Some(Duration::from_secs(1)),
        placement: Some(async_nats::jetstream::stream::Placement {
            tags: vec![format!("node:n{node}")],
            ..Default::default()
        }),
        ..Default::default()
    };
    // The meta leader may not count the node as a peer yet ("no suitable
    // peers for placement, peer offline"): asked again until it does.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match js.create_key_value(config.clone()).await {
            Ok(_) => break,
            Err(e)
                if orchestrator::bus::refused_placement(&e)
                    && std::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) => panic!("the claims bucket was not made on n{node}: {e}"),
        }
    }
    assert_eq!(cluster.wait_leader_of("KV_ORCH_DELIVERIES").await, node);
    d.add_worker(&urls, &[]).await;
    d.add_worker(&urls, &[]).await;
    // Both workers have started before the bucket goes away.
    for metrics in d.worker_metrics.clone() {
        wait_ready(&format!("{metrics}/readyz")).await;
    }
    let warmup = d.load("warmup", 5, 50).await;
    check_nothing_failed(&d, &warmup, "warm-up").await;

    let before = (
        d.warnings("orchestrator.log"),
        d.warnings("worker-0.log") + d.warnings("worker-1.log"),
    );
    cluster.kill(node).await;
    eprintln!("claims bucket: killed n{node}, which holds only the bucket, for 60 s");
    let ids = d.load("away", 60, 6).await;
    tokio::time::sleep(Duration::from_secs(50)).await;
    let during = (
        d.warnings("orchestrator.log") - before.0,
        d.warnings("worker-0.log") + d.warnings("worker-1.log") - before.1,
    );
    let mut waits = 0.0;
    for metrics in &d.worker_metrics {
        let text = common::get_text(&d.http, &format!("{metrics}/metrics")).await;
        waits += text
            .lines()
            .filter(|l| {
                l.starts_with("orch_worker_waits_total") && l.contains("claims_unavailable")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>();
    }
    cluster.restart(node).await.unwrap();
    check_nothing_failed(&d, &ids, "claims bucket away for a minute").await;
    eprintln!(
        "claims bucket away: workers waited {waits} times instead of spending deliveries; warning lines in the minute: orchestrator {}, workers {}",
        during.0, during.1
    );
    assert!(
        waits > 0.0,
        "the workers never waited for the bucket: the outage did not bite"
    );
    // One line per condition per 10 s, and a count of the rest: a few
    // dozen lines. A line per failure would be one per wait at least
    // (`waits`, a few hundred), so the bound is well below that.
    assert!(
        during.0 < 60 && during.1 < 80 && (during.1 as f64) < waits / 2.0,
        "too loud: {during:?}\n{}",
        d.tail_logs()
    );
}

/// One worker runs in a network namespace and is cut off by a partition
/// longer than its lease while it runs tasks; a worker on the other side
/// takes those attempts over. Every task completes and none is
/// dead-lettered; a task that ran twice was told it resumed the second
/// time, and the audit records both runs: `task.resumed` names the
/// instance that finished it, and, once the partition heals,
/// `task.run_abandoned` names the cut-off one. Skipped, with a message,
/// where the machine does not allow network namespaces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_longer_than_the_lease_is_on_the_record() {
    let n = 200 + (std::process::id() % 50) as u8;
    let Some(netns) = Netns::create(n) else {
        eprintln!(
            "SKIPPED: this machine does not allow network namespaces (needs root and `ip netns`)"
        );
        return;
    };
    let cluster = NatsCluster::start_on("0.0.0.0").await;
    let local = (0..3)
        .map(|i| format!("nats://127.0.0.1:{}", cluster.port(i)))
        .collect::<Vec<_>>()
        .join(",");
    let across = (0..3)
        .map(|i| format!("nats://10.{n}.77.1:{}", cluster.port(i)))
        .collect::<Vec<_>>()
        .join(",");
    let mut d = Deployment::start(&local, &[], 3, "3s", "1").await;
    let ns_name = netns.name.clone();
    d.add_worker(&across, &["ip", "netns", "exec", &ns_name])
        .await;
    wait_ready(&format!(
        "http://10.{n}.77.2:{}/readyz",
        metric_port(&d.worker_metrics[0])
    ))
    .await;
    let cut_off_pid = d.workers[0].0.id().to_string();

    // The cut-off worker takes the first tasks alone.
    let ids = d.load("cut", 8, 50).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while d.runs().len() < 8 {
        assert!(
            Instant::now() < deadline,
            "the worker in the namespace runs nothing\n{}",
            d.tail_logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    netns.link(false);
    d.add_worker(&local, &[]).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    netns.link(true);
    let more = d.load("after", 8, 50).await;
    let all: Vec<String> = ids.iter().chain(&more).cloned().collect();
    let repeated = check_nothing_failed(&d, &all, "a partition longer than the lease").await;
    assert!(
        repeated > 0,
        "no attempt was taken over: the partition did not bite"
    );

    let runs = d.runs();
    let mut abandoned_noted = 0;
    for id in &ids {
        let task_runs = &runs[id];
        if task_runs.len() < 2 {
            continue;
        }
        assert_eq!(task_runs[0].1, cut_off_pid, "{id}: {task_runs:?}");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let records = d.audit(id).await;
            let resumed = records.iter().find(|r| r["kind"] == "task.resumed");
            let abandoned = records.iter().find(|r| r["kind"] == "task.run_abandoned");
            if let (Some(resumed), Some(abandoned)) = (resumed, abandoned) {
                let by = resumed["detail"]["instance"].as_str().unwrap_or_default();
                assert!(!by.starts_with(&format!("{cut_off_pid}-")), "{resumed:#}");
                assert_eq!(resumed["detail"]["told_resumed"], true);
                let before = abandoned["detail"]["instance"].as_str().unwrap_or_default();
                assert!(
                    before.starts_with(&format!("{cut_off_pid}-")),
                    "{abandoned:#}"
                );
                abandoned_noted += 1;
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{id}: the audit does not record both runs: {records:#?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    eprintln!(
        "partition: {repeated} tasks ran twice, each told it resumed; {abandoned_noted} abandoned runs on the audit record"
    );
}

/// The port of a `http://host:port` address.
fn metric_port(url: &str) -> &str {
    url.rsplit(':').next().unwrap_or_default()
}

/// A worker waiting for the bus to be provisioned (no orchestrator yet)
/// answers on its metrics port at once: alive, and not ready, saying it has
/// not checked yet; it does not leave probes hanging.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_worker_answers_not_ready() {
    let nats = common::nats::NatsServer::start();
    let agents = tempfile::tempdir().unwrap();
    let agent = work_agent(agents.path(), "5s", "0");
    let port = free_port();
    let log = std::fs::File::create(agents.path().join("worker.log")).unwrap();
    let settings = agents.path().join("settings.json");
    std::fs::write(&settings, r#"{"tokens": {"verify": false}}"#).unwrap();
    let _worker = Proc(
        std::process::Command::new(env!("CARGO_BIN_EXE_orchestrator"))
            .args([
                "worker",
                "--agent",
                agent.to_str().unwrap(),
                "--metrics-addr",
            ])
            .arg(format!("127.0.0.1:{port}"))
            .arg("--config")
            .arg(&settings)
            .env("NATS_URL", nats.url())
            .env("ORCH_DATA_DIR", agents.path())
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let (status, body) = loop {
        match client
            .get(format!("http://127.0.0.1:{port}/readyz"))
            .send()
            .await
        {
            Ok(r) => break (r.status().as_u16(), r.text().await.unwrap_or_default()),
            Err(e) if e.is_timeout() => panic!("/readyz did not answer: {e}"),
            Err(e) => {
                let log =
                    std::fs::read_to_string(agents.path().join("worker.log")).unwrap_or_default();
                assert!(Instant::now() < deadline, "no metrics port: {e}\n{log}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("\"checked\":false"), "{body}");
}

/// With the store replicated (`replication.enabled`, its log `ORCH_STORE`
/// on three nodes), the node leading the log is SIGKILLed while tasks
/// flow and restarted a few seconds later: the leader's appends wait for
/// the new stream leader, and every task completes, none dead-lettered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_logs_leader_killed_under_load_loses_no_task() {
    let mut cluster = NatsCluster::start().await;
    let (u0, u1, u2) = (cluster.url(0), cluster.url(1), cluster.url(2));
    let replication =
        json!({"replication": {"enabled": true, "lease_ttl": "15s", "renew_every": "500ms"}});
    let d = Deployment::start_with(
        &cluster.urls(),
        &[format!("{u1},{u2},{u0}"), format!("{u2},{u0},{u1}")],
        3,
        "5s",
        "0.05",
        replication,
    )
    .await;
    let load = d.load("store-log", 90, 30);
    let kill = async {
        tokio::time::sleep(Duration::from_millis(800)).await;
        let leader = cluster.wait_leader_of("ORCH_STORE").await;
        cluster.kill(leader).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        cluster.restart(leader).await.unwrap();
        leader
    };
    let (ids, leader) = tokio::join!(load, kill);
    eprintln!("ORCH_STORE: killed its leader n{leader} under load, restarted it 3 s later");
    check_nothing_failed(&d, &ids, "leader of ORCH_STORE killed").await;
    let verify = common::get_json(&d.http, &format!("{}/v1/audit/verify", d.base)).await;
    assert_eq!(verify["ok"], true, "{verify}");
}
