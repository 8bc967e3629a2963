//! A message, as the task it asks for: which skill of which agent (its
//! metadata, else the router, else the configured default), and the
//! params its parts make (checked against what the skill takes).

use a2a::{Message, Part, PartContent, SendMessageRequest};
use serde_json::{Map, Value, json};

use std::sync::Arc;

use super::error::A2aError;
use super::wire::{MESSAGE_KEY_PREFIX, UNKEYED_PREFIX};
use super::{Face, runs};
use crate::agent::Skill;
use crate::envelope::{AgentName, CorrelationId, IdempotencyKey};
use crate::http::MessageIds;
use crate::service::{Orchestrator, TaskRequest};
use crate::trigger::Trigger;

/// The skill a message goes to.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Target {
    pub(super) agent: AgentName,
    pub(super) skill: String,
}

/// The metadata key that names the skill, and the REST-style one.
const SKILL_KEY: &str = "skillId";
const TRIGGER_KEY: &str = "trigger";

pub(super) fn metadata_str<'a>(request: &'a SendMessageRequest, key: &str) -> Option<&'a str> {
    let from = |m: &'a Option<std::collections::HashMap<String, Value>>| {
        m.as_ref().and_then(|m| m.get(key)).and_then(Value::as_str)
    };
    from(&request.message.metadata).or_else(|| from(&request.metadata))
}

/// The text of a message's text parts, one per line.
pub(super) fn text_of(message: &Message) -> String {
    message
        .parts
        .iter()
        .filter_map(Part::as_text)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Resolves `id` (`agent/skill`, or a skill id only one agent has).
fn resolve(o: &Orchestrator, id: &str, field: &str) -> Result<Target, A2aError> {
    if let Some((agent, skill)) = id.split_once('/') {
        let agent: AgentName = agent.parse().map_err(|e: crate::envelope::ParseError| {
            A2aError::invalid_params(field, format!("`{id}`: {e}"))
        })?;
        let declared = o.catalog();
        let known = declared.agents.is_empty()
            || declared
                .agents
                .get(&agent)
                .is_some_and(|c| c.skill(skill).is_some());
        if !known {
            return Err(A2aError::invalid_params(
                field,
                format!("no skill `{id}`: the agent card lists the skills"),
            ));
        }
        return Ok(Target {
            agent,
            skill: skill.to_string(),
        });
    }
    let declared = o.catalog();
    let mut found = declared
        .agents
        .values()
        .filter(|c| c.skill(id).is_some())
        .map(|c| c.name.clone());
    match (found.next(), found.next()) {
        (Some(agent), None) => Ok(Target {
            agent,
            skill: id.to_string(),
        }),
        (Some(a), Some(b)) => Err(A2aError::invalid_params(
            field,
            format!("skill `{id}` is offered by `{a}` and `{b}`: name it as `agent/skill`"),
        )),
        (None, _) => Err(A2aError::invalid_params(
            field,
            format!("no skill `{id}`: the agent card lists the skills"),
        )),
    }
}

/// The skill the message asks for: `metadata.skillId`, else the router
/// on its text, else `a2a.default_skill`, else the catalog's entry agent (a pack's); none of them → an error saying
/// what was tried.
pub(super) fn target(
    o: &Orchestrator,
    face: &Face,
    request: &SendMessageRequest,
) -> Result<Target, A2aError> {
    if let Some(id) = metadata_str(request, SKILL_KEY) {
        return resolve(o, id, "message.metadata.skillId");
    }
    let text = text_of(&request.message);
    if !text.trim().is_empty()
        && let Some(choice) = crate::run::route::choose(&text, &o.catalog(), &[])
    {
        return Ok(Target {
            agent: choice.agent,
            skill: choice.skill,
        });
    }
    if let Some(id) = &face.http.a2a.default_skill {
        return resolve(o, id, "a2a.default_skill");
    }
    // A pack's entry agent (or the card that says it is the default).
    let declared = o.catalog();
    if let Some(entry) = declared.entry.as_ref().and_then(|e| declared.agents.get(e))
        && let Some(skill) = entry.skills().first()
    {
        return Ok(Target {
            agent: entry.name.clone(),
            skill: skill.id.clone(),
        });
    }
    let tried = if text.trim().is_empty() {
        "the message has no text for the router"
    } else {
        "no skill's trigger phrases or tags, nor any agent's signals, match its text"
    };
    Err(A2aError::invalid_params(
        "message.metadata.skillId",
        format!(
            "no skill chosen: metadata.skillId is absent, {tried}, and no a2a.default_skill (nor a pack's entry agent) is configured"
        ),
    ))
}

/// The trigger a message starts a run of: `metadata.trigger`, or a
/// `metadata.skillId` of `trigger:<id>`; `None` when it names none.
pub(super) fn trigger(
    o: &Orchestrator,
    request: &SendMessageRequest,
) -> Result<Option<Arc<Trigger>>, A2aError> {
    let (id, field) = match (
        metadata_str(request, TRIGGER_KEY),
        metadata_str(request, SKILL_KEY).and_then(|s| s.strip_prefix(runs::SKILL_PREFIX)),
    ) {
        (Some(id), _) => (id, "message.metadata.trigger"),
        (None, Some(id)) => (id, "message.metadata.skillId"),
        (None, None) => return Ok(None),
    };
    o.trigger(id).map(Some).ok_or_else(|| {
        A2aError::invalid_params(
            field,
            format!(
                "no trigger `{id}`: the agent card lists the triggers as skills `trigger:<id>`"
            ),
        )
    })
}

/// A message's context, when it names one.
fn context(message: &Message) -> Result<Option<CorrelationId>, A2aError> {
    message
        .context_id
        .as_deref()
        .map(|c| {
            c.parse::<CorrelationId>()
                .map_err(|e: crate::envelope::ParseError| {
                    A2aError::invalid_params("message.contextId", format!("not a context id: {e}"))
                })
        })
        .transpose()
}

/// The input and context of the run a message starts: its parts made
/// into an object as a skill's params are, against the trigger's input
/// schema.
pub(super) fn run_input(
    send: &SendMessageRequest,
    trigger: &Trigger,
) -> Result<(Value, Option<CorrelationId>), A2aError> {
    let takes = Takes {
        modes: &[],
        schema: trigger.input_schema.as_ref(),
    };
    let input = params(&send.message, takes)?;
    Ok((Value::Object(input), context(&send.message)?))
}

/// A message's own checks: it has an id and a part.
pub(super) fn check(message: &Message) -> Result<(), A2aError> {
    if message.message_id.is_empty() {
        return Err(A2aError::invalid_params(
            "message.messageId",
            "a message needs its id",
        ));
    }
    if message.parts.is_empty() {
        return Err(A2aError::invalid_params(
            "message.parts",
            "a message needs at least one part",
        ));
    }
    Ok(())
}

/// What a message's parts go to: the media types taken (none: any) and
/// the JSON Schema of the object they make.
#[derive(Clone, Copy)]
pub(super) struct Takes<'a> {
    modes: &'a [String],
    schema: Option<&'a Value>,
}

impl<'a> Takes<'a> {
    /// What `skill` takes (an unknown skill: anything).
    pub(super) fn skill(skill: Option<&'a Skill>) -> Self {
        Takes {
            modes: skill.map(|s| s.input_modes.as_slice()).unwrap_or_default(),
            schema: skill.and_then(|s| s.input_schema.as_ref()),
        }
    }
}

/// A part's media type: its own, else its kind's.
fn media_type(part: &Part) -> &str {
    if let Some(m) = part.media_type.as_deref().filter(|m| !m.is_empty()) {
        return m;
    }
    match part.content {
        PartContent::Text(_) => "text/plain",
        PartContent::Data(_) => "application/json",
        PartContent::Raw(_) | PartContent::Url(_) => "application/octet-stream",
    }
}

/// The property a text fills: `text` when the schema has one, else its
/// single string property; `None` when it has neither.
fn text_property(schema: Option<&Value>) -> Option<String> {
    let Some(schema) = schema else {
        return Some("text".into());
    };
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return Some("text".into());
    };
    if props.contains_key("text") {
        return Some("text".into());
    }
    let strings: Vec<&String> = props
        .iter()
        .filter(|(_, p)| p.get("type").and_then(Value::as_str) == Some("string"))
        .map(|(k, _)| k)
        .collect();
    match strings.as_slice() {
        [one] if props.len() == 1 => Some((*one).clone()),
        _ => None,
    }
}

/// The params of a message for what `takes` them: a data part is the
/// params object; text parts fill `text` or the single string input;
/// file and URL parts are passed as references under `files`. A part
/// whose media type is not taken is refused (-32005).
pub(super) fn params(message: &Message, takes: Takes<'_>) -> Result<Map<String, Value>, A2aError> {
    let modes = takes.modes;
    let text_into = text_property(takes.schema);
    let takes = |part: &Part| {
        let mt = media_type(part);
        modes.is_empty()
            || modes.iter().any(|m| m == mt || m == "*/*")
            || (matches!(part.content, PartContent::Text(_))
                && mt == "text/plain"
                && modes.iter().any(|m| m == "application/json")
                && text_into.is_some())
    };
    let mut params = Map::new();
    let mut texts = Vec::new();
    let mut files = Vec::new();
    let mut data_seen = false;
    for (i, part) in message.parts.iter().enumerate() {
        if !takes(part) {
            return Err(A2aError::content_type(format!(
                "part {i} is `{}`; this skill takes {}",
                media_type(part),
                modes.join(", ")
            ))
            .with("mediaType", media_type(part)));
        }
        match &part.content {
            PartContent::Text(t) => texts.push(t.as_str()),
            PartContent::Data(Value::Object(map)) if !data_seen => {
                data_seen = true;
                params = map.clone();
            }
            PartContent::Data(Value::Object(_)) => {
                return Err(A2aError::invalid_params(
                    format!("message.parts[{i}].data"),
                    "a message carries at most one data part (the params object)",
                ));
            }
            PartContent::Data(_) => {
                return Err(A2aError::invalid_params(
                    format!("message.parts[{i}].data"),
                    "a data part must be a JSON object (the params)",
                ));
            }
            PartContent::Url(url) => files.push(json!({
                "url": url, "mediaType": media_type(part), "filename": part.filename,
            })),
            PartContent::Raw(bytes) => {
                use base64::Engine;
                files.push(json!({
                    "raw": base64::engine::general_purpose::STANDARD.encode(bytes),
                    "mediaType": media_type(part),
                    "filename": part.filename,
                }));
            }
        }
    }
    if !texts.is_empty() {
        let Some(into) = text_into else {
            return Err(A2aError::content_type(
                "this skill takes a data part (its params object), not text",
            )
            .with("mediaType", "text/plain"));
        };
        params
            .entry(into)
            .or_insert_with(|| Value::from(texts.join("\n")));
    }
    if !files.is_empty() {
        params.insert("files".into(), Value::Array(files));
    }
    Ok(params)
}

/// The idempotency key a message gives: the `Idempotency-Key` header,
/// else its id when message ids are keys (`a2a.message_ids`); none when
/// they are not. Keys a new task, and an answer to a task that waits.
pub(super) fn message_key(
    face: &Face,
    send: &SendMessageRequest,
    header_key: Option<&str>,
) -> Option<String> {
    match (header_key, face.http.a2a.message_ids) {
        (Some(k), _) => Some(k.to_string()),
        (None, MessageIds::Keys) => {
            Some(format!("{MESSAGE_KEY_PREFIX}{}", send.message.message_id))
        }
        (None, MessageIds::Ignored) => None,
    }
}

/// The task a message asks for, sent by whoever calls: keyed by the
/// message's id (or the `Idempotency-Key` header) so a resend is the same
/// task; in the message's context when it names one.
pub(super) fn request(
    o: &Orchestrator,
    face: &Face,
    send: &SendMessageRequest,
    header_key: Option<&str>,
) -> Result<TaskRequest, A2aError> {
    let message = &send.message;
    let target = target(o, face, send)?;
    let declared = o.catalog();
    let skill = declared
        .agents
        .get(&target.agent)
        .and_then(|c| c.skill(&target.skill));
    let params = params(message, Takes::skill(skill))?;
    let correlation_id = context(message)?;
    let action = target
        .skill
        .parse()
        .map_err(|e: crate::envelope::ParseError| {
            A2aError::invalid_params("message.metadata.skillId", e)
        })?;
    let request = TaskRequest {
        to: target.agent,
        action,
        params,
        idempotency_key: None,
        priority: None,
        response_mode: None,
        required_scopes: Vec::new(),
        callback_url: None,
        deadline: None,
        max_attempts: None,
        correlation_id,
    };
    // Unkeyed, a task still gets a key of its own that names the message.
    let key = message_key(face, send, header_key).unwrap_or_else(|| {
        let nonce = fastrand::u64(..);
        format!("{UNKEYED_PREFIX}{nonce:016x}:{}", message.message_id)
    });
    let idempotency_key: IdempotencyKey =
        key.parse().map_err(|e: crate::envelope::ParseError| {
            let field = if header_key.is_some() {
                "Idempotency-Key"
            } else {
                "message.messageId"
            };
            A2aError::invalid_params(field, e)
        })?;
    Ok(TaskRequest {
        idempotency_key: Some(idempotency_key),
        ..request
    })
}
