//! The `llm` invocation, the worker's side (`docs/llm.md`): each task is
//! one model call, a turn of a conversation the orchestrator holds. Its
//! params are the whole Chat Completions request; the worker adds the
//! model when the request names none, asks for a stream, adds its key,
//! sends it to `<base URL>/chat/completions` and answers with the model's
//! message, what the call cost, the model and the latency
//! ([`crate::llm::TurnResult`]).
//!
//! - Where: the card's `invocation` (`baseUrl`, `apiKeyEnv`, `timeout`,
//!   `model`), else the settings file's `llm`.
//! - Streamed answers: the text so far is reported as progress, an
//!   artifact `answer` in chunks, at most every 200 ms.
//! - Faults ([`super::upstream`]): 429 and 503 wait their `Retry-After`,
//!   other 5xx and timeouts are retryable, other 4xx fail with the
//!   provider's words; an answer that is not Chat Completions fails.
//! - The key is read from the environment when the worker starts and is
//!   only ever the request's bearer header (marked sensitive): never in a
//!   result, an error, a log or a span.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use serde_json::{Value, json};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::upstream;
use crate::agent::Invocation;
use crate::artifact::{Artifact, Part};
use crate::llm::{AssistantMessage, FunctionCall, LlmSettings, ToolCall, TurnResult, Usage};
use crate::worker::{Handler, Outcome, Task};

use super::HandlerError;

/// How this handler names the endpoint's failures.
const CODES: upstream::Codes = upstream::Codes {
    busy: "model_busy",
    unavailable: "model_unavailable",
    refused: "model_refused",
};

/// How often streamed text is reported.
const REPORT_EVERY: Duration = Duration::from_millis(200);

/// Sends an agent's model calls.
#[derive(Clone)]
pub struct LlmHandler {
    inner: Arc<Inner>,
}

struct Inner {
    /// The MCP servers whose tools the model is offered.
    mcp: Option<super::mcp::McpTools>,
    url: reqwest::Url,
    key: Option<HeaderValue>,
    model: Option<String>,
    stream: bool,
    http: reqwest::Client,
    /// The API key and the MCP servers' credentials (a provider may quote
    /// the key in its error): [`Handler::credentials`].
    secrets: crate::redact::Secrets,
}

impl LlmHandler {
    /// The handler of an `llm` invocation, what it leaves out taken from
    /// `settings`, offering the tools of `mcp`; the key read from the
    /// environment now.
    pub fn new(
        invocation: &Invocation,
        settings: &LlmSettings,
        mcp: Option<super::mcp::McpTools>,
    ) -> Result<LlmHandler, HandlerError> {
        let Invocation::Llm {
            model,
            base_url,
            api_key_env,
            timeout,
            ..
        } = invocation
        else {
            return Err(HandlerError::WrongKind("llm"));
        };
        let base = base_url.as_deref().unwrap_or(&settings.base_url);
        let url = reqwest::Url::parse(&format!("{}/chat/completions", base.trim_end_matches('/')))
            .map_err(|e| HandlerError::Endpoint {
                base: base.to_string(),
                why: e.to_string(),
            })?;
        let variable = api_key_env.as_deref().unwrap_or(&settings.api_key_env);
        let api_key = std::env::var(variable).ok().filter(|k| !k.is_empty());
        let secrets = crate::redact::Secrets::credentials(api_key.clone()).and(
            &mcp.as_ref()
                .map(super::mcp::McpTools::credentials)
                .unwrap_or_default(),
        );
        let key = match api_key {
            Some(k) => {
                let mut v = HeaderValue::from_str(&format!("Bearer {k}")).map_err(|_| {
                    HandlerError::KeyNotHeader {
                        variable: variable.to_string(),
                    }
                })?;
                v.set_sensitive(true);
                Some(v)
            }
            None => {
                tracing::warn!(
                    variable,
                    "no API key: ${variable} is not set, so model calls carry none (a local server needs none)"
                );
                None
            }
        };
        let http = reqwest::Client::builder()
            .timeout(timeout.unwrap_or(settings.timeout))
            .build()?;
        Ok(LlmHandler {
            inner: Arc::new(Inner {
                mcp,
                url,
                key,
                model: model.clone().or_else(|| settings.model.clone()),
                stream: settings.stream,
                http,
                secrets,
            }),
        })
    }
}

impl Handler for LlmHandler {
    fn credentials(&self) -> crate::redact::Secrets {
        self.inner.secrets.clone()
    }

    fn handle(&self, task: Task) -> BoxFuture<'static, Outcome> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            let cancel = task.cancel.clone();
            tokio::select! {
                outcome = inner.call(&task) => outcome,
                () = cancel.cancelled() => Outcome::Canceled,
            }
        })
    }
}

impl Inner {
    async fn call(&self, task: &Task) -> Outcome {
        if let Some(call) = &task.envelope.payload.meta.mcp {
            let params = task.envelope.payload.params.clone();
            return match &self.mcp {
                Some(mcp) => mcp.call(&call.server, &call.tool, params).await,
                None => Outcome::permanent(
                    "mcp_refused",
                    "this agent's card names no MCP server this worker has",
                ),
            };
        }
        if task.envelope.payload.meta.turn.is_none() {
            return Outcome::permanent(
                "not_a_turn",
                "this agent is a prompt for a model: its tasks are conversations the orchestrator holds, and its worker runs only their turns (docs/llm.md)",
            );
        }
        let mut body = task.envelope.payload.params.clone();
        if !body.contains_key("model") {
            match &self.model {
                Some(m) => {
                    body.insert("model".into(), json!(m));
                }
                None => {
                    return Outcome::permanent(
                        "no_model",
                        "no model: name one in the card (`model`, `invocation.model`) or in the settings' `llm.model`",
                    );
                }
            }
        }
        if let Some(mcp) = &self.mcp {
            let offered = match mcp.offered().await {
                Ok(tools) => tools,
                Err(outcome) => return outcome,
            };
            if !offered.is_empty()
                && let Value::Array(tools) = body.entry("tools").or_insert_with(|| json!([]))
            {
                tools.extend(offered);
            }
        }
        if self.stream {
            body.insert("stream".into(), json!(true));
            body.insert("stream_options".into(), json!({"include_usage": true}));
        }
        let mut request = self
            .http
            .post(self.url.clone())
            .header(CONTENT_TYPE, "application/json")
            .body(serde_json::to_vec(&body).unwrap_or_default());
        if let Some(key) = &self.key {
            request = request.header(AUTHORIZATION, key.clone());
        }
        for (name, value) in &task.trace {
            request = request.header(name.to_ascii_lowercase(), value.as_str());
        }
        let started = Instant::now();
        let response = match request.send().await {
            Ok(r) => r,
            Err(e) => return upstream::unreachable(&e, &self.url, &CODES),
        };
        let status = response.status();
        if !status.is_success() {
            let retry_after = response
                .headers()
                .get(RETRY_AFTER)
                .and_then(upstream::retry_after);
            return match upstream::body(response, &self.url, &CODES).await {
                Ok(bytes) => upstream::failure(status, retry_after, &bytes, &self.url, &CODES),
                Err(outcome) => outcome,
            };
        }
        let streamed = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let answer = if streamed {
            self.read_stream(response, task).await
        } else {
            match upstream::body(response, &self.url, &CODES).await {
                Ok(bytes) => whole(&bytes),
                Err(outcome) => return outcome,
            }
        };
        match answer {
            Ok(mut turn) => {
                turn.latency_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                // The OpenTelemetry GenAI conventions' names.
                let span = tracing::Span::current();
                let model = turn.model.clone().unwrap_or_default();
                span.set_attribute("gen_ai.response.model", model.clone());
                span.set_attribute("gen_ai.latency_ms", turn.latency_ms as i64);
                if let Some(u) = turn.usage {
                    span.set_attribute("gen_ai.usage.input_tokens", u.prompt_tokens as i64);
                    span.set_attribute("gen_ai.usage.output_tokens", u.completion_tokens as i64);
                }
                let usage = turn.usage.unwrap_or_default();
                crate::telemetry::metrics::model_called(
                    task.envelope
                        .payload
                        .meta
                        .trigger_id
                        .as_deref()
                        .unwrap_or(""),
                    task.envelope.header.to.as_str(),
                    &model,
                    usage.prompt_tokens,
                    usage.completion_tokens,
                    started.elapsed(),
                );
                tracing::debug!(model, latency_ms = turn.latency_ms, "model call");
                Outcome::completed(json!(turn))
            }
            Err(outcome) => outcome,
        }
    }

    /// Reads a streamed answer, reporting its text as it comes.
    async fn read_stream(
        &self,
        mut response: reqwest::Response,
        task: &Task,
    ) -> Result<TurnResult, Outcome> {
        let mut stream = Stream::default();
        let mut pending = Vec::new();
        let mut read = 0usize;
        let mut reported = 0usize;
        let mut last_report = Instant::now();
        loop {
            let chunk = match response.chunk().await {
                Ok(Some(c)) => c,
                Ok(None) => break,
                Err(e) => {
                    return Err(Outcome::retryable(
                        CODES.unavailable,
                        format!("{}: the stream broke: {e}", self.url),
                    ));
                }
            };
            read += chunk.len();
            if read > upstream::MAX_BODY_BYTES {
                return Err(Outcome::permanent(
                    "output_too_large",
                    format!(
                        "{} answered with more than {} bytes",
                        self.url,
                        upstream::MAX_BODY_BYTES
                    ),
                ));
            }
            pending.extend_from_slice(&chunk);
            while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                stream
                    .line(&String::from_utf8_lossy(&line))
                    .map_err(|why| {
                        Outcome::permanent("bad_response", format!("{}: {why}", self.url))
                    })?;
            }
            if stream.text.len() > reported && last_report.elapsed() >= REPORT_EVERY {
                report(task, &stream.text[reported..], reported > 0, false);
                reported = stream.text.len();
                last_report = Instant::now();
            }
        }
        if !pending.is_empty() {
            stream
                .line(&String::from_utf8_lossy(&pending))
                .map_err(|why| {
                    Outcome::permanent("bad_response", format!("{}: {why}", self.url))
                })?;
        }
        if reported > 0 || !stream.text.is_empty() {
            report(task, &stream.text[reported..], reported > 0, true);
        }
        stream
            .finish()
            .map_err(|why| Outcome::permanent("bad_response", format!("{}: {why}", self.url)))
    }
}

/// Reports streamed `text` as a chunk of the artifact `answer`.
fn report(task: &Task, text: &str, append: bool, last: bool) {
    let mut artifact = Artifact::new("answer", Part::text(text));
    artifact.append = append;
    artifact.last_chunk = last;
    task.progress.artifact(artifact);
}

/// A whole (not streamed) answer.
fn whole(bytes: &[u8]) -> Result<TurnResult, Outcome> {
    let bad = |why: String| Outcome::permanent("bad_response", why);
    let v: Value = serde_json::from_slice(bytes)
        .map_err(|e| bad(format!("the model's answer is not JSON: {e}")))?;
    let choice = v.pointer("/choices/0").ok_or_else(|| {
        bad("the model's answer has no `choices`: it is not a Chat Completions answer".into())
    })?;
    let message: AssistantMessage = serde_json::from_value(
        choice.get("message").cloned().unwrap_or(Value::Null),
    )
    .map_err(|e| {
        bad(format!(
            "the model's `choices[0].message` cannot be read: {e}"
        ))
    })?;
    Ok(TurnResult {
        message,
        model: v.get("model").and_then(Value::as_str).map(str::to_string),
        usage: v
            .get("usage")
            .and_then(|u| serde_json::from_value(u.clone()).ok()),
        latency_ms: 0,
        finish_reason: choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .map(str::to_string),
    })
}

/// A streamed answer, as its events arrive.
#[derive(Default)]
struct Stream {
    text: String,
    calls: Vec<ToolCall>,
    model: Option<String>,
    usage: Option<Usage>,
    finish_reason: Option<String>,
    done: bool,
    events: usize,
}

impl Stream {
    /// Takes one line of the event stream.
    fn line(&mut self, line: &str) -> Result<(), String> {
        let line = line.trim_end_matches(['\r', '\n']);
        let Some(data) = line.strip_prefix("data:") else {
            // Comments, `event:`, `id:`, blank lines.
            return Ok(());
        };
        let data = data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let v: Value = serde_json::from_str(data)
            .map_err(|e| format!("an event of the stream is not JSON: {e}"))?;
        self.events += 1;
        if let Some(e) = v.get("error") {
            return Err(format!(
                "the stream ended with an error: {}",
                e.get("message")
                    .and_then(Value::as_str)
                    .unwrap_or(&e.to_string())
            ));
        }
        if let Some(m) = v.get("model").and_then(Value::as_str) {
            self.model = Some(m.to_string());
        }
        if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
            self.usage = serde_json::from_value(u.clone()).ok();
        }
        let Some(choice) = v.pointer("/choices/0") else {
            return Ok(());
        };
        if let Some(r) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(r.to_string());
        }
        let delta = choice.get("delta").unwrap_or(&Value::Null);
        if let Some(t) = delta.get("content").and_then(Value::as_str) {
            self.text.push_str(t);
        }
        for d in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let index = d
                .get("index")
                .and_then(Value::as_u64)
                .and_then(|i| usize::try_from(i).ok())
                .unwrap_or(self.calls.len());
            if index > self.calls.len() + 16 {
                return Err(format!("a tool call's index {index} is out of order"));
            }
            while self.calls.len() <= index {
                self.calls.push(ToolCall {
                    id: String::new(),
                    kind: "function".into(),
                    function: FunctionCall {
                        name: String::new(),
                        arguments: String::new(),
                    },
                });
            }
            let call = &mut self.calls[index];
            if let Some(id) = d.get("id").and_then(Value::as_str) {
                call.id.push_str(id);
            }
            if let Some(f) = d.get("function") {
                if let Some(n) = f.get("name").and_then(Value::as_str) {
                    call.function.name.push_str(n);
                }
                if let Some(a) = f.get("arguments").and_then(Value::as_str) {
                    call.function.arguments.push_str(a);
                }
            }
        }
        Ok(())
    }

    /// The answer, once the stream ended.
    fn finish(self) -> Result<TurnResult, String> {
        if self.events == 0 {
            return Err("the stream carried no event".into());
        }
        if let Some(c) = self
            .calls
            .iter()
            .find(|c| c.id.is_empty() || c.function.name.is_empty())
        {
            return Err(format!(
                "a streamed tool call has no {}",
                if c.id.is_empty() { "id" } else { "name" }
            ));
        }
        Ok(TurnResult {
            message: AssistantMessage {
                content: (!self.text.is_empty()).then_some(self.text),
                tool_calls: self.calls,
            },
            model: self.model,
            usage: self.usage,
            latency_ms: 0,
            finish_reason: self.finish_reason,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_gathers_text_tool_calls_and_usage() {
        let mut s = Stream::default();
        for line in [
            r#"data: {"model":"m","choices":[{"delta":{"content":"Hel"}}]}"#,
            "",
            ": keep-alive",
            r#"data: {"choices":[{"delta":{"content":"lo","tool_calls":[{"index":0,"id":"c1","function":{"name":"wri","arguments":"{\"a\""}}]}}]}"#,
            r#"data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"ter","arguments":":1}"}}]},"finish_reason":"tool_calls"}]}"#,
            r#"data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}"#,
            "data: [DONE]",
        ] {
            s.line(line).unwrap();
        }
        let t = s.finish().unwrap();
        assert_eq!(t.message.content.as_deref(), Some("Hello"));
        assert_eq!(t.message.tool_calls[0].function.name, "writer");
        assert_eq!(t.message.tool_calls[0].function.arguments, r#"{"a":1}"#);
        assert_eq!(t.usage.unwrap().total(), 10);
        assert_eq!(t.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(t.model.as_deref(), Some("m"));
    }

    #[test]
    fn a_malformed_answer_is_a_clear_error() {
        let mut s = Stream::default();
        assert!(s.line("data: {not json").unwrap_err().contains("not JSON"));
        assert!(Stream::default().finish().unwrap_err().contains("no event"));
        let Err(Outcome::Failed { error, .. }) = whole(br#"{"id": "x"}"#) else {
            panic!()
        };
        assert!(error.message.contains("no `choices`"), "{}", error.message);
        assert!(!error.retryable);
    }
}
