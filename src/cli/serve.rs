//! The long-running commands: `run` (the orchestrator) and `worker`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use orchestrator::access::Authenticator;
use orchestrator::agent::{AgentCard, Catalog};
use orchestrator::broker::ManagedBroker;
use orchestrator::bus::{Bus, Servers, permissions};
use orchestrator::server::Settings;
use orchestrator::service::{DEFAULT_NATS_URL, Orchestrator, ServiceSettings};
use orchestrator::telemetry::{self, LogFormat, Telemetry};
use orchestrator::trigger::Triggers;
use orchestrator::worker::{Worker, WorkerSettings, handler_for};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

#[derive(Args)]
pub struct RunArgs {
    /// Trigger definitions: every `*.yaml`, `*.yml` and `*.json` here.
    #[arg(long, default_value = "triggers")]
    triggers: PathBuf,
    /// Agents: a directory or a file, in any format (`*/agent.json`
    /// folders, `registry.json`, PromptPacks, Markdown and YAML
    /// AgentCards; docs/agents.md). Repeatable; watched for changes.
    #[arg(long, default_value = "agents")]
    agents: Vec<PathBuf>,
    /// Settings file (JSON; see docs/operations.md). NATS_USER,
    /// NATS_PASSWORD, NATS_TOKEN, NATS_CREDS and NATS_NKEY (a seed file)
    /// override its `bus.auth`.
    #[arg(long)]
    config: Option<PathBuf>,
    /// With `replication.enabled`: the base URL other orchestrators
    /// forward requests to while this one leads (overrides the config
    /// file's `replication.advertise_url`).
    #[arg(long, env = "ORCH_ADVERTISE_URL")]
    advertise_url: Option<String>,
    /// Where the store lives (overrides the config file).
    #[arg(long, env = "ORCH_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// The HTTP API's address (overrides the config file).
    #[arg(long, env = "ORCH_HTTP_ADDR")]
    http_addr: Option<SocketAddr>,
    /// The broker: one NATS URL or several, comma-separated (overrides the
    /// config file). Without one, the default URL is tried and a local
    /// nats-server is started if nothing answers.
    #[arg(long, env = "NATS_URL")]
    nats_url: Option<Servers>,
    /// The key task tokens are signed with: a path or the PEM text
    /// (overrides the config file). Without one, `<data_dir>/keys/` is used,
    /// and a pair is generated there on the first start.
    #[arg(long, env = "ORCH_SIGNING_KEY", hide_env_values = true)]
    signing_key: Option<String>,
}

#[derive(Args)]
pub struct WorkerArgs {
    /// The agent: its directory (with agent.json) or a file of any format
    /// `run --agents` reads.
    #[arg(long)]
    agent: PathBuf,
    /// Which agent, when the file declares several (a PromptPack).
    #[arg(long)]
    name: Option<String>,
    /// Settings file (the same JSON as `run`'s; its bus settings apply).
    /// NATS_USER, NATS_PASSWORD, NATS_TOKEN, NATS_CREDS and NATS_NKEY (a
    /// seed file) override its `bus.auth`.
    #[arg(long)]
    config: Option<PathBuf>,
    /// The broker: one NATS URL or several, comma-separated (overrides the
    /// config file).
    #[arg(long, env = "NATS_URL")]
    nats_url: Option<Servers>,
    /// Tasks run at once (overrides the card).
    #[arg(long)]
    concurrency: Option<usize>,
    /// The orchestrator's public key, to check task tokens: a path or the
    /// PEM text (overrides the config file). Without one,
    /// `<data_dir>/keys/verify.pem` is used when it exists.
    #[arg(long, env = "ORCH_VERIFY_KEY", hide_env_values = true)]
    verify_key: Option<String>,
    /// Where an orchestrator on this machine keeps its keys (overrides the
    /// config file).
    #[arg(long, env = "ORCH_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Serve `/metrics` (Prometheus) on this address (overrides the config
    /// file's `telemetry.metrics_addr`); without one, no metrics port.
    #[arg(long, env = "ORCH_METRICS_ADDR")]
    metrics_addr: Option<SocketAddr>,
}

/// The settings file (or the defaults), with the `NATS_*` credentials from
/// the environment over its `bus.auth`.
pub(super) fn load_config(path: Option<&Path>) -> Result<Settings, String> {
    let mut config = match path {
        None => Settings::default(),
        Some(path) => {
            let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
            Settings::decode(&bytes).map_err(|e| format!("{}: {e}", path.display()))?
        }
    };
    let bus = &mut config.service.bus;
    bus.auth = std::mem::take(&mut bus.auth).with_env(|k| std::env::var(k).ok());
    bus.check().map_err(|e| e.to_string())?;
    Ok(config)
}

/// Fires on Ctrl-C or SIGTERM.
pub(super) fn shutdown_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let fire = token.clone();
    tokio::spawn(async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
        }
        info!("shutting down");
        fire.cancel();
    });
    token
}

/// Says why the process cannot go on, once: as a log line when logging is
/// set up, else plainly on stderr.
fn fail(message: impl std::fmt::Display) -> ExitCode {
    if tracing::dispatcher::has_been_set() {
        error!("{message}");
    } else {
        eprintln!("error: {message}");
    }
    ExitCode::from(2)
}

/// Installs logging and tracing for `service`; says where spans go.
fn start_telemetry(
    service: &str,
    format: LogFormat,
    config: &ServiceSettings,
) -> Result<Telemetry, String> {
    let telemetry = telemetry::init(service, format, "info", Some(&config.telemetry))
        .map_err(|e| e.to_string())?;
    match telemetry.exporting_to() {
        Some(to) => info!(service, "exporting traces to {to}"),
        None => info!(
            service,
            "no OTLP endpoint configured: traces are not exported"
        ),
    }
    Ok(telemetry)
}

/// Sends the spans still waiting (a blocking flush, off the async threads).
async fn stop_telemetry(telemetry: Telemetry) {
    let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
}

pub async fn run(args: RunArgs, format: LogFormat) -> ExitCode {
    // What `run` writes (the store, keys, the managed broker's files and
    // data) is its owner's, whatever umask it was started with; the
    // files meant for others (the verify key) set their own mode.
    orchestrator::files::restrict_umask();
    let config = match load_config(args.config.as_deref()) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let telemetry = match start_telemetry("orchestrator", format, &config.service) {
        Ok(t) => t,
        Err(e) => return fail(e),
    };
    let ended = run_orchestrator(args, config).await;
    stop_telemetry(telemetry).await;
    match ended {
        Ended::Exit(code) => code,
        Ended::StandByAgain => start_again(),
    }
}

/// How `run_orchestrator` ended.
enum Ended {
    /// Stopped: the process exits with this code.
    Exit(ExitCode),
    /// The leader lost the store's lease and stopped: it starts again,
    /// to stand by.
    StandByAgain,
}

impl From<ExitCode> for Ended {
    fn from(code: ExitCode) -> Self {
        Ended::Exit(code)
    }
}

/// Runs this process again from the start, with the same arguments and
/// environment and the same process id (what it held, the data
/// directory's lock, the listeners, is closed on exec): a leader that lost
/// the store's lease stands by again without a supervisor, its store
/// following the log anew. Returns only when that fails.
fn start_again() -> ExitCode {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::process::CommandExt;
    // A binary replaced since it started (an upgrade) is `<path> (deleted)`
    // here: the one now at its path runs, as a supervisor would run it.
    let exe = std::env::current_exe().map(|exe| {
        match exe.as_os_str().as_bytes().strip_suffix(b" (deleted)") {
            Some(path) => PathBuf::from(std::ffi::OsStr::from_bytes(path)),
            None => exe,
        }
    });
    let error = match exe {
        Ok(exe) => std::process::Command::new(exe)
            .args(std::env::args_os().skip(1))
            .exec(),
        Err(e) => e,
    };
    fail(format!(
        "this orchestrator lost the store's lease and stopped, and could not start again to stand by ({error}); start it again"
    ))
}

async fn run_orchestrator(args: RunArgs, settings: Settings) -> Ended {
    let Settings {
        service: mut config,
        mut http,
    } = settings;
    if let Some(d) = args.data_dir {
        config.data_dir = d;
    }
    if let Some(a) = args.http_addr {
        http.addr = a;
    }
    if let Some(u) = args.nats_url {
        config.nats_url = Some(u);
    }
    if let Some(k) = args.signing_key {
        config.tokens.signing_key = Some(k);
    }
    if let Some(u) = args.advertise_url {
        config.replication.advertise_url = Some(u);
    }
    let paths: Vec<PathBuf> = args.agents.iter().filter(|p| p.exists()).cloned().collect();
    if paths.is_empty() {
        warn!(paths = ?args.agents, "no agent files: tasks for any agent are accepted");
    }
    let catalog = Catalog::load(&paths, &config.git_options(false));
    for e in &catalog.errors {
        warn!("agent file skipped: {e}");
    }
    for w in &catalog.warnings {
        info!("agent file: {w}");
    }
    let triggers = load_triggers(&args.triggers, &catalog);
    let cards: Vec<AgentCard> = catalog.agents.values().cloned().collect();
    let access = match open_access(&config, http.addr) {
        Ok(a) => std::sync::Arc::new(a),
        Err(e) => return fail(e).into(),
    };
    // The settings hold; now a second `run` on this data directory stops
    // here, before it starts a broker or touches the store.
    let _lock = match lock_data_dir(&config.data_dir) {
        Ok(lock) => lock,
        Err(e) => return fail(e).into(),
    };
    let (bus, managed) = match connect_or_start_broker(&config, &cards).await {
        Ok(pair) => pair,
        Err(e) => return fail(e).into(),
    };
    let shutdown = shutdown_signal();
    // One of several sharing the store's log: a standby until it leads,
    // forwarding the API to the leader meanwhile.
    let mut listener = None;
    let (commits, lost, kept) = match config.replication.enabled {
        true => match stand_by(
            &mut config,
            &http,
            &bus,
            &shutdown,
            (&catalog, &triggers),
            &access,
        )
        .await
        {
            Ok(Some((leading, unused))) => {
                listener = unused;
                let lost = CancellationToken::new();
                let commits = leading.commits.clone();
                let kept = leading.keep(&config, lost.clone());
                // Losing the lease stops this process as a signal would.
                let (fire, on_lost) = (shutdown.clone(), lost.clone());
                tokio::spawn(async move {
                    on_lost.cancelled().await;
                    fire.cancel();
                });
                (Some(commits), Some(lost), Some(kept))
            }
            Ok(None) => return ExitCode::SUCCESS.into(),
            Err(e) => return fail(e).into(),
        },
        false => (None, None, None),
    };
    let listener = match listener {
        Some(l) => l,
        None => match tokio::net::TcpListener::bind(http.addr).await {
            Ok(l) => l,
            Err(e) => return fail(format!("cannot listen on {}: {e}", http.addr)).into(),
        },
    };
    info!(agents = cards.len(), data_dir = %config.data_dir.display(), "orchestrator starting");
    let opened = Orchestrator::open_logged(config, bus, catalog, triggers, commits).await;
    let orchestrator = match opened {
        Ok(o) => o,
        Err(e) => return fail(e).into(),
    };
    let result = orchestrator::server::serve(orchestrator, http, access, listener, shutdown).await;
    // Stopped and flushed: a standby may take over at once.
    if let Some(kept) = kept {
        kept.release().await;
    }
    if let Some(broker) = managed {
        broker.stop().await;
    }
    match (result, lost) {
        // What it could not finish (its store refused, no longer leading)
        // is the log's, and the next leader's.
        (result, Some(lost)) if lost.is_cancelled() => {
            let left = result.err().map(|e| e.to_string());
            warn!(
                left = left.as_deref(),
                "this orchestrator lost the store's lease and stopped: starting again, to stand by"
            );
            Ended::StandByAgain
        }
        (Err(e), _) => fail(e).into(),
        (Ok(()), _) => ExitCode::SUCCESS.into(),
    }
}

/// How long a node waits to learn it leads before it serves the standby's
/// face; at once when another node is found to lead.
const FACE_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// Stands by until this node leads (`None`: stopped first), serving the
/// standby's face on the API's address meanwhile; with the listener when
/// the face never served (a lone node takes the lease within
/// [`FACE_AFTER`], and its first answer is then the leader's, not a
/// standby's 503 `no_leader`).
async fn stand_by(
    config: &mut ServiceSettings,
    http: &orchestrator::http::HttpSettings,
    bus: &Bus,
    shutdown: &CancellationToken,
    (catalog, triggers): (&Catalog, &Triggers),
    access: &std::sync::Arc<Authenticator>,
) -> Result<
    Option<(
        orchestrator::service::Leading,
        Option<tokio::net::TcpListener>,
    )>,
    String,
> {
    orchestrator::service::name_node(config, http.addr);
    let (tell, leader) = tokio::sync::watch::channel(None);
    // Bound now: a port in use is said at once.
    let mut listener = Some(
        tokio::net::TcpListener::bind(http.addr)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", http.addr))?,
    );
    let standing = shutdown.child_token();
    let mut face = None;
    let mut known = leader.clone();
    // Reads sent with `orch-read: local` are answered from this node's
    // copy of the store while it follows the log.
    let reads = orchestrator::service::Reads::new(
        catalog.clone(),
        triggers.clone(),
        tokio::sync::watch::Sender::new(None),
    );
    let led = orchestrator::service::lead(config, bus, shutdown, &tell, &reads);
    tokio::pin!(led);
    let patience = tokio::time::sleep(FACE_AFTER);
    tokio::pin!(patience);
    let led = loop {
        tokio::select! {
            led = &mut led => break led,
            _ = known.changed(), if face.is_none() => {}
            () = &mut patience, if face.is_none() => {}
        }
        if let Some(listener) = listener.take() {
            face = Some(tokio::spawn(orchestrator::server::stand_by(
                orchestrator::server::Standing {
                    leader: leader.clone(),
                    replica: reads.replica.subscribe(),
                    access: std::sync::Arc::clone(access),
                    name: config.replication.name.clone().unwrap_or_default(),
                },
                http.clone(),
                listener,
                standing.clone(),
            )));
        }
    };
    standing.cancel();
    if let Some(face) = face {
        let _ = face.await;
    }
    led.map(|l| l.map(|leading| (leading, listener)))
        .map_err(|e| e.to_string())
}

/// Takes `<dir>/run.lock` (an exclusive lock, held until the file is
/// dropped), writing this process's id in it; says plainly when another
/// `orchestrator run` holds it.
fn lock_data_dir(dir: &Path) -> Result<std::fs::File, String> {
    use std::io::{Read, Seek, Write};
    let at = |e: std::io::Error| format!("{}: {e}", dir.display());
    // Every task's params and push credentials are in it: its owner's.
    orchestrator::files::private_dir(dir).map_err(at)?;
    let path = dir.join("run.lock");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(at)?;
    match file.try_lock() {
        Ok(()) => {
            file.set_len(0).map_err(at)?;
            file.rewind().map_err(at)?;
            writeln!(file, "{}", std::process::id()).map_err(at)?;
            Ok(file)
        }
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut pid = String::new();
            let _ = file.read_to_string(&mut pid);
            Err(format!(
                "the data directory {} is in use by another `orchestrator run` (pid {}): stop it, \
                 or give this one another --data-dir",
                dir.display(),
                pid.trim()
            ))
        }
        Err(std::fs::TryLockError::Error(e)) => Err(at(e)),
    }
}

/// Who may call the API. Says where a generated administrator key is, and
/// says loudly when nobody has to authenticate.
fn open_access(config: &ServiceSettings, addr: SocketAddr) -> Result<Authenticator, String> {
    let access = Authenticator::open(
        &config.api_auth,
        &orchestrator::task_token::settings::key_dir(&config.data_dir),
    )
    .map_err(|e| e.to_string())?;
    if let Some(path) = access.generated_admin_key() {
        let message = format!(
            "no API credentials configured: generated an administrator API key (every scope) at {}; \
             clients send it as ORCH_API_KEY (docs/security.md shows how to configure your own)",
            path.display()
        );
        info!("{message}");
    }
    if access.is_off() {
        let message = format!(
            "API AUTHENTICATION IS OFF (api_auth.mode = none): anyone who can reach {} \
             can submit, read and cancel every task as `anonymous` with every scope. \
             For local development only.",
            addr
        );
        warn!("{message}");
    }
    Ok(access)
}

/// Loads the triggers, and the cards' workflows with them; a broken one
/// is reported (file, line, what is wrong) and skipped.
fn load_triggers(dir: &Path, catalog: &Catalog) -> Triggers {
    let triggers = if dir.is_dir() {
        Triggers::load(dir, &catalog.agents)
    } else {
        warn!(dir = %dir.display(), "no triggers directory: only the cards' workflows");
        Triggers::default()
    };
    let triggers = triggers.with_cards(catalog);
    for e in &triggers.errors {
        warn!("trigger skipped: {e}");
    }
    info!(triggers = triggers.loaded.len(), "triggers loaded");
    triggers
}

/// Connects to the configured broker; with none configured, to the default
/// URL, starting a managed `nats-server` there when nothing answers.
async fn connect_or_start_broker(
    config: &ServiceSettings,
    cards: &[AgentCard],
) -> Result<(Bus, Option<ManagedBroker>), String> {
    if let Some(servers) = &config.nats_url {
        let bus = Bus::connect(&servers.to_string(), config.bus.clone())
            .await
            .map_err(|e| e.to_string())?;
        return Ok((bus, None));
    }
    if let Ok(bus) = Bus::connect_now(DEFAULT_NATS_URL, config.bus.clone()).await {
        return Ok((bus, None));
    }
    let names = orchestrator::bus::Names::new(&config.bus.prefix);
    let agents: Vec<_> = cards.iter().map(|c| c.name.clone()).collect();
    let broker = ManagedBroker::start(&config.data_dir, 4222, Some((&names, &agents)))
        .await
        .map_err(|e| e.to_string())?;
    let message = format!(
        "no NATS at {DEFAULT_NATS_URL}: started a managed nats-server with a user per process \
         (data in {}); workers on this machine find their seed in {} with --data-dir",
        config.data_dir.join("nats").display(),
        orchestrator::broker::users_dir(&config.data_dir).display()
    );
    info!("{message}");
    let mut bus_config = config.bus.clone();
    if bus_config.auth == Default::default() {
        bus_config.auth.nkey_seed_file = Some(permissions::orchestrator_seed(
            &orchestrator::broker::users_dir(&config.data_dir),
        ));
    }
    let bus = Bus::connect(broker.url(), bus_config)
        .await
        .map_err(|e| e.to_string())?;
    Ok((bus, Some(broker)))
}

pub async fn worker(args: WorkerArgs, format: LogFormat) -> ExitCode {
    let config = match load_config(args.config.as_deref()) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let (card, dir) = match load_agent(&args.agent, args.name.as_deref()) {
        Ok(pair) => pair,
        Err(e) => return fail(e),
    };
    let telemetry = match start_telemetry(&format!("agent-{}", card.name), format, &config.service)
    {
        Ok(t) => t,
        Err(e) => return fail(e),
    };
    // A worker serves no API: the settings' HTTP part is not its.
    let code = run_worker(args, config.service, card, dir).await;
    stop_telemetry(telemetry).await;
    code
}

/// The one agent `path` declares (or the one named `name`), and the
/// directory its tasks run in (its file's). Agents in git are read as
/// already cloned.
fn load_agent(path: &Path, name: Option<&str>) -> Result<(AgentCard, PathBuf), String> {
    let card = Catalog::one(path, name).map_err(|e| e.to_string())?;
    let dir = card
        .origin
        .as_ref()
        .and_then(|o| o.file.parent())
        .filter(|d| !d.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    Ok((card, dir))
}

async fn run_worker(
    args: WorkerArgs,
    mut config: ServiceSettings,
    card: AgentCard,
    dir: PathBuf,
) -> ExitCode {
    // The card's own problem first: nothing else matters until it can run.
    let handler = match handler_for(&card, &config.llm, &config.mcp) {
        Ok(h) => h,
        Err(e) => return fail(format!("{}: {e}", args.agent.display())),
    };
    if let Some(k) = args.verify_key {
        config.tokens.verify_key = Some(k);
    }
    if let Some(d) = args.data_dir {
        config.data_dir = d;
    }
    let verifier = match config.tokens.verifier(&config.data_dir, card.name.as_str()) {
        Ok(Some(v)) => {
            info!(algorithm = ?v.kind(), "task tokens are checked before anything runs");
            Some(std::sync::Arc::new(v))
        }
        Ok(None) => {
            let message = "tokens.verify is false: task tokens are NOT checked; anyone who can \
                           publish on this agent's subject can run its tasks (development only)";
            warn!("{message}");
            None
        }
        Err(e) => return fail(e),
    };
    let url = args
        .nats_url
        .or(config.nats_url.clone())
        .map(|s| s.to_string())
        .unwrap_or_else(|| DEFAULT_NATS_URL.to_string());
    let mut bus_config = config.bus.clone();
    bus_config.inbox_prefix = Some(orchestrator::bus::agent_inbox_prefix(&card.name));
    // Beside a managed broker, the agent's own user is found in the data
    // directory (as its verify key is).
    let seed = permissions::agent_seed(
        &orchestrator::broker::users_dir(&config.data_dir),
        &card.name,
    );
    if bus_config.auth == Default::default() && seed.exists() {
        info!(seed = %seed.display(), "logging in to NATS as this agent's user");
        bus_config.auth.nkey_seed_file = Some(seed);
    }
    let bus = match Bus::connect(&url, bus_config).await {
        Ok(b) => b,
        Err(e) => return fail(e),
    };
    let mut worker_config = WorkerSettings {
        max_envelope_bytes: config.max_envelope_bytes,
        verifier,
        sensitive: config.sensitive_fields.clone(),
        secrets: orchestrator::redact::Secrets::of_env(
            config.secret_env.iter().map(String::as_str),
        ),
        stall_after: config.ready_stall_after,
        ..WorkerSettings::default()
    };
    if let Some(c) = args.concurrency {
        worker_config.concurrency = c;
    }
    let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
    let metrics = match args.metrics_addr.or(config.telemetry.metrics_addr) {
        Some(addr) => match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => Some(l),
            Err(e) => return fail(format!("cannot serve metrics on {addr}: {e}")),
        },
        None => None,
    };
    // The metrics port answers from the start: while the worker waits for
    // the bus, `/readyz` says it is not ready (rather than not answering).
    let stop = shutdown_signal();
    if let Some(listener) = metrics {
        if let Ok(addr) = listener.local_addr() {
            info!(%addr, "serving /metrics");
        }
        tokio::spawn(telemetry::metrics::serve(
            listener,
            worker_config.readiness.clone(),
            stop.clone(),
        ));
    }
    let worker = match Worker::start(bus, card, dir, handler, worker_config).await {
        Ok(w) => w,
        Err(e) => return fail(e),
    };
    worker.run(stop).await;
    ExitCode::SUCCESS
}
