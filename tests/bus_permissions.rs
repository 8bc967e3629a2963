//! The least-privilege bus on a real nats-server configured with what
//! `orchestrator nats config` writes: the orchestrator and a worker do
//! their work as their own users, and an agent's user cannot publish
//! tasks, publish another agent's events, write another agent's claims,
//! pull another agent's consumer, read what is not its own (a stream's
//! info among it, which would list other agents' task ids), or change the
//! streams; a client without credentials is refused.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::nats::NatsServer;
use common::system::{System, card, fast_bus};
use futures::StreamExt;
use orchestrator::bus::{Bus, BusSettings, Names, NatsAuth, agent_inbox_prefix, permissions};
use orchestrator::envelope::{AgentName, Priority};
use orchestrator::worker::EchoHandler;
use serde_json::json;

/// A broker that knows the orchestrator and agents `echo` and `other`,
/// with the seed files in the returned directory.
fn broker() -> (tempfile::TempDir, NatsServer) {
    let dir = tempfile::tempdir().unwrap();
    let agents: Vec<AgentName> = vec!["echo".parse().unwrap(), "other".parse().unwrap()];
    let files = permissions::write(dir.path(), &Names::new("orch"), &agents).unwrap();
    let conf = std::fs::read_to_string(files.auth_conf).unwrap();
    (dir, NatsServer::start_with(&conf))
}

/// Bus settings for the user whose seed is `seed`.
fn as_user(seed: std::path::PathBuf, inbox: Option<String>) -> BusSettings {
    BusSettings {
        auth: NatsAuth {
            nkey_seed_file: Some(seed),
            ..NatsAuth::default()
        },
        inbox_prefix: inbox,
        ..fast_bus()
    }
}

/// Messages stored in `stream`, seen by the orchestrator's user.
async fn stored(bus: &Bus, stream: &str) -> u64 {
    let mut s = bus.jetstream().get_stream(stream).await.unwrap();
    s.info().await.unwrap().state.messages
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_process_does_its_work_and_an_agent_nothing_else() {
    let (seeds, nats) = broker();
    let url = nats.url();
    let echo: AgentName = "echo".parse().unwrap();
    let orchestrator_bus = as_user(permissions::orchestrator_seed(seeds.path()), None);
    let mut sys = System::start_with(
        nats,
        vec![card("echo", &["echo"]), card("other", &["echo"])],
        orchestrator_bus,
        |_| {},
    )
    .await;

    // A client without credentials is refused.
    let anonymous = Bus::connect_now(&url, fast_bus()).await;
    assert!(anonymous.is_err(), "an unauthenticated client got in");

    // The worker, as agent `echo`, runs a task end to end.
    let agent_config = as_user(
        permissions::agent_seed(seeds.path(), &echo),
        Some(agent_inbox_prefix(&echo)),
    );
    let worker_bus = Bus::connect_now(&url, agent_config.clone()).await.unwrap();
    let verifier = sys
        .service
        .tokens
        .verifier(sys.data.path(), "echo")
        .unwrap()
        .map(Arc::new);
    sys.worker_on(
        worker_bus,
        card("echo", &["echo"]),
        Arc::new(EchoHandler),
        verifier,
    )
    .await;
    let id = sys.submit("echo", "echo", json!({"n": 1})).await;
    let done = sys.wait_terminal(&id, Duration::from_secs(30)).await;
    assert_eq!(done["state"], "completed", "{done:#}");

    // An unreadable message on its subject: the worker dead-letters it.
    let admin = sys.bus().await;
    admin
        .jetstream()
        .publish("orch.tasks.echo.normal", "not an envelope".into())
        .await
        .unwrap()
        .await
        .unwrap();
    common::eventually(
        "the worker dead-letters it",
        Duration::from_secs(20),
        || async { stored(&admin, "ORCH_DLQ").await == 1 },
    )
    .await;
    // The worker's own copy, not the orchestrator's after max deliveries.
    let (_, letters) = sys.get("/v1/dlq").await;
    let code = &letters["dead_letters"][0]["code"];
    assert!(code.is_string() && code != "max_deliveries", "{letters:#}");

    // A task for `other` waits in its queue (no worker runs it).
    let waiting_id = sys.submit("other", "echo", json!({})).await;
    common::eventually("the task is queued", Duration::from_secs(10), || async {
        common::queued(&admin).await == 1
    })
    .await;
    let events_before = stored(&admin, "ORCH_EVENTS").await;
    // Its consumer exists, as a worker of `other` would have made it.
    let other: AgentName = "other".parse().unwrap();
    admin
        .agent_consumer(&other, Priority::Normal, &(&fast_bus()).into())
        .await
        .unwrap();

    // What agent `echo`'s user may not do.
    let rogue = Bus::connect_now(&url, agent_config).await.unwrap();
    let client = rogue.client().clone();
    let mut sneak = client.subscribe("orch.tasks.>").await.unwrap();
    let mut replies = client.subscribe("_INBOX.>").await.unwrap();
    let forged = json!({"forged": true}).to_string();
    // Publish a task; an event for another agent's task; another agent's
    // claim; pull another agent's consumer; delete a stream.
    let forbidden = [
        "orch.tasks.other.normal".to_string(),
        format!("orch.events.other.{waiting_id}"),
        format!("$KV.ORCH_DELIVERIES.other.{waiting_id}"),
        "orch.dlq.other".to_string(),
    ];
    for subject in forbidden {
        let _ = rogue
            .jetstream()
            .publish(subject, forged.clone().into())
            .await;
    }
    let pull = client.request(
        "$JS.API.CONSUMER.MSG.NEXT.ORCH_TASKS.agent_other_normal",
        json!({"batch": 1, "no_wait": true}).to_string().into(),
    );
    let _ = tokio::time::timeout(Duration::from_secs(2), pull).await;
    let deleted = tokio::time::timeout(
        Duration::from_secs(3),
        rogue.jetstream().delete_stream("ORCH_TASKS"),
    )
    .await;
    assert!(!matches!(deleted, Ok(Ok(_))), "the agent deleted a stream");
    // A stream's info lists its subjects, task ids among them: no stream's
    // info is the agent's to ask for.
    for stream in [
        "ORCH_EVENTS",
        "KV_ORCH_DELIVERIES",
        "ORCH_TASKS",
        "KV_ORCH_AGENTS",
    ] {
        let info = client.request(
            format!("$JS.API.STREAM.INFO.{stream}"),
            json!({"subjects_filter": ">"}).to_string().into(),
        );
        let answer = tokio::time::timeout(Duration::from_secs(2), info).await;
        let text = match &answer {
            Ok(Ok(reply)) => String::from_utf8_lossy(&reply.payload).into_owned(),
            _ => String::new(),
        };
        assert!(
            !matches!(answer, Ok(Ok(_))) && !text.contains(&waiting_id),
            "the agent read {stream}'s info: {text}"
        );
    }
    client.flush().await.unwrap();

    // The orchestrator republishes nothing meanwhile; everything stands.
    assert_eq!(common::queued(&admin).await, 1, "a forged task was queued");
    assert_eq!(
        stored(&admin, "ORCH_EVENTS").await,
        events_before,
        "an event for another agent was stored"
    );
    assert_eq!(
        stored(&admin, "ORCH_DLQ").await,
        1,
        "a dead letter for another agent"
    );
    let claims = admin.deliveries().await.unwrap();
    let claim = claims.entry(format!("other.{waiting_id}")).await.unwrap();
    assert!(
        claim.is_none(),
        "another agent's claim was written: {claim:?}"
    );
    let tasks = admin.jetstream().get_stream("ORCH_TASKS").await.unwrap();
    let other = tasks.consumer_info("agent_other_normal").await.unwrap();
    assert_eq!(
        (
            other.delivered.consumer_sequence,
            other.num_ack_pending,
            other.num_pending
        ),
        (0, 0, 1),
        "another agent's consumer was pulled"
    );
    let (_, still) = sys.get(&format!("/v1/tasks/{waiting_id}")).await;
    assert_eq!(still["state"], "submitted", "{still:#}");
    // Nothing reached the subscriptions it is not allowed: a new task for
    // `other` is published while it listens on the task subjects.
    sys.submit("other", "echo", json!({"n": 2})).await;
    common::eventually(
        "the new task is queued",
        Duration::from_secs(10),
        || async { common::queued(&admin).await == 2 },
    )
    .await;
    let sneaked = tokio::time::timeout(Duration::from_millis(500), sneak.next()).await;
    assert!(sneaked.is_err(), "the agent read the task queue");
    let sniffed = tokio::time::timeout(Duration::from_millis(500), replies.next()).await;
    assert!(sniffed.is_err(), "the agent read others' replies");
}

/// A worker started before the orchestrator, on a bus where it may not
/// create streams, waits until the orchestrator has provisioned them, then
/// runs tasks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_started_first_waits_for_the_orchestrator() {
    let (seeds, nats) = broker();
    let url = nats.url();
    let echo: AgentName = "echo".parse().unwrap();
    let agent_config = as_user(
        permissions::agent_seed(seeds.path(), &echo),
        Some(agent_inbox_prefix(&echo)),
    );
    let bus = Bus::connect_now(&url, agent_config).await.unwrap();
    let config = orchestrator::worker::WorkerSettings {
        idle_poll: Duration::from_millis(500),
        ..Default::default()
    };
    let starting = tokio::spawn(orchestrator::worker::Worker::start(
        bus,
        card("echo", &["echo"]),
        ".".into(),
        Arc::new(EchoHandler),
        config,
    ));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !starting.is_finished(),
        "the worker did not wait for the bus"
    );
    let orchestrator_bus = as_user(permissions::orchestrator_seed(seeds.path()), None);
    let sys = System::start_with(
        nats,
        vec![card("echo", &["echo"])],
        orchestrator_bus,
        |_| {},
    )
    .await;
    let worker = tokio::time::timeout(Duration::from_secs(20), starting)
        .await
        .expect("the worker never started once the bus was there")
        .unwrap()
        .unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(worker.run(stop.clone()));
    let id = sys.submit("echo", "echo", json!({})).await;
    let done = sys.wait_terminal(&id, Duration::from_secs(30)).await;
    assert_eq!(done["state"], "completed", "{done:#}");
    stop.cancel();
    running.await.unwrap();
}
