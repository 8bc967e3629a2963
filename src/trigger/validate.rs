//! `orchestrator validate`: trigger files and agent cards checked
//! together, offline, with every problem named by file and line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{TriggerError, Triggers, is_trigger_file, line_of, trigger_files};
use crate::agent::{AgentCard, CardError};
use crate::codec::DecodeError;
use crate::envelope::AgentName;

/// What validation found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Validation {
    /// The ids of the triggers without a problem.
    pub triggers: Vec<String>,
    /// The names of the agent cards without a problem.
    pub agents: Vec<String>,
    /// Every problem, by file and line.
    pub problems: Vec<TriggerError>,
}

impl Validation {
    /// Whether nothing is wrong.
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Checks `paths`: each is a trigger file, an agent card (`agent.json`),
/// an agent's directory, a directory of agents (`*/agent.json`) or a
/// directory of trigger files. Triggers are checked against the cards
/// found, when any are.
pub fn validate(paths: &[PathBuf]) -> Validation {
    let mut trigger_paths = Vec::new();
    let mut card_paths = Vec::new();
    let mut problems = Vec::new();
    for path in paths {
        if let Err(e) = sort(path, &mut trigger_paths, &mut card_paths) {
            problems.push(e);
        }
    }
    let mut cards: BTreeMap<AgentName, AgentCard> = BTreeMap::new();
    for path in &card_paths {
        match AgentCard::load(path) {
            Ok((card, _)) if cards.contains_key(&card.name) => problems.push(TriggerError {
                file: card_file(path),
                line: None,
                field: Some("name".into()),
                message: format!("`{}` is the name of another agent", card.name),
            }),
            Ok((card, _)) => {
                // What `orchestrator worker` would refuse is a problem here
                // too; triggers are still checked against the card.
                if let Err(error) = card.runnable() {
                    problems.push(card_problem(CardError::Invalid {
                        path: card_file(path),
                        error,
                    }));
                }
                cards.insert(card.name.clone(), card);
            }
            Err(e) => problems.push(card_problem(e)),
        }
    }
    let triggers = Triggers::load_files(&trigger_paths, &cards);
    problems.extend(triggers.errors);
    Validation {
        triggers: triggers.loaded.into_keys().collect(),
        agents: cards.into_keys().map(|n| n.to_string()).collect(),
        problems,
    }
}

/// Puts `path` among the trigger files or the cards.
fn sort(
    path: &Path,
    triggers: &mut Vec<PathBuf>,
    cards: &mut Vec<PathBuf>,
) -> Result<(), TriggerError> {
    let unusable = |message: &str| TriggerError {
        file: path.to_path_buf(),
        line: None,
        field: None,
        message: message.into(),
    };
    if path.is_file() {
        if path.file_name().is_some_and(|n| n == "agent.json") {
            cards.push(path.to_path_buf());
        } else if is_trigger_file(path) {
            triggers.push(path.to_path_buf());
        } else {
            return Err(unusable(
                "not a trigger file (.yaml, .yml, .json) or an agent card (agent.json)",
            ));
        }
        return Ok(());
    }
    if !path.is_dir() {
        return Err(unusable("no such file or directory"));
    }
    if path.join("agent.json").is_file() {
        cards.push(path.to_path_buf());
        return Ok(());
    }
    let mut agents: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|e| unusable(&e.to_string()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("agent.json").is_file())
        .collect();
    agents.sort();
    let files = trigger_files(path)?;
    if agents.is_empty() && files.is_empty() {
        return Err(unusable(
            "holds no trigger files and no agents (*/agent.json)",
        ));
    }
    cards.extend(agents);
    triggers.extend(files);
    Ok(())
}

/// The card file of a card path (a directory or the file).
fn card_file(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join("agent.json")
    } else {
        path.to_path_buf()
    }
}

/// A card that does not load, as a problem with its line when it can be
/// found.
fn card_problem(e: CardError) -> TriggerError {
    match e {
        CardError::Read { path, message } => TriggerError {
            file: path,
            line: None,
            field: None,
            message,
        },
        CardError::Invalid { path, error } => {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let field = error.field().map(str::to_string);
            let (line, message) = match &error {
                DecodeError::Syntax { line, message, .. } => {
                    (Some(*line), format!("malformed JSON: {message}"))
                }
                DecodeError::UnknownField { .. } => (None, "unknown field".into()),
                DecodeError::MissingField { .. } => (None, "missing field".into()),
                DecodeError::InvalidField { message, .. } => (None, message.clone()),
                DecodeError::TooLarge { .. } | DecodeError::TooDeep { .. } => {
                    (None, error.to_string())
                }
            };
            TriggerError {
                line: line.or_else(|| field.as_deref().and_then(|f| line_of(&text, f))),
                file: path,
                field,
                message,
            }
        }
    }
}
