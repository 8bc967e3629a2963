//! Event triggers: each `run_mode: event` trigger starts one run per
//! message on its subject. The messages are kept in a stream (so those
//! published while the orchestrator is down are not lost) and read through
//! a durable consumer per trigger; a message is acknowledged only after its
//! run is stored.
//!
//! Once per message, even when it is delivered again (a crash before the
//! ack, a publisher's retry): the run's idempotency key is the message's
//! id, its `Nats-Msg-Id` header, or its stream sequence when it has none,
//! scoped to the trigger (`event:<id>`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use crate::telemetry::quiet::warn_quietly;
use async_nats::jetstream::Message;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::access::Grants;
use crate::bus::{PullSettings, Puller, Settlement, settle};
use crate::run::{Origin, RunStarted};
use crate::service::runs::RunStart;
use crate::service::{Caller, Orchestrator, ServiceError};
use crate::store::StoreError;
use crate::trigger::{RunMode, Trigger};

/// How soon a failed set-up or start is tried again.
const RETRY: Duration = Duration::from_secs(1);

/// The header a publisher names a message with (JetStream dedupes on it
/// within its duplicate window too).
const MESSAGE_ID: &str = "Nats-Msg-Id";

/// A running listener.
struct Listener {
    /// The definition it listens for.
    hash: String,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

/// Keeps one listener per event trigger until `stop` fires, following the
/// triggers as they are reloaded.
pub(crate) async fn drive(o: Orchestrator, stop: CancellationToken) {
    let mut triggers = o.watch_triggers();
    let mut listeners: HashMap<String, Listener> = HashMap::new();
    loop {
        let current = Arc::clone(&triggers.borrow_and_update());
        let wanted: BTreeMap<&String, &Arc<Trigger>> = current
            .loaded
            .iter()
            .filter(|(_, t)| t.run_mode == RunMode::Event && t.event.is_some())
            .collect();
        let mut subjects: Vec<String> = wanted
            .values()
            .filter_map(|t| t.event.as_ref().map(|e| e.subject.clone()))
            .collect();
        subjects.sort();
        subjects.dedup();
        let provisioned = o.bus().provision_trigger_events(&subjects).await;
        if let Err(e) = &provisioned {
            warn_quietly!("orchestrator.event_triggers_subjects", error = %e, "event triggers: cannot keep their subjects; trying again");
        }
        // Stop the listeners of triggers gone or changed.
        listeners.retain(|id, l| {
            let keep = wanted.get(id).is_some_and(|t| t.hash() == l.hash);
            if !keep {
                l.stop.cancel();
            }
            keep
        });
        if provisioned.is_ok() {
            for (id, trigger) in &wanted {
                if listeners.contains_key(*id) {
                    continue;
                }
                let token = stop.child_token();
                let task = tokio::spawn(listen(o.clone(), Arc::clone(trigger), token.clone()));
                listeners.insert(
                    (*id).clone(),
                    Listener {
                        hash: trigger.hash(),
                        stop: token,
                        task,
                    },
                );
            }
        }
        let retry = async {
            if provisioned.is_err() {
                tokio::time::sleep(RETRY).await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            () = stop.cancelled() => break,
            changed = triggers.changed() => if changed.is_err() { break },
            () = retry => {}
        }
    }
    for (_, l) in listeners {
        l.stop.cancel();
        let _ = l.task.await;
    }
}

/// Starts a run for each message on `trigger`'s subject until `stop`.
async fn listen(o: Orchestrator, trigger: Arc<Trigger>, stop: CancellationToken) {
    let Some(subject) = trigger.event.as_ref().map(|e| e.subject.clone()) else {
        return;
    };
    let consumer = loop {
        match o.bus().trigger_consumer(&trigger.id, &subject).await {
            Ok(c) => break c,
            Err(e) => {
                warn_quietly!("orchestrator.event_trigger_consumer", trigger_id = %trigger.id, error = %e, "event trigger: no consumer yet; trying again");
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(RETRY) => {}
                }
            }
        }
    };
    info!(trigger_id = %trigger.id, %subject, "event trigger listening");
    let caller = Caller::new(
        format!("event:{}", trigger.id),
        Grants::new(trigger.required_scopes.iter().map(|s| s.as_str())),
    );
    let mut puller = Puller::new(consumer, PullSettings::short());
    loop {
        let msg = tokio::select! {
            () = stop.cancelled() => return,
            msg = puller.next() => msg,
        };
        let how = start(&o, &trigger, &caller, &msg).await;
        settle(&msg, how).await;
    }
}

/// The message's id: its `Nats-Msg-Id`, or its stream sequence.
fn message_id(msg: &Message) -> String {
    msg.headers
        .as_ref()
        .and_then(|h| h.get(MESSAGE_ID))
        .map(|v| v.as_str().to_string())
        .filter(|id| !id.is_empty())
        .unwrap_or_else(|| {
            let seq = msg.info().map(|i| i.stream_sequence).unwrap_or_default();
            format!("seq:{seq}")
        })
}

/// Starts the message's run; what to tell JetStream.
async fn start(o: &Orchestrator, trigger: &Trigger, caller: &Caller, msg: &Message) -> Settlement {
    let id = message_id(msg);
    let input: Value = if msg.payload.iter().all(u8::is_ascii_whitespace) {
        Value::Object(Default::default())
    } else {
        match serde_json::from_slice(&msg.payload) {
            Ok(v) => v,
            Err(e) => {
                warn!(trigger_id = %trigger.id, message_id = %id, error = %e, "event refused: its body is not JSON");
                return Settlement::Term;
            }
        }
    };
    let origin = Origin::Event {
        subject: msg.subject.to_string(),
        message_id: id.clone(),
    };
    let key = Some((caller.principal.clone(), id.clone()));
    match o
        .begin_run(
            &trigger.id,
            input,
            key,
            RunStart {
                origin,
                slot: None,
                context: None,
                callback_url: None,
            },
            caller,
        )
        .await
    {
        Ok(RunStarted::Created(r)) => {
            info!(trigger_id = %trigger.id, message_id = %id, run_id = %r.run_id, "event: run started");
            Settlement::Ack
        }
        Ok(RunStarted::Existing(r)) => {
            info!(trigger_id = %trigger.id, message_id = %id, run_id = %r.run_id, "event delivered again: its run exists");
            Settlement::Ack
        }
        Err(
            e @ (ServiceError::Store(StoreError::RunKeyConflict { .. })
            | ServiceError::BadInput(_)
            | ServiceError::Forbidden { .. }
            | ServiceError::UnknownTrigger(_)),
        ) => {
            warn!(trigger_id = %trigger.id, message_id = %id, error = %e, "event refused");
            Settlement::Term
        }
        Err(e) => {
            warn_quietly!("orchestrator.event_trigger_run", trigger_id = %trigger.id, message_id = %id, error = %e, "event: run not started; it will be delivered again");
            Settlement::Nak(RETRY)
        }
    }
}
