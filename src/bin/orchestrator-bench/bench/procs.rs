//! The full path as deployed: `orchestrator run` and `orchestrator worker`
//! as processes of their own, driven over HTTP like any client (submit,
//! then a long poll for the task's end).

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::process::{Child, Command};

use super::cpu::{CpuPerTask, Processes};
use super::{BenchArgs, Client, Figures, echo_card, measure};

/// `orchestrator run` and `orchestrator worker` running against one
/// broker, and an HTTP client for the orchestrator's API; the processes
/// are killed when this is dropped.
pub(super) struct Deployed {
    run: Child,
    /// A second `run` standing by beside it (`add_standby`), and its API.
    standby: Option<(Child, String)>,
    /// What that second `run` is started with.
    plan: Plan,
    worker: Child,
    /// With `llm_model`: the worker of the agent `asker`, a prompt for
    /// that model calling `echo`.
    llm_worker: Option<Child>,
    pub(super) client: reqwest::Client,
    pub(super) http: String,
    kind: Client,
}

/// What a `run` of the deployment is started with.
struct Plan {
    exe: std::path::PathBuf,
    dir: std::path::PathBuf,
    agents: std::path::PathBuf,
    triggers: std::path::PathBuf,
    config: std::path::PathBuf,
    signing: std::path::PathBuf,
    url: String,
}

impl Plan {
    /// Starts `orchestrator ARGS`, logging to `log` in the directory.
    fn spawn(&self, args: &[&dyn AsRef<std::ffi::OsStr>], log: &str) -> Result<Child, String> {
        let log = std::fs::File::create(self.dir.join(log)).map_err(|e| e.to_string())?;
        Command::new(&self.exe)
            .args(args.iter().map(|a| a.as_ref()))
            .env("RUST_LOG", "warn")
            // The settings file alone decides what is traced.
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .env_remove("OTEL_TRACES_SAMPLER")
            .env_remove("OTEL_TRACES_SAMPLER_ARG")
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.exe.display()))
    }

    /// Starts `orchestrator run` on `port` with its store in `data`.
    fn run(&self, data: &Path, port: u16, log: &str) -> Result<Child, String> {
        let addr = format!("127.0.0.1:{port}");
        self.spawn(
            &[
                &"run",
                &"--agents",
                &self.agents,
                &"--triggers",
                &self.triggers,
                &"--config",
                &self.config,
                &"--data-dir",
                &data,
                &"--http-addr",
                &addr,
                &"--nats-url",
                &self.url,
                &"--signing-key",
                &self.signing,
            ],
            log,
        )
    }
}

/// A port nothing listens on now.
fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| e.to_string())
}

impl Drop for Deployed {
    fn drop(&mut self) {
        let _ = self.run.start_kill();
        if let Some((standby, _)) = &mut self.standby {
            let _ = standby.start_kill();
        }
        let _ = self.worker.start_kill();
        if let Some(w) = &mut self.llm_worker {
            let _ = w.start_kill();
        }
    }
}

/// How a task the bench submitted ended, as its client saw it.
pub(super) struct Ended {
    /// From the submit to the answer saying it ended.
    pub(super) latency: Duration,
    /// `completed`, `failed`, `canceled` or `rejected`.
    pub(super) state: String,
    /// Submits the orchestrator did not take (answered 5xx, or not at
    /// all) before one it took, sent again with the same idempotency key.
    pub(super) resubmits: usize,
}

/// What the deployed path measured.
pub(super) struct Measured {
    /// The throughput run and the low-load run.
    pub(super) figures: (Figures, Figures),
    /// The orchestrator process's RSS (MiB) at the end.
    pub(super) orchestrator_rss: Option<f64>,
    /// Each process's CPU time per task in the throughput run.
    pub(super) cpu: CpuPerTask,
}

/// Measures the deployed path on `deployed` (the broker's processes are
/// `brokers`, if the bench started them).
pub(super) async fn full_path(
    deployed: &Deployed,
    brokers: &[u32],
    args: &BenchArgs,
) -> Result<Measured, String> {
    let one = |i: usize| {
        let task = deployed.task(i, false);
        async move { Ok(task.await?.latency) }
    };
    let processes = deployed.processes(brokers);
    let before = processes.cpu();
    let throughput = measure("processes", args.tasks, args.concurrency, one).await?;
    let cpu = CpuPerTask::between(before, processes.cpu(), throughput.count);
    let low = measure("processes, low load", args.samples, 1, one).await?;
    let orchestrator_rss = deployed.run.id().and_then(super::rss_mib_of);
    Ok(Measured {
        figures: (throughput, low),
        orchestrator_rss,
        cpu,
    })
}

impl Deployed {
    /// Starts a second `orchestrator run` with the same settings and keys
    /// and a store of its own (`replicated_store`), and waits until it
    /// stands by.
    pub(super) async fn add_standby(&mut self) -> Result<(), String> {
        let port = free_port()?;
        let http = format!("http://127.0.0.1:{port}");
        let child = self
            .plan
            .run(&self.plan.dir.join("standby-data"), port, "standby.log")?;
        self.standby = Some((child, http.clone()));
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(r) = self.client.get(format!("{http}/readyz")).send().await
                && let Ok(said) = r.json::<Value>().await
                && said["role"] == "standby"
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                let log =
                    std::fs::read_to_string(self.plan.dir.join("standby.log")).unwrap_or_default();
                return Err(format!("the standby never stood by:\n{log}"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The standby's process id.
    pub(super) fn standby_pid(&self) -> Option<u32> {
        self.standby.as_ref().and_then(|(c, _)| c.id())
    }

    /// Sends every later request to the standby (which forwards it while
    /// it stands by); its API's address.
    pub(super) fn through_standby(&mut self) -> Option<String> {
        let (_, http) = self.standby.as_ref()?;
        self.http = http.clone();
        Some(http.clone())
    }

    /// Kills the first `run` (SIGKILL).
    pub(super) fn kill_leader(&mut self) {
        let _ = self.run.start_kill();
    }

    /// The orchestrator process's id.
    pub(super) fn orchestrator_pid(&self) -> Option<u32> {
        self.run.id()
    }

    /// The worker process's id.
    pub(super) fn llm_worker_pid(&self) -> Option<u32> {
        self.llm_worker.as_ref().and_then(Child::id)
    }

    pub(super) fn worker_pid(&self) -> Option<u32> {
        self.worker.id()
    }

    /// The processes whose CPU a task costs: the orchestrator, the echo
    /// worker, the broker's (`brokers`) and this one, the client.
    pub(super) fn processes(&self, brokers: &[u32]) -> Processes {
        Processes {
            orchestrator: self.orchestrator_pid(),
            worker: self.worker_pid(),
            brokers: brokers.to_vec(),
            client: std::process::id(),
        }
    }

    /// Starts both processes against the broker at `url`, with streams of
    /// `replicas` replicas and their files under `dir/procs`, and waits
    /// until the orchestrator is ready and the worker registered.
    pub(super) async fn start(
        url: &str,
        prefix: &str,
        dir: &Path,
        replicas: usize,
        args: &BenchArgs,
        tracing: Option<(&str, f64)>,
    ) -> Result<Deployed, String> {
        let dir = dir.join("procs");
        let agents = dir.join("agents");
        let triggers = dir.join("triggers");
        let write = |path: &Path, value: &Value| -> Result<(), String> {
            std::fs::create_dir_all(path.parent().unwrap_or(Path::new(".")))
                .and_then(|()| std::fs::write(path, value.to_string()))
                .map_err(|e| format!("{}: {e}", path.display()))
        };
        let card = serde_json::to_value(echo_card(args.concurrency)?).map_err(|e| e.to_string())?;
        write(&agents.join("echo/agent.json"), &card)?;
        if let Some(model) = &args.llm_model {
            let asker = json!({
                "name": "asker", "version": "1.0.0", "description": "asks the echo agent",
                "skills": [{"id": "ask", "description": "ask"}],
                "invocation": {"type": "llm", "model": "bench", "baseUrl": model},
                "dependencies": {"agents": ["echo"]},
                "delivery": {"concurrency": args.concurrency},
            });
            write(&agents.join("asker/agent.json"), &asker)?;
        }
        if args.client == Client::A2a {
            // An agent no worker serves: its tasks wait, to be subscribed to.
            write(&agents.join("idle/agent.json"), &super::a2a::idle_card())?;
        }
        std::fs::create_dir_all(&triggers).map_err(|e| e.to_string())?;
        let config = dir.join("config.json");
        // The API as deployed: every call authenticated with an API key.
        let api_key = orchestrator::access::api_keys::generate();
        // Open subscriptions are requests in flight too.
        let in_flight = (args.concurrency * 2).max(512)
            + if args.client == Client::A2a {
                args.subscribers
            } else {
                0
            };
        let mut settings = json!({
            "bus": {"prefix": prefix, "replicas": replicas},
            // Answers as one body: streamed text would add progress events.
            "llm": {"stream": false},
            "http_max_in_flight": in_flight,
            // Every client is the one principal `bench`, from one address,
            // with every subscription it holds open.
            "http_max_in_flight_per_principal": in_flight,
            "http_max_connections": in_flight + 1024,
            "http_max_connections_per_peer": in_flight + 1024,
            "http_max_streams_per_principal": args.subscribers.max(32) + 64,
            "api_auth": {"api_keys": [{
                "principal": "bench", "scopes": ["*"],
                "sha256": orchestrator::access::api_keys::hash(&api_key),
            }]},
        });
        if args.overload.is_some() {
            settings["max_backlog"] = json!(args.overload_backlog);
        }
        if args.replicated_store {
            settings["replication"] = json!({"enabled": true});
        }
        if args.push && args.client == Client::A2a {
            // The bench's push receiver listens on loopback.
            settings["deliveries"] = json!({"allow_addresses": ["loopback"]});
        }
        if let Some((endpoint, ratio)) = tracing {
            settings["telemetry"] = json!({"otlp_endpoint": endpoint, "sample_ratio": ratio});
        }
        write(&config, &settings)?;
        let data = dir.join("data");
        super::preload::preload(&data, args.preload).await?;
        // Task tokens as deployed: the orchestrator signs, the worker verifies.
        let keys = orchestrator::task_token::keys::generate(
            &orchestrator::task_token::settings::key_dir(&data),
            orchestrator::task_token::KeyKind::EdDsa,
            false,
        )
        .map_err(|e| e.to_string())?;
        let port = free_port()?;
        let http = format!("http://127.0.0.1:{port}");
        let plan = Plan {
            exe: orchestrator_exe()?,
            dir: dir.clone(),
            agents: agents.clone(),
            triggers: triggers.clone(),
            config: config.clone(),
            signing: keys.signing.clone(),
            url: url.to_string(),
        };
        let run = plan.run(&data, port, "run.log")?;
        let worker_of = |agent: &str, log: &str| {
            plan.spawn(
                &[
                    &"worker",
                    &"--agent",
                    &agents.join(agent),
                    &"--config",
                    &config,
                    &"--nats-url",
                    &url,
                    &"--verify-key",
                    &keys.verify,
                ],
                log,
            )
        };
        let worker = worker_of("echo", "worker.log")?;
        let llm_worker = match &args.llm_model {
            Some(_) => Some(worker_of("asker", "llm-worker.log")?),
            None => None,
        };
        let mut headers = reqwest::header::HeaderMap::new();
        let bearer = format!("Bearer {api_key}")
            .parse()
            .map_err(|e| format!("{e}"))?;
        headers.insert(reqwest::header::AUTHORIZATION, bearer);
        let client = reqwest::Client::builder()
            .default_headers(headers)
            .build()
            .map_err(|e| e.to_string())?;
        ready(&client, &http, &dir).await?;
        Ok(Deployed {
            run,
            standby: None,
            plan,
            worker,
            llm_worker,
            client,
            http,
            kind: args.client,
        })
    }

    /// Submits task `i` and waits for its end; a wait that ends first is
    /// followed by another, for up to two minutes. With `resend`, the
    /// submit carries an idempotency key and is sent again while the
    /// orchestrator does not take it; without, a refused submit is an
    /// error (and the request is the plain one the figures have always
    /// measured: a caller's key costs the orchestrator more CPU per task,
    /// docs/performance.md).
    pub(super) fn task(
        &self,
        i: usize,
        resend: bool,
    ) -> impl std::future::Future<Output = Result<Ended, String>> + Send + 'static {
        self.task_to(i, resend, None)
    }

    /// A conversation of the LLM agent `asker` (`llm_model`), its user
    /// message `text`, over REST.
    pub(super) fn conversation(
        &self,
        i: usize,
        text: &str,
    ) -> impl std::future::Future<Output = Result<Ended, String>> + Send + 'static {
        self.task_to(i, false, Some(("asker", "ask", json!({"text": text}))))
    }

    /// [`Deployed::task`], to `to` (agent, action, params) when given.
    fn task_to(
        &self,
        i: usize,
        resend: bool,
        to: Option<(&'static str, &'static str, Value)>,
    ) -> impl std::future::Future<Output = Result<Ended, String>> + Send + 'static {
        let (client, http, kind) = (self.client.clone(), self.http.clone(), self.kind);
        async move {
            if kind == Client::A2a && to.is_none() {
                return super::a2a::send(&client, &http, i).await;
            }
            let mut body = match &to {
                Some((to, action, params)) => json!({"to": to, "action": action, "params": params}),
                None => json!({"to": "echo", "action": "echo", "params": {"i": i}}),
            };
            if resend {
                body["idempotency_key"] = json!(format!("bench-{}", uuid::Uuid::now_v7().simple()));
            }
            if kind == Client::Sync {
                body["response_mode"] = json!("sync");
            }
            let t = Instant::now();
            let deadline = t + Duration::from_secs(120);
            let mut resubmits = 0;
            let mut task = loop {
                match call(client.post(format!("{http}/v1/tasks")).json(&body)).await {
                    Ok(task) => break task,
                    Err(Failed::Final(e)) => return Err(e),
                    Err(Failed::Transient(e)) if !resend || Instant::now() > deadline => {
                        return Err(e);
                    }
                    Err(Failed::Transient(_)) => {
                        resubmits += 1;
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
            };
            loop {
                if let Some(state @ ("completed" | "failed" | "canceled" | "rejected")) =
                    task["state"].as_str()
                {
                    return Ok(Ended {
                        latency: t.elapsed(),
                        state: state.to_string(),
                        resubmits,
                    });
                }
                if Instant::now() > deadline {
                    return Err(format!(
                        "task {} still {} after two minutes",
                        task["task_id"], task["state"]
                    ));
                }
                let id = task["task_id"].as_str().unwrap_or_default().to_string();
                task = match call(client.get(format!("{http}/v1/tasks/{id}?wait=20s"))).await {
                    Ok(task) => task,
                    Err(Failed::Final(e)) => return Err(e),
                    Err(Failed::Transient(_)) => {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        task
                    }
                };
            }
        }
    }
}

/// Why a call got no answer to use.
pub(super) enum Failed {
    /// The orchestrator is away or answered 5xx: worth asking again.
    Transient(String),
    /// Anything else.
    Final(String),
}

impl Failed {
    /// What went wrong, whichever kind.
    pub(super) fn into_message(self) -> String {
        match self {
            Failed::Transient(e) | Failed::Final(e) => e,
        }
    }
}

/// The A2A face's JSON-RPC `request`, to the orchestrator at `http`.
pub(super) fn a2a(
    client: &reqwest::Client,
    http: &str,
    request: &Value,
) -> reqwest::RequestBuilder {
    client
        .post(format!("{http}/a2a"))
        .header("A2A-Version", "1.0")
        .json(request)
}

pub(super) async fn call(request: reqwest::RequestBuilder) -> Result<Value, Failed> {
    let response = request
        .send()
        .await
        .map_err(|e| Failed::Transient(e.to_string()))?;
    let status = response.status();
    let body: Value = response
        .json()
        .await
        .map_err(|e| Failed::Transient(e.to_string()))?;
    match status {
        s if s.is_success() => Ok(body),
        s if s.is_server_error() => Err(Failed::Transient(format!("HTTP {s}: {body}"))),
        s => Err(Failed::Final(format!("HTTP {s}: {body}"))),
    }
}

/// Waits until the orchestrator answers ready and a worker is registered.
async fn ready(client: &reqwest::Client, http: &str, dir: &Path) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let up = call(client.get(format!("{http}/readyz"))).await.is_ok();
        let agents = call(client.get(format!("{http}/v1/agents"))).await;
        let workers = agents
            .ok()
            .and_then(|a| {
                let agents = a["agents"].as_array()?.clone();
                Some(
                    agents
                        .iter()
                        .filter_map(|a| a["instances"].as_array())
                        .map(Vec::len)
                        .sum(),
                )
            })
            .unwrap_or(0);
        if up && workers > 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            let log = std::fs::read_to_string(dir.join("run.log")).unwrap_or_default();
            return Err(format!("the deployed processes never became ready:\n{log}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The `orchestrator` binary the deployed path runs: the one beside this
/// benchmark's own.
fn orchestrator_exe() -> Result<std::path::PathBuf, String> {
    let name = format!("orchestrator{}", std::env::consts::EXE_SUFFIX);
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let beside = exe
        .parent()
        .map(|dir| dir.join(&name))
        .filter(|path| path.is_file());
    beside.ok_or_else(|| {
        format!(
            "no `{name}` beside {}: the benchmark runs the one it was built with",
            exe.display()
        )
    })
}

/// Where the measurements added to the deployed path (`--a2a`, `--push`,
/// `--llm`, `--console`) each start one of their own: the broker, the
/// run's directory and tag, the broker's processes.
pub(super) struct Site<'a> {
    pub(super) url: &'a str,
    pub(super) dir: &'a Path,
    pub(super) tag: &'a str,
    pub(super) brokers: &'a [u32],
}

impl Site<'_> {
    /// The directory of measurement `name`.
    pub(super) fn dir(&self, name: &str) -> std::path::PathBuf {
        self.dir.join(name)
    }

    /// Starts the deployed path for measurement `name` with `args`, under
    /// its own directory and NATS prefix (`bench<name><tag>`).
    pub(super) async fn deploy(&self, name: &str, args: &BenchArgs) -> Result<Deployed, String> {
        let prefix = format!("bench{name}{}", self.tag);
        Deployed::start(self.url, &prefix, &self.dir(name), 1, args, None).await
    }
}
