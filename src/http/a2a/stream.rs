//! Streams (SSE): the task's snapshot first, then each of its events in
//! order, each with its generation as the SSE `id:`; closed after the
//! event that ends the task or makes it wait for the client. A stream that
//! names a `Last-Event-ID` gets the events after it instead, read from
//! what is stored, so a reconnect (to this process or to one restarted)
//! loses nothing and repeats nothing. A client that goes away leaves the
//! task running; idle streams carry keep-alive comments.

use std::collections::VecDeque;
use std::convert::Infallible;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use axum::http::HeaderMap;

use super::error::A2aError;
use super::subject;
use super::wire;
use crate::http::streams::{StreamPermit, StreamRefused, Streams};
use crate::service::{Caller, Orchestrator};
use crate::service::{Following, Subject};
use crate::task::TaskState;

/// Room for one more stream of `caller`: -32102 (503) when every one is
/// taken, -32103 (429) when the caller's principal holds its share.
fn enter(streams: &Streams, caller: &Caller) -> Result<StreamPermit, A2aError> {
    streams
        .enter(&caller.principal)
        .map_err(|refused| match refused {
            StreamRefused::Full => A2aError::unavailable(refused.message()),
            StreamRefused::PrincipalShare(message) => A2aError::too_many(message),
        })
}

/// How one binding frames an event: a 1.0 `StreamResponse` (as JSON) and
/// whether it ends the stream, to what goes in `data:`.
pub(super) type Frame = Box<dyn Fn(Value, bool) -> Value + Send>;

/// The `Last-Event-ID` of a reconnect: a generation, or refused.
fn last_event_id(headers: &axum::http::HeaderMap) -> Result<Option<u64>, A2aError> {
    let Some(v) = headers.get("last-event-id") else {
        return Ok(None);
    };
    v.to_str()
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .map(Some)
        .ok_or_else(|| {
            A2aError::invalid_request("Last-Event-ID must be an event id this server sent")
        })
}

struct State {
    follow: Following,
    /// The generation last sent (or resumed after).
    last: u64,
    /// Events read, not yet sent: (id, body, ends the stream).
    pending: VecDeque<(u64, Value, bool)>,
    /// The stream ends once `pending` is sent.
    ending: bool,
    /// The states a stream ends at.
    ends: fn(TaskState) -> bool,
    frame: Frame,
    closing: CancellationToken,
    _permit: StreamPermit,
}

fn body(event: &a2a::StreamResponse) -> Value {
    serde_json::to_value(event).unwrap_or_default()
}

impl State {
    /// Queues `subject`'s events after the last one sent.
    fn queue(&mut self, subject: &Subject) {
        for e in subject.events() {
            if e.id > self.last {
                let closes = e.state.is_some_and(self.ends);
                self.last = e.id;
                self.ending |= closes;
                self.pending.push_back((e.id, body(&e.body), closes));
            }
        }
    }
}

/// `SendStreamingMessage`: stores the task (or finds the one the same
/// message made), then streams it; with `Last-Event-ID`, a reconnect.
#[allow(clippy::too_many_arguments)]
pub(super) async fn send(
    o: &Orchestrator,
    face: &super::Face,
    caller: &Caller,
    send: &a2a::SendMessageRequest,
    key: Option<&str>,
    v03: bool,
    headers: &HeaderMap,
    frame: Frame,
) -> Result<Response, A2aError> {
    let streams = &face.streams;
    let permit = enter(streams, caller)?;
    let resume = last_event_id(headers)?;
    let sent = super::ops::submit(o, face, send, key, v03, caller).await?;
    let (first, follow) = subject::follow(o, &sent.id().to_string(), caller).await?;
    let ends = wire::closes;
    Ok(respond(
        streams, permit, &first, follow, resume, frame, ends,
    ))
}

/// `SubscribeToTask`: a task that has ended takes no subscription
/// (-32004), unless it resumes a stream (`Last-Event-ID`).
pub(super) async fn subscribe(
    o: &Orchestrator,
    streams: &Streams,
    caller: &Caller,
    id: &str,
    headers: &HeaderMap,
    frame: Frame,
) -> Result<Response, A2aError> {
    let permit = enter(streams, caller)?;
    let resume = last_event_id(headers)?;
    let (first, follow) = subject::follow(o, id, caller).await?;
    if resume.is_none() && first.state().is_terminal() {
        return Err(A2aError::unsupported(format!(
            "task {id} has ended ({}): there is nothing to subscribe to",
            first.state()
        ))
        .with("taskId", id));
    }
    // A subscription ends at a terminal state only (spec 3.1.6): a task
    // that waits for input goes on once answered.
    let ends = TaskState::is_terminal;
    Ok(respond(
        streams, permit, &first, follow, resume, frame, ends,
    ))
}

/// The stream of `first` (the task as read when `follow` began): from its
/// snapshot, or after `resume`.
fn respond(
    streams: &Streams,
    permit: StreamPermit,
    first: &Subject,
    follow: Following,
    resume: Option<u64>,
    frame: Frame,
    ends: fn(TaskState) -> bool,
) -> Response {
    let mut state = State {
        follow,
        last: 0,
        pending: VecDeque::new(),
        ending: false,
        ends,
        frame,
        closing: streams.closing(),
        _permit: permit,
    };
    match resume {
        None => {
            let generation = first.generation();
            let closes = ends(first.state());
            let snapshot = a2a::StreamResponse::Task(first.task(None, true));
            state.last = generation;
            state.ending = closes;
            state
                .pending
                .push_back((generation, body(&snapshot), closes));
        }
        Some(after) => {
            state.last = after;
            state.queue(first);
            // Resumed after the end: nothing more will come.
            state.ending |= ends(first.state());
        }
    }
    let events = futures::stream::unfold(state, |mut s| async move {
        loop {
            if let Some((id, body, closes)) = s.pending.pop_front() {
                let data = (s.frame)(body, closes);
                let event = SseEvent::default()
                    .id(id.to_string())
                    .data(data.to_string());
                return Some((Ok::<_, Infallible>(event), s));
            }
            if s.ending {
                return None;
            }
            let changed = tokio::select! {
                changed = s.follow.changed() => changed,
                () = s.closing.cancelled() => return None,
            };
            match changed {
                Ok(Some(record)) => s.queue(&record),
                Ok(None) => return None,
                Err(e) => {
                    tracing::warn!(error = %e, "a task stream could not read its task: closed");
                    return None;
                }
            }
        }
    });
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(streams.keepalive()))
        .into_response()
}

/// Machines try `Last-Event-ID` (`crate::fuzz`): any header value is an
/// event id exactly when it is a number, else a refusal, never a panic.
#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(crate::fuzz::config())]

        #[test]
        fn last_event_id(bytes in proptest::collection::vec(any::<u8>(), 0..40), n in any::<u64>()) {
            for value in [bytes, format!(" {n} ").into_bytes()] {
                let Ok(header) = axum::http::HeaderValue::from_bytes(&value) else {
                    continue;
                };
                let mut headers = axum::http::HeaderMap::new();
                headers.insert("last-event-id", header);
                let read = super::last_event_id(&headers);
                let number = std::str::from_utf8(&value)
                    .ok()
                    .and_then(|s| s.trim().parse::<u64>().ok());
                match number {
                    Some(n) => prop_assert_eq!(read.ok(), Some(Some(n))),
                    None => prop_assert!(read.is_err()),
                }
            }
        }
    }
}
