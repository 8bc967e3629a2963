//! The full path with the orchestrator and the worker in this process.

use std::sync::Arc;
use std::time::{Duration, Instant};

use orchestrator::bus::{Bus, BusSettings};
use orchestrator::service::{Caller, Orchestrator, ServiceSettings, TaskRequest};
use orchestrator::worker::{EchoHandler, Worker, WorkerSettings};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{BenchArgs, Figures, echo_card, measure};

/// Submit through the orchestrator's library API (claim, store, flush,
/// publish), run by an echo worker, the result applied to the store.
pub(super) async fn full_path(
    url: &str,
    bus_config: BusSettings,
    dir: &std::path::Path,
    args: &BenchArgs,
) -> Result<(Figures, Figures), String> {
    let card = echo_card(args.concurrency)?;
    let data_dir = dir.join("inproc");
    super::preload::preload(&data_dir, args.preload).await?;
    let config = ServiceSettings {
        data_dir: data_dir.clone(),
        ..ServiceSettings::default()
    };
    let tokens = config.tokens.clone();
    let access = orchestrator::access::Authenticator::open(
        &config.api_auth,
        &orchestrator::task_token::settings::key_dir(&data_dir),
    )
    .map_err(|e| e.to_string())?;
    let bus = Bus::connect_now(url, bus_config.clone())
        .await
        .map_err(|e| e.to_string())?;
    let orchestrator = Orchestrator::open(
        config,
        bus,
        orchestrator::agent::Catalog::of([card.clone()]),
        Default::default(),
    )
    .await
    .map_err(|e| e.to_string())?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let stop = CancellationToken::new();
    let server = tokio::spawn(orchestrator::server::serve(
        orchestrator.clone(),
        Default::default(),
        std::sync::Arc::new(access),
        listener,
        stop.clone(),
    ));
    let worker_bus = Bus::connect_now(url, bus_config)
        .await
        .map_err(|e| e.to_string())?;
    // Tokens are minted and checked as deployed.
    let verifier = tokens
        .verifier(&data_dir, card.name.as_str())
        .map_err(|e| e.to_string())?
        .map(Arc::new);
    let worker_config = WorkerSettings {
        concurrency: args.concurrency,
        verifier,
        ..WorkerSettings::default()
    };
    let worker = Worker::start(
        worker_bus,
        card,
        ".".into(),
        Arc::new(EchoHandler),
        worker_config,
    )
    .await
    .map_err(|e| e.to_string())?;
    let worker = tokio::spawn(worker.run(stop.clone()));

    let caller = Caller::new("bench", orchestrator::access::Grants::all());
    let one = |i: usize| {
        let orchestrator = orchestrator.clone();
        let caller = caller.clone();
        async move {
            let request: TaskRequest =
                serde_json::from_value(json!({"to": "echo", "action": "echo", "params": {"i": i}}))
                    .map_err(|e| e.to_string())?;
            let t = Instant::now();
            let submitted = orchestrator
                .submit(request, &caller)
                .await
                .map_err(|e| e.to_string())?;
            let id = submitted.record().task_id();
            let ended = orchestrator
                .task_when_ended(id, Duration::from_secs(60), &caller)
                .await
                .map_err(|e| e.to_string())?;
            match ended {
                Some(r) if r.status.state.is_terminal() => Ok::<Duration, String>(t.elapsed()),
                _ => Err(format!("task {id} did not end within a minute")),
            }
        }
    };
    let throughput = measure("full path", args.tasks, args.concurrency, one).await?;
    let low = measure("full path, low load", args.samples, 1, one).await?;
    stop.cancel();
    let _ = worker.await;
    let _ = server.await;
    Ok((throughput, low))
}
