//! CPU time per task, by process, read from `/proc/<pid>/stat`: what a
//! run costs the machine, and the throughput its cores could carry at that
//! cost.

use crate::cli::output::outln;

/// CPU seconds (user and system, every thread) a process has used so far.
pub(super) fn cpu_seconds_of(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok()??;
    Some(cpu_ticks(&stat)? / ticks as f64)
}

/// User and system clock ticks from a `/proc/<pid>/stat` line.
fn cpu_ticks(stat: &str) -> Option<f64> {
    // The command name (field 2) may hold spaces and parentheses: count
    // from after its last `)`. utime and stime are fields 14 and 15, so the
    // 12th and 13th after the name.
    let after_name = stat.get(stat.rfind(')')? + 1..)?;
    let mut fields = after_name.split_whitespace().skip(11);
    let user: f64 = fields.next()?.parse().ok()?;
    let system: f64 = fields.next()?.parse().ok()?;
    Some(user + system)
}

/// The processes of a run, whose CPU time is counted.
#[derive(Debug, Clone)]
pub(super) struct Processes {
    pub(super) orchestrator: Option<u32>,
    pub(super) worker: Option<u32>,
    /// The broker's processes, counted together: one server, or every
    /// node of a cluster; none with `--nats-url` (a broker the bench did
    /// not start).
    pub(super) brokers: Vec<u32>,
    /// This process: the clients.
    pub(super) client: u32,
}

/// Each process's CPU seconds so far.
#[derive(Debug, Clone, Copy)]
pub(super) struct CpuSnapshot([Option<f64>; 4]);

impl Processes {
    pub(super) fn cpu(&self) -> CpuSnapshot {
        let of = |pid: Option<u32>| pid.and_then(cpu_seconds_of);
        let brokers = match self.brokers.as_slice() {
            [] => None,
            pids => pids.iter().map(|p| cpu_seconds_of(*p)).sum(),
        };
        CpuSnapshot([
            of(self.orchestrator),
            of(self.worker),
            brokers,
            of(Some(self.client)),
        ])
    }
}

/// CPU time per task of a run, in microseconds, by process: what each task
/// costs the machine, and the most tasks per second its cores can carry at
/// that cost.
#[derive(Debug, Clone, serde::Serialize)]
pub(super) struct CpuPerTask {
    pub(super) orchestrator_us: Option<f64>,
    worker_us: Option<f64>,
    broker_us: Option<f64>,
    client_us: Option<f64>,
    total_us: f64,
    cores: usize,
    /// `cores` seconds of CPU per second over `total_us` per task.
    ceiling_per_second: f64,
}

impl CpuSnapshot {
    /// Nothing spent yet: the start of a sum of runs.
    pub(super) fn zero() -> Self {
        CpuSnapshot([Some(0.0); 4])
    }

    /// `self` plus what each process spent between `before` and `after`.
    pub(super) fn plus(self, before: CpuSnapshot, after: CpuSnapshot) -> Self {
        CpuSnapshot(std::array::from_fn(|i| {
            match (self.0[i], before.0[i], after.0[i]) {
                (Some(s), Some(b), Some(a)) => Some(s + a - b),
                _ => None,
            }
        }))
    }
}

impl CpuPerTask {
    pub(super) fn between(before: CpuSnapshot, after: CpuSnapshot, tasks: usize) -> Self {
        // Clock ticks are 10 ms: a tenth of a microsecond per task is more
        // than the figures carry.
        let tenths = |us: f64| (us * 10.0).round() / 10.0;
        let per_task = |i: usize| match (before.0[i], after.0[i]) {
            (Some(b), Some(a)) => Some(tenths((a - b) * 1e6 / tasks.max(1) as f64)),
            _ => None,
        };
        let [orchestrator_us, worker_us, broker_us, client_us] = [0, 1, 2, 3].map(per_task);
        let total_us = tenths(
            [orchestrator_us, worker_us, broker_us, client_us]
                .into_iter()
                .flatten()
                .sum::<f64>(),
        );
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        CpuPerTask {
            orchestrator_us,
            worker_us,
            broker_us,
            client_us,
            total_us,
            cores,
            ceiling_per_second: if total_us > 0.0 {
                (cores as f64 * 1e6 / total_us).round()
            } else {
                0.0
            },
        }
    }
}

/// Prints where a throughput run's CPU time went, per task or message,
/// by process (those not part of the run left out).
pub(super) fn print_cpu(title: &str, cpu: &CpuPerTask) {
    let parts = [
        ("orchestrator", cpu.orchestrator_us),
        ("worker", cpu.worker_us),
        ("broker", cpu.broker_us),
        ("clients", cpu.client_us),
    ];
    let shown: Vec<String> = parts
        .iter()
        .filter_map(|(name, us)| us.map(|us| format!("{name} {us:.0} µs")))
        .collect();
    outln!("{title} (throughput run):");
    outln!("  {}: {:.0} µs in all", shown.join(", "), cpu.total_us);
    outln!(
        "  at that cost {} cores carry at most {:.0} per second",
        cpu.cores,
        cpu.ceiling_per_second
    );
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn cpu_ticks_are_read_after_a_name_with_spaces_and_parentheses() {
        let line = "4242 (tokio (rt) 1) S 1 4242 4242 0 -1 4194560 1000 0 0 0 \
                    731 269 0 0 20 0 9 0 123 456 789";
        assert_eq!(cpu_ticks(line), Some(1000.0));
        assert_eq!(cpu_ticks("4242 (x) S 1 2"), None);
        assert_eq!(cpu_ticks("no name here"), None);
    }

    #[test]
    fn this_process_cpu_time_grows_as_it_works() {
        let me = std::process::id();
        let start = cpu_seconds_of(me).expect("/proc/self/stat is readable");
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut x = 0u64;
        while cpu_seconds_of(me).expect("readable") < start + 0.05 {
            assert!(Instant::now() < deadline, "50 ms of work never showed");
            for i in 0..100_000u64 {
                x = std::hint::black_box(x.wrapping_add(i.wrapping_mul(i)));
            }
        }
    }

    #[test]
    fn cpu_per_task_divides_each_process_and_caps_throughput_by_cores() {
        let before = CpuSnapshot([Some(1.0), Some(2.0), None, Some(0.5)]);
        let after = CpuSnapshot([Some(2.0), Some(2.5), None, Some(1.0)]);
        let cpu = CpuPerTask::between(before, after, 1000);
        assert_eq!(cpu.orchestrator_us, Some(1000.0));
        assert_eq!(cpu.worker_us, Some(500.0));
        assert_eq!(cpu.broker_us, None);
        assert_eq!(cpu.client_us, Some(500.0));
        assert_eq!(cpu.total_us, 2000.0);
        assert_eq!(cpu.ceiling_per_second, (cpu.cores as f64 * 500.0).round());
    }
}
