//! A whole system for tests: a real nats-server, an orchestrator serving
//! HTTP on a free port, and in-process workers.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use orchestrator::access::{ApiKeyEntry, Authenticator, Grants, Mode, api_keys};
use orchestrator::agent::AgentCard;
use orchestrator::bus::{Bus, BusSettings};
use orchestrator::http::HttpSettings;
use orchestrator::service::{Orchestrator, ServiceSettings};
use orchestrator::task::RetryPolicy;
use orchestrator::task_token::settings::key_dir;
use orchestrator::trigger::Triggers;
use orchestrator::worker::{Handler, Worker, WorkerSettings};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::nats::NatsServer;

/// A running orchestrator with its broker.
pub struct System {
    pub nats: NatsServer,
    pub http: String,
    pub data: tempfile::TempDir,
    pub bus_config: BusSettings,
    pub triggers: Triggers,
    /// The directory of the trigger files `start_with_triggers` wrote: the
    /// orchestrator watches it, so it lives as long as the system.
    trigger_dir: Option<tempfile::TempDir>,
    /// Agent files the orchestrator reads (and watches) instead of the
    /// cards it is given, when there are any.
    pub agent_paths: Vec<PathBuf>,
    pub client: reqwest::Client,
    /// Settings the orchestrator starts with (paths and broker filled in).
    pub service: ServiceSettings,
    /// Settings its HTTP API and A2A face start with.
    pub http_settings: HttpSettings,
    /// The administrator's API key (every scope), which `client` sends;
    /// `None` when the test turned authentication off.
    pub admin_key: Option<String>,
    stop: CancellationToken,
    server: Option<tokio::task::JoinHandle<()>>,
    workers: Vec<(CancellationToken, tokio::task::JoinHandle<()>)>,
}

/// A card for an agent `name` with the given skills, run by a built-in echo.
pub fn card(name: &str, skills: &[&str]) -> AgentCard {
    let skills: Vec<Value> = skills
        .iter()
        .map(|s| json!({"id": s, "description": s}))
        .collect();
    serde_json::from_value(json!({
        "name": name, "version": "1.0.0", "description": format!("test agent {name}"),
        "skills": skills, "invocation": {"type": "builtin", "handler": "echo"}
    }))
    .unwrap()
}

/// An HTTP client that sends `api_key` (when given) on every request.
pub fn client_with(api_key: Option<&str>) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(key) = api_key {
        headers.insert(
            reqwest::header::AUTHORIZATION,
            format!("Bearer {key}").parse().unwrap(),
        );
    }
    reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .unwrap()
}

/// A new API key for `principal` with `scopes`, and its settings entry.
pub fn key_for(principal: &str, scopes: &[&str]) -> (String, ApiKeyEntry) {
    let key = api_keys::generate();
    let entry = ApiKeyEntry {
        principal: principal.into(),
        scopes: Grants::new(scopes.iter().copied()),
        sha256: api_keys::hash(&key),
    };
    (key, entry)
}

/// Bus settings that make redelivery quick in tests.
pub fn fast_bus() -> BusSettings {
    BusSettings {
        ack_wait: Duration::from_secs(2),
        ..BusSettings::default()
    }
}

/// A trigger whose run waits at an approval gate (`ask`, "Go?"), then
/// runs a task of `echo`.
pub const GATED: &str = "id: gated\nsteps:\n  - {id: ask, approval: {prompt: Go?}}\n  - {id: s, agent: echo, action: echo}\n";

impl System {
    /// Starts a broker and an orchestrator knowing `cards`.
    pub async fn start(cards: Vec<AgentCard>, bus_config: BusSettings) -> System {
        System::start_with(NatsServer::start(), cards, bus_config, |_| {}).await
    }

    /// Starts an orchestrator on `nats`, with `tweak` applied to its
    /// service's settings.
    pub async fn start_with(
        nats: NatsServer,
        cards: Vec<AgentCard>,
        bus_config: BusSettings,
        tweak: impl FnOnce(&mut ServiceSettings),
    ) -> System {
        System::start_with_settings(nats, cards, bus_config, |service, _| tweak(service)).await
    }

    /// [`System::start_with`], with `tweak` given the HTTP face's settings
    /// too.
    pub async fn start_with_settings(
        nats: NatsServer,
        cards: Vec<AgentCard>,
        bus_config: BusSettings,
        tweak: impl FnOnce(&mut ServiceSettings, &mut HttpSettings),
    ) -> System {
        super::traced();
        let data = tempfile::tempdir().unwrap();
        let mut service = ServiceSettings {
            orphan_sweep: Duration::from_millis(200),
            retry: RetryPolicy {
                base: Duration::from_millis(100),
                max: Duration::from_secs(1),
            },
            reap_interval: Duration::from_millis(500),
            stall_after: Duration::from_secs(3),
            ..ServiceSettings::default()
        };
        let mut http_settings = HttpSettings::default();
        tweak(&mut service, &mut http_settings);
        // Authentication as deployed: the test's client is an administrator.
        let admin_key = (service.api_auth.mode == Mode::Required).then(|| {
            let key = api_keys::generate();
            service.api_auth.api_keys.push(ApiKeyEntry {
                principal: "test-admin".into(),
                scopes: Grants::all(),
                sha256: api_keys::hash(&key),
            });
            key
        });
        let mut sys = System {
            nats,
            http: String::new(),
            data,
            bus_config,
            triggers: Triggers::default(),
            trigger_dir: None,
            agent_paths: Vec::new(),
            client: client_with(admin_key.as_deref()),
            service,
            http_settings,
            admin_key,
            stop: CancellationToken::new(),
            server: None,
            workers: Vec::new(),
        };
        sys.start_orchestrator(cards).await;
        sys
    }

    /// Starts a broker and an orchestrator that knows `cards` and the
    /// triggers in `files` (file name, YAML), every one of which must
    /// load; no worker yet.
    pub async fn start_with_triggers(cards: Vec<AgentCard>, files: &[(&str, &str)]) -> System {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        let mut sys = System::start(cards.clone(), fast_bus()).await;
        sys.stop_orchestrator().await;
        sys.triggers = Triggers::load(dir.path(), &Default::default());
        sys.trigger_dir = Some(dir);
        sys.start_orchestrator(cards).await;
        sys
    }

    /// Starts a broker and an orchestrator reading (and watching) the
    /// agent files `paths`, as `orchestrator run --agents` does.
    pub async fn start_reading(paths: Vec<PathBuf>, bus_config: BusSettings) -> System {
        let mut sys = System::start_with(NatsServer::start(), Vec::new(), bus_config, |_| {}).await;
        sys.stop_orchestrator().await;
        sys.agent_paths = paths;
        sys.start_orchestrator(Vec::new()).await;
        sys
    }

    /// (Re)starts the orchestrator on the same data directory.
    pub async fn start_orchestrator(&mut self, cards: Vec<AgentCard>) {
        let config = ServiceSettings {
            data_dir: self.data.path().to_path_buf(),
            nats_url: Some(self.nats.url().parse().unwrap()),
            bus: self.bus_config.clone(),
            ..self.service.clone()
        };
        let bus = Bus::connect_now(&self.nats.url(), self.bus_config.clone())
            .await
            .unwrap();
        let access = Authenticator::open(&config.api_auth, &key_dir(self.data.path())).unwrap();
        let catalog = if self.agent_paths.is_empty() {
            orchestrator::agent::Catalog::of(cards)
        } else {
            orchestrator::agent::Catalog::load(&self.agent_paths, &config.git_options(false))
        };
        let triggers = self.triggers.clone().with_cards(&catalog);
        let orchestrator = Orchestrator::open(config, bus, catalog, triggers)
            .await
            .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        self.http = format!("http://{}", listener.local_addr().unwrap());
        self.stop = CancellationToken::new();
        let stop = self.stop.clone();
        let http = self.http_settings.clone();
        self.server = Some(tokio::spawn(async move {
            orchestrator::server::serve(orchestrator, http, Arc::new(access), listener, stop)
                .await
                .unwrap();
        }));
    }

    /// Stops the orchestrator gracefully.
    pub async fn stop_orchestrator(&mut self) {
        self.stop.cancel();
        if let Some(server) = self.server.take() {
            server.await.unwrap();
        }
    }

    /// Starts an in-process worker for `card` with `handler`.
    pub async fn worker(&mut self, card: AgentCard, handler: Arc<dyn Handler>) {
        self.worker_with_stop(card, handler).await;
    }

    /// Starts an in-process worker; returns its stop token and task.
    pub async fn worker_with_stop(
        &mut self,
        card: AgentCard,
        handler: Arc<dyn Handler>,
    ) -> (CancellationToken, usize) {
        // Every in-process worker checks task tokens, with the key the
        // orchestrator generated in its data directory.
        let verifier = self
            .service
            .tokens
            .verifier(self.data.path(), card.name.as_str())
            .unwrap()
            .map(Arc::new);
        self.worker_checking_with(card, handler, verifier).await
    }

    /// Starts an in-process worker that checks task tokens with `verifier`
    /// (`None`: unchecked); returns its stop token and index.
    pub async fn worker_checking_with(
        &mut self,
        card: AgentCard,
        handler: Arc<dyn Handler>,
        verifier: Option<Arc<orchestrator::task_token::Verifier>>,
    ) -> (CancellationToken, usize) {
        let bus = Bus::connect_now(&self.nats.url(), self.bus_config.clone())
            .await
            .unwrap();
        self.worker_on(bus, card, handler, verifier).await
    }

    /// Starts an in-process worker on `bus` (connected as the test wants);
    /// returns its stop token and index.
    pub async fn worker_on(
        &mut self,
        bus: Bus,
        card: AgentCard,
        handler: Arc<dyn Handler>,
        verifier: Option<Arc<orchestrator::task_token::Verifier>>,
    ) -> (CancellationToken, usize) {
        let dir = PathBuf::from(".");
        let config = WorkerSettings {
            idle_poll: Duration::from_millis(500),
            shutdown_grace: Duration::from_secs(5),
            verifier,
            ..WorkerSettings::default()
        };
        let worker = Worker::start(bus, card, dir, handler, config)
            .await
            .unwrap();
        let stop = CancellationToken::new();
        let handle = tokio::spawn(worker.run(stop.clone()));
        self.workers.push((stop.clone(), handle));
        (stop, self.workers.len() - 1)
    }

    /// An `orchestrator worker` process (killed on drop) for the agent
    /// `card`, its card written to `<dir>/<name>/agent.json`, on this
    /// system's broker and keys; its log in `<dir>/<log>`.
    pub fn worker_process(
        &self,
        dir: &std::path::Path,
        card: &Value,
        log: &str,
    ) -> super::process::Proc {
        let agent = dir.join(card["name"].as_str().unwrap());
        std::fs::create_dir_all(&agent).unwrap();
        std::fs::write(agent.join("agent.json"), card.to_string()).unwrap();
        super::process::orchestrator(
            &[
                "worker",
                "--agent",
                agent.to_str().unwrap(),
                "--data-dir",
                self.data.path().to_str().unwrap(),
            ],
            &self.nats.url(),
            &dir.join(log),
        )
    }

    /// Waits for worker `index` to stop (after its token fired).
    pub async fn join_worker(&mut self, index: usize) {
        let (_, handle) = self.workers.remove(index);
        handle.await.unwrap();
    }

    /// POSTs JSON to `path`, returning status and body.
    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let resp = self
            .client
            .post(format!("{}{path}", self.http))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    /// Calls `path` with `key` as the bearer credential (`None`: none),
    /// returning status, body and headers.
    pub async fn call_as(
        &self,
        key: Option<&str>,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value, reqwest::header::HeaderMap) {
        let mut request = reqwest::Client::new().request(method, format!("{}{path}", self.http));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let resp = request.send().await.unwrap();
        let (status, headers) = (resp.status().as_u16(), resp.headers().clone());
        (status, resp.json().await.unwrap_or(Value::Null), headers)
    }

    /// Submits a task for `to`'s `action` with `params`, asserting it is
    /// created; returns its id.
    pub async fn submit(&self, to: &str, action: &str, params: Value) -> String {
        let body = json!({"to": to, "action": action, "params": params});
        let (status, task) = self.post("/v1/tasks", body).await;
        assert_eq!(status, 201, "{task:#}");
        task["task_id"].as_str().unwrap().to_string()
    }

    /// GETs `path`, returning status and body.
    pub async fn get(&self, path: &str) -> (u16, Value) {
        let resp = self
            .client
            .get(format!("{}{path}", self.http))
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    /// The bus, for publishing straight onto subjects.
    pub async fn bus(&self) -> Bus {
        Bus::connect_now(&self.nats.url(), self.bus_config.clone())
            .await
            .unwrap()
    }

    /// Waits until task `id` is in a terminal state (or `timeout` passes).
    pub async fn wait_terminal(&self, id: &str, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let (status, task) = self.get(&format!("/v1/tasks/{id}")).await;
            if status == 200
                && matches!(
                    task["state"].as_str(),
                    Some("completed" | "failed" | "canceled" | "rejected")
                )
            {
                return task;
            }
            assert!(
                Instant::now() < deadline,
                "task {id} not finished in time: {task:#}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for System {
    fn drop(&mut self) {
        self.stop.cancel();
        for (stop, _) in &self.workers {
            stop.cancel();
        }
    }
}

/// A worker for `card` in this process (it outlives the orchestrator's
/// crashes), checking task tokens with the key the orchestrator generated
/// in `data`; stop it with the token.
pub async fn in_process_worker(
    nats: &NatsServer,
    data: &std::path::Path,
    card: orchestrator::agent::AgentCard,
    handler: Arc<dyn Handler>,
    concurrency: usize,
) -> (
    tokio_util::sync::CancellationToken,
    tokio::task::JoinHandle<()>,
) {
    let bus = orchestrator::bus::Bus::connect_now(&nats.url(), fast_bus())
        .await
        .unwrap();
    let verifier = orchestrator::task_token::TokenSettings::default()
        .verifier(data, card.name.as_str())
        .unwrap()
        .map(Arc::new);
    let config = orchestrator::worker::WorkerSettings {
        concurrency,
        verifier,
        ..Default::default()
    };
    let worker = orchestrator::worker::Worker::start(bus, card, ".".into(), handler, config)
        .await
        .unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(worker.run(stop.clone()));
    (stop, task)
}
