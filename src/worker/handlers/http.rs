//! The `http` invocation: the agent is an HTTP service of its own (the
//! seed's push-delegate pattern). Each task's envelope (its token left
//! out of the body) is POSTed to the card's `url`, with the task's token
//! as the bearer credential, so the service checks it as a worker would.
//!
//! - A 2xx with a JSON body completes the task with that body as the
//!   result (204: a null result).
//! - 202 with a `Location` is a job: the location is kept as the task's
//!   note before anything waits on it (a restarted worker polls it rather
//!   than posting again), then read every `poll` (or the `Retry-After` it
//!   gives) until it answers otherwise. A cancel of ours DELETEs it.
//! - 429 and 503 are retryable failures that wait the `Retry-After` they
//!   give; other 5xx, a refused connection and a timeout are retryable;
//!   other 4xx fail, with the service's message.
//! - A body over 1 MiB, or a 2xx body that is not JSON, fails the task.
//!
//! Each request carries `Idempotency-Key` (the task's), `Orch-Task-Id`,
//! `Orch-Attempt` and the handler span's `traceparent`.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use reqwest::header::{HeaderMap, HeaderValue, LOCATION, RETRY_AFTER};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::{HandlerError, upstream};
use crate::agent::Invocation;
use crate::worker::{Handler, Outcome, Task};

/// How this handler names its service's failures.
const CODES: upstream::Codes = upstream::Codes {
    busy: "agent_busy",
    unavailable: "agent_unavailable",
    refused: "agent_refused",
};

/// How the handler reaches the agent's service.
#[derive(Clone)]
pub struct HttpHandler {
    inner: Arc<Inner>,
}

struct Inner {
    url: reqwest::Url,
    http: reqwest::Client,
    poll: Duration,
}

/// What one exchange with the service came to.
enum Answer {
    /// The task's result.
    Done(Value),
    /// A job to follow at this URL, after this long.
    Job(reqwest::Url, Option<Duration>),
    /// How the attempt ends otherwise.
    End(Outcome),
}

impl HttpHandler {
    /// The handler of an `http` invocation.
    pub fn new(invocation: &Invocation) -> Result<HttpHandler, HandlerError> {
        let Invocation::Http { url, timeout, poll } = invocation else {
            return Err(HandlerError::WrongKind("http"));
        };
        let url = reqwest::Url::parse(url).map_err(|e| HandlerError::Field {
            field: "invocation.url",
            why: e.to_string(),
        })?;
        let http = reqwest::Client::builder()
            .timeout(*timeout)
            // A job's location is followed by this handler, not by redirects.
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(HttpHandler {
            inner: Arc::new(Inner {
                url,
                http,
                poll: *poll,
            }),
        })
    }
}

impl Handler for HttpHandler {
    fn handle(&self, task: Task) -> BoxFuture<'static, Outcome> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move { inner.run(task).await })
    }
}

/// What the note of a task handed to a service holds.
#[derive(serde::Serialize, serde::Deserialize)]
struct Note {
    /// The job's location.
    location: String,
    /// The attempt that posted it.
    attempt: u32,
}

impl Inner {
    async fn run(&self, task: Task) -> Outcome {
        let headers = match headers(&task) {
            Ok(h) => h,
            Err(why) => return Outcome::permanent("bad_request", why),
        };
        // A job this attempt posted before its worker died is followed,
        // not posted again.
        let kept = match task.notes.get().await {
            Ok(n) => n.and_then(|v| serde_json::from_value::<Note>(v).ok()),
            Err(why) => return Outcome::retryable("notes_unavailable", why.to_string()),
        };
        let mut answer = match kept {
            Some(n) if n.attempt == task.attempt => match reqwest::Url::parse(&n.location) {
                Ok(url) => Answer::Job(url, None),
                Err(_) => self.post(&task, &headers).await,
            },
            _ => self.post(&task, &headers).await,
        };
        let mut noted = None;
        loop {
            match answer {
                Answer::Done(result) => return Outcome::completed(result),
                Answer::End(outcome) => return outcome,
                Answer::Job(url, after) => {
                    if noted.as_ref() != Some(&url) {
                        let note = Note {
                            location: url.to_string(),
                            attempt: task.attempt,
                        };
                        if let Err(why) = task.notes.set(&json!(note)).await {
                            return Outcome::retryable("notes_unavailable", why.to_string());
                        }
                        noted = Some(url.clone());
                    }
                    tokio::select! {
                        () = tokio::time::sleep(after.unwrap_or(self.poll)) => {}
                        () = task.cancel.cancelled() => {
                            // Best effort: the service is told, the task is canceled either way.
                            let _ = self.http.delete(url).headers(headers.clone()).send().await;
                            return Outcome::Canceled;
                        }
                    }
                    answer = tokio::select! {
                        a = self.exchange(Method::GET, url.clone(), &headers, None) => a,
                        () = task.cancel.cancelled() => {
                            let _ = self.http.delete(url).headers(headers.clone()).send().await;
                            return Outcome::Canceled;
                        }
                    };
                }
            }
        }
    }

    /// Posts the task's envelope.
    async fn post(&self, task: &Task, headers: &HeaderMap) -> Answer {
        let body = serde_json::to_vec(&task.envelope).unwrap_or_default();
        tokio::select! {
            a = self.exchange(Method::POST, self.url.clone(), headers, Some(body)) => a,
            () = task.cancel.cancelled() => Answer::End(Outcome::Canceled),
        }
    }

    /// One request, and what its answer means.
    async fn exchange(
        &self,
        method: Method,
        url: reqwest::Url,
        headers: &HeaderMap,
        body: Option<Vec<u8>>,
    ) -> Answer {
        let method_was_get = method == Method::GET;
        let mut request = self
            .http
            .request(method, url.clone())
            .headers(headers.clone());
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body);
        }
        let response = match request.send().await {
            Ok(r) => r,
            Err(e) => return Answer::End(upstream::unreachable(&e, &url, &CODES)),
        };
        let status = response.status();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(upstream::retry_after);
        let location = response
            .headers()
            .get(LOCATION)
            .and_then(|l| l.to_str().ok())
            .and_then(|l| url.join(l).ok());
        let bytes = match upstream::body(response, &url, &CODES).await {
            Ok(b) => b,
            Err(outcome) => return Answer::End(outcome),
        };
        match status {
            StatusCode::ACCEPTED => match location {
                Some(job) => Answer::Job(job, retry_after),
                // A job already followed goes on at its location.
                None if method_was_get => Answer::Job(url, retry_after),
                None => Answer::End(Outcome::permanent(
                    "bad_response",
                    format!("{url} answered 202 without a Location to follow"),
                )),
            },
            StatusCode::NO_CONTENT => Answer::Done(Value::Null),
            s if s.is_success() => match serde_json::from_slice(&bytes) {
                Ok(result) => Answer::Done(result),
                Err(e) => Answer::End(Outcome::permanent(
                    "bad_response",
                    format!("{url} answered {s} with a body that is not JSON: {e}"),
                )),
            },
            s => Answer::End(upstream::failure(s, retry_after, &bytes, &url, &CODES)),
        }
    }
}

/// The headers every request of `task` carries.
fn headers(task: &Task) -> Result<HeaderMap, String> {
    let mut h = HeaderMap::new();
    let value =
        |s: &str| HeaderValue::from_str(s).map_err(|_| format!("`{s}` cannot be a header value"));
    if let Some(token) = &task.token {
        let mut v = value(&format!("Bearer {}", token.expose()))?;
        v.set_sensitive(true);
        h.insert("authorization", v);
    }
    h.insert(
        "idempotency-key",
        value(task.envelope.control.idempotency_key.as_str())?,
    );
    h.insert(
        "orch-task-id",
        value(&task.envelope.header.task_id.to_string())?,
    );
    h.insert("orch-attempt", value(&task.attempt.to_string())?);
    for (name, v) in &task.trace {
        h.insert(
            name.to_ascii_lowercase()
                .as_str()
                .parse::<reqwest::header::HeaderName>()
                .map_err(|e| e.to_string())?,
            value(v)?,
        );
    }
    Ok(h)
}
