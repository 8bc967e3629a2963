//! Applies worker events to the store, from a durable consumer: events
//! published while the orchestrator is down are applied when it is back.
//! An event that cannot be read, or whose application keeps failing past
//! `events_max_deliver`, is copied to the DLQ and skipped (a poison event
//! must not hold up the ones behind it).

use std::time::Duration;

use crate::telemetry::quiet::warn_quietly;
use async_nats::jetstream::Message;
use async_nats::jetstream::consumer::PullConsumer;
use futures::future::BoxFuture;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::audit::AuditEntry;
use crate::bus::{
    Bus, BusError, DeadLetterCopy, Original, PullSettings, Puller, Settlement, settle,
};
use crate::envelope::AgentName;
use crate::event::{ErrorInfo, ReportedState, RunAbandoned, WorkerEvent};
use crate::service::loops::publisher::Publisher;
use crate::store::{Applied, Change, Store, StoreError};
use crate::task::{Said, TaskState, Transition};
use crate::telemetry::{context, metrics, spans};

/// An event's message and the span of its application (a child of the
/// worker's report), which ends when the message is settled.
struct Arrived {
    msg: Message,
    span: tracing::Span,
}

/// The orchestrator's durable consumer of worker events.
pub(crate) async fn consumer(bus: &Bus) -> Result<PullConsumer, BusError> {
    let n = bus.names();
    let c = bus.settings();
    bus.durable_consumer(
        &n.events_stream(),
        &n.events_consumer(),
        c.events_max_deliver,
        c.events_max_ack_pending,
    )
    .await
}

/// How many tasks' events are applied at once.
const SHARDS: usize = 16;

/// The most events of one shard taken together; a task's events among them
/// that follow each other are applied as one store job.
const TOGETHER: usize = 64;

/// What applying events needs.
#[derive(Clone)]
pub(crate) struct Applier {
    pub(crate) store: Store,
    pub(crate) bus: Bus,
    pub(crate) publisher: Publisher,
    /// Params whose values are scrubbed from reported error messages.
    pub(crate) sensitive: crate::redact::SensitiveFields,
    /// The agents declared: a result is checked against its skill's
    /// `outputSchema` before the task completes.
    pub(crate) agents: tokio::sync::watch::Receiver<std::sync::Arc<crate::service::Declared>>,
}

/// Applies events as they arrive until `stop` fires. Events of one task go
/// to one shard and are applied in order; shards run concurrently (the
/// store batches their changes into shared transactions).
pub(crate) async fn apply_events(applier: Applier, events: PullConsumer, stop: CancellationToken) {
    let mut shards = Vec::new();
    let mut senders = Vec::new();
    for _ in 0..SHARDS {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Message>(64);
        let applier = applier.clone();
        senders.push(tx);
        shards.push(tokio::spawn(async move {
            let mut waiting = Vec::new();
            while rx.recv_many(&mut waiting, TOGETHER).await > 0 {
                applier.apply_arrived(std::mem::take(&mut waiting)).await;
            }
        }));
    }
    let mut pull = Puller::new(events, PullSettings::short());
    loop {
        let msg = tokio::select! {
            m = pull.next() => m,
            () = stop.cancelled() => break,
        };
        if senders[shard_of(&msg)].send(msg).await.is_err() {
            break;
        }
    }
    drop(senders);
    for shard in shards {
        let _ = shard.await;
    }
}

/// The shard of a message: by its task id header, so one task's events
/// stay in order.
fn shard_of(msg: &Message) -> usize {
    use std::hash::{Hash, Hasher};
    let key = msg
        .headers
        .as_ref()
        .and_then(|h| h.get(crate::bus::TASK_ID_HEADER))
        .map(|v| v.as_str().to_string())
        .unwrap_or_else(|| msg.subject.to_string());
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut hasher);
    (hasher.finish() % SHARDS as u64) as usize
}

/// The state machine event a report stands for. A retryable failure is a
/// [`Transition::Retry`]: the orchestrator schedules another attempt.
fn transition_of(event: &WorkerEvent) -> Transition {
    let retryable = event.error.as_ref().is_some_and(|e| e.retryable);
    match event.state {
        ReportedState::Working => Transition::Start,
        ReportedState::InputRequired => Transition::RequireInput,
        ReportedState::AuthRequired => Transition::RequireAuth,
        ReportedState::Completed => Transition::Complete,
        ReportedState::Failed if retryable => Transition::Retry,
        ReportedState::Failed => Transition::Fail,
        ReportedState::Rejected => Transition::Reject,
        ReportedState::Canceled => Transition::Cancel,
    }
}

/// Who an event's audit records name: the agent its subject names (the
/// identity the bus's permissions bind), never the body's `agent` field.
fn actor(reporter: Option<&AgentName>) -> String {
    format!("agent:{}", reporter.map_or("unknown", AgentName::as_str))
}

/// The change a worker event asks for; `reporter` is the agent the
/// event's subject (`<prefix>.events.<agent>.<task>`) names.
fn change_for(event: &WorkerEvent, reporter: Option<AgentName>) -> Change {
    // A result the store could not read back is not kept: the attempt
    // fails (another would send the same).
    let fits =
        crate::codec::check_depth("result", &event.result, 0).and_then(|()| artifacts_fit(event));
    if let Err(e) = fits {
        let error = ErrorInfo::new("result_too_deep", e.to_string(), false);
        let change = Change {
            attempt: Some(event.attempt.get()),
            reason: format!("{}: {}", error.code.as_str(), error.message),
            error: Some(error),
            run: run_of(event),
            ..Change::new(Transition::Fail, actor(reporter.as_ref()), "")
        };
        return Change { reporter, ..change };
    }
    let reason = match (&event.error, event.state) {
        (Some(e), _) => format!("{}: {}", e.code.as_str(), e.message),
        (None, state) => format!("worker reported {}", state.as_str()),
    };
    Change {
        event: transition_of(event),
        attempt: Some(event.attempt.get()),
        actor: actor(reporter.as_ref()),
        reason,
        result: event.result.clone(),
        error: event.error.clone(),
        retry_after: event.retry_after_seconds.map(Duration::from_secs),
        reporter,
        run: run_of(event),
        said: Said {
            message: event.message.clone(),
            artifacts: event.artifacts.clone(),
            reply: event.reply,
            input: None,
            answer_key: None,
        },
        progress: event.progress.clone(),
    }
}

/// Whether the artifacts an event carries nest no deeper than a result may
/// (only looked at when there are some).
fn artifacts_fit(event: &WorkerEvent) -> Result<(), crate::codec::DecodeError> {
    let chunk = event.progress.as_ref().and_then(|p| p.artifact.as_ref());
    if event.artifacts.is_empty() && chunk.is_none() {
        return Ok(());
    }
    // Both counted from an array, as a completion's artifacts come.
    let values = [json!(event.artifacts), json!([chunk])];
    crate::codec::check_depth("artifacts", &values, 0)
}

/// Who ran the attempt, as the audit keeps it.
fn run_of(event: &WorkerEvent) -> Option<serde_json::Value> {
    event
        .instance
        .as_ref()
        .map(|instance| json!({"instance": instance, "resumed": event.resumed}))
}

/// Splits events into runs of one task each, keeping their order.
fn runs_by_task<M>(events: Vec<(M, WorkerEvent)>) -> Vec<Vec<(M, WorkerEvent)>> {
    let mut runs: Vec<Vec<(M, WorkerEvent)>> = Vec::new();
    for (msg, event) in events {
        match runs.last_mut() {
            Some(run) if run.last().is_some_and(|(_, e)| e.task_id == event.task_id) => {
                run.push((msg, event));
            }
            _ => runs.push(vec![(msg, event)]),
        }
    }
    runs
}

impl Applier {
    /// Applies the events a shard had waiting, in order. Events of one task
    /// that follow each other (a `working` report and the result, read
    /// from a backlog) go to the store as one job, so its status is written
    /// once for them.
    async fn apply_arrived(&self, arrived: Vec<Message>) {
        let mut decoded = Vec::with_capacity(arrived.len());
        for msg in arrived {
            if msg.info().is_ok_and(|i| i.delivered > 1) {
                metrics::event_redelivered();
            }
            if crate::bus::Names::is_abandoned_subject(&msg.subject) {
                self.abandoned(msg).await;
                continue;
            }
            match WorkerEvent::from_wire(&msg.payload, crate::codec::DEFAULT_MAX_BYTES) {
                Ok(event) => {
                    let span = spans::apply_event(&event, &msg.subject);
                    context::follow_message(&span, msg.headers.as_ref());
                    decoded.push((Arrived { msg, span }, event));
                }
                Err(_) => {
                    self.poison(
                        msg,
                        "undecodable_event",
                        "the event is not a valid worker event",
                    )
                    .await;
                }
            }
        }
        for group in runs_by_task(decoded) {
            self.apply_group(group).await;
        }
    }

    /// Applies events of one task. The changes are made in order here; their
    /// flush and the acks run on their own, so the next events can be
    /// applied meanwhile.
    async fn apply_group(&self, mut group: Vec<(Arrived, WorkerEvent)>) {
        let Some(task_id) = group.first().map(|(_, e)| e.task_id) else {
            return;
        };
        self.scrub_errors(task_id, &mut group);
        self.check_outputs(task_id, &mut group);
        let forwarded = self.turn_progress(task_id, &group);
        let changes = group
            .iter()
            .map(|(a, e)| change_for(e, self.subject_agent(&a.msg.subject)))
            .collect();
        let outcomes = match self.store.apply_all_deferred(task_id, changes).await {
            Ok(outcomes) => outcomes,
            Err(e) => {
                let arrived = group.into_iter().map(|(a, _)| a).collect();
                return self.all_failed(arrived, e.to_string()).await;
            }
        };
        let mut applied = Vec::with_capacity(group.len());
        let mut refused = Vec::new();
        for ((arrived, event), outcome) in group.into_iter().zip(outcomes) {
            match outcome {
                Ok(outcome) => applied.push((arrived, event, outcome)),
                Err(e) => refused.push((arrived, event, e)),
            }
        }
        if !refused.is_empty() {
            self.refused(task_id, refused).await;
        }
        // Flushed with the turn's own changes, before their acks.
        if let Some((conversation, changes)) = forwarded
            && let Err(e) = self.store.apply_all_deferred(conversation, changes).await
        {
            warn!(task_id = %conversation, error = %e, "a turn's progress not shown on its conversation");
        }
        if !applied.is_empty() {
            let this = self.clone();
            tokio::spawn(async move { this.after_applied(applied).await });
        }
    }

    /// [`Applier::failed`] for each of `arrived`, for one reason. Boxed:
    /// see `failed`.
    fn all_failed(&self, arrived: Vec<Arrived>, why: String) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            for a in arrived {
                self.failed(a, &why).await;
            }
        })
    }

    /// The events of `task_id` the store would not apply, each settled as
    /// its reason says. Boxed: see `failed`.
    fn refused(
        &self,
        task_id: crate::envelope::TaskId,
        refused: Vec<(Arrived, WorkerEvent, StoreError)>,
    ) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            for (arrived, event, e) in refused {
                match e {
                    StoreError::NotFound(_) => {
                        let reporter = self.subject_agent(&arrived.msg.subject);
                        self.unknown_task(arrived, &event, reporter).await;
                    }
                    e if crate::service::quarantine::unreadable(&e) => {
                        // Set aside: the event comes back for a task that is
                        // no longer there, and is audited as such.
                        crate::service::quarantine::set_aside(&self.store, task_id, &e.to_string())
                            .await;
                        self.failed(arrived, &e.to_string()).await;
                    }
                    e @ StoreError::Transition { .. } => {
                        spans::failed(&arrived.span, "not applied: the state machine refused it");
                        arrived.span.in_scope(
                            || warn!(task_id = %event.task_id, error = %e, "event not applied"),
                        );
                        settle(&arrived.msg, Settlement::Ack).await;
                    }
                    e => self.failed(arrived, &e.to_string()).await,
                }
            }
        })
    }

    /// The progress reports of a model call, for its conversation's task
    /// too (`docs/llm.md`): each turn's attempt counts as a run of its own
    /// there, so its reports are kept in their order. Read only for a
    /// group that carries progress.
    fn turn_progress(
        &self,
        task_id: crate::envelope::TaskId,
        group: &[(Arrived, WorkerEvent)],
    ) -> Option<(crate::envelope::TaskId, Vec<Change>)> {
        if !group.iter().any(|(_, e)| e.progress.is_some()) {
            return None;
        }
        let turn = self.store.envelope(task_id).ok()??.payload.meta.turn?;
        let changes = group
            .iter()
            .filter(|(_, e)| e.progress.is_some())
            .map(|(arrived, e)| {
                let reporter = self.subject_agent(&arrived.msg.subject);
                let instance = format!(
                    "{}/turn-{}.{}",
                    e.instance.as_deref().unwrap_or("worker"),
                    turn.n,
                    e.attempt.get()
                );
                Change {
                    run: Some(json!({ "instance": instance })),
                    progress: e.progress.clone(),
                    reporter: reporter.clone(),
                    ..Change::new(
                        Transition::Start,
                        actor(reporter.as_ref()),
                        format!("turn {} of the conversation", turn.n),
                    )
                }
            })
            .collect();
        Some((turn.task, changes))
    }

    /// Scrubs the task's secret param values from reported error messages
    /// before they reach the status, the audit trail or a log (a worker
    /// should have done it; this holds for one that did not).
    fn scrub_errors(&self, task_id: crate::envelope::TaskId, group: &mut [(Arrived, WorkerEvent)]) {
        if group.iter().all(|(_, e)| e.error.is_none()) {
            return;
        }
        let Ok(Some(envelope)) = self.store.envelope(task_id) else {
            return;
        };
        let secrets = self.sensitive.secrets(&envelope.payload.params);
        for error in group.iter_mut().filter_map(|(_, e)| e.error.as_mut()) {
            error.message = secrets.scrub(&error.message);
        }
    }

    /// Turns a completion whose result its skill's `outputSchema` refuses
    /// into a failure (`invalid_output`, not retried: the same worker
    /// would send the same) naming the field. Only agents with an output
    /// schema cost a read of the task's envelope.
    fn check_outputs(
        &self,
        task_id: crate::envelope::TaskId,
        group: &mut [(Arrived, WorkerEvent)],
    ) {
        if !self.agents.borrow().checks_outputs() {
            return;
        }
        let declared = self.agents.borrow().clone();
        let mut envelope = None;
        for (arrived, event) in group.iter_mut() {
            if event.state != ReportedState::Completed {
                continue;
            }
            let Some(agent) = self.subject_agent(&arrived.msg.subject) else {
                continue;
            };
            if !declared.checks_output(&agent) {
                continue;
            }
            if envelope.is_none() {
                envelope = self.store.envelope(task_id).ok().flatten();
            }
            let Some(env) = &envelope else { return };
            let result = event.result.clone().unwrap_or(serde_json::Value::Null);
            if let Err(e) = declared.check_result(&agent, env.payload.action.as_str(), &result) {
                event.state = ReportedState::Failed;
                event.result = None;
                event.error = Some(ErrorInfo::new("invalid_output", e.to_string(), false));
            }
        }
    }

    /// The agent an event's subject (`<prefix>.events.<agent>.<task>`)
    /// names: the identity the bus's permissions bind, not the event's own
    /// `agent` field.
    fn subject_agent(&self, subject: &str) -> Option<AgentName> {
        self.bus.names().event_agent(subject)?.parse().ok()
    }

    /// Once the changes are flushed: ack each event, schedule a retry.
    async fn after_applied(&self, applied: Vec<(Arrived, WorkerEvent, Applied)>) {
        if let Err(e) = self.store.flush().await {
            let arrived = applied.into_iter().map(|(a, _, _)| a).collect();
            return self.all_failed(arrived, e.to_string()).await;
        }
        // By reference: the loop's state stays a few pointers, not copies
        // of each event (this future is moved whole when spawned).
        for (arrived, event, applied) in &applied {
            settle(&arrived.msg, Settlement::Ack).await;
            match applied {
                Applied::Moved(record) => {
                    if event.resumed && event.state != ReportedState::Working {
                        let reporter = self.subject_agent(&arrived.msg.subject);
                        self.resumed(event, reporter).await;
                    }
                    if record.state == TaskState::Submitted && record.attempt > event.attempt.get()
                    {
                        // A retry: boxed, as the cold paths are (`failed`).
                        let at = self.publisher.at(
                            record.task_id,
                            record.attempt,
                            record.retry_at,
                            false,
                        );
                        Box::pin(at).await;
                    }
                }
                Applied::Ignored { reason, .. } => arrived
                    .span
                    .in_scope(|| debug!(task_id = %event.task_id, "event ignored: {reason}")),
                Applied::Unchanged(_) => {}
            }
        }
    }

    /// Audits a run a worker gave up when its claim was lost
    /// (`task.run_abandoned`); the task itself is not changed.
    fn abandoned<'a>(&'a self, msg: Message) -> BoxFuture<'a, ()> {
        // Boxed: see `failed`.
        Box::pin(async move {
            let note = match RunAbandoned::from_wire(&msg.payload, crate::codec::DEFAULT_MAX_BYTES)
            {
                Ok(note) => note,
                Err(e) => {
                    let why = format!("not a run-abandoned note: {e}");
                    return self.poison(msg, "undecodable_event", &why).await;
                }
            };
            let reporter = self.subject_agent(&msg.subject);
            let entry = AuditEntry {
                actor: actor(reporter.as_ref()),
                kind: "task.run_abandoned".into(),
                task_id: Some(note.task_id),
                correlation_id: Some(note.correlation_id.clone()),
                trace_id: None,
                detail: json!({
                    "attempt": note.attempt,
                    "instance": note.instance,
                    "finished": note.finished,
                    "reason": note.reason,
                    "at": note.at,
                }),
            };
            match self.store.audit(entry).await {
                Ok(_) => settle(&msg, Settlement::Ack).await,
                Err(e) => {
                    warn_quietly!("orchestrator.audit_failed", task_id = %note.task_id, error = %e, "run-abandoned note not audited; it will be redelivered");
                    settle(&msg, Settlement::Nak(self.bus.settings().retry_delay)).await;
                }
            }
        })
    }

    /// Audits an attempt that ended on a run told it resumed
    /// (`task.resumed`): the instance that ran it, and the instances known
    /// to have run it before (from this attempt's earlier records).
    async fn resumed(&self, event: &WorkerEvent, reporter: Option<AgentName>) {
        let attempt = event.attempt.get();
        let instance = event.instance.as_deref();
        let filter = crate::audit::AuditFilter {
            task_id: Some(event.task_id),
            correlation_id: None,
        };
        let earlier: std::collections::BTreeSet<String> = self
            .store
            .audit_list(&filter, 0, 1000)
            .unwrap_or_default()
            .into_iter()
            .filter(|r| r.detail["attempt"].as_u64() == Some(u64::from(attempt)))
            .filter_map(|r| {
                let ran = match r.kind.as_str() {
                    "task.run_abandoned" => &r.detail["instance"],
                    "task.transition" => &r.detail["run"]["instance"],
                    _ => return None,
                };
                ran.as_str()
                    .filter(|i| Some(*i) != instance)
                    .map(str::to_string)
            })
            .collect();
        let entry = AuditEntry {
            actor: actor(reporter.as_ref()),
            kind: "task.resumed".into(),
            task_id: Some(event.task_id),
            correlation_id: Some(event.correlation_id.clone()),
            trace_id: None,
            detail: json!({
                "attempt": attempt,
                "instance": instance,
                "state": event.state,
                "told_resumed": true,
                "earlier_runs": earlier,
            }),
        };
        if let Err(e) = self.store.audit(entry).await {
            warn_quietly!("orchestrator.audit_failed", task_id = %event.task_id, error = %e, "a resumed run was not audited");
        }
    }

    /// An event for a task this orchestrator never stored (published
    /// straight onto the bus, or from another deployment): audited.
    fn unknown_task<'a>(
        &'a self,
        arrived: Arrived,
        event: &'a WorkerEvent,
        reporter: Option<AgentName>,
    ) -> BoxFuture<'a, ()> {
        // Boxed: see `failed`.
        Box::pin(async move {
            warn!(task_id = %event.task_id, "event for an unknown task");
            let trace_id = context::StoredTrace::of(&arrived.span).trace_id();
            let entry = AuditEntry {
                actor: actor(reporter.as_ref()),
                kind: "task.unknown_event".into(),
                task_id: Some(event.task_id),
                correlation_id: Some(event.correlation_id.clone()),
                trace_id,
                detail: json!({"state": event.state, "attempt": event.attempt, "error": event.error}),
            };
            match self.store.audit(entry).await {
                Ok(_) => settle(&arrived.msg, Settlement::Ack).await,
                Err(e) => self.failed(arrived, &e.to_string()).await,
            }
        })
    }

    /// Applying failed: try again later, or give up on a poison event.
    fn failed<'a>(&'a self, arrived: Arrived, why: &'a str) -> BoxFuture<'a, ()> {
        // Boxed: a cold path, kept out of the size of the hot futures that
        // await it (`apply_group`, `after_applied`), which are moved whole
        // (memcpy) when awaited and spawned; so are `poison`,
        // `unknown_task` and `abandoned`.
        Box::pin(async move {
            spans::failed(&arrived.span, "not applied");
            let msg = arrived.msg;
            let delivered = msg.info().map(|i| i.delivered).unwrap_or(1);
            if delivered >= self.bus.settings().events_max_deliver {
                let why = format!("not applied after {delivered} deliveries: {why}");
                return self.poison(msg, "poison_event", &why).await;
            }
            warn_quietly!("orchestrator.event_not_applied", subject = %msg.subject, error = why, "event not applied; it will be redelivered");
            settle(&msg, Settlement::Nak(self.bus.settings().retry_delay)).await;
        })
    }

    /// Copies an event to the DLQ and skips it.
    fn poison<'a>(&'a self, msg: Message, code: &'a str, why: &'a str) -> BoxFuture<'a, ()> {
        // Boxed: see `failed`.
        Box::pin(async move {
            let seq = msg.info().map(|i| i.stream_sequence).unwrap_or_default();
            let agent = self
                .subject_agent(&msg.subject)
                .map_or_else(|| "unknown".to_string(), |a| a.to_string());
            let task_id = msg
                .headers
                .as_ref()
                .and_then(|h| h.get(crate::bus::TASK_ID_HEADER))
                .and_then(|v| v.as_str().parse().ok());
            warn!(subject = %msg.subject, code, "poison event to the DLQ: {why}");
            let events_stream = self.bus.names().events_stream();
            let letter = DeadLetterCopy {
                agent: &agent,
                payload: &msg.payload,
                code,
                reason: why,
                original_subject: msg.subject.as_str(),
                stream: &events_stream,
                stream_seq: seq,
                task_id,
            };
            let moved = self
                .bus
                .move_to_dlq(letter, Original::Delivered(&msg, Settlement::Term))
                .await;
            if let Err(e) = moved {
                warn_quietly!("orchestrator.event_dlq_failed", error = %e, "poison event not copied; it will be redelivered");
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::TaskId;

    fn event(task_id: TaskId, state: &str) -> WorkerEvent {
        serde_json::from_value(json!({
            "v": 1,
            "task_id": task_id,
            "correlation_id": "c-1",
            "agent": "echo",
            "attempt": 1,
            "state": state,
            "at": crate::envelope::Timestamp::now(),
        }))
        .unwrap()
    }

    /// Every reported state stands for its state machine event; a failure
    /// is a retry only when it says it is retryable.
    #[test]
    fn each_report_stands_for_its_state_machine_event() {
        let failed = |retryable: bool| {
            let mut e = event(TaskId::new(), "failed");
            e.error = Some(ErrorInfo::new("boom", "m", retryable));
            e
        };
        assert_eq!(transition_of(&failed(true)), Transition::Retry);
        assert_eq!(transition_of(&failed(false)), Transition::Fail);
        let cases = [
            ("working", Transition::Start),
            ("input_required", Transition::RequireInput),
            ("auth_required", Transition::RequireAuth),
            ("completed", Transition::Complete),
            ("rejected", Transition::Reject),
            ("canceled", Transition::Cancel),
        ];
        for (state, want) in cases {
            assert_eq!(transition_of(&event(TaskId::new(), state)), want, "{state}");
        }
    }

    /// Only events of one task that follow each other go together, and
    /// order is kept: a task's later event never joins an earlier run.
    #[test]
    fn events_go_together_only_in_runs_of_one_task() {
        let (a, b) = (TaskId::new(), TaskId::new());
        let arrived = vec![
            (1, event(a, "working")),
            (2, event(a, "completed")),
            (3, event(b, "working")),
            (4, event(a, "completed")),
            (5, event(b, "completed")),
            (6, event(b, "completed")),
        ];
        let runs: Vec<Vec<i32>> = runs_by_task(arrived)
            .into_iter()
            .map(|run| run.into_iter().map(|(n, _)| n).collect())
            .collect();
        assert_eq!(runs, vec![vec![1, 2], vec![3], vec![4], vec![5, 6]]);
        assert!(runs_by_task::<i32>(Vec::new()).is_empty());
    }
}
