//! `orchestrator dev`: the whole system in one terminal. It starts
//! `orchestrator run` (which starts its managed broker when no NATS
//! answers) and, once the API is ready, one `orchestrator worker` per
//! agent a worker of this binary can run; their log lines are interleaved
//! on stdout, each after its process's name. It prints where the API and
//! the console are and how to sign in; Ctrl-C (or SIGTERM) stops every
//! process it started, workers first.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use clap::Args;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};

use orchestrator::agent::{Catalog, GitOptions};

use super::output::outln;

#[derive(Args)]
#[command(after_help = "Examples:
  orchestrator dev
  orchestrator dev --agents examples/llm-pack --config llm.json
  orchestrator dev --http-addr 127.0.0.1:9090 --data-dir /tmp/dev")]
pub struct DevArgs {
    /// Agents: a directory or a file, in any format `run` reads.
    /// Repeatable.
    #[arg(long, default_value = "agents")]
    agents: Vec<PathBuf>,
    /// Trigger definitions.
    #[arg(long, default_value = "triggers")]
    triggers: PathBuf,
    /// Settings file, for the orchestrator and every worker.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Where the store, the keys and the managed broker's data live
    /// (overrides the config file).
    #[arg(long, env = "ORCH_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// The HTTP API's address (overrides the config file).
    #[arg(long, env = "ORCH_HTTP_ADDR")]
    http_addr: Option<SocketAddr>,
    /// A broker to use instead of the managed one: one NATS URL or
    /// several, comma-separated.
    #[arg(long, env = "NATS_URL")]
    nats_url: Option<String>,
}

/// A process `dev` started, with its name for the log lines.
struct Started {
    name: String,
    child: Child,
}

pub async fn dev(args: DevArgs) -> ExitCode {
    match run(args).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

async fn run(args: DevArgs) -> Result<ExitCode, String> {
    let config = super::serve::load_config(args.config.as_deref())?;
    let data_dir = args
        .data_dir
        .clone()
        .unwrap_or(config.service.data_dir.clone());
    let http_addr = args.http_addr.unwrap_or(config.http.addr);
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let paths: Vec<PathBuf> = args.agents.iter().filter(|p| p.exists()).cloned().collect();
    let catalog = Catalog::load(&paths, &GitOptions::default());
    let workers = workers_of(&catalog);
    let width = workers
        .iter()
        .map(|(name, _)| name.len())
        .chain([ORCHESTRATOR.len()])
        .max()
        .unwrap_or(0);
    let labels = Labels {
        width,
        colour: std::io::IsTerminal::is_terminal(&std::io::stdout()),
    };

    let mut common = Vec::new();
    if let Some(c) = &args.config {
        common.extend(["--config".into(), c.display().to_string()]);
    }
    if let Some(u) = &args.nats_url {
        common.extend(["--nats-url".into(), u.clone()]);
    }
    common.extend(["--data-dir".into(), data_dir.display().to_string()]);

    let mut run_args: Vec<String> = vec!["run".into()];
    for a in &args.agents {
        run_args.extend(["--agents".into(), a.display().to_string()]);
    }
    run_args.extend([
        "--triggers".into(),
        args.triggers.display().to_string(),
        "--http-addr".into(),
        http_addr.to_string(),
    ]);
    run_args.extend(common.iter().cloned());
    let mut started = vec![spawn(&exe, ORCHESTRATOR, &run_args, &labels, 0)?];

    let stop = super::serve::shutdown_signal();
    let api = format!("http://{http_addr}");
    tokio::select! {
        ready = wait_ready(&api, &mut started[0]) => {
            if let Err(e) = ready {
                stop_all(&mut started).await;
                return Err(e);
            }
        }
        () = stop.cancelled() => {
            stop_all(&mut started).await;
            return Ok(ExitCode::SUCCESS);
        }
    }

    // The banner first, once the API answers: where everything is comes
    // before the workers' start-up lines.
    banner(&api, &data_dir, &catalog, &workers);
    for (i, (name, file)) in workers.iter().enumerate() {
        let mut worker_args: Vec<String> = vec![
            "worker".into(),
            "--agent".into(),
            file.display().to_string(),
            "--name".into(),
            name.clone(),
        ];
        worker_args.extend(common.iter().cloned());
        match spawn(&exe, name, &worker_args, &labels, i + 1) {
            Ok(s) => started.push(s),
            Err(e) => eprintln!("error: {e}"),
        }
    }
    // Then one line once they are up (or why not yet): what scripts and
    // tests wait for.
    let names: Vec<&str> = workers.iter().map(|(n, _)| n.as_str()).collect();
    match (
        names.is_empty(),
        registered(&api, &data_dir, &workers, &mut started).await,
    ) {
        (true, _) => outln!("orchestrator dev is up (no workers to start)"),
        (false, true) => outln!(
            "orchestrator dev is up: workers {} registered",
            names.join(", ")
        ),
        (false, false) => outln!(
            "orchestrator dev is up, but not every worker registered within 15 s ({}): their lines above say why",
            names.join(", ")
        ),
    }

    // Until Ctrl-C, or the orchestrator ends; a worker that ends is said,
    // and the rest go on.
    let mut ended = vec![false; started.len()];
    let code = loop {
        tokio::select! {
            () = stop.cancelled() => break ExitCode::SUCCESS,
            () = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
        let mut orchestrator_ended = None;
        for (i, s) in started.iter_mut().enumerate() {
            if ended[i] {
                continue;
            }
            if let Ok(Some(status)) = s.child.try_wait() {
                ended[i] = true;
                labels.say(&s.name, i, &format!("(exited: {status})"));
                if i == 0 {
                    orchestrator_ended = Some(status);
                }
            }
        }
        if let Some(status) = orchestrator_ended {
            eprintln!("error: the orchestrator ended ({status}): stopping the workers");
            break ExitCode::from(3);
        }
    };
    stop_all(&mut started).await;
    Ok(code)
}

/// The orchestrator's name in the log lines.
const ORCHESTRATOR: &str = "orchestrator";

/// The agents a worker of this binary runs (not the ones the orchestrator
/// holds itself), with the file that declares each.
fn workers_of(catalog: &Catalog) -> Vec<(String, PathBuf)> {
    catalog
        .agents
        .values()
        .filter(|c| c.runnable().is_ok())
        .filter_map(|c| Some((c.name.to_string(), c.origin.as_ref()?.file.clone())))
        .collect()
}

/// Starts `exe args`, its stdout and stderr written line by line after
/// `name`.
fn spawn(
    exe: &Path,
    name: &str,
    args: &[String],
    labels: &Labels,
    index: usize,
) -> Result<Started, String> {
    let mut child = Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {name}: {e}"))?;
    if let Some(out) = child.stdout.take() {
        tokio::spawn(relay(out, name.to_string(), *labels, index));
    }
    if let Some(err) = child.stderr.take() {
        tokio::spawn(relay(err, name.to_string(), *labels, index));
    }
    Ok(Started {
        name: name.to_string(),
        child,
    })
}

/// Writes each line `from` gives after `name`.
async fn relay(from: impl AsyncRead + Unpin, name: String, labels: Labels, index: usize) {
    let mut lines = BufReader::new(from).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        labels.say(&name, index, &line);
    }
}

/// How a process's lines are marked.
#[derive(Clone, Copy)]
struct Labels {
    /// The longest name, which the others are padded to.
    width: usize,
    /// Whether names are coloured (stdout is a terminal).
    colour: bool,
}

impl Labels {
    fn say(&self, name: &str, index: usize, line: &str) {
        const COLOURS: [u8; 6] = [36, 33, 32, 35, 34, 31];
        let width = self.width;
        if self.colour {
            let c = COLOURS[index % COLOURS.len()];
            outln!("\x1b[{c}m{name:>width$} |\x1b[0m {line}");
        } else {
            outln!("{name:>width$} | {line}");
        }
    }
}

/// Waits until `api/readyz` answers 200; fails when the orchestrator
/// ends first, or after two minutes.
async fn wait_ready(api: &str, orchestrator: &mut Started) -> Result<(), String> {
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(Some(status)) = orchestrator.child.try_wait() {
            return Err(format!(
                "the orchestrator ended before it was ready ({status}); its lines above say why"
            ));
        }
        let ready = http
            .get(format!("{api}/readyz"))
            .timeout(Duration::from_secs(1))
            .send()
            .await;
        if ready.is_ok_and(|r| r.status().is_success()) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the orchestrator is not ready at {api} after two minutes"
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits (15 seconds at most) until every worker has registered with the
/// orchestrator (true), or one has ended.
async fn registered(
    api: &str,
    data_dir: &Path,
    workers: &[(String, PathBuf)],
    started: &mut [Started],
) -> bool {
    let key = std::fs::read_to_string(
        orchestrator::task_token::settings::key_dir(data_dir)
            .join(orchestrator::access::api_keys::ADMIN_FILE),
    )
    .unwrap_or_default();
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        if started
            .iter_mut()
            .any(|s| matches!(s.child.try_wait(), Ok(Some(_))))
        {
            return false;
        }
        let listed = http
            .get(format!("{api}/v1/agents"))
            .bearer_auth(key.trim())
            .timeout(Duration::from_secs(2))
            .send()
            .await;
        if let Ok(r) = listed
            && let Ok(v) = r.json::<serde_json::Value>().await
        {
            let live = |name: &str| {
                v["agents"].as_array().into_iter().flatten().any(|a| {
                    a["card"]["name"] == name
                        && a["instances"].as_array().is_some_and(|i| !i.is_empty())
                })
            };
            if workers.iter().all(|(name, _)| live(name)) {
                return true;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

/// Says where everything is, and how to sign in.
fn banner(api: &str, data_dir: &Path, catalog: &Catalog, workers: &[(String, PathBuf)]) {
    let key = orchestrator::task_token::settings::key_dir(data_dir)
        .join(orchestrator::access::api_keys::ADMIN_FILE);
    let held: Vec<&str> = catalog
        .agents
        .values()
        .filter(|c| c.runnable().is_err())
        .map(|c| c.name.as_str())
        .collect();
    let names: Vec<&str> = workers.iter().map(|(n, _)| n.as_str()).collect();
    outln!();
    outln!("orchestrator dev: the API answers; Ctrl-C stops everything it started.");
    outln!("  API:      {api}");
    outln!("  console:  {api}/ui/");
    if key.exists() {
        outln!(
            "  API key:  in {} (sign in to the console with it; the CLI finds it from this directory)",
            key.display()
        );
    } else {
        outln!("  API key:  the credentials your settings file configures");
    }
    if names.is_empty() {
        outln!("  workers:  none (no agent a worker of this binary runs)");
    } else {
        outln!(
            "  workers:  {} (one each, starting below)",
            names.join(", ")
        );
    }
    if !held.is_empty() {
        outln!("  held by the orchestrator: {}", held.join(", "));
    }
    outln!("  next, in another terminal in this directory: orchestrator triggers list");
    outln!();
}

/// Stops the workers, then the orchestrator (which stops its managed
/// broker): SIGTERM, then SIGKILL after 15 seconds.
async fn stop_all(started: &mut [Started]) {
    for s in started.iter_mut().rev() {
        if let Some(pid) = s.child.id() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        if tokio::time::timeout(Duration::from_secs(15), s.child.wait())
            .await
            .is_err()
        {
            let _ = s.child.kill().await;
        }
    }
}
