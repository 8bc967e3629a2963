//! The `orchestrator` command line: parses arguments, sets up logging and
//! calls the library. `docs/cli.md` lists every
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
    about = "A queue-based orchestrator for AI agents",
    after_help = "Examples:
  orchestrator dev
  orchestrator new agent greeter
  orchestrator tasks list --since 1h
  orchestrator trigger summarize-project --input '{\"query\": \"architecture\"}' --wait

Docs: docs/README.md; every command: docs/cli.md"
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
    /// Where the client commands call, with which credential, and `--json`
    /// for every command.
    #[command(flatten)]
    client: ClientArgs,
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
    #[command(after_help = "Examples:
  orchestrator run
  orchestrator run --triggers triggers --agents agents --http-addr 0.0.0.0:8080
  orchestrator run --agents team.pack.yaml --config settings.json")]
    Run(RunArgs),
    /// Run a worker for one agent.
    #[command(after_help = "Examples:
  orchestrator worker --agent agents/knowledge-agent
  orchestrator worker --agent examples/llm-pack/research.pack.yaml --name researcher --config llm.json")]
    Worker(WorkerArgs),
    /// Run everything in one terminal: the orchestrator (and its broker)
    /// and a worker per agent, their logs interleaved; Ctrl-C stops all.
    Dev(cli::dev::DevArgs),
    /// Start a run of a trigger.
    #[command(after_help = "Examples:
  orchestrator trigger summarize-project --input '{\"query\": \"architecture\"}' --wait
  orchestrator trigger email-stakeholders --input '{\"query\": \"architecture\", \"to\": [\"team@example.com\"]}' --idempotency-key weekly-1")]
    Trigger {
        #[command(flatten)]
        run: TriggerArgs,
    },
    /// List the triggers the orchestrator has loaded.
    #[command(after_help = "Examples:
  orchestrator triggers list")]
    Triggers {
        #[command(subcommand)]
        command: cli::triggers::TriggersCommand,
    },
    /// Follow a task or a workflow run live until it ends.
    #[command(after_help = "Examples:
  orchestrator watch 01a21c14-0704-74c1-b2b5-54c6f9530ba1
  orchestrator watch RUN_OR_TASK_ID --json")]
    Watch {
        /// A task id or a run id.
        id: String,
    },
    /// Show and list workflow runs; answer their approval gates; cancel.
    #[command(after_help = "Examples:
  orchestrator runs list
  orchestrator runs get RUN_ID --wait")]
    Runs {
        #[command(subcommand)]
        command: RunsCommand,
    },
    /// Submit, show, list and cancel tasks.
    #[command(after_help = "Examples:
  orchestrator tasks list --since 1h
  orchestrator tasks submit --to greeter --action greet --params '{\"name\": \"Ada\"}' --wait")]
    Tasks {
        #[command(subcommand)]
        command: TasksCommand,
    },
    /// List audit records and verify the chain.
    #[command(after_help = "Examples:
  orchestrator audit list --limit 20
  orchestrator audit verify")]
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
    /// List and replay dead letters.
    #[command(after_help = "Examples:
  orchestrator dlq list
  orchestrator dlq replay TASK_ID")]
    Dlq {
        #[command(subcommand)]
        command: DlqCommand,
    },
    /// Show agent cards and live instances.
    #[command(after_help = "Examples:
  orchestrator agents list
  orchestrator agents show knowledge-agent")]
    Agents {
        #[command(subcommand)]
        command: AgentsCommand,
    },
    /// Show the span tree of a task's trace, or of every task of a
    /// correlation id, from Jaeger's query API.
    #[command(after_help = "Examples:
  orchestrator trace 01a21c14-0704-74c1-b2b5-54c6f9530ba1
  orchestrator trace TRACE_ID --jaeger-url http://127.0.0.1:16686")]
    Trace {
        #[command(flatten)]
        trace: cli::trace::TraceArgs,
    },
    /// Check trigger files and agent cards offline: every problem, with
    /// its file and line.
    #[command(after_help = "Examples:
  orchestrator validate
  orchestrator validate triggers/welcome.yaml agents/greeter
  orchestrator validate --json")]
    Validate(cli::validate::ValidateArgs),
    /// Print this binary's version, wire format and store format.
    #[command(after_help = "Examples:
  orchestrator version
  orchestrator version --json")]
    Version,
    /// Print a shell completion script (bash, zsh, fish, elvish,
    /// powershell).
    #[command(after_help = "Examples:
  source <(orchestrator completions bash)
  orchestrator completions zsh > _orchestrator
  orchestrator completions fish > orchestrator.fish")]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Make something new to start from: `new agent NAME`.
    #[command(subcommand)]
    #[command(after_help = "Examples:
  orchestrator new agent greeter
  orchestrator new agent greeter --lang rust")]
    New(cli::scaffold::NewCommand),
    /// Measure the full path against a bare JetStream round trip (runs
    /// `orchestrator-bench`, installed beside this binary; `orchestrator
    /// bench --help` lists its options).
    #[command(disable_help_flag = true)]
    Bench {
        /// The benchmark's own arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// Check envelopes and worker events against wire format v1.
    #[command(subcommand)]
    #[command(after_help = "Examples:
  orchestrator envelope check envelope.json")]
    Envelope(EnvelopeCommand),
    /// Offline tools for a store no process has open.
    #[command(subcommand)]
    #[command(after_help = "Examples:
  orchestrator store verify --data-dir data
  orchestrator store verify --data-dir data --against-log --config settings.json")]
    Store(StoreCommand),
    /// Keys for task tokens and the API.
    #[command(subcommand)]
    #[command(after_help = "Examples:
  orchestrator keys generate --dir data/keys
  orchestrator keys api-key --principal ci --scope tasks:submit")]
    Keys(KeysCommand),
    /// The broker's side of a deployment.
    #[command(subcommand)]
    #[command(after_help = "Examples:
  orchestrator nats config --agents agents --dir data/nats-auth")]
    Nats(NatsCommand),
}

#[derive(Subcommand)]
enum NatsCommand {
    /// Write the NATS users of a deployment: `auth.conf` (one user per
    /// process kind, each allowed only its own subjects) and a seed file per
    /// user.
    #[command(after_help = "Examples:
  orchestrator nats config --agents agents --dir data/nats-auth")]
    Config(cli::nats::ConfigArgs),
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Write a new key pair: the orchestrator signs with one, workers verify
    /// with the other.
    #[command(after_help = "Examples:
  orchestrator keys generate --dir data/keys
  orchestrator keys generate --dir data/keys --force")]
    Generate(cli::keys::GenerateArgs),
    /// Make an API key for a principal: prints the key (once) and the
    /// `api_auth.api_keys` entry that holds only its hash.
    #[command(after_help = "Examples:
  orchestrator keys api-key --principal ci --scope tasks:submit --scope tasks:read")]
    ApiKey(cli::keys::ApiKeyArgs),
}

#[derive(Subcommand)]
enum EnvelopeCommand {
    /// Check one JSON message strictly, as the orchestrator reads user input.
    #[command(after_help = "Examples:
  orchestrator envelope check envelope.json
  orchestrator envelope check event.json --event")]
    Check(CheckArgs),
}

#[derive(Subcommand)]
enum StoreCommand {
    /// Verify the audit chain and that the indexes agree with the tasks.
    #[command(after_help = "Examples:
  orchestrator store verify --data-dir data")]
    Verify(VerifyArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The benchmark is a binary of its own, so this one does not carry it;
    // it checks its own arguments, also under `ORCH_CHECK_ARGS`.
    if let Command::Bench { args } = &cli.command {
        return bench(args, cli.client.json, cli.log_format);
    }
    // `ORCH_CHECK_ARGS=1`: the command line parsed, nothing run (how the
    // docs' tests check the commands they cannot run; docs/cli.md).
    if std::env::var_os("ORCH_CHECK_ARGS").is_some() {
        return ExitCode::SUCCESS;
    }
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
    let client = cli.client;
    let json = client.json;
    runtime.block_on(async move {
        match cli.command {
            Command::Run(args) => cli::serve::run(args, format).await,
            Command::Worker(args) => cli::serve::worker(args, format).await,
            Command::Dev(args) => cli::dev::dev(args).await,
            Command::Triggers { command } => cli::triggers::triggers(&client, command).await,
            Command::Watch { id } => cli::watch::watch(&client, id).await,
            Command::Version => version(json),
            Command::Completions { shell } => {
                let mut command = <Cli as clap::CommandFactory>::command();
                clap_complete::generate(
                    shell,
                    &mut command,
                    "orchestrator",
                    &mut std::io::stdout(),
                );
                ExitCode::SUCCESS
            }
            Command::Trigger { run } => cli::runs::trigger(&client, run).await,
            Command::Runs { command } => cli::runs::runs(&client, command).await,
            Command::Tasks { command } => cli::client::tasks(&client, command).await,
            Command::Audit { command } => cli::client::audit(&client, command).await,
            Command::Dlq { command } => cli::client::dlq(&client, command).await,
            Command::Agents { command } => cli::agents::agents(&client, command).await,
            Command::Trace { trace } => cli::trace::trace(&client, trace).await,
            Command::Validate(mut args) => {
                args.json = json;
                cli::validate::validate(args)
            }
            Command::Bench { .. } => unreachable!("run before the runtime starts"),
            Command::New(command) => cli::scaffold::new(command, json),
            Command::Envelope(EnvelopeCommand::Check(mut args)) => {
                args.json = json;
                cli::offline::check(&args)
            }
            Command::Store(StoreCommand::Verify(mut args)) => {
                args.json = json;
                cli::offline::verify(&args).await
            }
            Command::Keys(KeysCommand::Generate(mut args)) => {
                args.json = json;
                cli::keys::generate(&args)
            }
            Command::Keys(KeysCommand::ApiKey(mut args)) => {
                args.json = json;
                cli::keys::api_key(&args)
            }
            Command::Nats(NatsCommand::Config(args)) => cli::nats::config(&args),
        }
    })
}

/// `orchestrator version`: what this binary is and speaks.
fn version(json: bool) -> ExitCode {
    let version = env!("CARGO_PKG_VERSION");
    let wire = orchestrator::envelope::VERSION;
    let store = orchestrator::store::format_name();
    if json {
        let v = serde_json::json!({"version": version, "wire_format": wire, "store_format": store});
        println!("{v}");
    } else {
        println!("orchestrator {version} (wire format v{wire}, store format {store})");
    }
    ExitCode::SUCCESS
}

/// Runs `orchestrator-bench` (beside this binary, else on the `PATH`) with
/// `args` and the global flags given before them, in this process's place.
fn bench(args: &[std::ffi::OsString], json: bool, log_format: LogFormat) -> ExitCode {
    let name = format!("orchestrator-bench{}", std::env::consts::EXE_SUFFIX);
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.join(&name)))
        .filter(|path| path.is_file());
    let mut command = std::process::Command::new(beside.unwrap_or_else(|| name.clone().into()));
    if json {
        command.arg("--json");
    }
    if log_format == LogFormat::Json {
        command.args(["--log-format", "json"]);
    }
    command.args(args);
    #[cfg(unix)]
    let e = std::os::unix::process::CommandExt::exec(&mut command);
    #[cfg(not(unix))]
    let e = match command.status() {
        Ok(status) => return ExitCode::from(status.code().unwrap_or(2) as u8),
        Err(e) => e,
    };
    eprintln!(
        "error: cannot run {name}, which `orchestrator bench` runs: {e} (it is built and installed with this binary: `cargo install --path .` installs both)"
    );
    ExitCode::from(2)
}
