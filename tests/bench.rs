//! `orchestrator bench` runs and reports what it measured: small runs, for
//! the counts and the shape of `--json`, never for the speed (that is the
//! bench's own job).

use crate::common;

use std::process::Command;

use common::nats::NatsServer;
use serde_json::Value;

fn bench(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_orchestrator"))
        .arg("bench")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "bench failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

fn count(v: &Value, path: &str) -> u64 {
    v.pointer(path)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("no {path} in {v:#}"))
}

/// Given two URLs, the first one down, every path of the bench runs on
/// the second, the bare round trip included.
#[test]
fn a_bench_given_several_urls_runs_every_path() {
    let server = NatsServer::start();
    let down = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let urls = format!("nats://127.0.0.1:{down},{}", server.url());
    let got = bench(&[
        "--tasks",
        "60",
        "--samples",
        "5",
        "--concurrency",
        "8",
        "--nats-url",
        &urls,
        "--json",
    ]);
    for path in [
        "/bare_jetstream/throughput/count",
        "/full_path/throughput/count",
        "/processes/throughput/count",
    ] {
        assert_eq!(count(&got, path), 60, "{path}");
    }
}

/// On a broker of its own, the bench measures the bare round trip and the
/// deployed path twice: at the server's default sync and on a second
/// broker syncing before each acknowledgement.
#[test]
fn a_bench_on_its_own_broker_measures_both_disk_syncs() {
    let got = bench(&[
        "--tasks",
        "40",
        "--samples",
        "5",
        "--concurrency",
        "8",
        "--json",
    ]);
    assert_eq!(got["broker_sync"], "interval", "{got:#}");
    for path in [
        "/processes/throughput/count",
        "/sync_always/processes/throughput/count",
        "/sync_always/bare_jetstream/throughput/count",
    ] {
        assert_eq!(count(&got, path), 40, "{path}");
    }
    assert_eq!(count(&got, "/sync_always/processes/low_load/count"), 5);
    assert!(got["sync_always"]["throughput_of_interval"].as_f64() > Some(0.0));
    // One of them only: no second broker.
    let one = bench(&[
        "--tasks",
        "20",
        "--samples",
        "5",
        "--concurrency",
        "8",
        "--broker-sync",
        "always",
        "--json",
    ]);
    assert_eq!(one["broker_sync"], "always", "{one:#}");
    assert!(one["sync_always"].is_null(), "{one:#}");
}

/// A managed broker asked to sync before each acknowledgement is
/// configured so, and the server takes that configuration.
#[tokio::test]
async fn a_managed_broker_syncing_always_is_configured_so() {
    use orchestrator::broker::{DiskSync, ManagedBroker};
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let broker = ManagedBroker::start_syncing(dir.path(), port, None, DiskSync::Always)
        .await
        .unwrap();
    let conf = std::fs::read_to_string(dir.path().join("nats-server.conf")).unwrap();
    assert!(conf.contains("sync_interval: always"), "{conf}");
    let client = async_nats::connect(broker.url()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "SYNCED".into(),
        subjects: vec!["synced".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    js.publish("synced", "x".into())
        .await
        .unwrap()
        .await
        .unwrap();
    broker.stop().await;
}

/// `--a2a`: the deployed path again with A2A clients, every task
/// completed through a blocking `SendMessage`, its CPU set beside REST's,
/// and the subscriptions held open and measured.
#[test]
fn an_a2a_bench_measures_the_gateway_beside_rest() {
    let server = NatsServer::start();
    let got = bench(&[
        "--tasks",
        "40",
        "--samples",
        "5",
        "--concurrency",
        "8",
        "--client",
        "sync",
        "--a2a",
        "--subscribers",
        "50",
        "--nats-url",
        &server.url(),
        "--json",
    ]);
    assert_eq!(count(&got, "/processes/throughput/count"), 40);
    assert_eq!(count(&got, "/a2a/throughput/count"), 40);
    assert_eq!(count(&got, "/a2a/low_load/count"), 5);
    assert_eq!(count(&got, "/a2a/subscribers"), 50);
    assert!(
        got["a2a"]["orchestrator_cpu_vs_rest"].as_f64() > Some(0.0),
        "{got:#}"
    );
    assert!(
        got["a2a"]["orchestrator_rss_mib_with_subscribers"].as_f64() > Some(0.0),
        "{got:#}"
    );
}

/// `--llm`: conversations of one model call, of one tool call and of two
/// at once run to completion against the bench's model, and the
/// orchestrator's CPU for each part is given beside a plain task's (a
/// difference of two runs of 30 may come out below zero: only its
/// presence is checked).
#[test]
fn an_llm_bench_measures_model_calls_and_tool_calls() {
    let server = NatsServer::start();
    let got = bench(&[
        "--tasks",
        "30",
        "--samples",
        "5",
        "--concurrency",
        "8",
        "--llm",
        "--nats-url",
        &server.url(),
        "--json",
    ]);
    assert_eq!(count(&got, "/llm/model_call/throughput/count"), 30);
    assert_eq!(count(&got, "/llm/tool_call/throughput/count"), 30);
    assert_eq!(count(&got, "/llm/two_tool_calls/throughput/count"), 30);
    let us = &got["llm"]["orchestrator_us"];
    for what in ["plain_task", "model_call", "tool_call", "turn_after_tools"] {
        assert!(us[what].as_f64().is_some(), "{what}: {got:#}");
    }
    assert!(us["plain_task"].as_f64() > Some(0.0), "{got:#}");
}

/// `--console`: every page the console reads is timed on the preloaded
/// store (the overview among them), and the task path ran with and
/// without a console open, which read the overview as changes came.
#[test]
fn a_console_bench_times_the_pages_and_the_task_path_beside_a_console() {
    let server = NatsServer::start();
    let got = bench(&[
        "--tasks",
        "60",
        "--samples",
        "5",
        "--concurrency",
        "8",
        "--console",
        "--console-tasks",
        "300",
        "--nats-url",
        &server.url(),
        "--json",
    ]);
    let console = &got["console"];
    assert_eq!(console["stored_tasks"], 300, "{got:#}");
    let pages = console["pages"].as_array().unwrap();
    assert!(pages.len() >= 8, "{got:#}");
    for page in pages {
        assert_eq!(page["reads"], 40, "{page:#}");
        assert!(page["p50_ms"].as_f64() > Some(0.0), "{page:#}");
    }
    assert!(pages.iter().any(|p| p["page"] == "overview"));
    assert!(console["throughput_without_console"].as_f64() > Some(0.0));
    assert!(console["throughput_with_console"].as_f64() > Some(0.0));
    assert!(
        console["console_overview_reads"].as_u64() > Some(0),
        "the open console read the overview: {got:#}"
    );
}

/// `--cluster`: R1 and R3 measured, the ratio given, and the leader-kill
/// run's tasks all completed across a kill that did happen (another
/// leader was named after it); two orchestrators sharing the store's log
/// measured, and their leader's kill survived.
#[test]
fn a_cluster_bench_measures_both_layouts_and_a_leader_kill() {
    let got = bench(&[
        "--cluster",
        "--tasks",
        "100",
        "--samples",
        "5",
        "--concurrency",
        "16",
        "--json",
    ]);
    for layout in ["single_server", "cluster"] {
        for path in ["processes", "bare_jetstream"] {
            let at = format!("/{layout}/figures/{path}/throughput/count");
            assert_eq!(count(&got, &at), 100, "{at}");
        }
    }
    assert_eq!(count(&got, "/cluster/replicas"), 3);
    assert!(got["throughput_ratio_cluster_to_single"]["processes"].as_f64() > Some(0.0));
    let kill = &got["leader_kill"];
    let nodes = ["n0", "n1", "n2"];
    let (killed, next) = (kill["node"].as_str(), kill["new_leader"].as_str());
    assert!(nodes.contains(&killed.unwrap_or("")), "{kill:#}");
    assert!(nodes.contains(&next.unwrap_or("")), "{kill:#}");
    assert_ne!(killed, next, "another node leads after the kill: {kill:#}");
    assert!(kill["new_leader_s"].as_f64() > Some(0.0), "{kill:#}");
    let tasks = count(kill, "/throughput/count");
    assert!(tasks > 0, "{kill:#}");
    assert_eq!(count(kill, "/completed"), tasks, "{kill:#}");
    assert_eq!(count(kill, "/failed"), 0, "{kill:#}");
    assert_eq!(count(kill, "/other"), 0, "{kill:#}");
    // Two orchestrators sharing the store's log: measured, the standby's
    // CPU counted, and the leader killed under load with every task
    // completed through the standby, which took over.
    let replicated = &got["replicated_orchestrators"];
    assert_eq!(
        count(replicated, "/processes/throughput/count"),
        100,
        "{replicated:#}"
    );
    assert!(
        replicated["processes"]["standby_cpu_per_task_us"].as_f64() >= Some(0.0),
        "{replicated:#}"
    );
    let failover = &replicated["failover"];
    assert!(failover["took_over_s"].as_f64() > Some(0.0), "{failover:#}");
    let tasks = count(failover, "/throughput/count");
    assert!(tasks > 0, "{failover:#}");
    assert_eq!(count(failover, "/completed"), tasks, "{failover:#}");
    assert_eq!(count(failover, "/failed"), 0, "{failover:#}");
}

/// A cluster the bench starts itself takes no broker URL.
#[test]
fn cluster_and_a_broker_url_are_refused_together() {
    let out = Command::new(env!("CARGO_BIN_EXE_orchestrator"))
        .args(["bench", "--cluster", "--nats-url", "nats://127.0.0.1:4222"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--cluster") && err.contains("--nats-url"),
        "{err}"
    );
}

/// The bench is a binary of its own, beside the product's: `orchestrator
/// bench` runs it, and without it says what is missing instead of failing
/// blindly.
#[test]
fn bench_runs_the_binary_beside_it_and_names_it_when_missing() {
    let dir = tempfile::tempdir().unwrap();
    let alone = dir.path().join("orchestrator");
    std::fs::copy(env!("CARGO_BIN_EXE_orchestrator"), &alone).unwrap();
    let out = Command::new(&alone)
        .args(["bench", "--tasks", "1"])
        .env("PATH", dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot run orchestrator-bench"), "{err}");

    // Beside it, its own options are what `bench --help` lists.
    let help = Command::new(env!("CARGO_BIN_EXE_orchestrator"))
        .args(["bench", "--help"])
        .output()
        .unwrap();
    assert!(help.status.success());
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("--tasks") && help.contains("--cluster"),
        "{help}"
    );
}
