//! The instruction-count guard: what a task costs the orchestrator, counted
//! in instructions (callgrind, from valgrind) rather than seconds, so that a
//! cost too small for a noisy benchmark's spread is still seen.
//!
//! [`the_task_path_costs_no_more_than_its_baseline`] runs this crate's own
//! binary again, under callgrind, as [`count_child`]: one process with the
//! orchestrator, its HTTP server, an echo worker and an HTTP client,
//! against a real `nats-server` (a process of its own, not counted). For
//! each path below the child runs [`WARM`] operations to warm up, then
//! [`COUNTED`] more one at a time between two marker functions: callgrind
//! zeroes its counts on entering the first and writes them out on entering
//! the second, so each window holds just its operations, in every thread of
//! the process. A last window with no operations measures what the
//! process spends per second when idle (its timers, the broker's
//! heartbeats); that rate times each window's length is taken off, so a
//! run slowed by a busy machine does not read as a costlier task. The
//! instructions per operation left are compared with
//! `tests/instructions.json`; more than [`TOLERANCE`] above fails. A change
//! that moves a figure on purpose writes the new figures there
//! (`ORCH_INSTRUCTIONS_UPDATE=1`) in the same commit, and says why.
//! docs/performance.md says how stable the figures are and how to read a
//! change by function.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use orchestrator::bus::BusSettings;
use orchestrator::service::ServiceSettings;
use orchestrator::trigger::Triggers;
use orchestrator::worker::EchoHandler;
use serde_json::{Value, json};

use crate::common::a2a::{message, rpc};
use crate::common::nats::NatsServer;
use crate::common::system::{System, card};

/// Operations counted per path.
const COUNTED: usize = 40;
/// Operations run before counting, per path.
const WARM: usize = 10;
/// How far above its baseline a figure may be.
const TOLERANCE: f64 = 0.03;
/// Set to the file the child writes its windows' names to.
const CHILD_VAR: &str = "ORCH_INSTRUCTIONS_CHILD";

/// The window of no operations, counted first.
const IDLE: &str = "idle";
/// How long the idle window lasts: several of the periodic checks' ticks
/// (every 2 s), so that where one falls weighs little.
const IDLE_FOR: Duration = Duration::from_secs(10);
/// How long the paths' last work is given before the idle window.
const SETTLE: Duration = Duration::from_secs(2);

/// The paths counted, in the order the child runs them.
const PATHS: [&str; 3] = ["task", "workflow_step", "a2a_send"];

/// A one-step workflow of the echo agent.
const ONE_STEP: &str = "id: one\nsteps:\n  - {id: s, agent: echo, action: echo}\n";

/// Where the committed figures are.
fn baseline_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/instructions.json")
}

#[test]
fn the_task_path_costs_no_more_than_its_baseline() {
    let valgrind = std::env::var("VALGRIND").unwrap_or_else(|_| "valgrind".into());
    let probe = Command::new(&valgrind).arg("--version").output();
    assert!(
        probe.as_ref().is_ok_and(|o| o.status.success()),
        "the instruction-count guard needs valgrind ({valgrind}: {probe:?}); \
         Debian's package is `valgrind`, or set VALGRIND to its path"
    );
    // The dumps are kept in ORCH_INSTRUCTIONS_KEEP when it is set, for
    // `callgrind_annotate`.
    let work = tempfile::tempdir().unwrap();
    let keep = std::env::var_os("ORCH_INSTRUCTIONS_KEEP").map(PathBuf::from);
    let dir = keep.as_deref().unwrap_or(work.path());
    std::fs::create_dir_all(dir).unwrap();
    let windows = dir.join("windows");
    let _ = std::fs::remove_file(&windows);
    let out = dir.join("callgrind.out");
    let status = Command::new(&valgrind)
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .args([
            "--zero-before=*instructions_window_opens*",
            "--dump-before=*instructions_window_closes*",
        ])
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "instructions::count_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_VAR, &windows)
        .env("RUST_LOG", "off")
        .status()
        .unwrap();
    assert!(status.success(), "the counted child failed: {status}");

    // Each window: its name and its wall time, in the order of the dumps.
    let windows: Vec<(String, f64)> = std::fs::read_to_string(&windows)
        .unwrap()
        .lines()
        .map(|l| {
            let (name, secs) = l.split_once(' ').unwrap();
            (name.to_string(), secs.parse().unwrap())
        })
        .collect();
    let names: Vec<&str> = windows.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names[..PATHS.len()], PATHS, "the child's windows");
    assert_eq!(names[PATHS.len()..], [IDLE], "the child's windows");
    let counted: Vec<u64> = (1..=windows.len())
        .map(|i| total_instructions(&PathBuf::from(format!("{}.{i}", out.display()))))
        .collect();
    // What the process spends when nothing is asked of it (its timers,
    // the broker's heartbeats), per second of the (slowed) wall clock:
    // taken off each path's window for the time it lasted, so that a slow
    // run (a loaded machine) does not read as a costlier task.
    let idle = PATHS.len();
    let idle_rate = counted[idle] as f64 / windows[idle].1;
    eprintln!(
        "idle: {idle_rate:.0} instructions per second ({:.1} s)",
        windows[idle].1
    );
    let measured: Vec<(String, u64)> = windows[..idle]
        .iter()
        .zip(&counted)
        .map(|((name, secs), &n)| {
            let own = (n as f64 - idle_rate * secs).max(0.0);
            (name.clone(), (own / COUNTED as f64) as u64)
        })
        .collect();
    let figures: Value = measured
        .iter()
        .map(|(name, n)| (name.clone(), json!(n)))
        .collect::<serde_json::Map<_, _>>()
        .into();

    if std::env::var_os("ORCH_INSTRUCTIONS_UPDATE").is_some() {
        let text = serde_json::to_string_pretty(&json!({
            "about": "instructions per operation, counted by tests/instructions.rs (debug test build, callgrind, the idle rate taken off); see docs/performance.md",
            "per_operation": figures,
        }))
        .unwrap();
        std::fs::write(baseline_path(), text + "\n").unwrap();
        eprintln!("wrote {}: {figures}", baseline_path().display());
        return;
    }
    let baseline: Value =
        serde_json::from_str(&std::fs::read_to_string(baseline_path()).unwrap()).unwrap();
    let mut over = Vec::new();
    for (name, n) in &measured {
        let base = baseline["per_operation"][name]
            .as_u64()
            .unwrap_or_else(|| panic!("{} has no figure for `{name}`", baseline_path().display()));
        let change = *n as f64 / base as f64 - 1.0;
        eprintln!(
            "{name}: {n} instructions per operation, baseline {base} ({:+.2} %)",
            change * 100.0
        );
        if change > TOLERANCE {
            over.push(format!(
                "{name}: {n} against {base} ({:+.2} %)",
                change * 100.0
            ));
        }
    }
    assert!(
        over.is_empty(),
        "more instructions per operation than tests/instructions.json allows (+{} %): {over:?}. \
         If the cost is meant, write the new figures with ORCH_INSTRUCTIONS_UPDATE=1 in the same commit and say why; \
         docs/performance.md says how to find where they went.",
        TOLERANCE * 100.0
    );
}

/// The instructions a callgrind dump counted since its window opened, from
/// its `totals:` line (the sum of its cost lines; its `summary:` counts
/// from the previous dump, the zeroing aside).
fn total_instructions(dump: &Path) -> u64 {
    let text = std::fs::read_to_string(dump)
        .unwrap_or_else(|e| panic!("no callgrind dump at {}: {e}", dump.display()));
    text.lines()
        .find_map(|l| l.strip_prefix("totals:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{} has no totals line", dump.display()))
}

/// Callgrind zeroes its counts when this is entered.
#[inline(never)]
fn instructions_window_opens(name: &str) {
    std::hint::black_box(name);
}

/// Callgrind writes its counts out when this is entered.
#[inline(never)]
fn instructions_window_closes(name: &str) {
    std::hint::black_box(name);
}

/// Runs `op` [`WARM`] times, then [`COUNTED`] times inside a window named
/// `name`, one at a time.
async fn window<F, Fut>(names: &Path, name: &str, mut op: F)
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for i in 0..WARM {
        op(i).await;
    }
    let started = std::time::Instant::now();
    instructions_window_opens(name);
    for i in WARM..WARM + COUNTED {
        op(i).await;
    }
    instructions_window_closes(name);
    record(names, name, started.elapsed());
}

/// Appends window `name` and its wall time to the file `names`.
fn record(names: &Path, name: &str, took: Duration) {
    let mut text = std::fs::read_to_string(names).unwrap_or_default();
    text.push_str(&format!("{name} {}\n", took.as_secs_f64()));
    std::fs::write(names, text).unwrap();
}

/// The counted process (run by the guard under callgrind): the deployed
/// settings' defaults, two runtime threads whatever the machine has.
#[test]
#[ignore = "run under callgrind by the instruction-count guard"]
fn count_child() {
    let Some(names) = std::env::var_os(CHILD_VAR).map(PathBuf::from) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(count(&names));
}

async fn count(names: &Path) {
    let cards = vec![card("echo", &["echo"])];
    let mut sys = System::start_with(
        NatsServer::start(),
        cards.clone(),
        BusSettings::default(),
        |c| {
            *c = ServiceSettings::default();
        },
    )
    .await;
    let triggers = tempfile::tempdir().unwrap();
    std::fs::write(triggers.path().join("one.yaml"), ONE_STEP).unwrap();
    sys.stop_orchestrator().await;
    sys.triggers = Triggers::load(triggers.path(), &Default::default());
    sys.start_orchestrator(cards).await;
    sys.worker(card("echo", &["echo"]), Arc::new(EchoHandler))
        .await;
    let sys = &sys;

    window(names, PATHS[0], |i| async move {
        let body =
            json!({"to": "echo", "action": "echo", "params": {"i": i}, "response_mode": "sync"});
        let (status, task) = sys.post("/v1/tasks", body).await;
        assert_eq!(status, 201, "{task}");
        assert_eq!(task["state"], "completed", "{task}");
    })
    .await;

    window(names, PATHS[1], |i| async move {
        let (status, run) = sys
            .post("/v1/triggers/one/runs", json!({"input": {"i": i}}))
            .await;
        assert_eq!(status, 201, "{run}");
        let id = run["run_id"].as_str().unwrap().to_string();
        let (status, run) = sys.get(&format!("/v1/runs/{id}?wait=30s")).await;
        assert_eq!(status, 200, "{run}");
        assert_eq!(run["state"], "completed", "{run}");
    })
    .await;

    window(names, PATHS[2], |i| async move {
        let id = uuid::Uuid::now_v7().to_string();
        let parts = json!([{"data": {"i": i}}]);
        let sent = message(&id, parts, json!({"skillId": "echo/echo"}));
        let answer = rpc(sys, "SendMessage", json!({ "message": sent })).await;
        assert_eq!(
            answer["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
            "{answer}"
        );
    })
    .await;

    // Idle, once the last path's work has settled.
    tokio::time::sleep(SETTLE).await;
    let started = std::time::Instant::now();
    instructions_window_opens(IDLE);
    tokio::time::sleep(IDLE_FOR).await;
    instructions_window_closes(IDLE);
    record(names, IDLE, started.elapsed());
}
