//! The `orchestrator` command line: parses arguments, sets up logging and
//! calls the library. `docs/operations.md` ("Command line") lists every
//! command and exit code.

mod cli;

/// glibc's allocator spends a fifth of the orchestrator's time on the task
/// path (`docs/performance.md`); mimalloc's thread-local free lists do not.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use cli::agents::AgentsCommand;
use cli::client::{AuditCommand, ClientArgs, DlqCommand, TasksCommand};
use cli::offline::{CheckArgs, VerifyArgs};
use cli::runs::{RunsCommand, TriggerArgs};
use cli::serve::{RunArgs, WorkerArgs};

#[derive(Parser)]
#[command(
    name = "orchestrator",
    version,
    about = "A queue-based orchestrator for AI agents"
)]
struct Cli {
    /// Log lines as `human` text or `json` (one object per line, with the
    /// task's ids when in a task's context).
    #[arg(
        long,
        global = true,
        value_enum,
        env = "ORCH_LOG_FORMAT",
        default_value = "human"
    )]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Human,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Run the orchestrator: store, event consumer and HTTP API.
    Run(RunArgs),
    /// Run a worker for one agent.
    Worker(WorkerArgs),
    /// Start a run of a trigger.
    Trigger {
        #[command(flatten)]
        client: ClientArgs,
        #[command(flatten)]
        run: TriggerArgs,
    },
    /// Show and list workflow runs; answer their approval gates; cancel.
    Runs {
        #[command(flatten)]
        client: ClientArgs,
        #[command(subcommand)]
        command: RunsCommand,
    },
    /// Submit, show, list and cancel tasks.
    Tasks {
        #[command(flatten)]
        client: ClientArgs,
        #[command(subcommand)]
        command: TasksCommand,
    },
    /// List audit records and verify the chain.
    Audit {
        #[command(flatten)]
        client: ClientArgs,
        #[command(subcommand)]
        command: AuditCommand,
    },
    /// List and replay dead letters.
    Dlq {
        #[command(flatten)]
        client: ClientArgs,
        #[command(subcommand)]
        command: DlqCommand,
    },
    /// Show agent cards and live instances.
    Agents {
        #[command(flatten)]
        client: ClientArgs,
        #[command(subcommand)]
        command: AgentsCommand,
    },
    /// Show the span tree of a task's trace, or of every task of a
    /// correlation id, from Jaeger's query API.
    Trace {
        #[command(flatten)]
        client: ClientArgs,
        #[command(flatten)]
        trace: cli::trace::TraceArgs,
    },
    /// Check trigger files and agent cards offline: every problem, with
    /// its file and line.
    Validate(cli::validate::ValidateArgs),
    /// Measure the full path against a bare JetStream round trip.
    Bench(cli::bench::BenchArgs),
    /// Check envelopes and worker events against wire format v1.
    #[command(subcommand)]
    Envelope(EnvelopeCommand),
    /// Offline tools for a store no process has open.
    #[command(subcommand)]
    Store(StoreCommand),
    /// Keys for task tokens and the API.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// The broker's side of a deployment.
    #[command(subcommand)]
    Nats(NatsCommand),
}

#[derive(Subcommand)]
enum NatsCommand {
    /// Write the NATS users of a deployment: `auth.conf` (one user per
    /// process kind, each allowed only its own subjects) and a seed file per
    /// user.
    Config(cli::nats::ConfigArgs),
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Write a new key pair: the orchestrator signs with one, workers verify
    /// with the other.
    Generate(cli::keys::GenerateArgs),
    /// Make an API key for a principal: prints the key (once) and the
    /// `api_auth.api_keys` entry that holds only its hash.
    ApiKey(cli::keys::ApiKeyArgs),
}

#[derive(Subcommand)]
enum EnvelopeCommand {
    /// Check one JSON message strictly, as the orchestrator reads user input.
    Check(CheckArgs),
}

#[derive(Subcommand)]
enum StoreCommand {
    /// Verify the audit chain and that the indexes agree with the tasks.
    Verify(VerifyArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let format = match cli.log_format {
        LogFormat::Human => orchestrator::telemetry::LogFormat::Human,
        LogFormat::Json => orchestrator::telemetry::LogFormat::Json,
    };
    // The services install their telemetry once their settings are read;
    // the other commands log warnings and export nothing.
    let service = matches!(cli.command, Command::Run(_) | Command::Worker(_));
    if !service {
        let _ = orchestrator::telemetry::init("orchestrator-cli", format, "warn", None);
    }
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
    runtime.block_on(async move {
        match cli.command {
            Command::Run(args) => cli::serve::run(args, format).await,
            Command::Worker(args) => cli::serve::worker(args, format).await,
            Command::Trigger { client, run } => cli::runs::trigger(&client, run).await,
            Command::Runs { client, command } => cli::runs::runs(&client, command).await,
            Command::Tasks { client, command } => cli::client::tasks(&client, command).await,
            Command::Audit { client, command } => cli::client::audit(&client, command).await,
            Command::Dlq { client, command } => cli::client::dlq(&client, command).await,
            Command::Agents { client, command } => cli::agents::agents(&client, command).await,
            Command::Trace { client, trace } => cli::trace::trace(&client, trace).await,
            Command::Validate(args) => cli::validate::validate(args),
            Command::Bench(args) => cli::bench::bench(args).await,
            Command::Envelope(EnvelopeCommand::Check(args)) => cli::offline::check(&args),
            Command::Store(StoreCommand::Verify(args)) => cli::offline::verify(&args),
            Command::Keys(KeysCommand::Generate(args)) => cli::keys::generate(&args),
            Command::Keys(KeysCommand::ApiKey(args)) => cli::keys::api_key(&args),
            Command::Nats(NatsCommand::Config(args)) => cli::nats::config(&args),
        }
    })
}
