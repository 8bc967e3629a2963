//! The agent card: `agents/<id>/agent.json`.
//!
//! Required: `name` (the agent id, a NATS subject token), `version`
//! (semver), `description`. Skills (`skills`, or legacy `capabilities` read
//! as skills) name the actions the agent accepts. `invocation` says how the
//! worker runs a task. Other A2A card fields (`displayName`, `signals`,
//! `context`, `provider`, `dependencies`, `metadata`, ...) are kept as they
//! are: a card is read tolerantly, so cards written for other tools load.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::codec::{self, DecodeError, Strictness, Validate};
use crate::envelope::{AgentName, Scope};

/// One agent's card.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentCard {
    /// The agent id.
    pub name: AgentName,
    /// Semantic version of the agent.
    pub version: String,
    /// What the agent does.
    pub description: String,
    /// A name for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// What the agent can do; each skill id is an action.
    #[serde(default)]
    pub skills: Vec<Skill>,
    /// Legacy skill declarations (`name`/`id`, `description`, `scopes`).
    #[serde(default, skip_serializing)]
    pub capabilities: Vec<Capability>,
    /// Routing keywords.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signals: Vec<String>,
    /// Who may use the agent: personal, work or shared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// How the worker runs a task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invocation: Option<Invocation>,
    /// Per-agent delivery settings, overriding the bus configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<Delivery>,
    /// Who maintains the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<Value>,
    /// MCP servers, agents and knowledge the agent needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependencies: Option<Value>,
    /// Anything else about the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

/// One skill: an action the agent accepts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
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
    /// JSON Schema of the params.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Value>,
    /// Scopes a task's token must carry to run this skill.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<Scope>,
}

/// A legacy capability, read as a skill.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Capability {
    /// Its id (`id` or, in older cards, `name`).
    #[serde(alias = "name")]
    pub id: String,
    /// What it does.
    #[serde(default)]
    pub description: String,
    /// Scopes it needs.
    #[serde(default)]
    pub scopes: Vec<Scope>,
    /// JSON Schema of its input.
    #[serde(default)]
    pub input_schema: Option<Value>,
}

/// How a worker runs one task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Invocation {
    /// A subprocess per task: the envelope (without its token) on stdin, the
    /// result JSON on stdout; exit 0 = completed, 75 = retryable failure,
    /// other = failed with the last stderr line as the message.
    Command {
        /// Program and arguments, run in the agent's directory.
        command: Vec<String>,
        /// Killed (and failed, retryably) after this long.
        #[serde(default = "default_timeout", with = "humantime_serde")]
        timeout: Duration,
        /// Variables of the worker's environment the process may see,
        /// besides the few every process gets (`PATH`, `LANG`, ...): the
        /// rest of the worker's environment (its keys, credentials) is not
        /// passed.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        env: Vec<String>,
    },
    /// A handler built into this binary (`echo`).
    Builtin {
        /// The handler's name.
        handler: String,
    },
    /// A remote A2A agent (JSON-RPC, A2A 1.0): each task is sent to it as
    /// a message and followed until it ends (`docs/a2a.md`, "A2A agents as
    /// workers").
    A2a {
        /// The remote agent's card (`https://host/.well-known/agent-card.json`).
        card: String,
        /// Credentials for the remote, read from the worker's environment:
        /// the orchestrator's own never leave.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        auth: Option<RemoteAuth>,
        /// What of the envelope the remote gets besides the params:
        /// `system_prompt` (as the message's `metadata.systemPrompt`),
        /// `context` (our correlation id as its `contextId`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        forward: Vec<Forward>,
        /// How often the remote task is read while it runs.
        #[serde(default = "default_poll", with = "humantime_serde")]
        poll: Duration,
        /// How long one request to the remote may take.
        #[serde(default = "default_timeout", with = "humantime_serde")]
        timeout: Duration,
    },
}

/// How a worker authenticates to a remote A2A agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteAuth {
    /// The variable of the worker's environment holding the credential.
    pub env: String,
    /// The header it goes in (default `Authorization`).
    #[serde(default = "default_auth_header")]
    pub header: String,
    /// The scheme before it (default `Bearer`; empty: none, as for an API
    /// key header).
    #[serde(default = "default_auth_scheme")]
    pub scheme: String,
}

/// What of a task's envelope a remote A2A agent is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Forward {
    /// The trigger's system prompt, as `metadata.systemPrompt`.
    SystemPrompt,
    /// The correlation id, as the message's `contextId`.
    Context,
}

fn default_timeout() -> Duration {
    Duration::from_secs(30)
}

fn default_poll() -> Duration {
    Duration::from_secs(1)
}

fn default_auth_header() -> String {
    "Authorization".into()
}

fn default_auth_scheme() -> String {
    "Bearer".into()
}

/// Per-agent delivery settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Delivery {
    /// How long a delivery may go without an ack or progress.
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub ack_wait: Option<Duration>,
    /// Deliveries before a message is dead-lettered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_deliver: Option<i64>,
    /// Redelivery delays after missed acks (`["1s", "5s"]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<Vec<humantime_serde::Serde<Duration>>>,
    /// Tasks one worker runs at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<usize>,
}

/// Why a card could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum CardError {
    /// The file could not be read.
    #[error("{path}: {message}")]
    Read {
        /// The card's path.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The card is malformed or breaks a rule.
    #[error("{path}: {error}")]
    Invalid {
        /// The card's path.
        path: PathBuf,
        /// What is wrong, naming the field (and line for syntax errors).
        error: DecodeError,
    },
}

impl Validate for AgentCard {
    fn validate(&self) -> Result<(), DecodeError> {
        if !is_semver(&self.version) {
            return Err(DecodeError::invalid(
                "version",
                format!(
                    "`{}` is not a semantic version (MAJOR.MINOR.PATCH)",
                    self.version
                ),
            ));
        }
        if self.description.trim().is_empty() {
            return Err(DecodeError::invalid("description", "must not be empty"));
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, skill) in self.skills().iter().enumerate() {
            if skill.id.is_empty() || skill.id.chars().any(char::is_control) {
                return Err(DecodeError::invalid(
                    format!("skills[{i}].id"),
                    "must be a non-empty name",
                ));
            }
            if !seen.insert(skill.id.clone()) {
                return Err(DecodeError::invalid(
                    format!("skills[{i}].id"),
                    format!("`{}` is declared twice", skill.id),
                ));
            }
        }
        if let Some(Invocation::Command { command, .. }) = &self.invocation
            && command.is_empty()
        {
            return Err(DecodeError::invalid(
                "invocation.command",
                "must name a program",
            ));
        }
        Ok(())
    }
}

/// The handlers built into this binary that `invocation.type: builtin`
/// may name.
pub const BUILTIN_HANDLERS: [&str; 1] = ["echo"];

impl AgentCard {
    /// How `orchestrator worker` runs this agent's tasks: the card's
    /// `invocation`, when it is one this binary can run. The worker refuses
    /// to start otherwise, and `orchestrator validate` reports the same
    /// problem. (A worker written in another language reads only `name`,
    /// `skills` and `delivery`; the orchestrator itself never needs it.)
    pub fn runnable(&self) -> Result<&Invocation, DecodeError> {
        match &self.invocation {
            None => Err(DecodeError::invalid(
                "invocation",
                "missing: the card does not say how to run the agent (`orchestrator worker` needs a `command`, `builtin` or `a2a` invocation)",
            )),
            Some(Invocation::Builtin { handler })
                if !BUILTIN_HANDLERS.contains(&handler.as_str()) =>
            {
                Err(DecodeError::invalid(
                    "invocation.handler",
                    format!(
                        "`{handler}` is not a built-in handler (known: {})",
                        BUILTIN_HANDLERS.join(", ")
                    ),
                ))
            }
            Some(Invocation::A2a { card, .. })
                if !(card.starts_with("http://") || card.starts_with("https://")) =>
            {
                Err(DecodeError::invalid(
                    "invocation.card",
                    format!("`{card}` is not an http(s) URL of the remote agent's card"),
                ))
            }
            Some(invocation) => Ok(invocation),
        }
    }
}

fn is_semver(v: &str) -> bool {
    let core = v.split(['-', '+']).next().unwrap_or_default();
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

impl AgentCard {
    /// Loads the card at `path`: an agent directory (its `agent.json`) or the
    /// JSON file itself. In a directory, the card's `name` must be the
    /// directory's name.
    pub fn load(path: &Path) -> Result<(AgentCard, PathBuf), CardError> {
        let (file, dir) = if path.is_dir() {
            (path.join("agent.json"), path.to_path_buf())
        } else {
            let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
            (path.to_path_buf(), dir)
        };
        let bytes = std::fs::read(&file).map_err(|e| CardError::Read {
            path: file.clone(),
            message: e.to_string(),
        })?;
        let card: AgentCard = codec::decode(&bytes, Strictness::Tolerant, codec::DEFAULT_MAX_BYTES)
            .map_err(|error| CardError::Invalid {
                path: file.clone(),
                error,
            })?;
        if path.is_dir()
            && let Some(dir_name) = dir.file_name().and_then(|n| n.to_str())
            && dir_name != card.name.as_str()
        {
            return Err(CardError::Invalid {
                path: file,
                error: DecodeError::invalid(
                    "name",
                    format!(
                        "`{}` differs from the directory name `{dir_name}`",
                        card.name
                    ),
                ),
            });
        }
        Ok((card, dir))
    }

    /// Loads every `*/agent.json` under `dir`, sorted by name.
    pub fn load_all(dir: &Path) -> Result<Vec<(AgentCard, PathBuf)>, CardError> {
        let entries = std::fs::read_dir(dir).map_err(|e| CardError::Read {
            path: dir.to_path_buf(),
            message: e.to_string(),
        })?;
        let mut cards = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            if path.join("agent.json").is_file() {
                cards.push(AgentCard::load(&path)?);
            }
        }
        cards.sort_by(|a, b| a.0.name.cmp(&b.0.name));
        Ok(cards)
    }

    /// The skills, with legacy capabilities converted.
    pub fn skills(&self) -> Vec<Skill> {
        let legacy = self.capabilities.iter().map(|c| Skill {
            id: c.id.clone(),
            name: None,
            description: c.description.clone(),
            tags: Vec::new(),
            triggers: Vec::new(),
            examples: Vec::new(),
            input_modes: Vec::new(),
            output_modes: Vec::new(),
            input_schema: c.input_schema.clone(),
            scopes: c.scopes.clone(),
        });
        self.skills.iter().cloned().chain(legacy).collect()
    }

    /// The skill whose id is `action`, if the agent has one.
    pub fn skill(&self, action: &str) -> Option<Skill> {
        self.skills().into_iter().find(|s| s.id == action)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(json: &str) -> Result<AgentCard, DecodeError> {
        codec::decode(json.as_bytes(), Strictness::Tolerant, 1 << 20)
    }

    #[test]
    fn a_full_card_loads_with_legacy_capabilities_as_skills() {
        let c = card(
            r#"{"name":"knowledge-agent","version":"1.2.0","description":"KB search",
                "displayName":"Knowledge","role":"librarian",
                "skills":[{"id":"search:kb","description":"search","scopes":["Files.Read"]}],
                "capabilities":[{"name":"summarize","description":"sum"}],
                "invocation":{"type":"command","command":["python3","agent.py"],"timeout":"10s"},
                "delivery":{"ackWait":"5s","maxDeliver":4,"backoff":["1s","5s"]}}"#,
        )
        .unwrap();
        let ids: Vec<String> = c.skills().into_iter().map(|s| s.id).collect();
        assert_eq!(ids, ["search:kb", "summarize"]);
        assert_eq!(c.skill("search:kb").unwrap().scopes.len(), 1);
        assert!(c.skill("send:mail").is_none());
        assert_eq!(
            c.invocation,
            Some(Invocation::Command {
                command: vec!["python3".into(), "agent.py".into()],
                timeout: Duration::from_secs(10),
                env: Vec::new(),
            })
        );
        let delivery = c.delivery.unwrap();
        assert_eq!(delivery.ack_wait, Some(Duration::from_secs(5)));
        let backoff: Vec<Duration> = delivery.backoff.unwrap().into_iter().map(|d| *d).collect();
        assert_eq!(backoff, [Duration::from_secs(1), Duration::from_secs(5)]);
    }

    #[test]
    fn required_fields_and_rules_are_named() {
        let err = card(r#"{"version":"1.0.0","description":"d"}"#).unwrap_err();
        assert_eq!(err.field(), Some("name"));
        let err = card(r#"{"name":"Bad Name","version":"1.0.0","description":"d"}"#).unwrap_err();
        assert_eq!(err.field(), Some("name"));
        let err = card(r#"{"name":"a","version":"1.0","description":"d"}"#).unwrap_err();
        assert_eq!(err.field(), Some("version"));
        let err = card(r#"{"name":"a","version":"1.0.0","description":" "}"#).unwrap_err();
        assert_eq!(err.field(), Some("description"));
        let err = card(
            r#"{"name":"a","version":"1.0.0","description":"d","skills":[{"id":"x"},{"id":"x"}]}"#,
        )
        .unwrap_err();
        assert_eq!(err.field(), Some("skills[1].id"));
        let err = card(
            r#"{"name":"a","version":"1.0.0","description":"d","invocation":{"type":"http"}}"#,
        )
        .unwrap_err();
        assert_eq!(err.field(), Some("invocation.type"));
    }

    #[test]
    fn semver_accepts_prereleases() {
        assert!(is_semver("1.0.0-beta.1+build"));
        assert!(!is_semver("1.0"));
        assert!(!is_semver("v1.0.0"));
    }
}
