//! The agents as callers see them: each declared agent's card with its
//! live instances, the cards' workflows, the topology, and what was wrong
//! in the agent files. An entry belongs to the agent its **key** names
//! (`<agent>.<instance>`): a least-privilege bus lets an agent write only
//! keys under its own name, while the entry's body says whatever its
//! writer put there, so the body's `agent` and `instance` are replaced by
//! the key's.

use futures::StreamExt;
use serde::Serialize;
use serde_json::Value;
use tracing::debug;

use super::Orchestrator;
use crate::agent::{AgentCard, CardWorkflow, Context, Edge};
use crate::envelope::{AgentName, Timestamp};
use crate::source::Diagnostic;
use crate::trigger::StepKind;

/// The agents as listed: declared and live together.
#[derive(Debug, Clone, Serialize)]
pub struct Agents {
    /// Every declared agent (its card: its format and file among it) with
    /// its live instances.
    pub agents: Vec<AgentInstances>,
    /// The workflows cards declare (each is a trigger too).
    pub workflows: Vec<CardWorkflow>,
    /// Live instances of agents no card names.
    pub unlisted_instances: Vec<Value>,
    /// The agent a request that names none goes to (a pack's entry, or a
    /// card that says it is the default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<AgentName>,
    /// Who uses whom: agents' calls, cards' workflows, triggers' steps.
    pub edges: Vec<Edge>,
    /// The agent files left out, and why.
    pub problems: Vec<Diagnostic>,
    /// What is likely a mistake in them.
    pub warnings: Vec<Diagnostic>,
    /// When the agent files were read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loaded_at: Option<Timestamp>,
}

/// One agent and its live instances.
#[derive(Debug, Clone, Serialize)]
pub struct AgentInstances {
    /// The card the orchestrator loaded.
    pub card: AgentCard,
    /// Its workers' registry entries (`agent`, `instance`, `card`,
    /// `started_at`, `heartbeat_at`, `in_flight`), each with how long ago
    /// it last beat (`heartbeat_age_seconds`).
    pub instances: Vec<Value>,
}

/// Which agents a listing shows.
#[derive(Debug, Clone, Default)]
pub struct AgentFilter {
    /// Only agents of these contexts (none: every agent).
    pub contexts: Vec<Context>,
    /// Agents usable only as tools too.
    pub tool_only: bool,
}

impl Orchestrator {
    /// The declared agents (those `filter` lets through) with their live
    /// instances, the cards' workflows and the topology. A live registry
    /// that cannot be read lists no instances (said in the log).
    pub async fn agents(&self, filter: &AgentFilter) -> Agents {
        let mut live = self.live_instances().await;
        let declared = self.catalog();
        let agents = declared
            .agents
            .values()
            .map(|card| {
                let (mine, rest): (Vec<_>, Vec<_>) = live
                    .drain(..)
                    .partition(|(agent, _)| agent == card.name.as_str());
                live = rest;
                AgentInstances {
                    card: card.clone(),
                    instances: mine.into_iter().map(|(_, entry)| entry).collect(),
                }
            })
            .filter(|a| filter.tool_only || !a.card.tool_only)
            .filter(|a| {
                filter.contexts.is_empty()
                    || a.card.context.is_some_and(|c| filter.contexts.contains(&c))
            })
            .collect();
        let mut edges = declared.edges();
        for trigger in self.triggers().loaded.values() {
            if declared.workflows.keys().any(|w| w.as_str() == trigger.id) {
                continue;
            }
            for step in trigger.all_steps() {
                let (to, kind): (Vec<&AgentName>, &str) = match &step.kind {
                    StepKind::Task(t) => (vec![&t.agent], "step"),
                    StepKind::Route(r) => (r.agents.iter().collect(), "route"),
                    StepKind::Parallel(_) | StepKind::Approval(_) => continue,
                };
                edges.extend(to.into_iter().map(|a| Edge {
                    from: format!("trigger:{}", trigger.id),
                    to: a.to_string(),
                    kind: kind.into(),
                }));
            }
        }
        Agents {
            agents,
            workflows: declared.workflows.values().cloned().collect(),
            unlisted_instances: live.into_iter().map(|(_, entry)| entry).collect(),
            entry: declared.entry.clone(),
            edges,
            problems: declared.errors.clone(),
            warnings: declared.warnings.clone(),
            loaded_at: declared.loaded_at,
        }
    }

    /// One declared agent (a tool-only one too) with its live instances.
    pub async fn agent(&self, name: &AgentName) -> Option<AgentInstances> {
        let card = self.catalog().agents.get(name).cloned()?;
        let instances = self
            .live_instances()
            .await
            .into_iter()
            .filter(|(agent, _)| agent == name.as_str())
            .map(|(_, entry)| entry)
            .collect();
        Some(AgentInstances { card, instances })
    }

    /// Every live registry entry, with the agent its key names.
    async fn live_instances(&self) -> Vec<(String, Value)> {
        let mut live = Vec::new();
        let registry = match self.bus().agents().await {
            Ok(registry) => registry,
            Err(e) => {
                debug!(error = %e, "the live registry cannot be read");
                return live;
            }
        };
        let Ok(mut keys) = registry.keys().await else {
            return live;
        };
        while let Some(Ok(key)) = keys.next().await {
            let Some((agent, instance)) = key.split_once('.') else {
                continue;
            };
            if let Ok(Some(value)) = registry.get(&key).await
                && let Ok(Value::Object(mut entry)) = serde_json::from_slice::<Value>(&value)
            {
                entry.insert("agent".into(), agent.into());
                entry.insert("instance".into(), instance.into());
                let age = entry
                    .get("heartbeat_at")
                    .and_then(Value::as_str)
                    .and_then(|t| t.parse::<Timestamp>().ok())
                    .map(|t| (Timestamp::now().unix_nanos() - t.unix_nanos()) as f64 / 1e9);
                if let Some(age) = age {
                    entry.insert(
                        "heartbeat_age_seconds".into(),
                        ((age * 10.0).round() / 10.0).into(),
                    );
                }
                live.push((agent.to_string(), Value::Object(entry)));
            }
        }
        live
    }
}
