//! The agent card: the one model of an agent that the router, the
//! capability checks, the task tokens, the A2A card and the listings
//! read, whatever file it came from. Its JSON form is `agent.json` (the
//! A2A conventions), read strictly: an unknown field is an error.
//!
//! Required: `name` (the agent id, a NATS subject token), `version`
//! (semver), `description`. Skills (`skills`, and legacy `capabilities`,
//! read as skills) name the actions the agent accepts; `invocation` says
//! how a worker runs a task. The rest describes the agent for people and
//! tools: `displayName`, `role`, `personality`, `signals` (routing
//! words), `context` (who may use it), `provider`, `dependencies` (the
//! MCP servers, agents and knowledge it needs; its `agents` are the ones
//! it may call), `observability`, `coordination`, `metadata`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::invocation::{Delivery, Invocation};
use super::prompt::Prompt;
use super::skill::{Capability, Skill};
use crate::codec::{DecodeError, Validate};
use crate::envelope::AgentName;

/// How a prompt with no invocation runs: as an `llm` agent with the
/// worker's settings.
static PROMPT_INVOCATION: std::sync::LazyLock<Invocation> =
    std::sync::LazyLock::new(|| Invocation::Llm {
        system_prompt: None,
        model: None,
        base_url: None,
        api_key_env: None,
        timeout: None,
        params: Map::new(),
    });

/// One agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", from = "CardFile")]
pub struct AgentCard {
    /// The agent id.
    pub name: AgentName,
    /// Semantic version of the agent.
    pub version: String,
    /// What the agent does.
    pub description: String,
    /// A name for people.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// Its role (`Sous Chef`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// A brief description of its personality.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub personality: Option<String>,
    /// Routing keywords.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub signals: Vec<String>,
    /// What the agent can do; each skill id is an action. Legacy
    /// `capabilities` are among them.
    pub skills: Vec<Skill>,
    /// Who may use the agent: listings can be filtered by it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<Context>,
    /// How a worker runs a task.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invocation: Option<Invocation>,
    /// Per-agent delivery settings, overriding the bus configuration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivery: Option<Delivery>,
    /// Who maintains the agent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<Provider>,
    /// MCP servers, agents and knowledge the agent needs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dependencies: Option<Dependencies>,
    /// Its telemetry settings, as written (the conventions give no shape).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observability: Option<Map<String, Value>>,
    /// Its rules for working with other agents, as written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coordination: Option<Map<String, Value>>,
    /// Anything else about the agent (author, dates, tags).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    /// When the agent is a prompt for a model: its instruction and what
    /// the model may use (AgentCards, PromptPack members). Not read from
    /// `agent.json`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<Prompt>,
    /// Usable only as another agent's tool: left out of listings and the
    /// A2A card (an AgentCard's `tool_only`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub tool_only: bool,
    /// Where it was read from; none for a card made in code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<Origin>,
}

/// Who may use an agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Context {
    /// One user only.
    Personal,
    /// A team or organization.
    Work,
    /// Anyone.
    Shared,
}

impl std::str::FromStr for Context {
    type Err = crate::envelope::ParseError;
    fn from_str(s: &str) -> Result<Context, Self::Err> {
        match s {
            "personal" => Ok(Context::Personal),
            "work" => Ok(Context::Work),
            "shared" => Ok(Context::Shared),
            _ => Err(crate::envelope::ParseError::NotOneOf {
                value: s.into(),
                what: "a context",
                names: "personal, work or shared".into(),
            }),
        }
    }
}

/// Who maintains an agent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provider {
    /// A person or team.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// How to reach them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contact: Option<String>,
    /// An organization (A2A's provider).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub organization: Option<String>,
    /// Its web site.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// What an agent needs besides itself.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dependencies {
    /// MCP servers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcps: Vec<McpDependency>,
    /// The agents it may call: its edges in the topology.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agents: Vec<AgentName>,
    /// Knowledge files it reads, relative to its directory.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub knowledge: Vec<String>,
}

/// An MCP server an agent uses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpDependency {
    /// Its name, as the MCP configuration (`.mcp.json`) names it.
    pub name: String,
    /// Whether the agent cannot work without it.
    #[serde(default)]
    pub required: bool,
    /// The agent's capabilities that need it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capabilities: Vec<String>,
}

/// Where a card was read from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    /// The format.
    pub format: Format,
    /// The file.
    pub file: PathBuf,
    /// The commit it was read at, for an agent cloned from git.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// The registry that located it, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry: Option<PathBuf>,
}

impl Origin {
    /// Read from `file`, in `format` (not from git, nor by a registry).
    pub fn new(format: Format, file: &std::path::Path) -> Origin {
        Origin {
            format,
            file: file.to_path_buf(),
            commit: None,
            registry: None,
        }
    }
}

/// The formats agents are read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// `agent.json` (the A2A conventions).
    AgentJson,
    /// A member of a PromptPack's `agents` (RFC 0007).
    PromptPack,
    /// A Markdown AgentCard (frontmatter and an instruction body).
    AgentCardMarkdown,
    /// A YAML AgentCard.
    AgentCardYaml,
}

/// `agent.json` as written.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CardFile {
    name: AgentName,
    version: String,
    description: String,
    #[serde(default)]
    display_name: Option<String>,
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    personality: Option<String>,
    #[serde(default)]
    signals: Vec<String>,
    #[serde(default)]
    skills: Vec<Skill>,
    #[serde(default)]
    capabilities: Vec<Capability>,
    #[serde(default)]
    context: Option<Context>,
    #[serde(default)]
    invocation: Option<Invocation>,
    #[serde(default)]
    delivery: Option<Delivery>,
    #[serde(default)]
    provider: Option<Provider>,
    #[serde(default)]
    dependencies: Option<Dependencies>,
    #[serde(default)]
    observability: Option<Map<String, Value>>,
    #[serde(default)]
    coordination: Option<Map<String, Value>>,
    #[serde(default)]
    metadata: Option<Map<String, Value>>,
}

impl From<CardFile> for AgentCard {
    fn from(f: CardFile) -> AgentCard {
        AgentCard {
            name: f.name,
            version: f.version,
            description: f.description,
            display_name: f.display_name,
            role: f.role,
            personality: f.personality,
            signals: f.signals,
            skills: f
                .skills
                .into_iter()
                .chain(f.capabilities.into_iter().map(Skill::from))
                .collect(),
            context: f.context,
            invocation: f.invocation,
            delivery: f.delivery,
            provider: f.provider,
            dependencies: f.dependencies,
            observability: f.observability,
            coordination: f.coordination,
            metadata: f.metadata,
            prompt: None,
            tool_only: false,
            origin: None,
        }
    }
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
        for (i, skill) in self.skills.iter().enumerate() {
            if skill.id.is_empty() || skill.id.chars().any(char::is_control) {
                return Err(DecodeError::invalid(
                    format!("skills[{i}].id"),
                    "must be a non-empty name",
                ));
            }
            if !seen.insert(skill.id.as_str()) {
                return Err(DecodeError::invalid(
                    format!("skills[{i}].id"),
                    format!("`{}` is declared twice", skill.id),
                ));
            }
            for (which, schema) in [
                ("inputSchema", &skill.input_schema),
                ("outputSchema", &skill.output_schema),
            ] {
                if let Some(schema) = schema
                    && let Err(e) = jsonschema::validator_for(schema)
                {
                    return Err(DecodeError::invalid(
                        format!("skills[{i}].{which}"),
                        format!("not a valid JSON Schema: {e}"),
                    ));
                }
            }
        }
        Ok(())
    }
}

impl AgentCard {
    /// An agent with a name, a version and a description, and nothing
    /// else yet.
    pub fn new(
        name: AgentName,
        version: impl Into<String>,
        description: impl Into<String>,
    ) -> AgentCard {
        AgentCard {
            name,
            version: version.into(),
            description: description.into(),
            display_name: None,
            role: None,
            personality: None,
            signals: Vec::new(),
            skills: Vec::new(),
            context: None,
            invocation: None,
            delivery: None,
            provider: None,
            dependencies: None,
            observability: None,
            coordination: None,
            metadata: None,
            prompt: None,
            tool_only: false,
            origin: None,
        }
    }

    /// How `orchestrator worker` runs this agent's tasks: the card's
    /// `invocation`, when it is one this binary can run. The worker refuses
    /// to start otherwise. (A worker written in another language reads
    /// only `name`, `skills` and `delivery`; the orchestrator itself never
    /// needs it.)
    pub fn runnable(&self) -> Result<&Invocation, DecodeError> {
        match &self.invocation {
            Some(invocation) => invocation.runnable().map(|()| invocation),
            None if self.model_driven() => Ok(&PROMPT_INVOCATION),
            None if self.held().is_some() => Err(DecodeError::invalid(
                "type",
                "this type runs in the orchestrator: its steps are tasks of the agents it names, so it needs no worker of its own (docs/llm.md)",
            )),
            None => Err(DecodeError::invalid(
                "invocation",
                "missing: the card does not say how to run the agent (`orchestrator worker` needs a `command`, `builtin`, `a2a`, `http` or `llm` invocation; a worker of your own needs none)",
            )),
        }
    }

    /// How the orchestrator holds this agent's tasks (`docs/llm.md`):
    /// an `llm` invocation, or a prompt (an AgentCard, a PromptPack
    /// member) with no invocation, by its type; `None` for an agent whose
    /// tasks are published to its workers.
    pub fn held(&self) -> Option<super::kind::Kind> {
        use super::kind::Kind;
        let of = |p: &super::Prompt| Kind::of(p.pattern.as_deref(), &p.attributes).ok();
        match (&self.invocation, &self.prompt) {
            (Some(Invocation::Llm { .. }), p) => Some(
                p.as_ref()
                    .and_then(of)
                    .unwrap_or(Kind::Conversation(Default::default())),
            ),
            (None, Some(p)) => of(p),
            _ => None,
        }
    }

    /// Whether the agent is a prompt for a model whose conversations the
    /// orchestrator holds, each model call a task for its worker.
    pub fn model_driven(&self) -> bool {
        self.held().is_some_and(|k| k.calls_a_model())
    }

    /// The skills, legacy capabilities among them.
    pub fn skills(&self) -> &[Skill] {
        &self.skills
    }

    /// The skill whose id is `action`, if the agent has one.
    pub fn skill(&self, action: &str) -> Option<&Skill> {
        self.skills.iter().find(|s| s.id == action)
    }

    /// The agents this one may call (`dependencies.agents`).
    pub fn calls(&self) -> &[AgentName] {
        self.dependencies
            .as_ref()
            .map(|d| d.agents.as_slice())
            .unwrap_or_default()
    }

    /// The MCP servers whose tools the agent's model is offered
    /// (`docs/llm.md`, "MCP tools"), each with whether the agent cannot
    /// work without it: an AgentCard's `servers` (all needed, as
    /// fast-agent has them), then `dependencies.mcps` (needed when
    /// `required`).
    pub fn mcp_servers(&self) -> Vec<(&str, bool)> {
        let mut out: Vec<(&str, bool)> = Vec::new();
        if let Some(p) = &self.prompt {
            out.extend(p.servers.iter().map(|s| (s.as_str(), true)));
        }
        for m in self.dependencies.iter().flat_map(|d| &d.mcps) {
            if !out.iter().any(|(s, _)| *s == m.name) {
                out.push((m.name.as_str(), m.required));
            }
        }
        out
    }

    /// Whether the agent's model may call `server`'s tool `tool` (as the
    /// model names it): the server is one of [`Self::mcp_servers`] and
    /// the card's `tools` filter for it, if any, lets the tool through.
    pub fn mcp_allows(&self, server: &str, tool: &str) -> bool {
        let named = self.mcp_servers().iter().any(|(s, _)| *s == server);
        let filter = self
            .prompt
            .as_ref()
            .and_then(|p| p.tools.get(server))
            .map(Vec::as_slice);
        named && super::tool_allowed(filter, tool)
    }

    /// The agent's name for people: its display name, or its id.
    pub fn label(&self) -> &str {
        self.display_name.as_deref().unwrap_or(self.name.as_str())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{self, Strictness};
    use std::time::Duration;

    fn card(json: &str) -> Result<AgentCard, DecodeError> {
        codec::decode(json.as_bytes(), Strictness::Tolerant, 1 << 20)
    }

    #[test]
    fn a_full_card_loads_with_legacy_capabilities_as_skills() {
        let c = card(
            r#"{"name":"knowledge-agent","version":"1.2.0","description":"KB search",
                "displayName":"Knowledge","role":"librarian","personality":"precise",
                "skills":[{"id":"search:kb","description":"search","scopes":["Files.Read"],
                           "outputSchema":{"type":"object"}}],
                "capabilities":[{"name":"summarize","description":"sum",
                                 "inputSchema":{"type":"object"},"outputSchema":{"type":"string"}}],
                "context":"work",
                "provider":{"name":"me","contact":"me@example.com"},
                "dependencies":{"mcps":[{"name":"notion","required":false,"capabilities":["summarize"]}],
                                "agents":["outlook-agent"],"knowledge":["knowledge/a.md"]},
                "observability":{"traces":true},"coordination":{"handoff":"ask"},
                "metadata":{"author":"me"},
                "invocation":{"type":"command","command":["python3","agent.py"],"timeout":"10s"},
                "delivery":{"ackWait":"5s","maxDeliver":4,"backoff":["1s","5s"]}}"#,
        )
        .unwrap();
        let ids: Vec<&str> = c.skills().iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["search:kb", "summarize"]);
        assert_eq!(c.skill("search:kb").unwrap().scopes.len(), 1);
        assert!(c.skill("summarize").unwrap().output_schema.is_some());
        assert!(c.skill("send:mail").is_none());
        assert_eq!(c.context, Some(Context::Work));
        assert_eq!(c.calls(), ["outlook-agent".parse::<AgentName>().unwrap()]);
        assert_eq!(
            c.invocation,
            Some(Invocation::Command {
                command: vec!["python3".into(), "agent.py".into()],
                timeout: Duration::from_secs(10),
                env: Vec::new(),
            })
        );
        let delivery = c.delivery.clone().unwrap();
        assert_eq!(delivery.ack_wait, Some(Duration::from_secs(5)));
        let backoff: Vec<Duration> = delivery.backoff.unwrap().into_iter().map(|d| *d).collect();
        assert_eq!(backoff, [Duration::from_secs(1), Duration::from_secs(5)]);
        // What it serializes to reads back as the same card.
        let back: AgentCard = serde_json::from_value(serde_json::to_value(&c).unwrap()).unwrap();
        assert_eq!(back, c);
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
            r#"{"name":"a","version":"1.0.0","description":"d","skills":[{"id":"x","outputSchema":{"type":7}}]}"#,
        )
        .unwrap_err();
        assert_eq!(err.field(), Some("skills[0].outputSchema"));
        let err =
            card(r#"{"name":"a","version":"1.0.0","description":"d","invocation":{"type":"ftp"}}"#)
                .unwrap_err();
        assert_eq!(err.field(), Some("invocation.type"));
    }

    #[test]
    fn semver_accepts_prereleases() {
        assert!(is_semver("1.0.0-beta.1+build"));
        assert!(!is_semver("1.0"));
        assert!(!is_semver("v1.0.0"));
    }

    #[test]
    fn what_runs_and_what_does_not_says_why() {
        let mut c = AgentCard::new("a".parse().unwrap(), "1.0.0", "d");
        assert_eq!(c.runnable().unwrap_err().field(), Some("invocation"));
        c.invocation = Some(Invocation::ClaudeSubprocess {
            system_prompt: Some("./CLAUDE.md".into()),
            mcp_config: None,
            knowledge_path: None,
        });
        let e = c.runnable().unwrap_err();
        assert!(e.to_string().contains("claude-subprocess"), "{e}");
        c.invocation = Some(Invocation::Builtin {
            handler: "echo".into(),
        });
        assert!(c.runnable().is_ok());
    }
}
