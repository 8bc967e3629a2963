//! The bare JetStream round trip, the floor any durable JetStream task
//! system stands on.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::cpu::{CpuPerTask, Processes};
use super::{BenchArgs, Figures, measure};

/// Publish (awaiting the stream's ack), pull, ack, reply: the least any
/// durable JetStream task system does per task. Also the CPU time per
/// message of the broker (`brokers`, the processes the bench started) and
/// of this process, in the throughput run. The stream has `replicas`
/// replicas.
pub(super) async fn bare_round_trip(
    url: &str,
    brokers: &[u32],
    tag: &str,
    replicas: usize,
    args: &BenchArgs,
) -> Result<((Figures, Figures), CpuPerTask), String> {
    let servers: orchestrator::bus::Servers = url
        .parse()
        .map_err(|e: orchestrator::envelope::ParseError| e.to_string())?;
    let client = async_nats::connect(servers.addrs())
        .await
        .map_err(|e| e.to_string())?;
    let js = jetstream::new(client.clone());
    let subject = format!("bare{tag}.work");
    let replies = format!("bare{tag}.reply");
    let config = stream::Config {
        name: format!("BARE{tag}"),
        subjects: vec![subject.clone()],
        retention: stream::RetentionPolicy::WorkQueue,
        storage: stream::StorageType::File,
        num_replicas: replicas,
        ..Default::default()
    };
    // A cluster just started may not see all its nodes yet: its refusal
    // to place the copies is waited out, as the orchestrator's own
    // provisioning does, for up to 30 s.
    let placed_by = Instant::now() + Duration::from_secs(30);
    let stream = loop {
        match js.create_stream(config.clone()).await {
            Ok(stream) => break stream,
            Err(e) if orchestrator::bus::refused_placement(&e) && Instant::now() < placed_by => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e.to_string()),
        }
    };
    let consumer: consumer::PullConsumer = stream
        .create_consumer(consumer::pull::Config {
            durable_name: Some("bare".into()),
            ack_policy: consumer::AckPolicy::Explicit,
            max_ack_pending: -1,
            ..Default::default()
        })
        .await
        .map_err(|e| e.to_string())?;
    let stop = CancellationToken::new();
    let responder = {
        let client = client.clone();
        let replies = replies.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let Ok(mut messages) = consumer.messages().await else {
                return;
            };
            loop {
                let msg = tokio::select! {
                    m = messages.next() => m,
                    () = stop.cancelled() => return,
                };
                let Some(Ok(msg)) = msg else { continue };
                let payload = msg.payload.clone();
                let _ = msg.ack().await;
                let _ = client.publish(replies.clone(), payload).await;
            }
        })
    };
    let waiting: Arc<Mutex<HashMap<u64, oneshot::Sender<()>>>> = Arc::default();
    let listener = {
        let mut sub = client.subscribe(replies).await.map_err(|e| e.to_string())?;
        let waiting = Arc::clone(&waiting);
        tokio::spawn(async move {
            while let Some(m) = sub.next().await {
                let id = std::str::from_utf8(&m.payload)
                    .ok()
                    .and_then(|s| s.parse::<u64>().ok());
                if let Some(tx) = id.and_then(|id| waiting.lock().ok()?.remove(&id)) {
                    let _ = tx.send(());
                }
            }
        })
    };
    let one = |id: u64| {
        let js = js.clone();
        let subject = subject.clone();
        let waiting = Arc::clone(&waiting);
        async move {
            let (tx, rx) = oneshot::channel();
            waiting.lock().map_err(|e| e.to_string())?.insert(id, tx);
            let t = Instant::now();
            js.publish(subject, id.to_string().into())
                .await
                .map_err(|e| e.to_string())?
                .await
                .map_err(|e| e.to_string())?;
            rx.await.map_err(|e| e.to_string())?;
            Ok::<Duration, String>(t.elapsed())
        }
    };
    let processes = Processes {
        orchestrator: None,
        worker: None,
        brokers: brokers.to_vec(),
        client: std::process::id(),
    };
    let before = processes.cpu();
    let throughput = measure("bare", args.tasks, args.concurrency, |i| one(i as u64)).await?;
    let cpu = CpuPerTask::between(before, processes.cpu(), throughput.count);
    let low = measure("bare, low load", args.samples, 1, |i| {
        one((args.tasks + i) as u64)
    })
    .await?;
    stop.cancel();
    let _ = responder.await;
    listener.abort();
    let _ = js.delete_stream(format!("BARE{tag}")).await;
    Ok(((throughput, low), cpu))
}
