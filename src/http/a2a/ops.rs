//! The operations, whatever the binding: each takes 1.0 request types
//! and answers 1.0 results, calling the service as the caller.

use a2a::{
    CancelTaskRequest, DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest, GetTaskRequest, ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse, ListTasksRequest, ListTasksResponse,
    SendMessageRequest, SendMessageResponse, TaskPushNotificationConfig,
};

use super::error::A2aError;
use super::subject;
use super::{Face, runs, send, wire};
use crate::run::{RunRecord, RunRefused};
use crate::service::Subject;
use crate::service::{
    Caller, DeliveryTarget, Orchestrator, PushAuth, PushDelivery, PushTarget, ServiceError,
};
use crate::task::{Submitted, TaskRecord};

/// A `historyLength`: absent = all; negative is refused.
pub(super) fn history_length(n: Option<i32>, field: &str) -> Result<Option<usize>, A2aError> {
    match n {
        None => Ok(None),
        Some(n) => usize::try_from(n)
            .map(Some)
            .map_err(|_| A2aError::invalid_params(field, "must not be negative")),
    }
}

/// A message that names a task (`taskId`): the task (or run) must be the
/// caller's to see, in the context the message names, and wait for input;
/// the message is the answer, and the task as it then is comes back.
/// `None`: the message names no task.
async fn continued(
    o: &Orchestrator,
    face: &Face,
    send: &SendMessageRequest,
    header_key: Option<&str>,
    caller: &Caller,
) -> Result<Option<Subject>, A2aError> {
    let Some(id) = send.message.task_id.as_deref() else {
        return Ok(None);
    };
    let found = subject::find(o, id, caller).await?;
    if let Some(c) = send.message.context_id.as_deref()
        && c != found.context()
    {
        return Err(A2aError::invalid_params(
            "message.contextId",
            format!("task {id} is in another context"),
        ));
    }
    let refused = |state: crate::task::TaskState| {
        let why = if state.is_terminal() {
            format!("task {id} has ended ({state}): it takes no more messages")
        } else {
            format!(
                "task {id} is {state}: it takes a message only while it waits for input (input-required)"
            )
        };
        A2aError::unsupported(why).with("taskId", id)
    };
    let key = send::message_key(face, send, header_key);
    let record = match found {
        Subject::Task(record) => {
            // (One that no longer waits may have taken this very answer
            // before: the service knows.)
            let declared = o.catalog();
            let skill = declared
                .agents
                .get(record.agent())
                .and_then(|c| c.skill(record.action().as_str()));
            let input = send::params(&send.message, send::Takes::skill(skill))?;
            let record = o
                .answer_task(record.task_id(), input, key.as_deref(), caller)
                .await
                .map_err(|e| match e {
                    ServiceError::NotWaiting { state, .. } => refused(state),
                    e => A2aError::from(e),
                })?;
            Subject::Task(Box::new(record))
        }
        Subject::Run(run) => {
            let (answer, reason, input) = runs::gate_answer(send)?;
            let state = runs::state(run.state);
            o.answer(run.run_id, answer, reason, input, key, caller)
                .await
                .map_err(|e| match e.run_refused() {
                    Some(RunRefused::NotWaiting { .. } | RunRefused::Ended { .. }) => {
                        refused(state)
                    }
                    _ => A2aError::from(e),
                })?;
            Subject::Run(Box::new(run_now(o, &run, caller).await?))
        }
    };
    Ok(Some(record))
}

/// Run `run` as it is now.
async fn run_now(
    o: &Orchestrator,
    run: &RunRecord,
    caller: &Caller,
) -> Result<RunRecord, A2aError> {
    o.run_record(run.run_id, caller)
        .await?
        .ok_or_else(|| A2aError::task_not_found(&run.run_id.to_string()))
}

/// A refusal of a key reused with other content names the message.
fn conflict_names_message(send: &SendMessageRequest) -> impl Fn(ServiceError) -> A2aError {
    move |e| A2aError::from(e).naming_message(&send.message.message_id)
}

/// Stores the task a message asks for, or starts the run (or finds the
/// one the same message made before); as stored.
pub(super) async fn submit(
    o: &Orchestrator,
    face: &Face,
    send: &SendMessageRequest,
    header_key: Option<&str>,
    v03: bool,
    caller: &Caller,
) -> Result<Subject, A2aError> {
    let pushes = send
        .configuration
        .as_ref()
        .is_some_and(|c| c.task_push_notification_config.is_some());
    // A message that continues a task owes its push config the events
    // from its answer on.
    let before = match (&send.message.task_id, pushes) {
        (Some(id), true) => subject::find(o, id, caller).await?.generation(),
        _ => 0,
    };
    let subject = match send::message_key(face, send, header_key) {
        Some(key) => {
            let act = async || made(o, face, send, header_key, caller).await;
            o.once_per_message(&key, &send.message, caller, act)
                .await
                .map_err(|e: A2aError| e.naming_message(&send.message.message_id))?
        }
        None => made(o, face, send, header_key, caller).await?,
    };
    if pushes {
        push_on_send(o, send, &subject, before, v03, caller).await?;
    }
    Ok(subject)
}

/// The task or run a message made, continued or found again.
async fn made(
    o: &Orchestrator,
    face: &Face,
    send: &SendMessageRequest,
    header_key: Option<&str>,
    caller: &Caller,
) -> Result<Subject, A2aError> {
    if let Some(found) = continued(o, face, send, header_key, caller).await? {
        return Ok(found);
    }
    send::check(&send.message)?;
    if let Some(trigger) = send::trigger(o, send)? {
        let (input, context) = send::run_input(send, &trigger)?;
        let key = send::message_key(face, send, header_key);
        let started = o
            .start_run(
                &trigger.id,
                input,
                key,
                crate::service::RunOptions {
                    context,
                    callback_url: None,
                },
                caller,
            )
            .await
            .map_err(conflict_names_message(send))?;
        return Ok(Subject::Run(Box::new(started.record().clone())));
    }
    let request = send::request(o, face, send, header_key)?;
    let submitted = o
        .submit(request, caller)
        .await
        .map_err(conflict_names_message(send))?;
    Ok(match submitted {
        Submitted::Created(r) | Submitted::Existing(r) => Subject::Task(Box::new(r)),
    })
}

/// `subject` once it has ended or waits for the client, or as it is when
/// the wait is up.
async fn settled(
    o: &Orchestrator,
    face: &Face,
    subject: Subject,
    caller: &Caller,
) -> Result<Subject, A2aError> {
    let longest = face.http.longest_wait();
    if wire::closes(subject.state()) {
        return Ok(subject);
    }
    Ok(match subject {
        Subject::Task(t) => {
            let done = o
                .task_when(t.task_id(), longest, caller, wire::closes)
                .await?;
            Subject::Task(done.map(Box::new).unwrap_or(t))
        }
        Subject::Run(r) => {
            let done = o
                .run_record_when(r.run_id, longest, caller, |s| wire::closes(runs::state(s)))
                .await?;
            Subject::Run(done.map(Box::new).unwrap_or(r))
        }
    })
}

/// `SendMessage`: the task (or run), once it has ended or waits for the
/// client (unless `returnImmediately`), or as it is when the wait is up.
pub(super) async fn send_message(
    o: &Orchestrator,
    face: &Face,
    send: SendMessageRequest,
    header_key: Option<&str>,
    v03: bool,
    caller: &Caller,
) -> Result<SendMessageResponse, A2aError> {
    let config = send.configuration.as_ref();
    let history = history_length(
        config.and_then(|c| c.history_length),
        "configuration.historyLength",
    )?;
    let immediately = config.and_then(|c| c.return_immediately).unwrap_or(false);
    let subject = submit(o, face, &send, header_key, v03, caller).await?;
    let subject = if immediately {
        subject
    } else {
        settled(o, face, subject, caller).await?
    };
    if let Subject::Task(record) = &subject
        && let Some(reply) = wire::reply(record)
    {
        return Ok(SendMessageResponse::Message(reply));
    }
    Ok(SendMessageResponse::Task(subject.task(history, true)))
}

/// `GetTask`.
pub(super) async fn get_task(
    o: &Orchestrator,
    get: GetTaskRequest,
    caller: &Caller,
) -> Result<a2a::Task, A2aError> {
    let history = history_length(get.history_length, "historyLength")?;
    let found = subject::find(o, &get.id, caller).await?;
    Ok(found.task(history, true))
}

/// `CancelTask`: an ended task (or run) is not cancelable (-32002),
/// canceled included.
pub(super) async fn cancel_task(
    o: &Orchestrator,
    cancel: CancelTaskRequest,
    caller: &Caller,
) -> Result<a2a::Task, A2aError> {
    let found = subject::find(o, &cancel.id, caller).await?;
    let ended = |state| {
        A2aError::not_cancelable(
            &cancel.id,
            format!("task {} has ended ({state})", cancel.id),
        )
    };
    if found.state().is_terminal() {
        return Err(ended(found.state()));
    }
    let canceled = match found {
        Subject::Task(record) => {
            let record = o
                .cancel(record.task_id(), caller)
                .await
                .map_err(|e| match e {
                    ServiceError::NotCancelable { state, .. } => ended(state),
                    e => A2aError::from(e),
                })?;
            Subject::Task(Box::new(record))
        }
        Subject::Run(run) => {
            o.cancel_run(run.run_id, String::new(), caller)
                .await
                .map_err(|e| match e.run_refused() {
                    Some(RunRefused::Ended { state, .. }) => ended(runs::state(*state)),
                    _ => A2aError::from(e),
                })?;
            Subject::Run(Box::new(run_now(o, &run, caller).await?))
        }
    };
    Ok(canceled.task(None, true))
}

/// The largest and default page of `ListTasks`.
const MAX_PAGE: i32 = 100;
const DEFAULT_PAGE: i32 = 50;

/// Where a page of `ListTasks` starts: after this task in the order
/// (newest status first, then id).
fn page_token(s: &Subject) -> String {
    format!("{}.{}", s.updated_nanos(), s.id())
}

/// `ListTasks`: the caller's tasks and runs (every one with
/// `orch:tasks:read_all`), filtered by context, state and status time,
/// newest status first, a page at a time.
pub(super) async fn list_tasks(
    o: &Orchestrator,
    list: ListTasksRequest,
    caller: &Caller,
) -> Result<ListTasksResponse, A2aError> {
    let size = match list.page_size {
        None => DEFAULT_PAGE,
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
                .map_err(|e: crate::envelope::ParseError| A2aError::invalid_params("contextId", e))
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
                .and_then(|(n, id)| {
                    Some((
                        n.parse::<i128>().ok()?,
                        id.parse::<crate::envelope::TaskId>().ok()?,
                    ))
                })
                .ok_or_else(|| {
                    A2aError::invalid_params("pageToken", "not a page token this server gave")
                })
        })
        .transpose()?;
    // Every matching task and run the caller may see, ordered; a page is
    // cut from it after the token's place.
    let mut all = Vec::new();
    let mut cursor = None;
    loop {
        let batch = o
            .tasks(context.as_ref(), state, cursor, 1000, caller)
            .await?;
        let done = batch.len() < 1000;
        cursor = batch.last().map(TaskRecord::task_id);
        all.extend(batch.into_iter().map(|t| Subject::Task(Box::new(t))));
        if done {
            break;
        }
    }
    // A run is never `submitted` nor `auth-required`.
    let run_state = state.map(runs::run_state);
    if run_state != Some(None) {
        let found = o
            .run_records(context.as_ref(), run_state.flatten(), caller)
            .await?;
        all.extend(found.into_iter().map(|r| Subject::Run(Box::new(r))));
    }
    all.retain(|s| after.is_none_or(|a| s.updated_nanos() > a));
    let key = |s: &Subject| (s.updated_nanos(), s.id());
    all.sort_by_key(|s| std::cmp::Reverse(key(s)));
    let total = all.len();
    let start = match token {
        None => 0,
        Some(t) => all.iter().position(|s| key(s) < t).unwrap_or(total),
    };
    let page: Vec<&Subject> = all.iter().skip(start).take(size as usize).collect();
    let next = if start + page.len() < total {
        page.last().map(|s| page_token(s)).unwrap_or_default()
    } else {
        String::new()
    };
    let artifacts = list.include_artifacts.unwrap_or(false);
    Ok(ListTasksResponse {
        tasks: page.iter().map(|s| s.task(history, artifacts)).collect(),
        next_page_token: next,
        page_size: size,
        total_size: i32::try_from(total).unwrap_or(i32::MAX),
    })
}

/// A push config's header values must be sendable as such, and short.
fn header_safe(field: &str, v: &str) -> Result<(), A2aError> {
    if v.len() > 4096 {
        return Err(A2aError::invalid_params(field, "is longer than 4096 bytes"));
    }
    let ok = v.bytes().all(|b| b == b'\t' || (b' '..=b'~').contains(&b));
    if ok {
        Ok(())
    } else {
        Err(A2aError::invalid_params(
            field,
            "must be printable ASCII: it is sent as an HTTP header",
        ))
    }
}

/// A push config as the service keeps it.
fn push_target(c: &TaskPushNotificationConfig, v03: bool) -> Result<PushTarget, A2aError> {
    if c.url.is_empty() {
        return Err(A2aError::invalid_params("url", "is required"));
    }
    if c.url.len() > 2048 {
        return Err(A2aError::invalid_params("url", "is longer than 2048 bytes"));
    }
    if let Some(t) = &c.token {
        header_safe("token", t)?;
    }
    if let Some(a) = &c.authentication {
        header_safe("authentication.scheme", &a.scheme)?;
        if let Some(cr) = &a.credentials {
            header_safe("authentication.credentials", cr)?;
        }
    }
    Ok(PushTarget {
        url: c.url.clone(),
        token: c.token.clone(),
        authentication: c.authentication.as_ref().map(|a| PushAuth {
            scheme: a.scheme.clone(),
            credentials: a.credentials.clone(),
        }),
        v03,
    })
}

/// A stored push config as A2A shows it: its credentials are not shown
/// again (the scheme is).
fn push_config(d: &PushDelivery) -> Option<TaskPushNotificationConfig> {
    let DeliveryTarget::A2a(t) = &d.target else {
        return None;
    };
    Some(TaskPushNotificationConfig {
        url: t.url.clone(),
        id: Some(d.id.clone()),
        task_id: d.subject.to_string(),
        token: t.token.clone(),
        authentication: t.authentication.as_ref().map(|a| a2a::AuthenticationInfo {
            scheme: a.scheme.clone(),
            credentials: None,
        }),
        tenant: None,
    })
}

/// Sets push config `c` on its task (or run), owing the events after
/// `cursor` (a new config: the events from now on).
async fn set_push_from(
    o: &Orchestrator,
    c: &TaskPushNotificationConfig,
    cursor: Option<u64>,
    v03: bool,
    caller: &Caller,
) -> Result<TaskPushNotificationConfig, A2aError> {
    let target = push_target(c, v03)?;
    let id = subject::task_id(&c.task_id)?;
    let cursor = match cursor {
        Some(n) => n,
        None => subject::find(o, &c.task_id, caller).await?.generation(),
    };
    let config_id =
        c.id.clone()
            .filter(|i| !i.is_empty())
            .unwrap_or_else(|| c.task_id.clone());
    // It is part of each delivery's id, a header.
    header_safe("id", &config_id)?;
    if config_id.len() > 128 {
        return Err(A2aError::invalid_params("id", "is longer than 128 bytes"));
    }
    let d = o
        .set_push(id, config_id, target, cursor, caller)
        .await?
        .ok_or_else(|| A2aError::task_not_found(&c.task_id))?;
    Ok(push_config(&d).expect("a push config was set"))
}

/// `CreateTaskPushNotificationConfig`.
pub(super) async fn create_push(
    o: &Orchestrator,
    c: TaskPushNotificationConfig,
    v03: bool,
    caller: &Caller,
) -> Result<TaskPushNotificationConfig, A2aError> {
    if c.task_id.is_empty() {
        return Err(A2aError::invalid_params("taskId", "is required"));
    }
    set_push_from(o, &c, None, v03, caller).await
}

/// The push config a message sets on the task (or run) it made or
/// continued: owed every event after `before` (0: a new one's all).
pub(super) async fn push_on_send(
    o: &Orchestrator,
    send: &SendMessageRequest,
    subject: &Subject,
    before: u64,
    v03: bool,
    caller: &Caller,
) -> Result<(), A2aError> {
    let Some(c) = send
        .configuration
        .as_ref()
        .and_then(|c| c.task_push_notification_config.as_ref())
    else {
        return Ok(());
    };
    let c = TaskPushNotificationConfig {
        task_id: subject.id().to_string(),
        ..c.clone()
    };
    set_push_from(o, &c, Some(before), v03, caller)
        .await
        .map(drop)
}

/// `GetTaskPushNotificationConfig`: a config that is not there is -32001.
pub(super) async fn get_push(
    o: &Orchestrator,
    get: GetTaskPushNotificationConfigRequest,
    caller: &Caller,
) -> Result<TaskPushNotificationConfig, A2aError> {
    configs_of(o, &get.task_id, caller)
        .await?
        .into_iter()
        .find(|c| c.id.as_deref() == Some(get.id.as_str()))
        .ok_or_else(|| {
            A2aError::new(
                -32001,
                format!(
                    "task {} has no push notification config `{}`",
                    get.task_id, get.id
                ),
            )
            .with("taskId", get.task_id.clone())
        })
}

/// `ListTaskPushNotificationConfigs`: every config of the task, on one
/// page.
pub(super) async fn list_push(
    o: &Orchestrator,
    list: ListTaskPushNotificationConfigsRequest,
    caller: &Caller,
) -> Result<ListTaskPushNotificationConfigsResponse, A2aError> {
    Ok(ListTaskPushNotificationConfigsResponse {
        configs: configs_of(o, &list.task_id, caller).await?,
        next_page_token: None,
    })
}

/// The push configs of task (or run) `task_id`, as A2A shows them; -32001
/// if the caller may not see it.
async fn configs_of(
    o: &Orchestrator,
    task_id: &str,
    caller: &Caller,
) -> Result<Vec<TaskPushNotificationConfig>, A2aError> {
    let all = o
        .deliveries_of(subject::task_id(task_id)?, caller)
        .await?
        .ok_or_else(|| A2aError::task_not_found(task_id))?;
    Ok(all.iter().filter_map(push_config).collect())
}

/// `DeleteTaskPushNotificationConfig`: idempotent (a config already gone
/// is deleted).
pub(super) async fn delete_push(
    o: &Orchestrator,
    delete: DeleteTaskPushNotificationConfigRequest,
    caller: &Caller,
) -> Result<(), A2aError> {
    let id = subject::task_id(&delete.task_id)?;
    o.remove_push(id, &delete.id, caller)
        .await?
        .ok_or_else(|| A2aError::task_not_found(&delete.task_id))?;
    Ok(())
}
