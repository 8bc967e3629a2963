//! The agent card (`/.well-known/agent-card.json`): who the orchestrator
//! is to an A2A client, where to reach it (JSON-RPC 1.0 and 0.3, and
//! HTTP+JSON), how to authenticate, and the skills of its agents. Served
//! with `ETag`, `Last-Modified` and `Cache-Control`; the extended card
//! (`GetExtendedAgentCard`) lists only the skills the caller's scopes
//! allow.

use std::collections::HashMap;

use a2a::{
    AgentCapabilities, AgentCard, AgentInterface, AgentSkill, HttpAuthSecurityScheme,
    SecurityScheme,
};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use sha2::Digest;

use super::Face;
use crate::service::{Caller, Orchestrator};

/// Where the JSON-RPC binding is, and the HTTP+JSON one, under the base.
pub(super) const RPC_PATH: &str = "/a2a";
pub(super) const REST_PATH: &str = "/a2a/rest";

/// The name of the one security scheme (a bearer API key or JWT).
const SCHEME: &str = "bearer";

/// The base URL clients reach us at: the configured one, else `http://`
/// and the request's `Host`.
pub(super) fn base_url(face: &Face, headers: &HeaderMap) -> String {
    if let Some(url) = &face.http.a2a.public_url {
        return url.trim_end_matches('/').to_string();
    }
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_graphic()))
        .unwrap_or("localhost");
    format!("http://{host}")
}

/// The card as 1.0 types: every trigger (as `trigger:<id>`) and every
/// skill of every agent, or (for `caller`) those whose scopes it holds.
fn card(o: &Orchestrator, face: &Face, base: &str, caller: Option<&Caller>) -> AgentCard {
    let auth = face.auth;
    let lacks = |scopes: &[crate::envelope::Scope]| {
        caller.is_some_and(|c| {
            !c.grants
                .missing(scopes.iter().map(|s| s.as_str()))
                .is_empty()
        })
    };
    let triggers = o.triggers();
    let mut skills: Vec<AgentSkill> = triggers
        .loaded
        .values()
        .filter(|t| !lacks(&t.required_scopes))
        .map(|t| super::runs::skill(t))
        .collect();
    let declared = o.catalog();
    for agent in declared.listed() {
        for skill in agent.skills() {
            if lacks(&skill.scopes) {
                continue;
            }
            let tags = if skill.tags.is_empty() {
                vec![agent.name.to_string()]
            } else {
                skill.tags.clone()
            };
            skills.push(AgentSkill {
                id: format!("{}/{}", agent.name, skill.id),
                name: skill.name.clone().unwrap_or_else(|| skill.id.clone()),
                description: if skill.description.is_empty() {
                    agent.description.clone()
                } else {
                    skill.description.clone()
                },
                tags,
                examples: (!skill.examples.is_empty()).then(|| skill.examples.clone()),
                input_modes: (!skill.input_modes.is_empty()).then(|| skill.input_modes.clone()),
                output_modes: (!skill.output_modes.is_empty()).then(|| skill.output_modes.clone()),
                security_requirements: None,
            });
        }
    }
    let rpc = format!("{base}{RPC_PATH}");
    let mut old = AgentInterface::new(rpc.clone(), a2a::TRANSPORT_PROTOCOL_JSONRPC);
    old.protocol_version = "0.3".into();
    AgentCard {
        name: face.http.a2a.name.clone(),
        description: "An orchestrator of AI agents: each message becomes a durable task for one of its agents' skills, or a run of one of its workflows (skills `trigger:<id>`), with its state, history and audit kept.".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        supported_interfaces: vec![
            AgentInterface::new(rpc, a2a::TRANSPORT_PROTOCOL_JSONRPC),
            AgentInterface::new(format!("{base}{REST_PATH}"), a2a::TRANSPORT_PROTOCOL_HTTP_JSON),
            old,
        ],
        capabilities: AgentCapabilities {
            streaming: Some(true),
            push_notifications: Some(true),
            extensions: None,
            extended_agent_card: Some(auth),
        },
        default_input_modes: vec!["application/json".into(), "text/plain".into()],
        default_output_modes: vec!["application/json".into(), "text/plain".into()],
        skills,
        provider: None,
        documentation_url: None,
        icon_url: None,
        security_schemes: auth.then(|| {
            HashMap::from([(
                SCHEME.to_string(),
                SecurityScheme::HttpAuth(HttpAuthSecurityScheme {
                    scheme: "Bearer".into(),
                    description: Some(
                        "An API key of the orchestrator, or a JWT from its configured issuer"
                            .into(),
                    ),
                    bearer_format: Some("API key or JWT".into()),
                }),
            )])
        }),
        security_requirements: auth.then(|| vec![HashMap::from([(SCHEME.to_string(), vec![])])]),
        signatures: None,
    }
}

/// The card as served: 1.0's fields, and (unless `a2a.card_v0_3_fields`
/// is off) 0.3's top-level ones so 0.3 clients find the endpoint.
fn card_json(o: &Orchestrator, face: &Face, base: &str, caller: Option<&Caller>) -> Value {
    let mut v = serde_json::to_value(card(o, face, base, caller)).unwrap_or_default();
    if !face.http.a2a.card_v0_3_fields {
        return v;
    }
    v["url"] = json!(format!("{base}{RPC_PATH}"));
    v["protocolVersion"] = json!("0.3.0");
    v["preferredTransport"] = json!("JSONRPC");
    v["additionalInterfaces"] = json!([
        {"url": format!("{base}{RPC_PATH}"), "transport": "JSONRPC"},
    ]);
    v
}

/// The extended card (`GetExtendedAgentCard`): the skills `caller` may
/// use. With authentication off every caller sees the public card, so
/// there is none (-32007).
pub(super) fn extended(
    o: &Orchestrator,
    face: &Face,
    caller: &Caller,
    headers: &HeaderMap,
) -> Result<Value, super::error::A2aError> {
    if !face.auth {
        return Err(super::error::A2aError::new(
            -32007,
            "no extended card: authentication is off, so every caller sees the public one",
        ));
    }
    Ok(card_json(o, face, &base_url(face, headers), Some(caller)))
}

/// `GET /.well-known/agent-card.json`: cacheable, with a validator.
pub(super) fn serve(o: &Orchestrator, face: &Face, headers: &HeaderMap) -> Response {
    let started = face.started;
    let body = card_json(o, face, &base_url(face, headers), None).to_string();
    let etag = format!(
        "\"{}\"",
        hex::encode(&sha2::Sha256::digest(body.as_bytes())[..12])
    );
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            body,
        )
            .into_response()
    };
    let h = response.headers_mut();
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=300"),
    );
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    // The card changes when the triggers are read again (on a change of
    // their directory); agents change only on restart.
    let read = o
        .triggers()
        .loaded_at
        .map(|t| std::time::SystemTime::from(t.as_offset_date_time()));
    let modified = read.map_or(started, |r| r.max(started));
    if let Ok(v) = HeaderValue::from_str(&httpdate::fmt_http_date(modified)) {
        h.insert(header::LAST_MODIFIED, v);
    }
    response
}
