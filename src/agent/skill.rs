//! Skills: what an agent can do, each the action of a task. Legacy
//! `capabilities` are read as skills.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::envelope::Scope;

/// One skill: an action the agent accepts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Skill {
    /// The action name (`search:kb`).
    pub id: String,
    /// A name for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What the skill does.
    #[serde(default)]
    pub description: String,
    /// Free tags.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Phrases that route to this skill.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub triggers: Vec<String>,
    /// Example requests (A2A's `examples`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<String>,
    /// Accepted input media types.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub input_modes: Vec<String>,
    /// Produced output media types.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output_modes: Vec<String>,
    /// JSON Schema of the params: checked before a task is stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Value>,
    /// JSON Schema of the result: checked before a task completes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Scopes a task's token must carry to run this skill.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<Scope>,
}

impl Skill {
    /// A skill with only an id and a description.
    pub fn new(id: impl Into<String>, description: impl Into<String>) -> Skill {
        Skill {
            id: id.into(),
            name: None,
            description: description.into(),
            tags: Vec::new(),
            triggers: Vec::new(),
            examples: Vec::new(),
            input_modes: Vec::new(),
            output_modes: Vec::new(),
            input_schema: None,
            output_schema: None,
            scopes: Vec::new(),
        }
    }
}

/// A legacy capability (the conventions' older form), read as a skill.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct Capability {
    /// Its id (`id` or, as the conventions write it, `name`).
    #[serde(alias = "name")]
    id: String,
    /// What it does.
    #[serde(default)]
    description: String,
    /// Scopes it needs.
    #[serde(default)]
    scopes: Vec<Scope>,
    /// JSON Schema of its input.
    #[serde(default)]
    input_schema: Option<Value>,
    /// JSON Schema of its output.
    #[serde(default)]
    output_schema: Option<Value>,
}

impl From<Capability> for Skill {
    fn from(c: Capability) -> Skill {
        Skill {
            scopes: c.scopes,
            input_schema: c.input_schema,
            output_schema: c.output_schema,
            ..Skill::new(c.id, c.description)
        }
    }
}
