//! A small OpenAI-compatible Chat Completions server for the tests: a
//! script decides each answer from the request (so parallel calls of
//! different conversations answer as they should), and the server keeps
//! every request it got, so tests can count model calls.

use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use tokio::sync::watch;

/// How the model answers one request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A message with this text.
    Text(String),
    /// A message calling these tools (name, arguments), in order.
    Calls(Vec<(String, Value)>),
    /// This status, with this JSON body and `Retry-After` (seconds).
    Status(u16, Value, Option<u64>),
    /// A 200 with this body as it is (a malformed answer).
    Raw(String),
    /// A 302 to this `Location`.
    Redirect(String),
    /// The answer after the gate opens ([`Model::open`]).
    Held(Box<Reply>),
}

/// Decides an answer from a request's body.
pub type Script = dyn Fn(&Value) -> Reply + Send + Sync;

/// What the server got.
#[derive(Default)]
pub struct Seen {
    /// Each request's body, in the order they came.
    pub requests: Vec<Value>,
    /// Each request's `Authorization` header.
    pub auth: Vec<Option<String>>,
    /// When each request came.
    pub at: Vec<std::time::Instant>,
}

/// The running server.
pub struct Model {
    /// Its base URL (`http://127.0.0.1:port/v1`).
    pub url: String,
    seen: Arc<Mutex<Seen>>,
    gate: watch::Sender<bool>,
}

#[derive(Clone)]
struct Shared {
    script: Arc<Script>,
    seen: Arc<Mutex<Seen>>,
    gate: watch::Receiver<bool>,
}

impl Model {
    /// Serves `script` on a free port.
    pub async fn serve(script: impl Fn(&Value) -> Reply + Send + Sync + 'static) -> Model {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (gate, open) = watch::channel(false);
        let shared = Shared {
            script: Arc::new(script),
            seen: Arc::clone(&seen),
            gate: open,
        };
        let app = axum::Router::new()
            .route("/v1/chat/completions", post(answer))
            .with_state(shared);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Model { url, seen, gate }
    }

    /// Requests so far.
    pub fn calls(&self) -> usize {
        self.seen.lock().unwrap().requests.len()
    }

    /// The requests so far.
    pub fn requests(&self) -> Vec<Value> {
        self.seen.lock().unwrap().requests.clone()
    }

    /// The `Authorization` headers so far.
    pub fn auth(&self) -> Vec<Option<String>> {
        self.seen.lock().unwrap().auth.clone()
    }

    /// When each request came.
    pub fn times(&self) -> Vec<std::time::Instant> {
        self.seen.lock().unwrap().at.clone()
    }

    /// Lets held answers go.
    pub fn open(&self) {
        self.gate.send_replace(true);
    }
}

/// The names of the tools a request offers, in order.
pub fn offered(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// The role of a request's last message (`user`, `tool`).
pub fn last_role(request: &Value) -> String {
    request["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["role"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// The tool messages of a request, in order: (call id, content).
pub fn tool_results(request: &Value) -> Vec<(String, String)> {
    request["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap_or_default().to_string(),
                m["content"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

async fn answer(
    State(s): State<Shared>,
    headers: HeaderMap,
    Json(request): Json<Value>,
) -> Response {
    {
        let mut seen = s.seen.lock().unwrap();
        seen.requests.push(request.clone());
        seen.at.push(std::time::Instant::now());
        seen.auth.push(
            headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
        );
    }
    let mut reply = (s.script)(&request);
    if let Reply::Held(inner) = reply {
        let mut gate = s.gate.clone();
        let _ = gate.wait_for(|open| *open).await;
        reply = *inner;
    }
    let stream = request["stream"] == json!(true);
    let model = request["model"].as_str().unwrap_or("stub").to_string();
    let usage = json!({"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18});
    let message = match reply {
        Reply::Status(code, body, retry_after) => {
            let mut r = (StatusCode::from_u16(code).unwrap(), Json(body)).into_response();
            if let Some(s) = retry_after {
                r.headers_mut()
                    .insert("retry-after", s.to_string().parse().unwrap());
            }
            return r;
        }
        Reply::Raw(body) => {
            return (StatusCode::OK, [("content-type", "application/json")], body).into_response();
        }
        Reply::Redirect(to) => {
            return (StatusCode::FOUND, [("location", to)]).into_response();
        }
        Reply::Held(_) => unreachable!(),
        Reply::Text(text) => json!({"role": "assistant", "content": text}),
        Reply::Calls(calls) => {
            let calls: Vec<Value> = calls
                .iter()
                .enumerate()
                .map(|(i, (name, args))| {
                    json!({"id": format!("call_{i}_{name}"), "type": "function",
                           "function": {"name": name, "arguments": args.to_string()}})
                })
                .collect();
            json!({"role": "assistant", "content": null, "tool_calls": calls})
        }
    };
    let finish = if message["tool_calls"].is_array() {
        "tool_calls"
    } else {
        "stop"
    };
    if !stream {
        return Json(json!({
            "id": "chatcmpl-1", "object": "chat.completion", "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage,
        }))
        .into_response();
    }
    // Streamed: the text in three-character deltas, each tool call in two
    // (its name, then its arguments), the usage last.
    let mut events = Vec::new();
    let chunk = |delta: Value, finish: Option<&str>| {
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": model,
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    if let Some(text) = message["content"].as_str() {
        let chars: Vec<char> = text.chars().collect();
        for piece in chars.chunks(3) {
            events.push(chunk(
                json!({"content": piece.iter().collect::<String>()}),
                None,
            ));
        }
    }
    for (i, call) in message["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        events.push(chunk(
            json!({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                   "function": {"name": call["function"]["name"], "arguments": ""}}]}),
            None,
        ));
        events.push(chunk(
            json!({"tool_calls": [{"index": i, "function": {"arguments": call["function"]["arguments"]}}]}),
            None,
        ));
    }
    events.push(chunk(json!({}), Some(finish)));
    events.push(
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": model,
                       "choices": [], "usage": usage}),
    );
    let mut body = String::new();
    for e in events {
        body.push_str(&format!("data: {e}\n\n"));
    }
    body.push_str("data: [DONE]\n\n");
    (
        StatusCode::OK,
        [("content-type", "text/event-stream")],
        body,
    )
        .into_response()
}
