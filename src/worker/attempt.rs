//! Running a claimed attempt: the handler under a renewed lease, then the
//! fence and the report.
//!
//! The report waits out an events stream that cannot take it (its leader
//! is being elected): the worker keeps the message (in-progress acks) and
//! the claim (renewals) and publishes again after a backoff with jitter. A
//! nak there would run the attempt a second time for nothing. It gives the
//! result up only when the claim is lost (another replica runs the attempt
//! now) or canceled, or when the claim cannot be confirmed for a whole
//! lease.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::Message;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, Span, info, warn};

use super::acquire::keep_waiting;
use super::progress::{Publisher, Reporter};
use super::{Outcome, Shared, Stops, Task, event_for, lock};
use crate::bus::{Settlement, settle};
use crate::claim::{ClaimErrorKind, Held};
use crate::envelope::Envelope;
use crate::event::{RunAbandoned, WorkerEvent};
use crate::telemetry::quiet::warn_quietly;
use crate::telemetry::{context, metrics, spans};

/// How a run ended before its outcome could be reported.
enum Stopped {
    /// The handler finished.
    Finished(Outcome),
    /// A cancel mark replaced the claim: the handler was canceled.
    Canceled,
    /// The claim was lost (its lease ended and another replica took over):
    /// the handler was canceled (why).
    Lost(String),
    /// The worker is shutting down past its grace period.
    HardStop,
}

pub(super) async fn run_task(
    shared: &Arc<Shared>,
    msg: Message,
    envelope: Envelope,
    resumed: bool,
    mut held: Held,
    stops: &Stops,
    trace: &Span,
) {
    let hard_stop = &stops.hard_stop;
    let task_id = envelope.header.task_id;
    let cancel = CancellationToken::new();
    lock(&shared.running).insert(task_id, cancel.clone());
    let handling = trace.in_scope(|| spans::handle(&envelope));
    let (reporter, mut progress) = Reporter::channel();
    // Started by the first progress report, if any.
    let mut publisher: Option<Publisher> = None;
    let start_publisher = || Publisher::start(shared, &envelope, resumed, trace);
    let task = task_for(shared, &envelope, resumed, &cancel, &handling, reporter);
    let running = metrics::handler_started(shared.card.name.as_str());
    let started = std::time::Instant::now();
    let mut run = shared.handler.handle(task).instrument(handling.clone());
    let every = shared.beat();
    let mut renew = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    let working_at = tokio::time::sleep(shared.config.working_after);
    tokio::pin!(working_at);
    let mut working: Option<tokio::task::JoinHandle<()>> = None;
    let stopped = loop {
        tokio::select! {
            outcome = &mut run => break Stopped::Finished(outcome),
            Some(update) = progress.recv() => {
                publisher.get_or_insert_with(&start_publisher).send(update);
            }
            () = &mut working_at, if working.is_none() => {
                working = Some(report_working(shared, &envelope, resumed, trace));
            }
            _ = renew.tick() => {
                if let Some(stopped) = renew_claim(shared, &msg, task_id, &mut held, &mut renew).await {
                    cancel.cancel();
                    break stopped;
                }
            }
            () = hard_stop.cancelled() => break Stopped::HardStop,
        }
    };
    // Dropping the run stops a handler that ignored its cancel token (a
    // command handler's process is killed).
    drop(run);
    drop(running);
    record_end(shared, &envelope, &stopped, started, &handling);
    drop(handling);
    lock(&shared.running).remove(&task_id);
    if let Some(working) = working {
        let _ = working.await;
    }
    // What was reported goes out before the final report.
    progress.close();
    while let Ok(update) = progress.try_recv() {
        publisher.get_or_insert_with(&start_publisher).send(update);
    }
    if let Some(publisher) = publisher {
        publisher.finish().await;
    }
    let outcome = match stopped {
        Stopped::Finished(outcome) => outcome,
        Stopped::Canceled => return settle(&msg, Settlement::Ack).await,
        // Another replica runs the attempt now and settles the message.
        Stopped::Lost(why) => return abandoned(shared, &envelope, false, why, trace),
        Stopped::HardStop => {
            cancel.cancel();
            return give_back(shared, &msg, Some(held)).await;
        }
    };
    let event = final_event(shared, &envelope, resumed, outcome);
    if let Reported::Dropped(why) =
        report_and_ack(shared, &msg, &event, trace, Some(held), hard_stop).await
    {
        abandoned(shared, &envelope, true, why, trace);
    }
}

/// The task a handler is given for `envelope`'s attempt: the envelope
/// without its token, which comes beside it, and what the handler reports
/// and keeps through.
fn task_for(
    shared: &Shared,
    envelope: &Envelope,
    resumed: bool,
    cancel: &CancellationToken,
    handling: &Span,
    progress: Reporter,
) -> Task {
    Task {
        envelope: envelope.without_token(),
        token: envelope.header.token.clone(),
        attempt: envelope.control.attempt.get(),
        resumed,
        agent_dir: shared.dir.clone(),
        cancel: cancel.clone(),
        trace: context::environment(handling),
        progress,
        notes: super::Notes::new(&shared.notes, envelope.header.task_id),
    }
}

/// The event that reports `outcome` of `envelope`'s attempt, with what
/// it must not show redacted.
fn final_event(
    shared: &Shared,
    envelope: &Envelope,
    resumed: bool,
    outcome: Outcome,
) -> crate::event::WorkerEvent {
    let outcome = outcome.redacted(
        &shared.config.sensitive,
        &envelope.payload.params,
        &shared.config.secrets,
        envelope.header.token.as_ref(),
    );
    let attempt = envelope.control.attempt.get();
    let mut event = event_for(envelope, attempt, &outcome);
    shared.stamp(&mut event, resumed);
    info!(task_id = %envelope.header.task_id, attempt, state = event.state.as_str(), "task ran");
    event
}

/// Counts how the handler of `envelope`'s attempt ended, begun at
/// `started`, and marks its span when it did not complete.
fn record_end(
    shared: &Shared,
    envelope: &Envelope,
    stopped: &Stopped,
    started: std::time::Instant,
    handling: &Span,
) {
    let label = match stopped {
        Stopped::Finished(outcome) => outcome.label(),
        Stopped::Canceled => "canceled",
        Stopped::Lost(_) => "claim_lost",
        Stopped::HardStop => "shutdown",
    };
    metrics::handler_finished(
        shared.card.name.as_str(),
        envelope.payload.action.as_str(),
        label,
        started.elapsed(),
    );
    if label != "completed" {
        spans::failed(handling, label);
    }
}

/// Reports `envelope`'s attempt `working`, in the background.
fn report_working(
    shared: &Shared,
    envelope: &Envelope,
    resumed: bool,
    trace: &Span,
) -> tokio::task::JoinHandle<()> {
    let bus = shared.bus.clone();
    let event = shared.working_event(envelope, resumed);
    let trace = trace.clone();
    tokio::spawn(async move {
        if let Err(e) = bus.publish_event(&event, &trace).await {
            warn_quietly!("worker.report_failed", task_id = %event.task_id, error = %e, "could not report working");
        }
    })
}

/// Renews the claim `held` on task `task_id`, then `msg`'s ack wait: why the handler must
/// stop, if the claim is lost or canceled. The claim comes first, and the
/// ack wait only once it is renewed: a holder that dies (or stays cut off)
/// leaves a claim that ends no later than its message comes back. A
/// renewal the claim bucket could not take is tried again soon while the
/// lease lasts.
async fn renew_claim(
    shared: &Shared,
    msg: &Message,
    task_id: crate::envelope::TaskId,
    held: &mut Held,
    renew: &mut tokio::time::Interval,
) -> Option<Stopped> {
    match shared.claims.renew(held).await {
        Ok(()) => {
            settle(msg, Settlement::Progress).await;
            None
        }
        Err(e) if e.kind == ClaimErrorKind::Unavailable && !held.expired(shared.lease()) => {
            warn_quietly!("worker.renew_failed", task_id = %task_id, error = %e, "lease renewal failed; trying again");
            renew.reset_after(shared.renew_retry());
            None
        }
        Err(e) => {
            warn!(task_id = %task_id, error = %e, "claim lost: canceling the handler");
            Some(match e.kind {
                ClaimErrorKind::Canceled => Stopped::Canceled,
                _ => Stopped::Lost(e.to_string()),
            })
        }
    }
}

/// Notes on the bus, in the background, that this instance ran `envelope`'s
/// attempt but lost its claim (`finished`: after the handler ended, its
/// result dropped; otherwise the handler was stopped). The note is for the
/// audit trail; it is tried until the bus takes it (a partition that cost
/// the claim usually still holds), for at most [`NOTE_PATIENCE`].
fn abandoned(shared: &Arc<Shared>, envelope: &Envelope, finished: bool, why: String, trace: &Span) {
    let note = RunAbandoned {
        v: crate::envelope::Version,
        task_id: envelope.header.task_id,
        correlation_id: envelope.header.correlation_id.clone(),
        agent: envelope.header.to.clone(),
        attempt: envelope.control.attempt,
        instance: shared.instance.clone(),
        finished,
        reason: why,
        at: crate::envelope::Timestamp::now(),
    };
    let shared = Arc::clone(shared);
    let trace = trace.clone();
    tokio::spawn(async move {
        let mut backoff = shared.bus.settings().backoff();
        let give_up = Instant::now() + NOTE_PATIENCE;
        while let Err(e) = shared.bus.publish_abandoned(&note, &trace).await {
            warn_quietly!("worker.note_failed", task_id = %note.task_id, error = %e, "could not note the abandoned run; trying again");
            if Instant::now() >= give_up {
                return warn!(task_id = %note.task_id, "the abandoned run was not noted: the bus never took it");
            }
            tokio::time::sleep(backoff.next_delay()).await;
        }
    });
}

/// How long a run-abandoned note is tried.
const NOTE_PATIENCE: Duration = Duration::from_secs(600);

/// Publishes the attempt's final event, then acks: the event is the
/// attempt's record, so a lost ack is harmless (a redelivery finds it).
///
/// With a claim, the fence comes first: a holder whose lease may have ended
/// reports nothing. While the event cannot be published the message and
/// the claim are kept, and the publish is tried again; `stop` hands the
/// message back instead (the claim released).
pub(super) async fn report_and_ack(
    shared: &Shared,
    msg: &Message,
    event: &WorkerEvent,
    trace: &Span,
    mut held: Option<Held>,
    stop: &CancellationToken,
) -> Reported {
    let task_id = event.task_id;
    let mut backoff = shared.bus.settings().backoff();
    let mut kept_alive = Instant::now();
    loop {
        if let Some(claim) = held.as_mut()
            && !claim.fresh(shared.beat())
        {
            match shared.claims.renew(claim).await {
                Ok(()) => {
                    settle(msg, Settlement::Progress).await;
                    kept_alive = Instant::now();
                }
                Err(e) if e.kind == ClaimErrorKind::Canceled => {
                    settle(msg, Settlement::Ack).await;
                    return Reported::Settled;
                }
                Err(e)
                    if e.kind == ClaimErrorKind::Unavailable && !claim.expired(shared.lease()) =>
                {
                    warn_quietly!("worker.renew_failed", task_id = %task_id, error = %e, "cannot confirm the claim before reporting; trying again");
                    metrics::worker_waited(shared.card.name.as_str(), "claims_unavailable");
                    if !keep_waiting(shared, msg, backoff.next_delay(), &mut kept_alive, stop).await
                    {
                        give_back(shared, msg, held).await;
                        return Reported::Settled;
                    }
                    continue;
                }
                // Lost, or unconfirmed for a whole lease: another replica
                // may run the attempt now, and settles the message.
                Err(e) => {
                    warn!(task_id = %task_id, error = %e, "claim lost before reporting: result dropped");
                    return Reported::Dropped(e.to_string());
                }
            }
        }
        // One try waits at most a beat, so the claim and the message are
        // renewed in time however long the stream takes to answer.
        let published = tokio::time::timeout(shared.beat(), shared.bus.publish_event(event, trace))
            .await
            .unwrap_or_else(|_| {
                Err(crate::bus::BusError::Publish {
                    subject: format!("the events of task {task_id}"),
                    source: "no acknowledgement within a beat".into(),
                })
            });
        match published {
            Ok(()) => {
                settle(msg, Settlement::Ack).await;
                return Reported::Settled;
            }
            Err(e) => {
                warn_quietly!("worker.report_failed", task_id = %task_id, error = %e, "could not publish the result; keeping it and trying again");
                metrics::worker_waited(shared.card.name.as_str(), "report_failed");
            }
        }
        if !keep_waiting(shared, msg, backoff.next_delay(), &mut kept_alive, stop).await {
            give_back(shared, msg, held).await;
            return Reported::Settled;
        }
    }
}

/// What became of a report.
pub(super) enum Reported {
    /// Published and acked, or the message settled or handed back.
    Settled,
    /// The claim was lost first: the result was dropped (why).
    Dropped(String),
}

/// Hands a message back for another replica (the worker is stopping),
/// releasing the claim first so the next delivery need not wait out the
/// lease.
async fn give_back(shared: &Shared, msg: &Message, held: Option<Held>) {
    if let Some(held) = held
        && let Err(e) = shared.claims.release(held).await
    {
        warn!(error = %e, "could not release the claim");
    }
    settle(msg, Settlement::Nak(Duration::ZERO)).await;
}
