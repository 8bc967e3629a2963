//! The `a2a` invocation: a remote A2A agent as this agent's handler. Each
//! task is sent to it as a message (JSON-RPC, A2A 1.0) and the remote task
//! is followed until it ends, waits for input, or ours is canceled.
//!
//! - The message's `messageId` is `<task id>-<attempt>`: a remote that
//!   dedupes message ids sees one message per attempt.
//! - The remote task's id is left as the task's note (in the claim bucket)
//!   before anything waits on it, so a worker that died while the remote
//!   worked is replaced by one that follows the same remote task, never by
//!   a second message.
//! - The remote's status messages and artifacts become progress; its
//!   artifacts at the end become the result; its `input-required` and
//!   `auth-required` become ours, and the answer our task gets goes to the
//!   remote task as the next message.
//! - A cancel of ours cancels the remote task. A remote that cannot be
//!   reached (or answers 5xx) is a retryable failure: the next attempt
//!   follows the remote task it left, if the remote still has it.
//! - The remote gets the params and what the card's `forward` lists, with
//!   the credential the card names from the worker's environment; the
//!   task's token and the orchestrator's credentials are never sent.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use reqwest::header::{HeaderName, HeaderValue};
use serde_json::{Map, Value, json};

use crate::agent::{Forward, Invocation};
use crate::artifact::{Artifact, Part};
use crate::event::ErrorInfo;
use crate::worker::{Handler, Outcome, Task};

use super::HandlerError;

/// How the handler reaches its remote.
#[derive(Clone)]
pub struct RemoteHandler {
    inner: Arc<Inner>,
}

struct Inner {
    card: String,
    http: reqwest::Client,
    auth: Option<(HeaderName, HeaderValue)>,
    forward: Vec<Forward>,
    poll: Duration,
    /// The JSON-RPC endpoint, once the card was read.
    endpoint: Mutex<Option<String>>,
    /// The credential ([`Handler::credentials`]): a remote may quote it in
    /// its error.
    secrets: crate::redact::Secrets,
}

/// What the note of a task delegated to a remote holds.
#[derive(serde::Serialize, serde::Deserialize)]
struct Note {
    /// The remote task.
    remote_task: String,
    /// The attempt that sent the remote its last message.
    attempt: u32,
}

/// Why one call to the remote failed.
enum CallError {
    /// It could not be reached, timed out, or answered 5xx: try again.
    Down(String),
    /// It answered with a JSON-RPC error.
    Refused { code: i64, message: String },
}

impl CallError {
    fn outcome(self, what: &str) -> Outcome {
        match self {
            CallError::Down(why) => {
                Outcome::retryable("remote_unavailable", format!("{what}: {why}"))
            }
            CallError::Refused { code, message } => Outcome::permanent(
                "remote_refused",
                format!("{what}: the remote agent refused ({code}): {message}"),
            ),
        }
    }
}

impl RemoteHandler {
    /// The handler of an `a2a` invocation; fails when the credential's
    /// variable is not set (or is no header value).
    pub fn new(invocation: &Invocation) -> Result<RemoteHandler, HandlerError> {
        let Invocation::A2a {
            card,
            auth,
            forward,
            poll,
            timeout,
        } = invocation
        else {
            return Err(HandlerError::WrongKind("a2a"));
        };
        let mut secrets = crate::redact::Secrets::default();
        let auth = match auth {
            None => None,
            Some(a) => {
                let secret = std::env::var(&a.env).map_err(|_| HandlerError::Field {
                    field: "invocation.auth.env",
                    why: format!("`{}` is not set in the worker's environment", a.env),
                })?;
                secrets = crate::redact::Secrets::credentials([secret.clone()]);
                let name =
                    HeaderName::try_from(a.header.as_str()).map_err(|e| HandlerError::Field {
                        field: "invocation.auth.header",
                        why: e.to_string(),
                    })?;
                let text = if a.scheme.is_empty() {
                    secret
                } else {
                    format!("{} {secret}", a.scheme)
                };
                let mut value = HeaderValue::try_from(text).map_err(|_| HandlerError::Field {
                    field: "invocation.auth.env",
                    why: format!("`{}` is not a header value", a.env),
                })?;
                value.set_sensitive(true);
                Some((name, value))
            }
        };
        let http = reqwest::Client::builder().timeout(*timeout).build()?;
        Ok(RemoteHandler {
            inner: Arc::new(Inner {
                card: card.clone(),
                http,
                auth,
                forward: forward.clone(),
                poll: *poll,
                endpoint: Mutex::new(None),
                secrets,
            }),
        })
    }
}

impl Handler for RemoteHandler {
    fn credentials(&self) -> crate::redact::Secrets {
        self.inner.secrets.clone()
    }

    fn handle(&self, task: Task) -> BoxFuture<'static, Outcome> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move { inner.run(task).await })
    }
}

impl Inner {
    fn lock_endpoint(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.endpoint.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The remote's JSON-RPC URL, from its card (read once, again after a
    /// failure).
    async fn endpoint(&self) -> Result<String, CallError> {
        if let Some(url) = self.lock_endpoint().clone() {
            return Ok(url);
        }
        let down = |e: String| CallError::Down(format!("its card at {}: {e}", self.card));
        let resp = self
            .http
            .get(&self.card)
            .send()
            .await
            .map_err(|e| down(e.to_string()))?;
        if !resp.status().is_success() {
            return Err(down(format!("answered {}", resp.status())));
        }
        let card: Value = resp.json().await.map_err(|e| down(e.to_string()))?;
        let url = jsonrpc_url(&card).ok_or_else(|| CallError::Refused {
            code: 0,
            message: format!(
                "its card at {} names no JSON-RPC interface for A2A 1.0",
                self.card
            ),
        })?;
        *self.lock_endpoint() = Some(url.clone());
        Ok(url)
    }

    /// One JSON-RPC call: its result.
    async fn call(&self, method: &str, params: Value) -> Result<Value, CallError> {
        let url = self.endpoint().await?;
        let mut req = self
            .http
            .post(&url)
            .header("A2A-Version", "1.0")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}));
        if let Some((name, value)) = &self.auth {
            req = req.header(name.clone(), value.clone());
        }
        let forget = |why: String| {
            // The card may have moved the endpoint: read it again next time.
            *self.lock_endpoint() = None;
            CallError::Down(why)
        };
        let resp = req.send().await.map_err(|e| forget(e.to_string()))?;
        let status = resp.status();
        if status.is_server_error() {
            return Err(forget(format!("{method} answered {status}")));
        }
        let body: Value = resp.json().await.map_err(|e| {
            CallError::Down(format!("{method} answered {status}, not JSON-RPC: {e}"))
        })?;
        if let Some(e) = body.get("error") {
            return Err(CallError::Refused {
                code: e["code"].as_i64().unwrap_or_default(),
                message: e["message"].as_str().unwrap_or_default().to_string(),
            });
        }
        if !status.is_success() {
            return Err(CallError::Refused {
                code: i64::from(status.as_u16()),
                message: body.to_string(),
            });
        }
        Ok(body.get("result").cloned().unwrap_or(Value::Null))
    }

    /// The message for this attempt: the params (or the answer), as the
    /// remote's next message; on the remote task `remote` when given.
    fn message(&self, task: &Task, parts: Value, remote: Option<&str>) -> Value {
        let env = &task.envelope;
        let mut m = json!({
            "messageId": format!("{}-{}", env.header.task_id, task.attempt),
            "role": "ROLE_USER",
            "parts": parts,
        });
        if let Some(id) = remote {
            m["taskId"] = id.into();
        }
        if self.forward.contains(&Forward::Context) {
            m["contextId"] = env.header.correlation_id.as_str().into();
        }
        if self.forward.contains(&Forward::SystemPrompt)
            && let Some(prompt) = &env.payload.meta.system_prompt
        {
            m["metadata"] = json!({ "systemPrompt": prompt });
        }
        m
    }

    async fn run(&self, task: Task) -> Outcome {
        let note = match task.notes.get().await {
            Ok(n) => n.and_then(|v| serde_json::from_value::<Note>(v).ok()),
            Err(why) => return Outcome::retryable("notes_unavailable", why.to_string()),
        };
        let remote = match self.start(&task, note).await {
            Ok(Started::Following(id)) => id,
            Ok(Started::Done(outcome)) => return outcome,
            Err(e) => return e.outcome("sending the task to the remote agent"),
        };
        self.follow(&task, &remote).await
    }

    /// Sends this attempt's message, unless the note says it was sent (or
    /// the remote task it names is still running): the remote task to
    /// follow.
    async fn start(&self, task: &Task, note: Option<Note>) -> Result<Started, CallError> {
        if let Some(n) = note {
            let found = match self.call("GetTask", json!({"id": n.remote_task})).await {
                Ok(t) => Some(t),
                // The remote no longer has it: start over.
                Err(CallError::Refused { code: -32001, .. }) => None,
                Err(e) => return Err(e),
            };
            if let Some(t) = found {
                let state = t["status"]["state"].as_str().unwrap_or_default();
                let earlier = n.attempt != task.attempt;
                if state == WAITS_INPUT
                    && earlier
                    && let Some(input) = task.envelope.payload.input.as_ref()
                {
                    // Our task was answered: the answer is the remote's
                    // next message.
                    let m = self.message(task, parts(input), Some(&n.remote_task));
                    self.call(
                        "SendMessage",
                        json!({"message": m, "configuration": {"returnImmediately": true}}),
                    )
                    .await?;
                    self.note(task, &n.remote_task).await?;
                    return Ok(Started::Following(n.remote_task));
                }
                // Sent by this attempt (its worker died), still running or
                // waiting, or completed (an attempt that could not see the
                // end): follow it. One that failed is sent again.
                if !earlier || !ended(state) || state == "TASK_STATE_COMPLETED" {
                    return Ok(Started::Following(n.remote_task));
                }
            }
        }
        let m = self.message(task, parts(&task.envelope.payload.params), None);
        let sent = self
            .call(
                "SendMessage",
                json!({"message": m, "configuration": {"returnImmediately": true}}),
            )
            .await?;
        if let Some(reply) = sent.get("message") {
            return Ok(Started::Done(Outcome::Replied(text_of(reply))));
        }
        let id = sent["task"]["id"]
            .as_str()
            .ok_or_else(|| CallError::Refused {
                code: 0,
                message: format!("SendMessage answered neither a task nor a message: {sent}"),
            })?
            .to_string();
        self.note(task, &id).await?;
        Ok(Started::Following(id))
    }

    /// Leaves the remote task's id as the task's note, for this attempt.
    async fn note(&self, task: &Task, remote: &str) -> Result<(), CallError> {
        let note = Note {
            remote_task: remote.to_string(),
            attempt: task.attempt,
        };
        task.notes
            .set(&serde_json::to_value(note).unwrap_or_default())
            .await
            .map_err(|e| CallError::Down(format!("the task's note was not kept: {e}")))
    }

    /// Follows remote task `id` until it ends or waits, reporting its
    /// messages and artifacts as progress.
    async fn follow(&self, task: &Task, id: &str) -> Outcome {
        let mut seen = Seen::default();
        let mut failures = 0u32;
        loop {
            let read = tokio::select! {
                read = self.call("GetTask", json!({"id": id})) => read,
                () = task.cancel.cancelled() => return self.cancel(id).await,
            };
            let t = match read {
                Ok(t) => {
                    failures = 0;
                    t
                }
                Err(CallError::Down(why)) if failures < 2 => {
                    // Three failed reads in a row give up (below).
                    failures += 1;
                    tracing::debug!(remote_task = id, error = %why, "the remote agent did not answer; trying again");
                    Value::Null
                }
                Err(e) => return e.outcome("following the remote task"),
            };
            if !t.is_null() {
                seen.report(task, &t);
                if let Some(outcome) = settled(&t) {
                    return outcome;
                }
            }
            tokio::select! {
                () = tokio::time::sleep(self.poll) => {}
                () = task.cancel.cancelled() => return self.cancel(id).await,
            }
        }
    }

    /// Cancels remote task `id` (ours was canceled).
    async fn cancel(&self, id: &str) -> Outcome {
        if let Err(e) = self.call("CancelTask", json!({"id": id})).await {
            let why = match e {
                CallError::Down(w) => w,
                CallError::Refused { message, .. } => message,
            };
            tracing::warn!(remote_task = id, error = %why, "the remote task was not canceled");
        }
        Outcome::Canceled
    }
}

/// What sending found.
enum Started {
    /// A remote task to follow.
    Following(String),
    /// The remote answered at once.
    Done(Outcome),
}

const WAITS_INPUT: &str = "TASK_STATE_INPUT_REQUIRED";

fn ended(state: &str) -> bool {
    matches!(
        state,
        "TASK_STATE_COMPLETED"
            | "TASK_STATE_FAILED"
            | "TASK_STATE_CANCELED"
            | "TASK_STATE_REJECTED"
    )
}

/// The JSON-RPC endpoint a card names for A2A 1.0 (or, for a 0.3 card,
/// its `url` when its preferred transport is JSON-RPC).
fn jsonrpc_url(card: &Value) -> Option<String> {
    let interfaces = card["supportedInterfaces"].as_array();
    let found = interfaces.into_iter().flatten().find(|i| {
        i["protocolBinding"] == "JSONRPC"
            && i["protocolVersion"]
                .as_str()
                .is_none_or(|v| v.starts_with("1."))
    });
    if let Some(i) = found {
        return i["url"].as_str().map(str::to_string);
    }
    let preferred = card["preferredTransport"].as_str().unwrap_or("JSONRPC");
    (preferred == "JSONRPC")
        .then(|| card["url"].as_str().map(str::to_string))
        .flatten()
}

/// Params (or an answer) as a message's parts: `{"text": s}` alone is a
/// text part, anything else one data part.
fn parts(params: &Map<String, Value>) -> Value {
    match params.get("text") {
        Some(Value::String(s)) if params.len() == 1 => json!([{ "text": s }]),
        _ => json!([{ "data": params }]),
    }
}

/// The text of a message's text parts.
fn text_of(message: &Value) -> String {
    message["parts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// One of the remote's parts as ours.
fn part(p: &Value) -> Part {
    let mut out = match (&p["text"], &p["data"], &p["url"], &p["raw"]) {
        (Value::String(t), ..) => Part::text(t.clone()),
        (_, d, ..) if !d.is_null() => Part::data(d.clone()),
        (_, _, Value::String(u), _) => Part {
            url: Some(u.clone()),
            ..Part::default()
        },
        (.., Value::String(r)) => Part {
            raw: Some(r.clone()),
            ..Part::default()
        },
        _ => Part::text(""),
    };
    out.media_type = p["mediaType"].as_str().map(str::to_string);
    out.filename = p["filename"].as_str().map(str::to_string);
    out
}

/// What a part says, as a result value.
fn value_of(p: &Value) -> Value {
    if let Some(t) = p["text"].as_str() {
        return t.into();
    }
    if !p["data"].is_null() {
        return p["data"].clone();
    }
    p.clone()
}

/// The remote's artifacts as a result: each by name (or id), a single
/// part as its value, several as a list.
fn result_of(t: &Value) -> Value {
    let mut out = Map::new();
    for a in t["artifacts"].as_array().into_iter().flatten() {
        let name = a["name"]
            .as_str()
            .or_else(|| a["artifactId"].as_str())
            .unwrap_or("artifact")
            .to_string();
        let parts: Vec<Value> = a["parts"]
            .as_array()
            .into_iter()
            .flatten()
            .map(value_of)
            .collect();
        let value = match <[Value; 1]>::try_from(parts) {
            Ok([one]) => one,
            Err(many) => Value::Array(many),
        };
        out.insert(name, value);
    }
    if out.is_empty() {
        let text = text_of(&t["status"]["message"]);
        return if text.is_empty() {
            Value::Null
        } else {
            text.into()
        };
    }
    Value::Object(out)
}

/// The outcome a remote task in its state stands for, if it is settled.
fn settled(t: &Value) -> Option<Outcome> {
    let state = t["status"]["state"].as_str().unwrap_or_default();
    let says = text_of(&t["status"]["message"]);
    let why = |default: &str| {
        if says.is_empty() {
            default.to_string()
        } else {
            says.clone()
        }
    };
    Some(match state {
        "TASK_STATE_COMPLETED" => Outcome::completed(result_of(t)),
        "TASK_STATE_FAILED" => Outcome::permanent("remote_failed", why("the remote task failed")),
        "TASK_STATE_REJECTED" => Outcome::Rejected(ErrorInfo::new(
            "remote_rejected",
            why("the remote agent rejected the task"),
            false,
        )),
        "TASK_STATE_CANCELED" => {
            Outcome::permanent("remote_canceled", why("the remote task was canceled"))
        }
        WAITS_INPUT => Outcome::InputRequired(why("the remote agent asks for input")),
        "TASK_STATE_AUTH_REQUIRED" => Outcome::AuthRequired(ErrorInfo::new(
            "remote_auth_required",
            why("the remote agent asks for authorization"),
            false,
        )),
        _ => return None,
    })
}

/// What of the remote task was reported as progress.
#[derive(Default)]
struct Seen {
    messages: HashSet<String>,
    artifacts: HashSet<String>,
}

impl Seen {
    /// Reports the remote's agent messages and artifacts not reported yet.
    fn report(&mut self, task: &Task, t: &Value) {
        for m in t["history"].as_array().into_iter().flatten() {
            let id = m["messageId"].as_str().unwrap_or_default();
            if m["role"] == "ROLE_AGENT" && self.messages.insert(id.to_string()) {
                let text = text_of(m);
                if !text.is_empty() {
                    task.progress.message(text);
                }
            }
        }
        for a in t["artifacts"].as_array().into_iter().flatten() {
            let id = a["artifactId"].as_str().unwrap_or_default();
            if id.is_empty() || !self.artifacts.insert(id.to_string()) {
                continue;
            }
            let parts: Vec<Part> = a["parts"]
                .as_array()
                .into_iter()
                .flatten()
                .map(part)
                .collect();
            if parts.is_empty() {
                continue;
            }
            task.progress.artifact(Artifact {
                artifact_id: id
                    .chars()
                    .take(crate::artifact::MAX_ARTIFACT_ID_LEN)
                    .collect(),
                name: a["name"].as_str().map(str::to_string),
                description: None,
                parts,
                append: false,
                last_chunk: true,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_card_names_its_json_rpc_endpoint() {
        let v1 = json!({"supportedInterfaces": [
            {"url": "http://x/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
            {"url": "http://x/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]});
        assert_eq!(jsonrpc_url(&v1).as_deref(), Some("http://x/rpc"));
        let v03 = json!({"url": "http://y/", "preferredTransport": "JSONRPC"});
        assert_eq!(jsonrpc_url(&v03).as_deref(), Some("http://y/"));
        assert_eq!(
            jsonrpc_url(&json!({"preferredTransport": "GRPC", "url": "x"})),
            None
        );
    }

    #[test]
    fn artifacts_become_the_result() {
        let t = json!({"status": {"state": "TASK_STATE_COMPLETED"}, "artifacts": [
            {"artifactId": "a", "name": "notes", "parts": [{"text": "n"}]},
            {"artifactId": "b", "parts": [{"data": {"k": 1}}, {"text": "t"}]}]});
        assert_eq!(result_of(&t), json!({"notes": "n", "b": [{"k": 1}, "t"]}));
        let said = json!({"status": {"state": "TASK_STATE_COMPLETED",
            "message": {"parts": [{"text": "done"}]}}});
        assert_eq!(result_of(&said), json!("done"));
        assert!(matches!(settled(&said), Some(Outcome::Completed { .. })));
        let working = json!({"status": {"state": "TASK_STATE_WORKING"}});
        assert!(settled(&working).is_none());
    }
}
