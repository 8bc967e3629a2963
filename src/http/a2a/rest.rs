//! The HTTP+JSON binding under `/a2a/rest` (the paths of
//! `specification/a2a.proto`'s HTTP annotations): `POST /message:send`,
//! `POST /message:stream`, `GET /tasks`, `GET /tasks/{id}`,
//! `POST /tasks/{id}:cancel`, `GET /tasks/{id}:subscribe`,
//! `/tasks/{id}/pushNotificationConfigs[/{configId}]`,
//! `GET /extendedAgentCard`; errors as `google.rpc.Status`.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Query, RawQuery, State};
use axum::http::{HeaderMap, Method};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::{Extension, Json, Router};
use serde_json::{Map, Value, json};

use super::card::REST_PATH;
use super::error::A2aError;
use super::rpc::decode;
use super::{Face, Version, card, ops, stream, to_json, v03, version};
use crate::http::Requester;
use crate::service::Orchestrator;

pub(super) fn router() -> Router<crate::http::Api> {
    Router::new()
        .route(&format!("{REST_PATH}/message:send"), post(send))
        .route(&format!("{REST_PATH}/message:stream"), post(send))
        .route(&format!("{REST_PATH}/tasks"), get(list))
        .route(&format!("{REST_PATH}/tasks/{{*rest}}"), any(task))
        .route(&format!("{REST_PATH}/extendedAgentCard"), get(extended))
}

fn fail(e: A2aError) -> Response {
    (e.status(), Json(e.rest())).into_response()
}

fn reply(v: Result<Value, A2aError>) -> Response {
    match v {
        Ok(v) => Json(v).into_response(),
        Err(e) => fail(e),
    }
}

/// A stream's `data:`: the `StreamResponse`, in the request's version.
fn frame(version: Version) -> stream::Frame {
    Box::new(move |body, closes| match version {
        Version::V03 => v03::stream03(body, closes),
        Version::V10 => body,
    })
}

/// The body as JSON (an empty one is `{}`).
async fn body_json(
    o: &Orchestrator,
    face: &Face,
    headers: &HeaderMap,
    body: Body,
) -> Result<Value, A2aError> {
    if let Some(other) = super::rpc::not_json(headers) {
        return Err(A2aError::content_type(format!(
            "the request's Content-Type is `{other}`; the HTTP+JSON binding takes application/json"
        )));
    }
    let bytes = crate::http::body(o, &face.http, headers, body).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    serde_json::from_slice(&bytes).map_err(|e| A2aError::parse(format!("not JSON: {e}")))
}

/// `POST /message:send` and `POST /message:stream`.
async fn send(
    State(o): State<Orchestrator>,
    Extension(face): Extension<Arc<Face>>,
    Requester(caller): Requester,
    RawQuery(query): RawQuery,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let streaming = uri.path().ends_with(":stream");
    let run = async {
        let version = version(&headers, query.as_deref())?;
        let mut params = body_json(&o, &face, &headers, body).await?;
        if version == Version::V03 {
            params = v03::send_params_v1(params);
        }
        let send: a2a::SendMessageRequest = decode(params)?;
        let key = headers.get("idempotency-key").and_then(|v| v.to_str().ok());
        if streaming {
            return stream::send(
                &o,
                &face,
                &caller,
                &send,
                key,
                version == Version::V03,
                &headers,
                frame(version),
            )
            .await;
        }
        let old = version == Version::V03;
        let r = to_json(ops::send_message(&o, &face, send, key, old, &caller).await?);
        let r = if version == Version::V03 {
            v03::send_result03(r)
        } else {
            r
        };
        Ok(Json(r).into_response())
    };
    run.await.unwrap_or_else(fail)
}

/// A query string as the JSON a request type reads: numbers and booleans
/// where they are meant.
fn query_json(q: &HashMap<String, String>) -> Result<Value, A2aError> {
    let mut out = Map::new();
    for (k, v) in q {
        let value = match k.as_str() {
            "pageSize" | "historyLength" => Value::from(
                v.parse::<i32>()
                    .map_err(|_| A2aError::invalid_params(k.clone(), "must be a whole number"))?,
            ),
            "includeArtifacts" => Value::from(
                v.parse::<bool>()
                    .map_err(|_| A2aError::invalid_params(k.clone(), "must be true or false"))?,
            ),
            "A2A-Version" => continue,
            _ => Value::from(v.clone()),
        };
        out.insert(k.clone(), value);
    }
    Ok(Value::Object(out))
}

/// `GET /tasks`.
async fn list(
    State(o): State<Orchestrator>,
    Requester(caller): Requester,
    RawQuery(raw): RawQuery,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let run = async {
        let version = version(&headers, raw.as_deref())?;
        let mut params = query_json(&q)?;
        if version == Version::V03 {
            params = v03::list_params_v1(params);
        }
        let l = to_json(ops::list_tasks(&o, decode(params)?, &caller).await?);
        Ok(if version == Version::V03 {
            v03::list03(l)
        } else {
            l
        })
    };
    reply(run.await)
}

/// `/tasks/{id}`, `/tasks/{id}:cancel`, `/tasks/{id}:subscribe`, and the
/// push-notification configs.
#[allow(clippy::too_many_arguments)]
async fn task(
    State(o): State<Orchestrator>,
    Extension(face): Extension<Arc<Face>>,
    Requester(caller): Requester,
    Path(rest): Path<String>,
    RawQuery(raw): RawQuery,
    Query(q): Query<HashMap<String, String>>,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let run = async {
        let version = version(&headers, raw.as_deref())?;
        let (id, verb) = match rest.split_once(':') {
            Some((id, verb)) => (id, Some(verb)),
            None => (rest.as_str(), None),
        };
        if let Some((task, config)) = id.split_once("/pushNotificationConfigs") {
            return push(
                &o, &face, &caller, version, &method, task, config, &headers, body,
            )
            .await;
        }
        if id.contains('/') {
            return Err(A2aError::method_not_found(&format!("{method} {rest}")));
        }
        let task = |t: a2a::Task| {
            let t = to_json(t);
            if version == Version::V03 {
                v03::task03(t)
            } else {
                t
            }
        };
        match (&method, verb) {
            (&Method::GET, None) => {
                let mut params = query_json(&q)?;
                params["id"] = id.into();
                Ok(Json(task(ops::get_task(&o, decode(params)?, &caller).await?)).into_response())
            }
            (&Method::POST, Some("cancel")) => {
                let mut params = body_json(&o, &face, &headers, body).await?;
                if !params.is_object() {
                    return Err(A2aError::invalid_params("body", "must be an object"));
                }
                params["id"] = id.into();
                Ok(
                    Json(task(ops::cancel_task(&o, decode(params)?, &caller).await?))
                        .into_response(),
                )
            }
            (&Method::GET | &Method::POST, Some("subscribe")) => {
                stream::subscribe(&o, &face.streams, &caller, id, &headers, frame(version)).await
            }
            _ => Err(A2aError::method_not_found(&format!(
                "{method} /tasks/{rest}"
            ))),
        }
    };
    run.await.unwrap_or_else(fail)
}

/// `/tasks/{id}/pushNotificationConfigs[/{configId}]`: create (POST),
/// list and get (GET), delete (DELETE).
#[allow(clippy::too_many_arguments)]
async fn push(
    o: &Orchestrator,
    face: &Face,
    caller: &crate::service::Caller,
    version: Version,
    method: &Method,
    task: &str,
    config: &str,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, A2aError> {
    let old = version == Version::V03;
    let config = config.trim_start_matches('/');
    let ids = json!({ "taskId": task, "id": config });
    let shown = |c: a2a::TaskPushNotificationConfig| {
        let c = to_json(c);
        Json(if old { v03::push03(c) } else { c }).into_response()
    };
    match (method, config.is_empty()) {
        (&Method::POST, true) => {
            let mut params = body_json(o, face, headers, body).await?;
            if old {
                params = v03::push_set_v1(params);
            }
            if !params.is_object() {
                return Err(A2aError::invalid_params("body", "must be an object"));
            }
            params["taskId"] = task.into();
            Ok(shown(
                ops::create_push(o, decode(params)?, old, caller).await?,
            ))
        }
        (&Method::GET, true) => {
            let l = ops::list_push(o, decode(json!({ "taskId": task }))?, caller).await?;
            Ok(Json(if old {
                v03::push_list03(to_json(l))
            } else {
                to_json(l)
            })
            .into_response())
        }
        (&Method::GET, false) => Ok(shown(ops::get_push(o, decode(ids)?, caller).await?)),
        (&Method::DELETE, false) => {
            ops::delete_push(o, decode(ids)?, caller).await?;
            Ok(Json(json!({})).into_response())
        }
        _ => Err(A2aError::method_not_found(&format!(
            "{method} /tasks/{task}/pushNotificationConfigs/{config}"
        ))),
    }
}

/// `GET /extendedAgentCard`.
async fn extended(
    State(o): State<Orchestrator>,
    Extension(face): Extension<Arc<Face>>,
    Requester(caller): Requester,
    headers: HeaderMap,
) -> Response {
    reply(card::extended(&o, &face, &caller, &headers))
}
