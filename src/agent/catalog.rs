//! The catalog: every agent (and every workflow a card declares) read
//! from the paths given, whatever their formats, with every problem at
//! its file and line.
//!
//! A directory may mix them: `*/agent.json` folders (or an `agent.json`
//! of its own), `registry.json`, PromptPacks (`*.yaml`, `*.yml`,
//! `*.json` with `prompts`), and AgentCards (`*.md` with frontmatter,
//! other `*.yaml`). Each file is read on its own; a file with an error is
//! left out whole (and, on a reload, the version of it read last time
//! keeps serving). Names are unique across all of them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::card::AgentCard;
use super::git::GitOptions;
use super::registry::Routing;
use super::topology::Edge;
use super::workflow::CardWorkflow;
use super::{fast_agent, json, pack, registry};
use crate::envelope::{AgentName, Timestamp};
use crate::source::{Diagnostic, parse};

/// What one file gave.
#[derive(Debug, Clone, Default)]
pub(super) struct Loaded {
    /// Its agents.
    pub(super) agents: Vec<AgentCard>,
    /// Its cards' workflows.
    pub(super) workflows: Vec<CardWorkflow>,
    /// Its problems: with any, the file is left out.
    pub(super) errors: Vec<Diagnostic>,
    /// What is likely a mistake, but does not stop it.
    pub(super) warnings: Vec<Diagnostic>,
    /// A pack's entry agent.
    pub(super) entry: Option<AgentName>,
    /// A card that says it is the default.
    pub(super) default: Option<AgentName>,
    /// A registry's routing, and the registry.
    pub(super) routing: Option<(PathBuf, Routing)>,
    /// Files it read besides itself (history files, located agents): not
    /// agent files of their own.
    pub(super) referenced: Vec<PathBuf>,
}

impl Loaded {
    fn absorb(&mut self, mut other: Loaded) {
        self.agents.append(&mut other.agents);
        self.workflows.append(&mut other.workflows);
        self.errors.append(&mut other.errors);
        self.warnings.append(&mut other.warnings);
        self.entry = self.entry.take().or(other.entry);
        self.default = self.default.take().or(other.default);
        self.routing = self.routing.take().or(other.routing);
        self.referenced.append(&mut other.referenced);
    }
}

/// The agent id a name written in a card or pack stands for: lower case,
/// anything but `a-z`, `0-9`, `_` and `-` made a `-`
/// (`NY-Project-Manager` is `ny-project-manager`).
pub(super) fn agent_id(written: &str) -> Result<AgentName, NotAnId> {
    let id: String = written
        .trim()
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    id.parse().map_err(|source| NotAnId {
        written: written.to_string(),
        source,
    })
}

/// A name that cannot be made an agent's id.
#[derive(Debug, thiserror::Error)]
#[error("`{written}` cannot be an agent's id: {source}")]
pub(super) struct NotAnId {
    /// The name as written.
    written: String,
    /// Why its id form is refused.
    source: crate::envelope::ParseError,
}

/// The agent files `path` holds: itself when a file; in a directory, its
/// own `agent.json`, or else its folders' `agent.json`, its
/// `registry.json` and its other files that may be packs or cards.
fn files_of(path: &Path) -> Result<Vec<PathBuf>, Diagnostic> {
    if path.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    if !path.is_dir() {
        return Err(Diagnostic::file(path, "no such file or directory"));
    }
    if path.join("agent.json").is_file() {
        return Ok(vec![path.join("agent.json")]);
    }
    let entries = std::fs::read_dir(path).map_err(|e| Diagnostic::file(path, e.to_string()))?;
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter_map(|p| {
            if p.is_dir() {
                let card = p.join("agent.json");
                return card.is_file().then_some(card);
            }
            is_agent_file(&p).then_some(p)
        })
        .collect();
    files.sort();
    Ok(files)
}

/// Whether `path` may be an agent file, by its name: not hidden (editors
/// save through hidden files), not a README, of an extension read here.
pub fn is_agent_file(path: &Path) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    if name.starts_with('.') || name.eq_ignore_ascii_case("readme.md") {
        return false;
    }
    name.ends_with(".json") || fast_agent::is_card_file(path)
}

/// Reads one agent file.
fn load_file(file: &Path, git: &GitOptions) -> Loaded {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) => {
            return Loaded {
                errors: vec![Diagnostic::file(file, e.to_string())],
                ..Loaded::default()
            };
        }
    };
    let name = file
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    if name == "agent.json" {
        return json::read(file, &text);
    }
    if registry::is_registry(file) {
        return registry::read(file, &text, git);
    }
    let markdown = name.ends_with(".md") || name.ends_with(".markdown");
    if markdown {
        if !fast_agent::has_frontmatter(&text) {
            return Loaded {
                warnings: vec![Diagnostic::file(
                    file,
                    "no YAML frontmatter: not an AgentCard (left out)",
                )],
                ..Loaded::default()
            };
        }
        return fast_agent::read(file, &text);
    }
    let yaml = !name.ends_with(".json");
    let body = text.strip_prefix('\u{feff}').unwrap_or(&text);
    match parse(body, yaml) {
        Ok(value) if pack::is_pack(&value) => pack::read(file, body, value),
        Ok(_) if yaml => fast_agent::read(file, &text),
        Ok(_) => Loaded {
            warnings: vec![Diagnostic::file(
                file,
                "neither an agent.json, a registry.json nor a PromptPack (left out)",
            )],
            ..Loaded::default()
        },
        Err(p) => Loaded {
            errors: vec![Diagnostic::located(file, body, 0, p)],
            ..Loaded::default()
        },
    }
}

/// Everything `path` (a file or a directory) gives, one file after the
/// other, names not yet checked against each other.
pub(super) fn load_path(path: &Path, git: &GitOptions) -> Loaded {
    let mut all = Loaded::default();
    match files_of(path) {
        Ok(files) => {
            for f in files {
                all.absorb(load_file(&f, git));
            }
        }
        Err(e) => all.errors.push(e),
    }
    all
}

/// Every agent and card workflow read from some paths, and what was wrong.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    /// The agents, by id.
    pub agents: BTreeMap<AgentName, AgentCard>,
    /// The workflows cards declare, by id.
    pub workflows: BTreeMap<AgentName, CardWorkflow>,
    /// The registry's routing rules (none without a registry).
    pub routing: Routing,
    /// The agent requests go to when they name none: a pack's entry, or
    /// the card that says it is the default.
    pub entry: Option<AgentName>,
    /// The problems: each file with one is left out.
    pub errors: Vec<Diagnostic>,
    /// What is likely a mistake, but left nothing out.
    pub warnings: Vec<Diagnostic>,
    /// The paths read.
    pub paths: Vec<PathBuf>,
    /// When they were read.
    pub loaded_at: Option<Timestamp>,
    /// The agent files as they were when read (for a watcher that starts
    /// later, and to tell a change event that changed nothing).
    pub stamp: crate::source::Stamp,
    /// Each file's last reading without an error.
    good: BTreeMap<PathBuf, Loaded>,
}

impl Catalog {
    /// A catalog of cards made in code (no files).
    pub fn of(cards: impl IntoIterator<Item = AgentCard>) -> Catalog {
        Catalog {
            agents: cards.into_iter().map(|c| (c.name.clone(), c)).collect(),
            ..Catalog::default()
        }
    }

    /// The one agent `path` declares, or the one named `name` among
    /// several (a pack's); every problem of its files as one error.
    /// Agents in git are read as already cloned.
    pub fn one(path: &Path, name: Option<&str>) -> Result<AgentCard, super::AgentError> {
        use super::AgentError;
        let catalog = Catalog::load(&[path.to_path_buf()], &GitOptions::default());
        if !catalog.errors.is_empty() {
            return Err(AgentError::Files(catalog.errors));
        }
        if let Some(n) = name {
            return catalog
                .agents
                .into_values()
                .find(|c| c.name.as_str() == n)
                .ok_or_else(|| AgentError::NoSuchAgent {
                    path: path.to_path_buf(),
                    name: n.to_string(),
                });
        }
        let names: Vec<String> = catalog.agents.keys().map(ToString::to_string).collect();
        let mut all = catalog.agents.into_values();
        match (all.next(), all.next()) {
            (Some(one), None) => Ok(one),
            (None, _) => Err(AgentError::NoAgent {
                path: path.to_path_buf(),
            }),
            (Some(_), Some(_)) => Err(AgentError::Several {
                path: path.to_path_buf(),
                names,
            }),
        }
    }

    /// Reads every agent file under `paths`.
    pub fn load(paths: &[PathBuf], git: &GitOptions) -> Catalog {
        Catalog::read(paths, git, &BTreeMap::new())
    }

    /// Reads the same paths again: a file that now has an error is left
    /// as it was last read without one (said in a warning).
    pub fn reload(&self, git: &GitOptions) -> Catalog {
        Catalog::read(&self.paths, git, &self.good)
    }

    fn read(paths: &[PathBuf], git: &GitOptions, good: &BTreeMap<PathBuf, Loaded>) -> Catalog {
        let mut catalog = Catalog {
            paths: paths.to_vec(),
            loaded_at: Some(Timestamp::now()),
            // Taken first: a file written while the others are read makes
            // the stamp older than what was read, so a watcher reads again.
            stamp: stamp(paths),
            ..Catalog::default()
        };
        let mut per_file: Vec<(PathBuf, Loaded)> = Vec::new();
        for path in paths {
            match files_of(path) {
                Ok(files) => per_file.extend(files.into_iter().map(|f| {
                    let loaded = load_file(&f, git);
                    (f, loaded)
                })),
                Err(e) => catalog.errors.push(e),
            }
        }
        // Files another file read (history, located agents) are not read
        // on their own.
        let referenced: BTreeSet<PathBuf> = per_file
            .iter()
            .flat_map(|(_, l)| l.referenced.iter())
            .flat_map(|p| [canonical(p), canonical(&p.join("agent.json"))])
            .collect();
        per_file.retain(|(f, _)| !referenced.contains(&canonical(f)));
        let mut used = Loaded::default();
        for (file, mut loaded) in per_file {
            if loaded.errors.is_empty() {
                catalog.good.insert(file, loaded.clone());
                used.absorb(loaded);
                continue;
            }
            catalog.errors.append(&mut loaded.errors);
            catalog.warnings.append(&mut loaded.warnings);
            if let Some(last) = good.get(&file) {
                catalog.warnings.push(Diagnostic::file(
                    &file,
                    "the version read before this error keeps serving until the file is mended",
                ));
                let mut last = last.clone();
                last.warnings.clear();
                catalog.good.insert(file, last.clone());
                used.absorb(last);
            }
        }
        catalog.warnings.append(&mut used.warnings);
        catalog.errors.append(&mut used.errors);
        catalog.settle(used);
        let order = |d: &Diagnostic| (d.file.clone(), d.line);
        catalog.errors.sort_by_key(order);
        catalog.warnings.sort_by_key(order);
        catalog
    }

    /// Puts what the files gave together: names unique, references known.
    fn settle(&mut self, used: Loaded) {
        let file_of = |a: &AgentCard| {
            a.origin
                .as_ref()
                .map(|o| o.file.clone())
                .unwrap_or_default()
        };
        for agent in used.agents {
            if let Some(first) = self.agents.get(&agent.name) {
                self.errors.push(Diagnostic::file(
                    &file_of(&agent),
                    format!(
                        "agent `{}` is also declared in {}: this one is left out",
                        agent.name,
                        file_of(first).display()
                    ),
                ));
                continue;
            }
            self.agents.insert(agent.name.clone(), agent);
        }
        for w in used.workflows {
            let clash = self
                .agents
                .get(&w.name)
                .map(file_of)
                .or_else(|| self.workflows.get(&w.name).map(|x| x.origin.file.clone()));
            if let Some(other) = clash {
                self.errors.push(Diagnostic::file(
                    &w.origin.file,
                    format!(
                        "`{}` is also declared in {}: this one is left out",
                        w.name,
                        other.display()
                    ),
                ));
                continue;
            }
            let unknown: Vec<String> = w
                .pattern
                .members()
                .into_iter()
                .filter(|m| !self.agents.contains_key(*m))
                .map(|m| format!("`{m}`"))
                .collect();
            if !unknown.is_empty() {
                self.errors.push(Diagnostic::file(
                    &w.origin.file,
                    format!(
                        "{} `{}` names agents that are not declared: {}",
                        w.pattern.kind(),
                        w.name,
                        unknown.join(", ")
                    ),
                ));
                continue;
            }
            self.workflows.insert(w.name.clone(), w);
        }
        for agent in self.agents.values() {
            for called in agent.calls() {
                if !self.agents.contains_key(called) && !self.workflows.contains_key(called) {
                    self.warnings.push(Diagnostic::file(
                        &file_of(agent),
                        format!(
                            "agent `{}` may call `{called}`, which is not declared",
                            agent.name
                        ),
                    ));
                }
            }
        }
        if let Some((file, routing)) = used.routing {
            match &routing.default_agent {
                Some(d) if !self.agents.contains_key(d) => self.errors.push(Diagnostic {
                    line: std::fs::read_to_string(&file)
                        .ok()
                        .and_then(|t| crate::source::line_of(&t, "routing.defaultAgent")),
                    file,
                    field: Some("routing.defaultAgent".into()),
                    message: format!("`{d}` is not a declared agent"),
                }),
                _ => self.routing = routing,
            }
        }
        self.entry = used.entry.or(used.default);
    }

    /// Whether no agent file changed since these were read.
    pub fn unchanged(&self) -> bool {
        stamp(&self.paths) == self.stamp
    }

    /// The agents listings show (not those only usable as tools), with
    /// `context` when given.
    pub fn listed(&self) -> impl Iterator<Item = &AgentCard> {
        self.agents.values().filter(|a| !a.tool_only)
    }

    /// The edges of the topology the agents declare: who may call whom,
    /// and which agents each card workflow runs.
    pub fn edges(&self) -> Vec<Edge> {
        let mut edges = Vec::new();
        for agent in self.agents.values() {
            for called in agent.calls() {
                edges.push(Edge {
                    from: agent.name.to_string(),
                    to: called.to_string(),
                    kind: "calls".into(),
                });
            }
        }
        for w in self.workflows.values() {
            for m in w.pattern.members() {
                edges.push(Edge {
                    from: w.name.to_string(),
                    to: m.to_string(),
                    kind: w.pattern.kind().into(),
                });
            }
        }
        edges
    }
}

/// `base` joined with `path`, without its `.` parts
/// (`conventions/./agents` is `conventions/agents`).
pub(crate) fn joined(base: &Path, path: &str) -> PathBuf {
    base.join(path)
        .components()
        .filter(|c| !matches!(c, std::path::Component::CurDir))
        .collect()
}

/// The stamp of the agent files under `paths`: an agent's folder is one
/// level down, its knowledge and history files one or two more.
fn stamp(paths: &[PathBuf]) -> crate::source::Stamp {
    crate::source::stamp(paths, is_agent_file, 3)
}

fn canonical(p: &Path) -> PathBuf {
    p.canonicalize().unwrap_or_else(|_| p.to_path_buf())
}
