//! `orchestrator bench`: throughput and latency of the full durable path,
//! against a bare JetStream round trip measured in the same run.
//!
//! Three paths against one broker (a managed `nats-server` on a free port
//! unless `--nats-url` is given): the bare JetStream round trip; the full
//! path in this process (orchestrator, echo worker and clients together);
//! and the full path as deployed, with `orchestrator run` and
//! `orchestrator worker` as processes of their own, driven over HTTP.
//! `--cluster` measures replication and a leader kill instead (see
//! `cluster`); `--a2a`, `--push` and `--llm` add the A2A face, push
//! notifications and LLM agents (see `a2a`, `push` and `llm`).

mod a2a;
mod args;
mod bare;
mod cluster;
mod console;
mod cpu;
mod inproc;
mod llm;
mod overload;
mod preload;
mod procs;
mod push;
mod report;
mod sink;
mod sitting;
mod timing;
mod tools;

use std::process::ExitCode;

pub use args::BenchArgs;
use args::Client;
use timing::{Figures, figures, latencies, measure, on_terminal, print_run, progress};
use tools::{echo_card, rss_mib_of, serve_loopback};

pub async fn bench(args: BenchArgs) -> ExitCode {
    match sitting::run(&args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
