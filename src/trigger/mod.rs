//! Triggers (`triggers/*.yaml`, JSON also accepted): named entry points with
//! a default system prompt, turned into tasks on demand.
//!
//! Built: single-step, on-demand triggers. A trigger with more than one
//! step, or another `run_mode`, is refused with a message saying so.

mod template;

pub use template::{TemplateError, paths, render};

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::agent::AgentCard;
use crate::codec::{self, DecodeError, Strictness, Validate};
use crate::envelope::{Action, AgentName, Priority, Scope};

/// One trigger.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trigger {
    /// Its id, used in URLs and the CLI.
    pub id: String,
    /// A name for people.
    #[serde(default)]
    pub name: Option<String>,
    /// What it does.
    #[serde(default)]
    pub description: Option<String>,
    /// The system prompt put in each task's `payload.meta`.
    #[serde(default)]
    pub default_system_prompt: Option<String>,
    /// Scopes its tasks need.
    #[serde(default)]
    pub required_scopes: Vec<Scope>,
    /// How it is started; only `on_demand` is built.
    #[serde(default)]
    pub run_mode: RunMode,
    /// Defaults for its tasks.
    #[serde(default)]
    pub defaults: Defaults,
    /// A JSON Schema for the input; `required` and property `type`s are checked.
    #[serde(default)]
    pub input_schema: Option<Value>,
    /// The steps; exactly one for now.
    pub steps: Vec<Step>,
}

/// How a trigger is started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunMode {
    /// By an API call or `orchestrator trigger`.
    #[default]
    OnDemand,
    /// On a schedule (not built).
    Schedule,
    /// On a bus event (not built).
    Event,
}

/// Task defaults of a trigger.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Defaults {
    /// Attempt budget.
    #[serde(default)]
    pub max_attempts: Option<NonZeroU32>,
    /// Queue priority.
    #[serde(default)]
    pub priority: Option<Priority>,
    /// Kept for the workflow engine; not applied yet.
    #[serde(default)]
    pub timeout: Option<String>,
}

/// One step: a task for an agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// The step's id.
    pub id: String,
    /// The agent that runs it.
    pub agent: AgentName,
    /// The skill.
    pub action: Action,
    /// Parameters, with `{{ input.* }}` placeholders.
    #[serde(default)]
    pub params: Map<String, Value>,
    /// Overrides the trigger's system prompt.
    #[serde(default)]
    pub system_prompt: Option<String>,
}

impl Validate for Trigger {
    fn validate(&self) -> Result<(), DecodeError> {
        let id_ok = !self.id.is_empty()
            && self.id.len() <= 64
            && self
                .id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        if !id_ok {
            return Err(DecodeError::invalid(
                "id",
                "must be 1 to 64 of a-z, 0-9, `-` and `_`",
            ));
        }
        if self.run_mode != RunMode::OnDemand {
            return Err(DecodeError::invalid(
                "run_mode",
                "only `on_demand` triggers are built so far",
            ));
        }
        if self.steps.len() != 1 {
            return Err(DecodeError::invalid(
                "steps",
                format!(
                    "has {} steps; multi-step workflows are not built yet, so a trigger has exactly one",
                    self.steps.len()
                ),
            ));
        }
        for path in paths(&self.steps[0].params) {
            if !path.starts_with("input.") && path != "input" {
                return Err(DecodeError::invalid(
                    "steps[0].params",
                    format!("`{{{{ {path} }}}}`: a single-step trigger can only use `input.*`"),
                ));
            }
        }
        Ok(())
    }
}

/// Why a trigger file could not be used.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct TriggerError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong (with the field, and the line for YAML syntax).
    pub message: String,
}

impl Trigger {
    /// Reads one trigger file (`.yaml`, `.yml` or `.json`).
    pub fn load(path: &Path) -> Result<Trigger, TriggerError> {
        let error = |message: String| TriggerError {
            path: path.to_path_buf(),
            message,
        };
        let bytes = std::fs::read(path).map_err(|e| error(e.to_string()))?;
        let is_json = path.extension().is_some_and(|e| e == "json");
        let json = if is_json {
            bytes
        } else {
            let value: Value =
                serde_norway::from_slice(&bytes).map_err(|e| error(format!("YAML: {e}")))?;
            serde_json::to_vec(&value).map_err(|e| error(e.to_string()))?
        };
        codec::decode(&json, Strictness::Strict, codec::DEFAULT_MAX_BYTES)
            .map_err(|e| error(e.to_string()))
    }

    /// Reads every trigger file in `dir`. A broken file is reported and
    /// skipped; the others load.
    pub fn load_dir(dir: &Path) -> (BTreeMap<String, Trigger>, Vec<TriggerError>) {
        let mut triggers = BTreeMap::new();
        let mut errors = Vec::new();
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) => {
                errors.push(TriggerError {
                    path: dir.to_path_buf(),
                    message: e.to_string(),
                });
                return (triggers, errors);
            }
        };
        let mut paths: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.extension()
                    .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
            })
            .collect();
        paths.sort();
        for path in paths {
            match Trigger::load(&path) {
                Ok(t) if triggers.contains_key(&t.id) => errors.push(TriggerError {
                    path,
                    message: format!("id `{}` is used by another trigger", t.id),
                }),
                Ok(t) => {
                    triggers.insert(t.id.clone(), t);
                }
                Err(e) => errors.push(e),
            }
        }
        (triggers, errors)
    }

    /// Checks the trigger against the known agents: the step's agent exists
    /// and has the action.
    pub fn check_agents(&self, cards: &BTreeMap<AgentName, AgentCard>) -> Result<(), String> {
        let step = &self.steps[0];
        let card = cards
            .get(&step.agent)
            .ok_or_else(|| format!("steps[0].agent: no agent `{}` is known", step.agent))?;
        if card.skill(step.action.as_str()).is_none() {
            return Err(format!(
                "steps[0].action: agent `{}` has no skill `{}`",
                step.agent, step.action
            ));
        }
        Ok(())
    }

    /// Checks `input` against `input_schema`'s `required` list and property
    /// `type`s, naming the first field that fails.
    pub fn check_input(&self, input: &Value) -> Result<(), DecodeError> {
        let Some(schema) = &self.input_schema else {
            return Ok(());
        };
        if schema.get("type").and_then(Value::as_str) == Some("object") && !input.is_object() {
            return Err(DecodeError::invalid("input", "must be an object"));
        }
        for name in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if input.get(name).is_none() {
                return Err(DecodeError::MissingField {
                    field: format!("input.{name}"),
                });
            }
        }
        let properties = schema.get("properties").and_then(Value::as_object);
        for (name, spec) in properties.into_iter().flatten() {
            let (Some(value), Some(want)) =
                (input.get(name), spec.get("type").and_then(Value::as_str))
            else {
                continue;
            };
            let ok = match want {
                "string" => value.is_string(),
                "number" => value.is_number(),
                "integer" => value.is_i64() || value.is_u64(),
                "boolean" => value.is_boolean(),
                "object" => value.is_object(),
                "array" => value.is_array(),
                "null" => value.is_null(),
                _ => true,
            };
            if !ok {
                return Err(DecodeError::invalid(
                    format!("input.{name}"),
                    format!("must be of type {want}"),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    const GOOD: &str = "id: summarize\ndefault_system_prompt: Be brief.\ninput_schema: { type: object, required: [query], properties: { query: { type: string } } }\nsteps:\n  - id: search\n    agent: knowledge-agent\n    action: search:kb\n    params: { query: \"{{ input.query }}\" }\n";

    #[test]
    fn a_directory_loads_good_files_and_reports_broken_ones() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.yaml", GOOD);
        write(
            dir.path(),
            "b.yaml",
            "id: two\nsteps:\n  - {id: a, agent: x, action: y}\n  - {id: b, agent: x, action: y}\n",
        );
        write(dir.path(), "c.yml", "id: [unclosed\n");
        write(
            dir.path(),
            "d.json",
            r#"{"id": "d", "steps": [{"id": "s", "agent": "x", "action": "y"}], "colour": 1}"#,
        );
        write(dir.path(), "notes.txt", "ignored");
        let (triggers, errors) = Trigger::load_dir(dir.path());
        assert_eq!(triggers.keys().collect::<Vec<_>>(), ["summarize"]);
        let messages: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
        assert_eq!(messages.len(), 3, "{messages:?}");
        assert!(
            messages[0].contains("b.yaml") && messages[0].contains("multi-step"),
            "{}",
            messages[0]
        );
        assert!(
            messages[1].contains("c.yml") && messages[1].contains("line"),
            "{}",
            messages[1]
        );
        assert!(
            messages[2].contains("d.json") && messages[2].contains("colour"),
            "{}",
            messages[2]
        );
    }

    #[test]
    fn input_is_checked_against_the_schema() {
        let dir = tempfile::tempdir().unwrap();
        let t = Trigger::load(&write(dir.path(), "a.yaml", GOOD)).unwrap();
        assert!(t.check_input(&json!({"query": "x"})).is_ok());
        assert_eq!(
            t.check_input(&json!({})).unwrap_err().field(),
            Some("input.query")
        );
        assert_eq!(
            t.check_input(&json!({"query": 1})).unwrap_err().field(),
            Some("input.query")
        );
        assert!(t.check_input(&json!([1])).is_err());
    }

    #[test]
    fn steps_may_only_use_the_input() {
        let dir = tempfile::tempdir().unwrap();
        let text = GOOD.replace("input.query", "steps.other.result");
        let err = Trigger::load(&write(dir.path(), "a.yaml", &text)).unwrap_err();
        assert!(err.message.contains("steps.other.result"), "{err}");
    }
}
