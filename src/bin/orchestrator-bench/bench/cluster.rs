//! `orchestrator bench --cluster`: what replication costs and what a
//! leader election stalls. In one sitting: the deployed path and the bare
//! round trip on a single server with every stream in one replica (R1),
//! then on a local three-node cluster with every stream in three (R3);
//! then the deployed path on the cluster again while the node leading the
//! task stream is killed (SIGKILL) and, once another node leads, started
//! again. The stall is the longest time no task ended, from the kill on.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use orchestrator::broker::{LocalCluster, ManagedBroker};
use orchestrator::bus::{BusSettings, Names};
use serde_json::{Value, json};

use super::cpu::{CpuPerTask, print_cpu};
use super::procs::{self, Deployed, Ended};
use super::{BenchArgs, Figures, on_terminal, print_run};
use crate::cli::output::outln;
use tokio::sync::Semaphore;

/// Nodes of the cluster, and replicas of every stream on it.
const NODES: usize = 3;

/// The figures of one broker layout.
struct Layout {
    bare: (Figures, Figures),
    bare_cpu: CpuPerTask,
    deployed: (Figures, Figures),
    cpu: CpuPerTask,
}

impl Layout {
    fn json(&self) -> Value {
        json!({
            "processes": {
                "throughput": self.deployed.0,
                "low_load": self.deployed.1,
                "cpu_per_task": self.cpu,
            },
            "bare_jetstream": {
                "throughput": self.bare.0,
                "low_load": self.bare.1,
                "cpu_per_message": self.bare_cpu,
            },
        })
    }

    fn print(&self, title: &str, concurrency: usize) {
        outln!("{title}:");
        print_run(
            "  full path, as deployed",
            ("tasks", "tasks/s"),
            concurrency,
            &self.deployed,
        );
        print_run(
            "  bare JetStream round trip",
            ("messages", "msgs/s"),
            concurrency,
            &self.bare,
        );
        print_cpu("  CPU per task, as deployed", &self.cpu);
    }
}

/// Measures one layout: the broker at `url` (processes `brokers`), every
/// stream in `replicas`.
async fn layout(
    url: &str,
    brokers: &[u32],
    replicas: usize,
    dir: &Path,
    args: &BenchArgs,
) -> Result<Layout, String> {
    let tag = &uuid::Uuid::now_v7().simple().to_string()[20..];
    let (bare, bare_cpu) = super::bare::bare_round_trip(url, brokers, tag, replicas, args).await?;
    let prefix = format!("benchp{tag}");
    let deployed = Deployed::start(url, &prefix, dir, replicas, args, None).await?;
    let measured = procs::full_path(&deployed, brokers, args).await?;
    drop(deployed);
    Ok(Layout {
        bare,
        bare_cpu,
        deployed: measured.figures,
        cpu: measured.cpu,
    })
}

/// What the leader-kill run saw.
#[derive(serde::Serialize)]
struct LeaderKill {
    /// The stream whose leader was killed.
    stream: String,
    /// The node killed.
    node: String,
    /// The node leading the stream after it.
    new_leader: String,
    /// Seconds of steady load before the kill, and of load after it.
    warm_up_s: f64,
    load_after_kill_s: f64,
    /// Tasks ended per second before the kill.
    before_per_second: f64,
    /// From the kill until the cluster named another leader of the stream
    /// (polled every 50 ms).
    new_leader_s: f64,
    /// The longest time no task ended, from the kill to the end of the
    /// load.
    stall_s: f64,
    /// The longest time no task ended before the kill: the run's ordinary
    /// gaps.
    longest_gap_before_kill_s: f64,
    /// Tasks that took longer than a lease (`bus.ack_wait`): those whose
    /// delivery was lost with the node, delivered again when their lease
    /// ran out.
    over_a_lease: usize,
    /// The longest a task took.
    slowest_s: f64,
    /// The whole run: tasks ended per second, and their latency.
    throughput: Figures,
    /// Final states of the run's tasks.
    completed: usize,
    failed: usize,
    other: usize,
    /// Submits the orchestrator did not take and the client sent again
    /// (same idempotency key).
    resubmits: usize,
}

pub(super) async fn run(args: &BenchArgs) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let dir = dir.path();

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    let single_dir = dir.join("single");
    let single = ManagedBroker::start(&single_dir, port, None)
        .await
        .map_err(|e| e.to_string())?;
    let pids: Vec<u32> = single.pid().into_iter().collect();
    let r1 = layout(single.url(), &pids, 1, &single_dir, args).await?;
    single.stop().await;

    let cluster = LocalCluster::start(&dir.join("cluster"), NODES, "127.0.0.1", "")
        .await
        .map_err(|e| e.to_string())?;
    let r3 = layout(
        &cluster.urls(),
        &cluster.pids(),
        NODES,
        &dir.join("r3"),
        args,
    )
    .await?;
    let logged = replicated(
        &cluster.urls(),
        &cluster.pids(),
        &dir.join("replicated"),
        args,
    )
    .await?;
    cluster.stop().await;
    // A cluster of its own: no streams of the runs before to elect leaders
    // for.
    let kill = leader_kill(&dir.join("kill"), args).await?;
    let failover = orchestrator_failover(&dir.join("failover"), args).await?;
    if on_terminal() {
        eprint!("\r\x1b[2K");
    }

    let ratio = |r3: &Figures, r1: &Figures| r3.per_second / r1.per_second;
    let deployed_ratio = ratio(&r3.deployed.0, &r1.deployed.0);
    let bare_ratio = ratio(&r3.bare.0, &r1.bare.0);
    if args.json {
        outln!(
            "{}",
            json!({
                "single_server": {"nodes": 1, "replicas": 1, "figures": r1.json()},
                "cluster": {"nodes": NODES, "replicas": NODES, "figures": r3.json()},
                "throughput_ratio_cluster_to_single": {
                    "processes": deployed_ratio,
                    "bare_jetstream": bare_ratio,
                },
                "leader_kill": kill,
                "replicated_orchestrators": {
                    "processes": {
                        "throughput": logged.deployed.0,
                        "low_load": logged.deployed.1,
                        "cpu_per_task": logged.cpu,
                        "standby_cpu_per_task_us": logged.standby_us,
                    },
                    "throughput_ratio_to_single": logged.deployed.0.per_second / r1.deployed.0.per_second,
                    "failover": failover,
                },
                "concurrency": args.concurrency,
                "client": args.client,
            })
        );
        return Ok(());
    }
    r1.print(
        "single server, every stream in 1 replica (R1)",
        args.concurrency,
    );
    r3.print(
        &format!("{NODES}-node cluster, every stream in {NODES} replicas (R{NODES})"),
        args.concurrency,
    );
    outln!(
        "R{NODES} / R1 throughput: deployed {:.0} %, bare JetStream {:.0} %",
        deployed_ratio * 100.0,
        bare_ratio * 100.0
    );
    outln!(
        "leader kill, R{NODES}, {} in flight: {:.0} s of load ({:.0} tasks/s), then node {} (leading {}) killed, {:.0} s more load",
        args.concurrency,
        kill.warm_up_s,
        kill.before_per_second,
        kill.node,
        kill.stream,
        kill.load_after_kill_s
    );
    outln!(
        "  {} led it after {:.1} s; the node restarted then",
        kill.new_leader,
        kill.new_leader_s
    );
    outln!(
        "  longest time no task ended: {:.2} s from the kill on (before it: {:.2} s)",
        kill.stall_s,
        kill.longest_gap_before_kill_s
    );
    outln!(
        "  {} tasks over a lease (delivery lost with the node, delivered again when it ran out); slowest {:.1} s",
        kill.over_a_lease,
        kill.slowest_s
    );
    outln!(
        "  {} tasks: {} completed, {} failed, {} other; {} submits sent again; p50 {:.0} ms, p99 {:.0} ms",
        kill.throughput.count,
        kill.completed,
        kill.failed,
        kill.other,
        kill.resubmits,
        kill.throughput.p50_ms,
        kill.throughput.p99_ms
    );
    print_run(
        &format!(
            "two orchestrators sharing the store's log (replication.enabled) on the R{NODES} cluster: the leader's figures"
        ),
        ("tasks", "tasks/s"),
        args.concurrency,
        &logged.deployed,
    );
    print_cpu("  CPU per task, the leader's deployment", &logged.cpu);
    if let (Some(us), Some(leader)) = (logged.standby_us, logged.cpu.orchestrator_us) {
        outln!(
            "  the standby (following the log): {us:.0} µs per task, {:.0} % of the leader's",
            us / leader * 100.0
        );
    }
    outln!(
        "  replicated / single server R1 throughput: {:.0} %",
        logged.deployed.0.per_second / r1.deployed.0.per_second * 100.0
    );
    outln!(
        "orchestrator failover, R{NODES}, clients sending to the standby: {:.0} s of load, then the leading orchestrator SIGKILLed, {:.0} s more",
        failover.warm_up_s,
        failover.load_after_kill_s
    );
    outln!(
        "  the standby led {:.1} s after the kill; longest time no task ended: {:.2} s (before it: {:.2} s)",
        failover.took_over_s,
        failover.stall_s,
        failover.longest_gap_before_kill_s
    );
    outln!(
        "  {} tasks: {} completed, {} failed, {} other; {} submits sent again",
        failover.throughput.count,
        failover.completed,
        failover.failed,
        failover.other,
        failover.resubmits
    );
    Ok(())
}

/// Load before the kill.
const WARM_UP: Duration = Duration::from_secs(5);

/// Runs the deployed path on a cluster of its own under steady load
/// (`concurrency` tasks in flight): [`WARM_UP`], then the kill of the task
/// stream's leader, then a lease and ten seconds more, so that deliveries
/// lost with the node come back within the run.
async fn leader_kill(dir: &Path, args: &BenchArgs) -> Result<LeaderKill, String> {
    let mut cluster = LocalCluster::start(&dir.join("cluster"), NODES, "127.0.0.1", "")
        .await
        .map_err(|e| e.to_string())?;
    let tag = &uuid::Uuid::now_v7().simple().to_string()[20..];
    let prefix = format!("benchk{tag}");
    let stream = Names::new(&prefix).tasks_stream();
    let lease = BusSettings::default().ack_wait;
    let after_kill = lease + Duration::from_secs(10);
    let deployed = Deployed::start(&cluster.urls(), &prefix, dir, NODES, args, None).await?;
    // When each task ended, and how.
    let ended: Arc<Mutex<Vec<(Instant, Ended)>>> = Arc::default();
    let started = Instant::now();
    let driven = drive(&deployed, args, WARM_UP + after_kill, &ended, "leader kill");
    let killer = async {
        tokio::time::sleep(WARM_UP).await;
        let leader = cluster
            .leader_of(&stream)
            .await
            .ok_or_else(|| format!("{stream} has no leader to kill"))?;
        cluster.kill(leader).await;
        let killed_at = Instant::now();
        let next = cluster
            .wait_leader_of(&stream, Duration::from_secs(60))
            .await
            .map_err(|e| e.to_string())?;
        let new_leader = killed_at.elapsed();
        cluster.restart(leader).await.map_err(|e| e.to_string())?;
        Ok::<_, String>((leader, killed_at, next, new_leader))
    };
    let (driven, killed) = tokio::join!(driven, killer);
    let ((stopped, elapsed), (leader, killed_at, next, new_leader)) = (driven?, killed?);
    drop(deployed);
    let all = std::mem::take(&mut *ended.lock().map_err(|e| e.to_string())?);
    let mut times: Vec<Instant> = all.iter().map(|(t, _)| *t).collect();
    times.sort();
    // Gaps while the load ran: after it, the last tasks drain.
    let under_load = &times[..times.partition_point(|t| *t <= stopped)];
    let (stall, usual) = gaps(under_load, killed_at);
    let before = under_load.partition_point(|t| *t < killed_at);
    let state = |s: &str| all.iter().filter(|(_, e)| e.state == s).count();
    let (completed, failed) = (state("completed"), state("failed"));
    let latencies: Vec<Duration> = all.iter().map(|(_, e)| e.latency).collect();
    Ok(LeaderKill {
        stream,
        node: cluster.name(leader).to_string(),
        new_leader: cluster.name(next).to_string(),
        warm_up_s: WARM_UP.as_secs_f64(),
        load_after_kill_s: after_kill.as_secs_f64(),
        before_per_second: before as f64 / (killed_at - started).as_secs_f64(),
        new_leader_s: new_leader.as_secs_f64(),
        stall_s: stall.as_secs_f64(),
        longest_gap_before_kill_s: usual.as_secs_f64(),
        over_a_lease: latencies.iter().filter(|l| **l >= lease).count(),
        slowest_s: latencies
            .iter()
            .max()
            .copied()
            .unwrap_or_default()
            .as_secs_f64(),
        throughput: super::figures(latencies, elapsed),
        completed,
        failed,
        other: all.len() - completed - failed,
        resubmits: all.iter().map(|(_, e)| e.resubmits).sum(),
    })
}

/// Keeps `concurrency` tasks in flight on `deployed` for `length`
/// (submits sent again while not taken), recording when each ended in
/// `ended`; when the load stopped, and how long until every task ended.
async fn drive(
    deployed: &Deployed,
    args: &BenchArgs,
    length: Duration,
    ended: &Arc<Mutex<Vec<(Instant, Ended)>>>,
    what: &str,
) -> Result<(Instant, Duration), String> {
    let started = Instant::now();
    let slots = Arc::new(Semaphore::new(args.concurrency.max(1)));
    let mut handles = Vec::new();
    while started.elapsed() < length {
        let permit = Arc::clone(&slots)
            .acquire_owned()
            .await
            .map_err(|e| e.to_string())?;
        let task = deployed.task(handles.len(), true);
        let ended = Arc::clone(ended);
        handles.push(tokio::spawn(async move {
            let e = task.await?;
            drop(permit);
            if let Ok(mut all) = ended.lock() {
                all.push((Instant::now(), e));
            }
            Ok::<(), String>(())
        }));
        if on_terminal() && handles.len().is_multiple_of(500) {
            eprint!(
                "\r{what}: {} tasks, {:.0} s   ",
                handles.len(),
                started.elapsed().as_secs_f64()
            );
        }
    }
    let stopped = Instant::now();
    for h in handles {
        h.await.map_err(|e| e.to_string())??;
    }
    Ok((stopped, started.elapsed()))
}

/// The replicated layout: on the cluster (every stream in three
/// replicas), the store's commits through its log, one orchestrator
/// leading and one standing by.
struct Replicated {
    deployed: (Figures, Figures),
    cpu: CpuPerTask,
    /// The standby's CPU per task over the throughput and low-load runs.
    standby_us: Option<f64>,
}

async fn replicated(
    url: &str,
    brokers: &[u32],
    dir: &Path,
    args: &BenchArgs,
) -> Result<Replicated, String> {
    let logged = BenchArgs {
        replicated_store: true,
        ..args.clone()
    };
    let tag = &uuid::Uuid::now_v7().simple().to_string()[20..];
    let mut deployed =
        Deployed::start(url, &format!("benchr{tag}"), dir, NODES, &logged, None).await?;
    deployed.add_standby().await?;
    let standby = deployed.standby_pid();
    let before = standby.and_then(super::cpu::cpu_seconds_of);
    let measured = procs::full_path(&deployed, brokers, &logged).await?;
    let after = standby.and_then(super::cpu::cpu_seconds_of);
    let tasks = (measured.figures.0.count + measured.figures.1.count).max(1) as f64;
    let standby_us = before.zip(after).map(|(b, a)| (a - b) * 1e6 / tasks);
    Ok(Replicated {
        deployed: measured.figures,
        cpu: measured.cpu,
        standby_us,
    })
}

/// What the orchestrator failover run saw.
#[derive(serde::Serialize)]
struct Failover {
    /// Seconds of load before the leader was killed, and after.
    warm_up_s: f64,
    load_after_kill_s: f64,
    /// From the SIGKILL of the leading orchestrator until the standby's
    /// `/readyz` said it leads (polled every 50 ms).
    took_over_s: f64,
    /// The longest time no task ended, from the kill on, and before it.
    stall_s: f64,
    longest_gap_before_kill_s: f64,
    throughput: Figures,
    completed: usize,
    failed: usize,
    other: usize,
    resubmits: usize,
}

/// On a cluster of its own, the replicated layout under steady load with
/// every client sending to the standby (which forwards to the leader):
/// [`WARM_UP`], then the leading orchestrator SIGKILLed, then 15 s more.
async fn orchestrator_failover(dir: &Path, args: &BenchArgs) -> Result<Failover, String> {
    let cluster = LocalCluster::start(&dir.join("cluster"), NODES, "127.0.0.1", "")
        .await
        .map_err(|e| e.to_string())?;
    let logged = BenchArgs {
        replicated_store: true,
        ..args.clone()
    };
    let tag = &uuid::Uuid::now_v7().simple().to_string()[20..];
    let mut deployed = Deployed::start(
        &cluster.urls(),
        &format!("benchf{tag}"),
        dir,
        NODES,
        &logged,
        None,
    )
    .await?;
    deployed.add_standby().await?;
    let standby = deployed
        .through_standby()
        .ok_or("the standby has no address")?;
    let leader = deployed.orchestrator_pid().ok_or("the leader has no pid")?;
    let after_kill = Duration::from_secs(15);
    let ended: Arc<Mutex<Vec<(Instant, Ended)>>> = Arc::default();
    let driven = drive(&deployed, &logged, WARM_UP + after_kill, &ended, "failover");
    let killer = async {
        tokio::time::sleep(WARM_UP).await;
        let pid = nix::unistd::Pid::from_raw(leader as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL)
            .map_err(|e| e.to_string())?;
        let killed_at = Instant::now();
        let deadline = killed_at + Duration::from_secs(60);
        loop {
            if let Ok(r) = deployed
                .client
                .get(format!("{standby}/readyz"))
                .send()
                .await
                && let Ok(said) = r.json::<Value>().await
                && said["role"] == "leader"
            {
                return Ok::<_, String>((killed_at, killed_at.elapsed()));
            }
            if Instant::now() > deadline {
                return Err("the standby never took over".to_string());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let (driven, killed) = tokio::join!(driven, killer);
    let ((stopped, elapsed), (killed_at, took_over)) = (driven?, killed?);
    deployed.kill_leader();
    drop(deployed);
    cluster.stop().await;
    let all = std::mem::take(&mut *ended.lock().map_err(|e| e.to_string())?);
    let mut times: Vec<Instant> = all.iter().map(|(t, _)| *t).collect();
    times.sort();
    let under_load = &times[..times.partition_point(|t| *t <= stopped)];
    let (stall, usual) = gaps(under_load, killed_at);
    let state = |s: &str| all.iter().filter(|(_, e)| e.state == s).count();
    let (completed, failed) = (state("completed"), state("failed"));
    let latencies: Vec<Duration> = all.iter().map(|(_, e)| e.latency).collect();
    Ok(Failover {
        warm_up_s: WARM_UP.as_secs_f64(),
        load_after_kill_s: after_kill.as_secs_f64(),
        took_over_s: took_over.as_secs_f64(),
        stall_s: stall.as_secs_f64(),
        longest_gap_before_kill_s: usual.as_secs_f64(),
        throughput: super::figures(latencies, elapsed),
        completed,
        failed,
        other: all.len() - completed - failed,
        resubmits: all.iter().map(|(_, e)| e.resubmits).sum(),
    })
}

/// The longest time without an ending in `times` (sorted) from `kill` on
/// (the wait for the first ending after it included), and before it.
fn gaps(times: &[Instant], kill: Instant) -> (Duration, Duration) {
    let split = times.partition_point(|t| *t < kill);
    let longest = |points: &[Instant]| {
        points
            .windows(2)
            .map(|w| w[1] - w[0])
            .max()
            .unwrap_or_default()
    };
    let after = times[split..]
        .first()
        .map(|first| *first - kill)
        .unwrap_or_default()
        .max(longest(&times[split..]));
    (after, longest(&times[..split]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stall_counts_from_the_kill_and_the_usual_gap_before_it() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let times = [at(0), at(10), at(30), at(2_530), at(2_540), at(2_600)];
        // Killed at 100 ms: nothing ends until 2,530 ms.
        let (stall, usual) = gaps(&times, at(100));
        assert_eq!(stall, Duration::from_millis(2_430));
        assert_eq!(usual, Duration::from_millis(20));
        // Killed at 2,535 ms: the longest gap after is 60 ms, before 2,500.
        let (stall, usual) = gaps(&times, at(2_535));
        assert_eq!(stall, Duration::from_millis(60));
        assert_eq!(usual, Duration::from_millis(2_500));
        assert_eq!(gaps(&[], at(0)), (Duration::ZERO, Duration::ZERO));
    }
}
