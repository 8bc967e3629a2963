//! `registry.json` (version 3.0 of the A2A conventions): where agents
//! live (`local` paths and `git` repositories), the skill index, and the
//! routing rules.
//!
//! Each agent's own card stays the owner of what it says: the registry's
//! copies (description, signals, context, skills) are compared with the
//! card and a difference is a warning. The skill index is built from the
//! cards; a skill claimed by two agents is an error naming both, and an
//! index written in the file must agree with the built one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::card::{AgentCard, Context};
use super::git::{self, GitOptions};
use super::{Loaded, joined, load_path};
use crate::envelope::AgentName;
use crate::source::{Diagnostic, FieldProblem, nearest, parse, read_strict};

/// The registry as written.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RegistryFile {
    version: String,
    #[serde(default, rename = "orchestrator")]
    _orchestrator: Option<String>,
    #[serde(default)]
    agents: BTreeMap<String, Entry>,
    #[serde(default)]
    skill_index: Option<BTreeMap<String, String>>,
    #[serde(default)]
    routing: Option<Routing>,
}

/// One agent of the registry.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Entry {
    location: Location,
    #[serde(default)]
    context: Option<Context>,
    #[serde(default)]
    display_name: Option<String>,
    #[serde(default, rename = "role")]
    _role: Option<String>,
    #[serde(default, rename = "personality")]
    _personality: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    signals: Option<Vec<String>>,
    #[serde(default)]
    skills: Option<Vec<Value>>,
    #[serde(default, rename = "mcps")]
    _mcps: Option<Vec<Value>>,
}

/// Where an agent of the registry lives.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
enum Location {
    /// A path, relative to the registry's directory.
    Local { path: String },
    /// A repository, cloned into `localPath` (relative to the registry's
    /// directory) or the configured folder.
    Git {
        repo: String,
        #[serde(default)]
        branch: Option<String>,
        #[serde(default, rename = "ref")]
        reference: Option<String>,
        #[serde(default, rename = "localPath")]
        local_path: Option<String>,
    },
}

/// How the router treats requests, beyond skills and signals.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Routing {
    /// The agent a request goes to when nothing matches.
    #[serde(default)]
    pub default_agent: Option<AgentName>,
    /// Phrases that name the agent to use (`talk to knowledge-agent`).
    #[serde(default)]
    pub switch_commands: Vec<String>,
    /// Phrases that join requests for several agents (`and also`, `then`).
    #[serde(default)]
    pub multi_agent_triggers: Vec<String>,
}

/// Whether `path` is a registry file by its name.
pub(super) fn is_registry(path: &Path) -> bool {
    path.file_name().is_some_and(|n| n == "registry.json")
}

/// Reads the registry in `file` (text `text`) and the agents it locates.
pub(super) fn read(file: &Path, text: &str, git: &GitOptions) -> Loaded {
    let mut out = Loaded::default();
    let at = |p: FieldProblem| Diagnostic::located(file, text, 0, p);
    let value = match parse(text.strip_prefix('\u{feff}').unwrap_or(text), false) {
        Ok(v) => v,
        Err(p) => {
            out.errors.push(at(p));
            return out;
        }
    };
    let registry: RegistryFile = match read_strict(value) {
        Ok(r) => r,
        Err(problems) => {
            out.errors.extend(problems.into_iter().map(at));
            return out;
        }
    };
    if registry.version != "3.0" {
        out.errors.push(at(FieldProblem::new(
            "version",
            format!(
                "`{}`: this orchestrator reads registry version 3.0",
                registry.version
            ),
        )));
        return out;
    }
    let base = file.parent().unwrap_or(Path::new("."));
    // Which agent claims each skill, as the cards say.
    let mut claimed: BTreeMap<String, AgentName> = BTreeMap::new();
    for (key, entry) in &registry.agents {
        let field = format!("agents.{key}");
        let name: AgentName = match key.parse() {
            Ok(n) => n,
            Err(e) => {
                out.errors.push(at(FieldProblem::new(field, e)));
                continue;
            }
        };
        let (path, commit) = match place(&entry.location, &name, base, git) {
            Ok(placed) => placed,
            Err(e) => {
                out.errors
                    .push(at(FieldProblem::new(format!("{field}.location"), e)));
                continue;
            }
        };
        let mut there = load_path(&path, git);
        out.warnings.append(&mut there.warnings);
        if !there.errors.is_empty() {
            out.errors.append(&mut there.errors);
            continue;
        }
        let Some(i) = there.agents.iter().position(|a| a.name == name) else {
            let held: Vec<String> = there
                .agents
                .iter()
                .map(|a| format!("`{}`", a.name))
                .collect();
            out.errors.push(at(FieldProblem::new(
                format!("{field}.location"),
                format!(
                    "{} holds no agent `{name}` ({})",
                    path.display(),
                    if held.is_empty() {
                        "it holds none".to_string()
                    } else {
                        format!("it holds {}", held.join(", "))
                    }
                ),
            )));
            continue;
        };
        let mut card = there.agents.swap_remove(i);
        if let Some(origin) = &mut card.origin {
            origin.commit = commit;
            origin.registry = Some(file.to_path_buf());
        }
        let (mut warnings, mut errors) = (Vec::new(), Vec::new());
        compare(entry, &card, &field, &mut warnings, &mut errors);
        out.warnings.extend(warnings.into_iter().map(at));
        out.errors.extend(errors.into_iter().map(at));
        let mut clash = false;
        for skill in card.skills() {
            if let Some(other) = claimed.get(&skill.id) {
                out.errors.push(at(FieldProblem::new(
                    field.clone(),
                    format!("skill `{}` is claimed by both `{other}` and `{name}`; `{name}` is left out", skill.id),
                )));
                clash = true;
            }
        }
        if clash {
            continue;
        }
        for skill in card.skills() {
            claimed.insert(skill.id.clone(), name.clone());
        }
        out.referenced.push(path);
        out.agents.push(card);
    }
    if let Some(index) = &registry.skill_index {
        let (mut warnings, mut errors) = (Vec::new(), Vec::new());
        check_index(index, &claimed, &mut warnings, &mut errors);
        out.errors.extend(errors.into_iter().map(at));
        out.warnings.extend(warnings.into_iter().map(at));
    }
    out.routing = registry.routing.map(|r| (file.to_path_buf(), r));
    out
}

/// Where `location` puts agent `name`'s files (a git repository checked
/// out as `git` allows), and the commit when it is one.
fn place(
    location: &Location,
    name: &AgentName,
    base: &Path,
    git: &GitOptions,
) -> Result<(PathBuf, Option<String>), git::GitError> {
    match location {
        Location::Local { path } => Ok((joined(base, path), None)),
        Location::Git {
            repo,
            branch,
            reference,
            local_path,
        } => {
            let dest = match local_path {
                Some(p) => joined(base, p),
                None => git.dir.join(name.as_str()),
            };
            let url = git::url_of(repo, base);
            let reference = reference.as_deref().or(branch.as_deref());
            let commit = git::checkout(&url, reference, &dest, git)?;
            Ok((dest, Some(commit)))
        }
    }
}

/// The registry's copies of what `card` says (description, display name,
/// context, signals, skills) against the card, their owner: a difference
/// is a warning, a skill written as neither an id nor an object with one
/// an error.
fn compare(
    entry: &Entry,
    card: &AgentCard,
    field: &str,
    warnings: &mut Vec<FieldProblem>,
    errors: &mut Vec<FieldProblem>,
) {
    let differs = |what: &str, says: String, card_says: String| {
        FieldProblem::new(
            format!("{field}.{what}"),
            format!("the registry says {says}, the agent's card {card_says}: the card's is used"),
        )
    };
    if let Some(d) = &entry.description
        && d != &card.description
    {
        warnings.push(differs(
            "description",
            format!("{d:?}"),
            format!("{:?}", card.description),
        ));
    }
    if let Some(d) = &entry.display_name
        && Some(d) != card.display_name.as_ref()
    {
        warnings.push(differs(
            "displayName",
            format!("{d:?}"),
            format!("{:?}", card.display_name),
        ));
    }
    if entry.context.is_some() && entry.context != card.context {
        warnings.push(differs(
            "context",
            format!("{:?}", entry.context),
            format!("{:?}", card.context),
        ));
    }
    if let Some(s) = &entry.signals
        && s != &card.signals
    {
        warnings.push(differs(
            "signals",
            format!("{s:?}"),
            format!("{:?}", card.signals),
        ));
    }
    for (i, skill) in entry.skills.iter().flatten().enumerate() {
        let id = skill
            .as_str()
            .or_else(|| skill.get("id").and_then(Value::as_str));
        match id {
            Some(id) if card.skill(id).is_some() => {}
            Some(id) => warnings.push(FieldProblem::new(
                format!("{field}.skills[{i}]"),
                format!("the agent's card has no skill `{id}`"),
            )),
            None => errors.push(FieldProblem::new(
                format!("{field}.skills[{i}]"),
                "a skill is its id, or an object with an `id`",
            )),
        }
    }
}

/// A skill index written in the file against the one built from the
/// cards (`claimed`): an entry naming another agent or no skill is an
/// error, a skill it lacks a warning.
fn check_index(
    index: &BTreeMap<String, String>,
    claimed: &BTreeMap<String, AgentName>,
    warnings: &mut Vec<FieldProblem>,
    errors: &mut Vec<FieldProblem>,
) {
    for (skill, agent) in index {
        let field = format!("skillIndex.{skill}");
        match claimed.get(skill) {
            Some(owner) if owner.as_str() == agent => {}
            Some(owner) => errors.push(FieldProblem::new(
                field,
                format!("names `{agent}`, but the skill is `{owner}`'s"),
            )),
            None => {
                let mut m = format!("no agent of the registry has the skill `{skill}`");
                if let Some(near) = nearest(skill, claimed.keys().map(String::as_str)) {
                    m.push_str(&format!("; did you mean `{near}`?"));
                }
                errors.push(FieldProblem::new(field, m));
            }
        }
    }
    for (skill, owner) in claimed {
        if !index.contains_key(skill) {
            warnings.push(FieldProblem::new(
                "skillIndex",
                format!("lacks `{skill}` (of `{owner}`): the index is built from the cards, so it is used all the same"),
            ));
        }
    }
}
