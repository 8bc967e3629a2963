//! The operations, whatever the binding: each takes 1.0 request types
//! and answers 1.0 results, calling the service as the caller.

use std::time::Duration;

use a2a::{
    CancelTaskRequest, GetTaskRequest, ListTasksRequest, ListTasksResponse, SendMessageRequest,
    SendMessageResponse,
};

use super::error::A2aError;
use super::{send, wire};
use crate::envelope::TaskId;
use crate::service::{Caller, Orchestrator, ServiceError};
use crate::task::{Submitted, TaskRecord};

/// A task id from a request: one that does not parse is a task that is
/// not there.
pub(super) fn task_id(id: &str) -> Result<TaskId, A2aError> {
    id.parse().map_err(|_| A2aError::task_not_found(id))
}

/// A `historyLength`: absent = all; negative is refused.
pub(super) fn history_length(n: Option<i32>, field: &str) -> Result<Option<usize>, A2aError> {
    match n {
        None => Ok(None),
        Some(n) => usize::try_from(n)
            .map(Some)
            .map_err(|_| A2aError::invalid_params(field, "must not be negative")),
    }
}

/// The task a caller names, if it may see it.
async fn visible(o: &Orchestrator, id: &str, caller: &Caller) -> Result<TaskRecord, A2aError> {
    o.task(task_id(id)?, caller)
        .await?
        .ok_or_else(|| A2aError::task_not_found(id))
}

/// A message that names a task (`taskId`): the task must be the caller's
/// to see, in the context the message names, and wait for input; the
/// message (its parts as params, against the task's skill) is the answer,
/// and the task as it then is comes back. `None`: the message names no
/// task.
async fn continued(
    o: &Orchestrator,
    send: &SendMessageRequest,
    header_key: Option<&str>,
    caller: &Caller,
) -> Result<Option<TaskRecord>, A2aError> {
    let Some(id) = send.message.task_id.as_deref() else {
        return Ok(None);
    };
    let record = visible(o, id, caller).await?;
    if let Some(c) = send.message.context_id.as_deref()
        && c != record.correlation_id().as_str()
    {
        return Err(A2aError::invalid_params(
            "message.contextId",
            format!("task {id} is in another context"),
        ));
    }
    let waiting = |state: crate::task::TaskState| {
        let why = if state.is_terminal() {
            format!("task {id} has ended ({state}): it takes no more messages")
        } else {
            format!(
                "task {id} is {state}: it takes a message only while it waits for input (input-required)"
            )
        };
        A2aError::unsupported(why).with("taskId", id)
    };
    // (One that no longer waits may have taken this very answer before:
    // the service knows.)
    let skill = o
        .cards()
        .get(record.agent())
        .and_then(|c| c.skill(record.action().as_str()));
    let input = send::params(&send.message, skill.as_ref())?;
    let record = o
        .answer_task(
            record.task_id(),
            input,
            send::message_key(o, send, header_key).as_deref(),
            caller,
        )
        .await
        .map_err(|e| match e {
            ServiceError::NotWaiting { state, .. } => waiting(state),
            e => A2aError::from(e),
        })?;
    Ok(Some(record))
}

/// Stores the task a message asks for (or finds the one the same message
/// made before); the record as stored.
pub(super) async fn submit(
    o: &Orchestrator,
    send: &SendMessageRequest,
    header_key: Option<&str>,
    caller: &Caller,
) -> Result<TaskRecord, A2aError> {
    if let Some(record) = continued(o, send, header_key, caller).await? {
        return Ok(record);
    }
    let request = send::request(o, send, header_key)?;
    let submitted = o.submit(request, caller).await.map_err(|e| {
        let conflict = e.kind() == crate::service::ErrorKind::Conflict;
        let e = A2aError::from(e);
        if conflict {
            e.with("messageId", send.message.message_id.clone())
        } else {
            e
        }
    })?;
    Ok(match submitted {
        Submitted::Created(r) | Submitted::Existing(r) => r,
    })
}

/// The longest a blocking call waits: the request timeout less a second.
fn longest(o: &Orchestrator) -> Duration {
    o.config()
        .http_request_timeout
        .saturating_sub(Duration::from_secs(1))
}

/// `SendMessage`: the task, once it has ended or waits for the client
/// (unless `returnImmediately`), or as it is when the wait is up.
pub(super) async fn send_message(
    o: &Orchestrator,
    send: SendMessageRequest,
    header_key: Option<&str>,
    caller: &Caller,
) -> Result<SendMessageResponse, A2aError> {
    let config = send.configuration.as_ref();
    let history = history_length(
        config.and_then(|c| c.history_length),
        "configuration.historyLength",
    )?;
    let immediately = config.and_then(|c| c.return_immediately).unwrap_or(false);
    let record = submit(o, &send, header_key, caller).await?;
    let record = if immediately || wire::closes(record.status.state) {
        record
    } else {
        o.task_when(record.task_id(), longest(o), caller, wire::closes)
            .await?
            .unwrap_or(record)
    };
    if let Some(reply) = wire::reply(&record) {
        return Ok(SendMessageResponse::Message(reply));
    }
    Ok(SendMessageResponse::Task(wire::task(
        &record, history, true,
    )))
}

/// `GetTask`.
pub(super) async fn get_task(
    o: &Orchestrator,
    get: GetTaskRequest,
    caller: &Caller,
) -> Result<a2a::Task, A2aError> {
    let history = history_length(get.history_length, "historyLength")?;
    let record = visible(o, &get.id, caller).await?;
    Ok(wire::task(&record, history, true))
}

/// `CancelTask`: an ended task is not cancelable (-32002), canceled
/// included.
pub(super) async fn cancel_task(
    o: &Orchestrator,
    cancel: CancelTaskRequest,
    caller: &Caller,
) -> Result<a2a::Task, A2aError> {
    let record = visible(o, &cancel.id, caller).await?;
    if record.status.state.is_terminal() {
        return Err(A2aError::not_cancelable(
            &cancel.id,
            format!("task {} has ended ({})", cancel.id, record.status.state),
        ));
    }
    let record = o
        .cancel(record.task_id(), caller)
        .await
        .map_err(|e| match e {
            ServiceError::NotCancelable { state, .. } => A2aError::not_cancelable(
                &cancel.id,
                format!("task {} has ended ({state})", cancel.id),
            ),
            e => A2aError::from(e),
        })?;
    Ok(wire::task(&record, None, true))
}

/// The largest and default page of `ListTasks`.
const MAX_PAGE: i32 = 100;
const DEFAULT_PAGE: i32 = 50;

/// Where a page of `ListTasks` starts: after this task in the order
/// (newest status first, then task id).
fn page_token(t: &TaskRecord) -> String {
    format!("{}.{}", t.status.updated_at.unix_nanos(), t.task_id())
}

/// `ListTasks`: the caller's tasks (every one with `orch:tasks:read_all`),
/// filtered by context, state and status time, newest status first, a
/// page at a time.
pub(super) async fn list_tasks(
    o: &Orchestrator,
    list: ListTasksRequest,
    caller: &Caller,
) -> Result<ListTasksResponse, A2aError> {
    let size = match list.page_size {
        None | Some(0) => DEFAULT_PAGE,
        Some(n) if (1..=MAX_PAGE).contains(&n) => n,
        Some(_) => {
            return Err(A2aError::invalid_params(
                "pageSize",
                format!("must be 1 to {MAX_PAGE}"),
            ));
        }
    };
    let history = history_length(list.history_length, "historyLength")?;
    let context = list
        .context_id
        .as_deref()
        .map(|c| {
            c.parse()
                .map_err(|e: String| A2aError::invalid_params("contextId", e))
        })
        .transpose()?;
    let state = list.status.as_ref().and_then(wire::our_state);
    let after = list.status_timestamp_after.map(|t| {
        i128::from(t.timestamp()) * 1_000_000_000 + i128::from(t.timestamp_subsec_nanos())
    });
    let token = list
        .page_token
        .as_deref()
        .filter(|t| !t.is_empty())
        .map(|t| {
            t.split_once('.')
                .and_then(|(n, id)| Some((n.parse::<i128>().ok()?, id.parse::<TaskId>().ok()?)))
                .ok_or_else(|| {
                    A2aError::invalid_params("pageToken", "not a page token this server gave")
                })
        })
        .transpose()?;
    // Every matching task the caller may see, ordered; a page is cut from
    // it after the token's place.
    let mut all = Vec::new();
    let mut cursor = None;
    loop {
        let batch = o
            .tasks(context.as_ref(), state, cursor, 1000, caller)
            .await?;
        let done = batch.len() < 1000;
        cursor = batch.last().map(TaskRecord::task_id);
        all.extend(
            batch
                .into_iter()
                .filter(|r| after.is_none_or(|a| r.status.updated_at.unix_nanos() > a)),
        );
        if done {
            break;
        }
    }
    let key = |r: &TaskRecord| (r.status.updated_at.unix_nanos(), r.task_id());
    all.sort_by_key(|r| std::cmp::Reverse(key(r)));
    let total = all.len();
    let start = match token {
        None => 0,
        Some(t) => all.iter().position(|r| key(r) < t).unwrap_or(total),
    };
    let page: Vec<&TaskRecord> = all.iter().skip(start).take(size as usize).collect();
    let next = if start + page.len() < total {
        page.last().map(|r| page_token(r)).unwrap_or_default()
    } else {
        String::new()
    };
    let artifacts = list.include_artifacts.unwrap_or(false);
    Ok(ListTasksResponse {
        tasks: page
            .iter()
            .map(|r| wire::task(r, history, artifacts))
            .collect(),
        next_page_token: next,
        page_size: size,
        total_size: i32::try_from(total).unwrap_or(i32::MAX),
    })
}
