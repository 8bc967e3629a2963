//! JSON-RPC 2.0 at `POST /a2a`: 1.0's method names with `A2A-Version:
//! 1.0`, 0.3's without; unary answers as JSON, streams as SSE whose every
//! `data:` is a JSON-RPC response with the request's id.

use std::sync::Arc;

use axum::Extension;
use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::error::A2aError;
use super::{Face, Version, card, ops, stream, to_json, v03, version};
use crate::http::Requester;
use crate::service::{Caller, Orchestrator};

/// A JSON-RPC answer: the result, or the error, with the request's id.
fn answer(id: &Value, outcome: Result<Value, A2aError>) -> Response {
    let body = match outcome {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(e) => json!({"jsonrpc": "2.0", "id": id, "error": e.rpc()}),
    };
    axum::Json(body).into_response()
}

/// `params` decoded as `T`, or -32602 naming the field at fault. Field
/// names may be the proto's own (`history_length`) as well as their
/// lowerCamelCase JSON names (`historyLength`): the ProtoJSON mapping asks
/// parsers to take both.
pub(super) fn decode<T: DeserializeOwned>(mut params: Value) -> Result<T, A2aError> {
    camel_case_fields(&mut params);
    for inner in ["configuration", "message"] {
        if let Some(v) = params.get_mut(inner) {
            camel_case_fields(v);
        }
    }
    serde_path_to_error::deserialize(params).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." {
            "params".to_string()
        } else {
            path
        };
        A2aError::invalid_params(field, e.into_inner().to_string())
    })
}

/// Renames an object's `snake_case` field names to lowerCamelCase, unless
/// that name is given too; its values are left as they are (a message's
/// `metadata`, a data part, are the client's own).
fn camel_case_fields(v: &mut Value) {
    let Value::Object(fields) = v else {
        return;
    };
    let snake: Vec<String> = fields.keys().filter(|k| k.contains('_')).cloned().collect();
    for name in snake {
        let mut camel = String::with_capacity(name.len());
        let mut upper = false;
        for c in name.chars() {
            match c {
                '_' => upper = true,
                c if upper => {
                    camel.extend(c.to_uppercase());
                    upper = false;
                }
                c => camel.push(c),
            }
        }
        if !fields.contains_key(&camel)
            && let Some(value) = fields.remove(&name)
        {
            fields.insert(camel, value);
        }
    }
}

/// The request's Content-Type when it is given and is not JSON
/// (`application/json` or a `+json` type); a request without one is read as
/// JSON.
pub(super) fn not_json(headers: &HeaderMap) -> Option<String> {
    let given = headers.get(axum::http::header::CONTENT_TYPE)?;
    let given = given.to_str().unwrap_or("(not text)");
    let essence = given
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    let json = essence == "application/json" || essence.ends_with("+json");
    (!json).then(|| given.to_string())
}

/// The first member the request's top-level object has twice, if any
/// (the body is known to be a JSON object).
fn repeated_member(body: &[u8]) -> Option<String> {
    struct Members(Option<String>);
    impl<'de> serde::Deserialize<'de> for Members {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct Visit;
            impl<'de> serde::de::Visitor<'de> for Visit {
                type Value = Members;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a JSON object")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(
                    self,
                    mut map: A,
                ) -> Result<Members, A::Error> {
                    let mut seen = std::collections::HashSet::new();
                    let mut repeated = None;
                    while let Some(key) = map.next_key::<String>()? {
                        map.next_value::<serde::de::IgnoredAny>()?;
                        if !seen.insert(key.clone()) && repeated.is_none() {
                            repeated = Some(key);
                        }
                    }
                    Ok(Members(repeated))
                }
            }
            d.deserialize_map(Visit)
        }
    }
    serde_json::from_slice::<Members>(body)
        .ok()
        .and_then(|m| m.0)
}

/// The request's id, method and params, or why it is no request.
fn envelope(body: &[u8]) -> Result<(Value, String, Value), (Value, A2aError)> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| (Value::Null, A2aError::parse(format!("not JSON: {e}"))))?;
    let Value::Object(mut o) = v else {
        return Err((
            Value::Null,
            A2aError::invalid_request("a request is a JSON object (batches are not taken)"),
        ));
    };
    // A JSON object with a member twice is ambiguous (which `method`?):
    // refused, not read as its last.
    if let Some(key) = repeated_member(body) {
        return Err((
            Value::Null,
            A2aError::invalid_request(format!("the request has the member `{key}` twice")),
        ));
    }
    let id = match o.remove("id") {
        Some(id @ (Value::String(_) | Value::Number(_) | Value::Null)) => id,
        Some(_) => {
            return Err((
                Value::Null,
                A2aError::invalid_request("`id` must be a string, a number or null"),
            ));
        }
        None => Value::Null,
    };
    if o.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err((id, A2aError::invalid_request("`jsonrpc` must be \"2.0\"")));
    }
    let Some(Value::String(method)) = o.remove("method") else {
        return Err((id, A2aError::invalid_request("`method` must be a string")));
    };
    let params = match o.remove("params") {
        None | Some(Value::Null) => json!({}),
        Some(p @ Value::Object(_)) => p,
        Some(_) => {
            return Err((id, A2aError::invalid_params("params", "must be an object")));
        }
    };
    Ok((id, method, params))
}

/// `POST /a2a`.
pub(super) async fn handle(
    State(o): State<Orchestrator>,
    Extension(face): Extension<Arc<Face>>,
    Requester(caller): Requester,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let body = match crate::http::body(&o, &face.http, &headers, body).await {
        Ok(b) => b,
        Err(e) => return answer(&Value::Null, Err(e.into())),
    };
    if let Some(other) = not_json(&headers) {
        let why =
            format!("the request's Content-Type is `{other}`; JSON-RPC takes application/json");
        return answer(&Value::Null, Err(A2aError::content_type(why)));
    }
    let (id, method, params) = match envelope(&body) {
        Ok(r) => r,
        Err((id, e)) => return answer(&id, Err(e)),
    };
    let version = match version(&headers, query.as_deref()) {
        Ok(v) => v,
        Err(e) => return answer(&id, Err(e)),
    };
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let call = Call {
        o: &o,
        face: &face,
        caller: &caller,
        headers: &headers,
        key: key.as_deref(),
        id: &id,
        version,
    };
    match call.run(&method, params).await {
        Ok(Reply::Json(v)) => answer(&id, Ok(v)),
        Ok(Reply::Stream(r)) => r,
        Err(e) => answer(&id, Err(e)),
    }
}

enum Reply {
    Json(Value),
    Stream(Response),
}

struct Call<'a> {
    o: &'a Orchestrator,
    face: &'a Face,
    caller: &'a Caller,
    headers: &'a HeaderMap,
    key: Option<&'a str>,
    id: &'a Value,
    version: Version,
}

impl Call<'_> {
    async fn run(&self, method: &str, params: Value) -> Result<Reply, A2aError> {
        let (o, caller) = (self.o, self.caller);
        let old = self.version == Version::V03;
        let name = match (self.version, method) {
            (Version::V10, m) => m,
            (Version::V03, "message/send") => "SendMessage",
            (Version::V03, "message/stream") => "SendStreamingMessage",
            (Version::V03, "tasks/get") => "GetTask",
            (Version::V03, "tasks/list") => "ListTasks",
            (Version::V03, "tasks/cancel") => "CancelTask",
            (Version::V03, "tasks/resubscribe") => "SubscribeToTask",
            (Version::V03, "agent/getAuthenticatedExtendedCard") => "GetExtendedAgentCard",
            (Version::V03, "tasks/pushNotificationConfig/set") => {
                "CreateTaskPushNotificationConfig"
            }
            (Version::V03, "tasks/pushNotificationConfig/get") => "GetTaskPushNotificationConfig",
            (Version::V03, "tasks/pushNotificationConfig/list") => {
                "ListTaskPushNotificationConfigs"
            }
            (Version::V03, "tasks/pushNotificationConfig/delete") => {
                "DeleteTaskPushNotificationConfig"
            }
            (Version::V03, m) => return Err(A2aError::method_not_found(m)),
        };
        let params = match (old, name) {
            (true, "SendMessage" | "SendStreamingMessage") => v03::send_params_v1(params),
            (true, "ListTasks") => v03::list_params_v1(params),
            (true, "CreateTaskPushNotificationConfig") => v03::push_set_v1(params),
            (
                true,
                "GetTaskPushNotificationConfig"
                | "ListTaskPushNotificationConfigs"
                | "DeleteTaskPushNotificationConfig",
            ) => v03::push_ids_v1(params),
            _ => params,
        };
        let reply = match name {
            "SendMessage" => {
                let r =
                    ops::send_message(o, self.face, decode(params)?, self.key, old, caller).await?;
                let v = to_json(r);
                Reply::Json(if old { v03::send_result03(v) } else { v })
            }
            "GetTask" => {
                let t = to_json(ops::get_task(o, decode(params)?, caller).await?);
                Reply::Json(if old { v03::task03(t) } else { t })
            }
            "ListTasks" => {
                let l = to_json(ops::list_tasks(o, decode(params)?, caller).await?);
                Reply::Json(if old { v03::list03(l) } else { l })
            }
            "CancelTask" => {
                let t = to_json(ops::cancel_task(o, decode(params)?, caller).await?);
                Reply::Json(if old { v03::task03(t) } else { t })
            }
            "SendStreamingMessage" => {
                let send: a2a::SendMessageRequest = decode(params)?;
                let frame = self.frame();
                Reply::Stream(
                    stream::send(
                        o,
                        self.face,
                        caller,
                        &send,
                        self.key,
                        old,
                        self.headers,
                        frame,
                    )
                    .await?,
                )
            }
            "SubscribeToTask" => {
                let sub: a2a::SubscribeToTaskRequest = decode(params)?;
                let (streams, frame) = (&self.face.streams, self.frame());
                Reply::Stream(
                    stream::subscribe(o, streams, caller, &sub.id, self.headers, frame).await?,
                )
            }
            "GetExtendedAgentCard" => {
                Reply::Json(card::extended(o, self.face, caller, self.headers)?)
            }
            "CreateTaskPushNotificationConfig" => {
                let c = to_json(ops::create_push(o, decode(params)?, old, caller).await?);
                Reply::Json(if old { v03::push03(c) } else { c })
            }
            "GetTaskPushNotificationConfig" => {
                let c = to_json(ops::get_push(o, decode(params)?, caller).await?);
                Reply::Json(if old { v03::push03(c) } else { c })
            }
            "ListTaskPushNotificationConfigs" => {
                let l = ops::list_push(o, decode(params)?, caller).await?;
                Reply::Json(if old {
                    v03::push_list03(to_json(l))
                } else {
                    to_json(l)
                })
            }
            "DeleteTaskPushNotificationConfig" => {
                ops::delete_push(o, decode(params)?, caller).await?;
                Reply::Json(if old { Value::Null } else { json!({}) })
            }
            other => return Err(A2aError::method_not_found(other)),
        };
        Ok(reply)
    }

    fn frame(&self) -> stream::Frame {
        let id = self.id.clone();
        let old = self.version == Version::V03;
        Box::new(move |body, closes| {
            let result = if old {
                v03::stream03(body, closes)
            } else {
                body
            };
            json!({"jsonrpc": "2.0", "id": id, "result": result})
        })
    }
}

/// Machines try the JSON-RPC face's reading (`crate::fuzz`): any bytes,
/// and edits of valid requests, are a request or a JSON-RPC error, and a
/// refusal of params names the field.
#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;
    use serde_json::json;

    use super::{decode, envelope};

    fn seed() -> serde_json::Value {
        json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
            "message": {"messageId": "m-1", "role": "ROLE_USER", "taskId": "t", "contextId": "c",
                        "parts": [{"text": "hi"}, {"data": {"q": 1}}], "metadata": {"skillId": "a/b"}},
            "configuration": {"historyLength": 3, "returnImmediately": true,
                              "taskPushNotificationConfig": {"url": "https://example.com/h", "token": "x"}}
        }})
    }

    proptest! {
        #![proptest_config(crate::fuzz::config())]

        #[test]
        fn requests(edits in crate::fuzz::edits(), bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let doc = crate::fuzz::edited(&seed(), &edits);
            let body = serde_json::to_vec(&doc).unwrap();
            for body in [body, bytes] {
                match envelope(&body) {
                    Ok((_, _, params)) => {
                        for attempt in [
                            decode::<a2a::SendMessageRequest>(params.clone()).err(),
                            // A 0.3 client's send, as either binding reads it.
                            decode::<a2a::SendMessageRequest>(super::super::v03::send_params_v1(
                                params.clone(),
                            ))
                            .err(),
                            decode::<a2a::GetTaskRequest>(params.clone()).err(),
                            decode::<a2a::ListTasksRequest>(params.clone()).err(),
                            decode::<a2a::SubscribeToTaskRequest>(params).err(),
                        ]
                        .into_iter()
                        .flatten()
                        {
                            prop_assert_eq!(attempt.code, -32602);
                            prop_assert!(attempt.field.as_deref().is_some_and(|f| !f.is_empty()));
                        }
                    }
                    Err((_, e)) => prop_assert!(
                        [-32700, -32600, -32602].contains(&e.code),
                        "{:?}",
                        e
                    ),
                }
            }
        }
    }
}
