//! What a delivery is owed next, from its task or run as it stands: for a
//! push config, the next A2A event after its cursor; for a callback, the
//! next time the task or run waited for its caller or ended, as the REST
//! API shows it.

use serde_json::Value;

use super::PushBodies;
use crate::service::{Caller, DeliveryTarget, Orchestrator, PushDelivery, ServiceError, Subject};
use crate::task::TaskState;

/// Why what a delivery is owed cannot be known now.
#[derive(Debug, thiserror::Error)]
pub(super) enum OwedError {
    /// The store or the broker failed.
    #[error(transparent)]
    Service(#[from] ServiceError),
    /// The run followed is gone (set aside as unreadable).
    #[error("the run is gone")]
    RunGone,
}

/// What to do next.
pub(super) enum Owed {
    /// Send event `event`'s `body` to `url`.
    Send {
        event: u64,
        url: String,
        body: Vec<u8>,
    },
    /// Pass over event `event`: a callback's wait that is over.
    Skip(u64),
    /// Nothing for now; `ended`: nothing ever again.
    Nothing { ended: bool },
}

/// What `d` is owed next by `subject` as it stands.
pub(super) async fn next(
    o: &Orchestrator,
    bodies: &dyn PushBodies,
    d: &PushDelivery,
    subject: &Subject,
    reader: &Caller,
) -> Result<Owed, OwedError> {
    let ended = subject.ended();
    match &d.target {
        DeliveryTarget::A2a(t) => Ok(match bodies.event_after(subject, d.cursor, t.v03) {
            Some((event, body)) => Owed::Send {
                event,
                url: t.url.clone(),
                body: body.to_string().into_bytes(),
            },
            None => Owed::Nothing { ended },
        }),
        DeliveryTarget::Callback => {
            let moments = callback_moments(subject);
            let Some(&(event, waits)) = moments.iter().find(|(n, _)| *n > d.cursor) else {
                return Ok(Owed::Nothing { ended });
            };
            let last = moments.last().is_some_and(|(n, _)| *n == event);
            if waits && !last {
                return Ok(Owed::Skip(event));
            }
            let Some(url) = callback_url(subject) else {
                return Ok(Owed::Nothing { ended: true });
            };
            let body = view(o, bodies, subject, reader).await?;
            Ok(Owed::Send {
                event,
                url,
                body: body.to_string().into_bytes(),
            })
        }
    }
}

/// The moments a callback is for, numbered so the numbers never change:
/// (number, whether it is a wait). A task's are its history's entries
/// into a state that waits for the caller or ends it (numbered by
/// entry); a run's are its waits at gates, then its end.
fn callback_moments(subject: &Subject) -> Vec<(u64, bool)> {
    match subject {
        Subject::Task(t) => t
            .history
            .iter()
            .enumerate()
            .filter(|(_, h)| h.progress.is_none())
            .filter_map(|(i, h)| {
                let waits = matches!(h.to, TaskState::InputRequired | TaskState::AuthRequired);
                (waits || h.to.is_terminal()).then_some((i as u64 + 1, waits))
            })
            .collect(),
        Subject::Run(r) => {
            let mut out: Vec<(u64, bool)> = (1..=r.waits.len() as u64).map(|n| (n, true)).collect();
            if r.state.is_terminal() {
                out.push((r.waits.len() as u64 + 1, false));
            }
            out
        }
    }
}

fn callback_url(subject: &Subject) -> Option<String> {
    match subject {
        Subject::Task(t) => t.envelope.control.callback_url.clone(),
        Subject::Run(r) => r.callback_url.clone(),
    }
}

/// The subject as `GET /v1/tasks/{id}` or `GET /v1/runs/{id}` shows it.
async fn view(
    o: &Orchestrator,
    bodies: &dyn PushBodies,
    subject: &Subject,
    reader: &Caller,
) -> Result<Value, OwedError> {
    match subject {
        Subject::Task(t) => Ok(bodies.task_view(o, t)),
        Subject::Run(r) => {
            let view = o.run(r.run_id, reader).await?.ok_or(OwedError::RunGone)?;
            Ok(serde_json::to_value(view).unwrap_or_default())
        }
    }
}
