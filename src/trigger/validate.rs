//! `orchestrator validate`: trigger files and agent files of every format
//! checked together, offline, with every problem named by file and line.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{Triggers, is_trigger_file};
use crate::agent::{Catalog, GitOptions, is_agent_file};
use crate::source::{Diagnostic, parse};

/// What validation found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Validation {
    /// The ids of the triggers without a problem (cards' workflows
    /// among them).
    pub triggers: Vec<String>,
    /// The names of the agents without a problem.
    pub agents: Vec<String>,
    /// Every problem, by file and line.
    pub problems: Vec<Diagnostic>,
    /// What is likely a mistake but stops nothing.
    pub warnings: Vec<Diagnostic>,
}

impl Validation {
    /// Whether nothing is wrong.
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Checks `paths`: each is a trigger file, an agent file (`agent.json`,
/// `registry.json`, a PromptPack, an AgentCard), an agent's directory, or
/// a directory of any of these. Triggers are checked against the agents
/// found, when any are. Agents in git are read only if already cloned.
pub fn validate(paths: &[PathBuf], git: &GitOptions) -> Validation {
    let mut trigger_paths = Vec::new();
    let mut agent_paths = Vec::new();
    let mut problems = Vec::new();
    for path in paths {
        if let Err(e) = sort(path, &mut trigger_paths, &mut agent_paths) {
            problems.push(e);
        }
    }
    let catalog = Catalog::load(&agent_paths, git);
    problems.extend(catalog.errors.iter().cloned());
    let triggers = Triggers::load_files(&trigger_paths, &catalog.agents).with_cards(&catalog);
    problems.extend(triggers.errors);
    Validation {
        triggers: triggers.loaded.into_keys().collect(),
        agents: catalog.agents.keys().map(|n| n.to_string()).collect(),
        problems,
        warnings: catalog.warnings,
    }
}

/// Whether `path` (a `.yaml`, `.yml` or `.json` file) holds a trigger
/// rather than an agent: it has `steps`, or an `id` without `prompts` (a
/// pack's). A file that does not parse is taken as a trigger when its
/// name could be one's.
fn holds_trigger(path: &Path) -> bool {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    if name == "agent.json" || name == "registry.json" || !is_trigger_file(path) {
        return false;
    }
    let text = std::fs::read_to_string(path).unwrap_or_default();
    match parse(
        text.strip_prefix('\u{feff}').unwrap_or(&text),
        !name.ends_with(".json"),
    ) {
        Ok(v) => v.get("steps").is_some() || (v.get("id").is_some() && v.get("prompts").is_none()),
        Err(_) => true,
    }
}

/// Puts `path` among the trigger files or the agent paths.
fn sort(
    path: &Path,
    triggers: &mut Vec<PathBuf>,
    agents: &mut Vec<PathBuf>,
) -> Result<(), Diagnostic> {
    if path.is_file() {
        if holds_trigger(path) {
            triggers.push(path.to_path_buf());
        } else if is_agent_file(path) {
            agents.push(path.to_path_buf());
        } else {
            return Err(Diagnostic::file(
                path,
                "not a trigger file (.yaml, .yml, .json) or an agent file (agent.json, registry.json, a PromptPack, an AgentCard .md or .yaml)",
            ));
        }
        return Ok(());
    }
    if !path.is_dir() {
        return Err(Diagnostic::file(path, "no such file or directory"));
    }
    if path.join("agent.json").is_file() {
        agents.push(path.to_path_buf());
        return Ok(());
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|e| Diagnostic::file(path, e.to_string()))?
        .flatten()
        .map(|e| e.path())
        .collect();
    found.sort();
    let before = (triggers.len(), agents.len());
    for p in found {
        if p.is_dir() {
            if p.join("agent.json").is_file() {
                agents.push(p);
            }
        } else if holds_trigger(&p) {
            triggers.push(p);
        } else if is_agent_file(&p) {
            agents.push(p);
        }
    }
    if (triggers.len(), agents.len()) == before {
        return Err(Diagnostic::file(
            path,
            "holds no trigger files and no agent files",
        ));
    }
    Ok(())
}
