//! `orchestrator-bench`: the benchmark and cluster-kill harness, a binary
//! of its own so that the product binary does not carry it. Users run it
//! as `orchestrator bench …`, which runs this binary in its place; the
//! processes it measures are the `orchestrator` binary beside it
//! (docs/performance.md).

mod bench;

/// The same allocator as the `orchestrator` binary, so the in-process
/// path measures what a deployment runs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The command line's output helpers, shared with the `orchestrator`
/// binary (`outln`: a closed pipe ends the command quietly).
#[path = "../../cli"]
mod cli {
    #[allow(dead_code)]
    pub mod output;
}

use std::process::ExitCode;

use clap::Parser;

#[derive(Parser)]
#[command(
    name = "orchestrator bench",
    bin_name = "orchestrator bench",
    version,
    about = "Measure the full path against a bare JetStream round trip",
    after_help = "Examples:
  orchestrator bench
  orchestrator bench --tasks 3000 --llm
  orchestrator bench --json

Docs: docs/performance.md"
)]
struct Cli {
    /// Log lines as `human` text or `json`.
    #[arg(long, value_enum, env = "ORCH_LOG_FORMAT", default_value = "human")]
    log_format: LogFormat,
    /// Print the results as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    args: bench::BenchArgs,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Human,
    Json,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // `ORCH_CHECK_ARGS=1`: the command line parsed, nothing run (docs/cli.md).
    if std::env::var_os("ORCH_CHECK_ARGS").is_some() {
        return ExitCode::SUCCESS;
    }
    let format = match cli.log_format {
        LogFormat::Human => orchestrator::telemetry::LogFormat::Human,
        LogFormat::Json => orchestrator::telemetry::LogFormat::Json,
    };
    let _ = orchestrator::telemetry::init("orchestrator-bench", format, "warn", None);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let mut args = cli.args;
    args.json = cli.json;
    runtime.block_on(bench::bench(args))
}
