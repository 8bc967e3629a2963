//! The delivery core's guarantees, each against a real broker: no task is
//! stuck, none runs twice or after a cancel, a live task is never
//! dead-lettered, and what the broker cannot carry is refused up front.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::nats::NatsServer;
use common::system::{System, card, fast_bus};
use futures::future::BoxFuture;
use orchestrator::agent::{AgentCard, Delivery};
use orchestrator::bus::BusSettings;
use orchestrator::worker::{EchoHandler, Handler, Outcome, Task};
use serde_json::{Value, json};

/// Counts its runs; completes after `delay`, or when canceled.
struct Counted {
    runs: Arc<AtomicU32>,
    canceled: Arc<AtomicU32>,
    delay: Duration,
}

impl Counted {
    fn with_counters(delay: Duration) -> (Arc<AtomicU32>, Arc<AtomicU32>, Arc<dyn Handler>) {
        let (runs, canceled) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
        let handler = Counted {
            runs: Arc::clone(&runs),
            canceled: Arc::clone(&canceled),
            delay,
        };
        (runs, canceled, Arc::new(handler))
    }
}

impl Handler for Counted {
    fn handle(&self, task: Task) -> BoxFuture<'static, Outcome> {
        let run = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        let (canceled, delay) = (Arc::clone(&self.canceled), self.delay);
        Box::pin(async move {
            tokio::select! {
                () = tokio::time::sleep(delay) => Outcome::completed(json!({"run": run})),
                () = task.cancel.cancelled() => {
                    canceled.fetch_add(1, Ordering::SeqCst);
                    Outcome::Canceled
                }
            }
        })
    }
}

/// A card whose consumers redeliver after `ack_wait` and give up after
/// `max_deliver` deliveries.
fn card_with(name: &str, ack_wait: Duration, max_deliver: i64) -> AgentCard {
    let mut c = card(name, &["work"]);
    c.delivery = Some(Delivery {
        ack_wait: Some(ack_wait),
        max_deliver: Some(max_deliver),
        ..Default::default()
    });
    c
}

async fn submit(sys: &System, body: Value) -> String {
    let (status, task) = sys.post("/v1/tasks", body).await;
    assert_eq!(status, 201, "{task}");
    task["task_id"].as_str().unwrap().to_string()
}

/// Day two of a daily job with a fixed idempotency key: once the key's
/// retention has passed, the same request is a new task, and it runs (the
/// worker's claims are keyed by task, not by the user's key).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_idempotency_key_after_its_retention_runs_again() {
    let echo = card("bar-echo", &["echo"]);
    let mut sys = System::start_with(NatsServer::start(), vec![echo.clone()], fast_bus(), |c| {
        c.idempotency_retention = Duration::from_secs(2);
    })
    .await;
    sys.worker(echo, Arc::new(EchoHandler)).await;
    let body = json!({"to": "bar-echo", "action": "echo", "params": {"day": 1}, "idempotency_key": "daily-report"});
    let first = submit(&sys, body.clone()).await;
    let done = sys.wait_terminal(&first, Duration::from_secs(20)).await;
    assert_eq!(done["state"], "completed");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let second = submit(&sys, body).await;
    assert_ne!(first, second, "past its retention the key names a new task");
    let again = sys.wait_terminal(&second, Duration::from_secs(20)).await;
    assert_eq!(again["state"], "completed", "{again:#}");
    assert_eq!(again["result"], json!({"echo": {"day": 1}}));
}

/// An attempt whose message vanished (a broker that lost unsynced data, a
/// message deleted by hand) with nobody holding it is found by the reaper
/// and run again as the next attempt, instead of staying `submitted`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_attempt_is_resolved_by_the_reaper() {
    let agent = card("lost", &["work"]);
    let mut sys = System::start(vec![agent.clone()], fast_bus()).await;
    let id = submit(&sys, json!({"to": "lost", "action": "work"})).await;
    let bus = sys.bus().await;
    common::eventually(
        "the broker has the task",
        Duration::from_secs(10),
        || async { common::queued(&bus).await == 1 },
    )
    .await;
    let mut tasks = bus.jetstream().get_stream("ORCH_TASKS").await.unwrap();
    let first = tasks.info().await.unwrap().state.first_sequence;
    tasks.delete_message(first).await.unwrap();
    let (_, _, handler) = Counted::with_counters(Duration::ZERO);
    sys.worker(agent, handler).await;
    let done = sys.wait_terminal(&id, Duration::from_secs(30)).await;
    assert_eq!(done["state"], "completed", "{done:#}");
    assert_eq!(done["attempt"], 2);
    let reasons = common::strings(&done, "history", "reason");
    assert!(
        reasons.iter().any(|r| r.starts_with("lost attempt")),
        "{reasons:?}"
    );
}

/// A handler that runs longer than the ack wait, with a second copy of its
/// message in the queue and the orchestrator restarted after the duplicate
/// window: the copy is settled as a duplicate without counting toward the
/// poison limit, the restart republishes nothing the broker has, the task
/// completes once, and nothing is dead-lettered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_task_is_never_dead_lettered() {
    let slow = card_with("slow", Duration::from_secs(1), 2);
    let bus_config = BusSettings {
        duplicate_window: Duration::from_secs(1),
        ..fast_bus()
    };
    let mut sys = System::start(vec![slow.clone()], bus_config).await;
    let (runs, _, handler) = Counted::with_counters(Duration::from_secs(5));
    sys.worker(slow.clone(), handler).await;
    let id = submit(&sys, json!({"to": "slow", "action": "work"})).await;
    common::eventually("the handler starts", Duration::from_secs(10), || async {
        runs.load(Ordering::SeqCst) == 1
    })
    .await;
    // A second copy of the same attempt, as a republish past the duplicate
    // window would make.
    let bus = sys.bus().await;
    let tasks = bus.jetstream().get_stream("ORCH_TASKS").await.unwrap();
    let original = tasks.get_raw_message(1).await.unwrap();
    bus.jetstream()
        .publish(original.subject.clone(), original.payload.clone())
        .await
        .unwrap()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    sys.stop_orchestrator().await;
    sys.start_orchestrator(vec![slow]).await;
    let done = sys.wait_terminal(&id, Duration::from_secs(30)).await;
    assert_eq!(done["state"], "completed", "{done:#}");
    assert_eq!(done["result"], json!({"run": 1}));
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the task ran more than once"
    );
    common::eventually("the copy is settled", Duration::from_secs(20), || async {
        common::queued(&bus).await == 0
    })
    .await;
    let (_, dlq) = sys.get("/v1/dlq").await;
    assert_eq!(dlq["dead_letters"], json!([]), "{dlq:#}");
}

/// A task still running at its deadline ends `failed` with
/// `deadline_exceeded`, and its handler is canceled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_past_its_deadline_fails_and_its_handler_stops() {
    let slow = card("slow", &["work"]);
    let mut sys = System::start(vec![slow.clone()], fast_bus()).await;
    let (runs, canceled, handler) = Counted::with_counters(Duration::from_secs(60));
    sys.worker(slow, handler).await;
    let deadline = time::OffsetDateTime::now_utc() + Duration::from_secs(2);
    let deadline = deadline
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    let id = submit(
        &sys,
        json!({"to": "slow", "action": "work", "deadline": deadline}),
    )
    .await;
    let done = sys.wait_terminal(&id, Duration::from_secs(20)).await;
    assert_eq!(done["state"], "failed", "{done:#}");
    assert_eq!(done["error"]["code"], "deadline_exceeded");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    common::eventually(
        "the handler is canceled",
        Duration::from_secs(10),
        || async { canceled.load(Ordering::SeqCst) == 1 },
    )
    .await;
}

/// Against a broker that carries at most 256 KiB, a 400 kB request is
/// refused with 413 and nothing is stored; a request that fits is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_the_broker_cannot_carry_is_refused_and_not_stored() {
    let echo = card("echo", &["echo"]);
    let nats = NatsServer::start_with("max_payload: 262144\n");
    let mut sys = System::start_with(nats, vec![echo.clone()], fast_bus(), |_| {}).await;
    sys.worker(echo, Arc::new(EchoHandler)).await;
    let big = json!({"to": "echo", "action": "echo", "params": {"blob": "x".repeat(400_000)}});
    let (status, body) = sys.post("/v1/tasks", big).await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["code"], "payload_too_large");
    // The request itself is under the broker's limit, but its envelope
    // (with header, ids and control) would not be.
    let near = json!({"to": "echo", "action": "echo", "params": {"blob": "x".repeat(261_000)}});
    let (status, body) = sys.post("/v1/tasks", near).await;
    assert_eq!(status, 413, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_payload"),
        "{body}"
    );
    let (_, listed) = sys.get("/v1/tasks").await;
    assert_eq!(listed["tasks"], json!([]), "nothing may be stored");
    let fits = json!({"to": "echo", "action": "echo", "params": {"blob": "x".repeat(200_000)}});
    let id = submit(&sys, fits).await;
    let done = sys.wait_terminal(&id, Duration::from_secs(20)).await;
    assert_eq!(done["state"], "completed");
}

/// An event the orchestrator cannot read is copied to the DLQ and skipped;
/// the events behind it are applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_event_goes_to_the_dlq_and_does_not_block_the_rest() {
    let echo = card("echo", &["echo"]);
    let mut sys = System::start(vec![echo.clone()], fast_bus()).await;
    let bus = sys.bus().await;
    bus.jetstream()
        .publish(
            format!("orch.events.echo.{}", uuid::Uuid::now_v7()),
            "{ not an event".into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    sys.worker(echo, Arc::new(EchoHandler)).await;
    let id = submit(&sys, json!({"to": "echo", "action": "echo"})).await;
    let done = sys.wait_terminal(&id, Duration::from_secs(20)).await;
    assert_eq!(done["state"], "completed");
    common::eventually(
        "the poison event is dead-lettered",
        Duration::from_secs(10),
        || async {
            let (_, dlq) = sys.get("/v1/dlq").await;
            dlq["dead_letters"]
                .as_array()
                .is_some_and(|l| l.iter().any(|d| d["code"] == "undecodable_event"))
        },
    )
    .await;
}
