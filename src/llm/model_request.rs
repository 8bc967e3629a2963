//! The first request of a conversation, built from the agent's card and
//! its task's envelope, and the tools a card offers its model.
//!
//! - **System prompt**: the trigger's `system_prompt` (the envelope's
//!   `payload.meta.system_prompt`) first, then the agent's instruction:
//!   the seed's rule is that agents honour the trigger's, so it leads. The
//!   instruction is a template: `{{name}}` is replaced by the param `name`
//!   (a string as it is, anything else as JSON; an unknown name is left).
//! - **History**: the card's `messages` files, after the system prompt.
//! - **User message**: a lone string param (`{"text": "…"}`) as it is,
//!   any other params as their JSON.
//! - **Tools**: each skill of each agent the card may call, a function
//!   whose parameters are the skill's `inputSchema`; without one, a
//!   prompt's is `{"text": string}`, anything else's any object
//!   ([`tool_name`] names it).
//! - **Request params**: the card's (`request_params`, a pack prompt's
//!   `parameters`, an `llm` invocation's `params`), those the Chat
//!   Completions API knows, camelCase names read as theirs.

use serde_json::{Map, Value, json};

use super::patterns::Conversation;
use crate::agent::{AgentCard, Catalog};
use crate::envelope::Envelope;

/// The request params passed to the endpoint (after renaming); others
/// are not sent.
const SENT: [&str; 14] = [
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "response_format",
    "parallel_tool_calls",
    "tool_choice",
    "logit_bias",
    "user",
    "reasoning_effort",
];

/// The first Chat Completions request of `card`'s conversation for the
/// task of `envelope`, its tools found in `catalog`, as its type
/// (`pattern`) has it: a planner's or a router's brief after the
/// trigger's system prompt, and a router's model made to call one tool.
pub fn first(
    card: &AgentCard,
    envelope: &Envelope,
    catalog: &Catalog,
    pattern: &Conversation,
) -> Map<String, Value> {
    let params = &envelope.payload.params;
    let prompt = card.prompt.clone().unwrap_or_default();
    let instruction = fill(&prompt.instruction, params);
    let system = [
        envelope.payload.meta.system_prompt.as_deref().unwrap_or(""),
        pattern.preamble.unwrap_or(""),
        instruction.as_str(),
    ]
    .iter()
    .map(|s| s.trim())
    .filter(|s| !s.is_empty())
    .collect::<Vec<_>>()
    .join("\n\n");
    let mut messages = Vec::new();
    if !system.is_empty() {
        messages.push(json!({"role": "system", "content": system}));
    }
    for m in &prompt.history {
        messages.push(json!({"role": m.role, "content": m.text}));
    }
    messages.push(json!({"role": "user", "content": user_message(params)}));
    let mut body = Map::new();
    if let Some(model) = &prompt.model {
        body.insert("model".into(), json!(model));
    }
    for (k, v) in &prompt.request_params {
        let name = snake(k);
        if SENT.contains(&name.as_str()) {
            body.insert(name, v.clone());
        }
    }
    body.insert("messages".into(), Value::Array(messages));
    let tools = tools(card, catalog);
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
        if pattern.route {
            body.insert("tool_choice".into(), json!("required"));
            body.insert("parallel_tool_calls".into(), json!(false));
        }
    }
    body
}

/// The model calls `card` allows its conversations: its
/// `request_params.max_iterations`, when given.
pub fn max_turns(card: &AgentCard) -> Option<u32> {
    let params = &card.prompt.as_ref()?.request_params;
    ["max_iterations", "maxIterations"]
        .iter()
        .find_map(|k| params.get(*k)?.as_u64())
        .map(|n| u32::try_from(n).unwrap_or(u32::MAX))
}

/// The user message of `params`: a lone string param as it is, any
/// other params as their JSON.
pub fn user_message(params: &Map<String, Value>) -> String {
    match params.values().next() {
        Some(Value::String(s)) if params.len() == 1 => s.clone(),
        _ => Value::Object(params.clone()).to_string(),
    }
}

/// `template` with each `{{name}}` (spaces allowed inside the braces)
/// replaced by the param `name`.
fn fill(template: &str, params: &Map<String, Value>) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            out.push_str(&rest[start..]);
            return out;
        };
        match params.get(after[..end].trim()) {
            Some(Value::String(s)) => out.push_str(s),
            Some(v) => out.push_str(&v.to_string()),
            None => out.push_str(&rest[start..start + 2 + end + 2]),
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    out
}

/// `maxTokens` → `max_tokens`.
fn snake(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for c in name.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    if out == "stop_sequences" {
        return "stop".into();
    }
    out
}

/// The function tools `card` offers its model: a skill of an agent it may
/// call each.
pub fn tools(card: &AgentCard, catalog: &Catalog) -> Vec<Value> {
    let mut out = Vec::new();
    for name in card.calls() {
        let Some(agent) = catalog.agents.get(name) else {
            continue;
        };
        for skill in agent.skills() {
            let description = if skill.description.is_empty() {
                agent.description.clone()
            } else {
                skill.description.clone()
            };
            let parameters = match (&skill.input_schema, &agent.prompt) {
                (Some(schema), _) => schema.clone(),
                // A prompt takes its request as one string (the user
                // message above): named, so a model need not guess it.
                (None, Some(_)) => json!({
                    "type": "object",
                    "properties": {"text": {"type": "string", "description": "the request, in words"}},
                    "required": ["text"],
                }),
                (None, None) => json!({"type": "object"}),
            };
            out.push(json!({
                "type": "function",
                "function": {
                    "name": tool_name(agent, &skill.id),
                    "description": description,
                    "parameters": parameters,
                }
            }));
        }
    }
    out
}

/// The tool of `agent`'s skill `skill`: the agent's name when it has one
/// skill, else `<agent>__<skill>`; characters a function name may not
/// hold (`[A-Za-z0-9_-]`, 64 at most) become `_`.
pub fn tool_name(agent: &AgentCard, skill: &str) -> String {
    let raw = if agent.skills().len() == 1 {
        agent.name.to_string()
    } else {
        format!("{}__{skill}", agent.name)
    };
    raw.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect()
}

/// What a tool of a card's model stands for.
#[derive(Debug, Clone, Copy)]
pub enum Tool<'c, 'n> {
    /// A skill of an agent the card may call.
    Agent(&'c AgentCard, &'c str),
    /// A tool of an MCP server the card names (`mcp__<server>__<tool>`).
    Mcp {
        /// The server.
        server: &'n str,
        /// The tool, as the model names it.
        tool: &'n str,
    },
}

/// What the tool `name` of `card` stands for, or why the model may not
/// call it.
pub fn resolve<'c, 'n>(
    card: &AgentCard,
    catalog: &'c Catalog,
    name: &'n str,
) -> Result<Tool<'c, 'n>, super::LlmError> {
    for called in card.calls() {
        let Some(agent) = catalog.agents.get(called) else {
            continue;
        };
        if let Some(skill) = agent
            .skills()
            .iter()
            .find(|s| tool_name(agent, &s.id) == name)
        {
            return Ok(Tool::Agent(agent, skill.id.as_str()));
        }
    }
    if let Some((server, tool)) = super::mcp::parse(name) {
        if card.mcp_allows(server, tool) {
            return Ok(Tool::Mcp { server, tool });
        }
        if card.mcp_servers().iter().any(|(s, _)| *s == server) {
            return Err(super::LlmError::FilteredTool {
                server: server.into(),
                tool: tool.into(),
                agent: card.name.to_string(),
            });
        }
    }
    let servers = card.mcp_servers();
    let mut may: Vec<String> = card.calls().iter().map(|a| format!("`{a}`")).collect();
    may.extend(servers.iter().map(|(s, _)| format!("the MCP server `{s}`")));
    Err(super::LlmError::UnknownTool {
        name: name.into(),
        agent: card.name.to_string(),
        may: if may.is_empty() {
            "no agent".to_string()
        } else {
            may.join(", ")
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn a_template_takes_the_params_it_names() {
        let p = params(json!({"topic": "rust", "n": 3}));
        assert_eq!(
            fill("About {{topic}}, {{ n }} points, {{missing}}.", &p),
            "About rust, 3 points, {{missing}}."
        );
        assert_eq!(fill("open {{ end", &p), "open {{ end");
    }

    #[test]
    fn a_lone_string_param_is_the_user_message() {
        assert_eq!(user_message(&params(json!({"text": "hi"}))), "hi");
        assert_eq!(
            user_message(&params(json!({"a": 1, "b": "x"}))),
            r#"{"a":1,"b":"x"}"#
        );
    }

    #[test]
    fn camel_case_params_are_read_as_the_apis() {
        assert_eq!(snake("maxTokens"), "max_tokens");
        assert_eq!(snake("stopSequences"), "stop");
        assert_eq!(snake("temperature"), "temperature");
    }
}
