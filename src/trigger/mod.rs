//! Triggers (`triggers/*.yaml`, JSON also accepted): named workflows with a
//! default system prompt, an input schema and steps (docs/triggers.md).
//!
//! A file is read strictly: an unknown field, a wrong type or a step that
//! is not one of the four kinds is reported with the file, the line and
//! the field. After parsing, [`Trigger::problems`] finds what only the
//! whole trigger shows (duplicate step ids, templates naming steps that
//! have not run, a bad cron expression), and [`Trigger::problems_with`]
//! checks it against the agents' cards.

mod cards;
mod check;
mod parse;
mod schedule;
mod step;
pub(crate) mod template;
mod validate;

pub use check::{Placed, Problem};
pub use step::{
    Approval, BadStepId, FailurePolicy, Merge, OnFailure, Parallel, Route, Step, StepError,
    StepKind, StepProblem, TaskStep,
};
pub use template::{TemplateError, condition, paths, render, render_text};
pub use validate::{Validation, validate};

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

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
    fn read(path: &Path) -> Result<(Trigger, String), Vec<Diagnostic>> {
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

/// The triggers loaded from a directory, and what could not be loaded.
#[derive(Debug, Clone, Default)]
pub struct Triggers {
    /// The usable triggers, by id.
    pub loaded: BTreeMap<String, std::sync::Arc<Trigger>>,
    /// Every problem found, by file and line; those files are skipped.
    pub errors: Vec<Diagnostic>,
    /// The directory they were loaded from, watched while the
    /// orchestrator runs.
    pub dir: Option<PathBuf>,
    /// When the directory was read.
    pub loaded_at: Option<crate::envelope::Timestamp>,
    /// The directory's trigger files as they were when read: a watcher
    /// that starts later compares it to see what it missed.
    pub stamp: crate::source::Stamp,
}

/// The stamp of the trigger files of `dir` (its own files, as loading
/// reads them).
pub fn stamp(dir: &Path) -> crate::source::Stamp {
    crate::source::stamp(&[dir.to_path_buf()], is_trigger_file, 1)
}

impl Triggers {
    /// Loads every trigger file of `dir` and checks each against `cards`
    /// (when there are cards): a trigger with a problem is skipped and its
    /// problems kept.
    pub fn load(
        dir: &Path,
        cards: &BTreeMap<crate::envelope::AgentName, crate::agent::AgentCard>,
    ) -> Triggers {
        // Taken first: a file written while the others are read makes the
        // stamp older than what was read, so a watcher reads it again.
        let stamp = stamp(dir);
        let mut triggers = match trigger_files(dir) {
            Ok(paths) => Triggers::load_files(&paths, cards),
            Err(e) => Triggers {
                errors: vec![e],
                ..Triggers::default()
            },
        };
        triggers.dir = Some(dir.to_path_buf());
        triggers.loaded_at = Some(crate::envelope::Timestamp::now());
        triggers.stamp = stamp;
        triggers
    }

    /// Loads `paths` in order and checks each trigger on its own and
    /// against `cards` (when there are cards); every problem of a file is
    /// kept, and a file with any is skipped. A second file with an id
    /// already seen is a problem.
    pub fn load_files(
        paths: &[PathBuf],
        cards: &BTreeMap<crate::envelope::AgentName, crate::agent::AgentCard>,
    ) -> Triggers {
        let mut loaded = BTreeMap::new();
        let mut errors = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for path in paths {
            let (trigger, text) = match Trigger::read(path) {
                Ok(read) => read,
                Err(e) => {
                    errors.extend(e);
                    continue;
                }
            };
            let mut problems = trigger.problems();
            if !cards.is_empty() {
                problems.extend(trigger.problems_with(cards));
            }
            if !seen.insert(trigger.id.clone()) {
                problems.push(Problem {
                    path: "id".into(),
                    message: format!("`{}` is the id of another trigger", trigger.id),
                });
            }
            if problems.is_empty() {
                loaded.insert(trigger.id.clone(), std::sync::Arc::new(trigger));
            } else {
                errors.extend(locate(path, &text, problems));
            }
        }
        Triggers {
            loaded,
            errors,
            ..Triggers::default()
        }
    }
}

/// The trigger files of `dir`, sorted.
pub fn trigger_files(dir: &Path) -> Result<Vec<PathBuf>, Diagnostic> {
    let entries = std::fs::read_dir(dir).map_err(|e| Diagnostic {
        file: dir.to_path_buf(),
        line: None,
        field: None,
        message: e.to_string(),
    })?;
    let mut paths: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| is_trigger_file(p))
        .collect();
    paths.sort();
    Ok(paths)
}

/// Whether `path` names a trigger file: by its extension, and not hidden
/// (editors save through hidden files).
pub fn is_trigger_file(path: &Path) -> bool {
    let hidden = path
        .file_name()
        .and_then(|n| n.to_str())
        .is_none_or(|n| n.starts_with('.'));
    !hidden
        && path
            .extension()
            .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
}

/// Turns problems found after parsing into errors with lines, in the
/// order of the file.
pub fn locate(file: &Path, text: &str, problems: Vec<Problem>) -> Vec<Diagnostic> {
    let mut errors: Vec<Diagnostic> = problems
        .into_iter()
        .map(|p| Diagnostic {
            file: file.to_path_buf(),
            line: crate::source::line_of(text, &p.path),
            field: Some(p.path),
            message: p.message,
        })
        .collect();
    errors.sort_by_key(|e| e.line);
    errors
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
    fn a_directory_loads_good_files_and_reports_broken_ones_with_lines() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.yaml", GOOD);
        write(
            dir.path(),
            "b.yaml",
            "id: two\nsteps:\n  - id: a\n    agent: x\n    action: y\n  - id: b\n    agent: x\n    action: y\n    agnet: x\n",
        );
        write(dir.path(), "c.yml", "id: [unclosed\n");
        write(
            dir.path(),
            "d.json",
            r#"{"id": "d", "steps": [{"id": "s", "agent": "x", "action": "y"}], "colour": 1}"#,
        );
        write(
            dir.path(),
            "e.yaml",
            &GOOD.replace("id: search", "id: Search"),
        );
        write(dir.path(), "notes.txt", "ignored");
        let Triggers {
            loaded: triggers,
            errors,
            ..
        } = Triggers::load(dir.path(), &BTreeMap::new());
        assert_eq!(triggers.keys().collect::<Vec<_>>(), ["summarize"]);
        let messages: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
        assert_eq!(messages.len(), 4, "{messages:?}");
        assert_eq!(errors[0].line, Some(9), "{}", messages[0]);
        assert!(
            messages[0].ends_with("b.yaml:9: steps[1].agnet: unknown field"),
            "{}",
            messages[0]
        );
        assert!(
            messages[1].contains("c.yml:") && errors[1].line.is_some(),
            "{}",
            messages[1]
        );
        assert!(
            messages[2].contains("d.json") && messages[2].contains("colour"),
            "{}",
            messages[2]
        );
        assert!(
            messages[3].contains("e.yaml:5") && messages[3].contains("Search"),
            "{}",
            messages[3]
        );
    }

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
