//! One trigger as its file defines it: its id, prompt, input schema,
//! scopes, defaults, schedule or event source, and steps; read from a
//! file, hashed for the runs that start from it, and checked on its own.

use std::num::NonZeroU32;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{Step, locate, parse};
use crate::codec::DecodeError;
use crate::envelope::{Priority, ResponseMode, Scope};
use crate::source::Diagnostic;

/// One trigger.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trigger {
    /// Its id, used in URLs and the CLI.
    pub id: String,
    /// A name for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Example requests, for the A2A card's skill.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<String>,
    /// The system prompt put in each task's `payload.meta`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_system_prompt: Option<String>,
    /// The scopes its runs need: whoever starts a run must hold them, and
    /// every step's skill scopes must be among them.
    #[serde(default)]
    pub required_scopes: Vec<Scope>,
    /// How runs start.
    #[serde(default)]
    pub run_mode: RunMode,
    /// When runs start (`run_mode: schedule`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<Schedule>,
    /// The subject whose messages start runs (`run_mode: event`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<EventSource>,
    /// Defaults for its steps' tasks.
    #[serde(default)]
    pub defaults: Defaults,
    /// How long a run may take, approvals included; past it the run fails
    /// and its running steps are canceled.
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub deadline: Option<Duration>,
    /// A JSON Schema for the input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Value>,
    /// The steps, run in order.
    pub steps: Vec<Step>,
}

/// How a trigger's runs start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunMode {
    /// By an API call or `orchestrator trigger`.
    #[default]
    OnDemand,
    /// On the trigger's `schedule` (API calls may start runs too).
    Schedule,
    /// One run per message on the trigger's `event.subject` (API calls
    /// may start runs too).
    Event,
}

/// When a scheduled trigger fires.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    /// A cron expression (5 fields, or 6 with seconds), in UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// A fixed interval (`10m`).
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub every: Option<Duration>,
    /// What happens to times missed while the orchestrator was down.
    #[serde(default)]
    pub catch_up: CatchUp,
    /// What happens when a time comes while the last run is still going.
    #[serde(default)]
    pub overlap: Overlap,
    /// The input of each run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
}

/// Missed times after downtime.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CatchUp {
    /// Missed times are skipped; the next one on the schedule runs.
    #[default]
    Skip,
    /// One run makes up for every missed time.
    RunOnce,
}

/// A time that comes while the schedule's last run is unfinished.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// No run for that time.
    #[default]
    Skip,
    /// The run starts when the unfinished one ends (at most one waits).
    Queue,
    /// The run starts anyway.
    Allow,
}

/// The subject an event trigger listens on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventSource {
    /// A NATS subject (wildcards allowed); each message's JSON body is
    /// the run's input.
    pub subject: String,
}

/// Task defaults of a trigger; a step may override each.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Defaults {
    /// Attempt budget of each task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<NonZeroU32>,
    /// Queue priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<Priority>,
    /// How long a step's task may take, attempts included.
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub timeout: Option<Duration>,
    /// The tasks' response mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_mode: Option<ResponseMode>,
}

impl Trigger {
    /// Reads one trigger file (`.yaml`, `.yml` or `.json`) and checks it on
    /// its own; every problem found is returned.
    pub fn load(path: &Path) -> Result<Trigger, Vec<Diagnostic>> {
        let (trigger, text) = Trigger::read(path)?;
        let problems = trigger.problems();
        if problems.is_empty() {
            Ok(trigger)
        } else {
            Err(locate(path, &text, problems))
        }
    }

    /// Parses one trigger file, with its text (for the lines of problems
    /// found later); nothing beyond the format is checked.
    pub(super) fn read(path: &Path) -> Result<(Trigger, String), Vec<Diagnostic>> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            vec![Diagnostic {
                file: path.to_path_buf(),
                line: None,
                field: None,
                message: e.to_string(),
            }]
        })?;
        match parse::parse(&text) {
            Ok(trigger) => Ok((trigger, text)),
            Err(problems) => Err(problems
                .into_iter()
                .map(|p| Diagnostic {
                    file: path.to_path_buf(),
                    line: p.line,
                    field: p.field,
                    message: p.message,
                })
                .collect()),
        }
    }

    /// A digest of the definition: a run records the one it started with.
    pub fn hash(&self) -> String {
        let bytes = serde_json::to_vec(self).unwrap_or_default();
        hex::encode(Sha256::digest(&bytes))
    }

    /// Every step, branches and compensations included, depth first.
    pub fn all_steps(&self) -> Vec<&Step> {
        self.steps.iter().flat_map(Step::walk).collect()
    }

    /// Checks `input` against `input_schema`, naming the first field that
    /// fails.
    pub fn check_input(&self, input: &Value) -> Result<(), DecodeError> {
        let Some(schema) = &self.input_schema else {
            return Ok(());
        };
        let validator = jsonschema::validator_for(schema)
            .map_err(|e| DecodeError::invalid("input_schema", e.to_string()))?;
        crate::codec::check_schema(
            &validator,
            input,
            "input",
            &format!("trigger `{}`'s input_schema", self.id),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trigger::testing::{GOOD, write};
    use serde_json::json;

    #[test]
    fn input_is_checked_against_the_schema() {
        let dir = tempfile::tempdir().unwrap();
        let t = Trigger::load(&write(dir.path(), "a.yaml", GOOD)).unwrap();
        assert!(t.check_input(&json!({"query": "x"})).is_ok());
        assert!(t.check_input(&json!({})).is_err());
        assert_eq!(
            t.check_input(&json!({"query": 1})).unwrap_err().field(),
            Some("input.query")
        );
        assert!(t.check_input(&json!([1])).is_err());
    }

    #[test]
    fn a_definition_survives_a_round_trip_and_its_hash_follows_it() {
        let dir = tempfile::tempdir().unwrap();
        let t = Trigger::load(&write(dir.path(), "a.yaml", GOOD)).unwrap();
        let back: Trigger = serde_json::from_value(serde_json::to_value(&t).unwrap()).unwrap();
        assert_eq!(back, t);
        assert_eq!(back.hash(), t.hash());
        let other = Trigger::load(&write(
            dir.path(),
            "b.yaml",
            &GOOD.replace("Be brief", "Be long"),
        ))
        .unwrap();
        assert_ne!(other.hash(), t.hash());
    }
}
