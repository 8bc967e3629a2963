//! The live registry as callers see it: each known agent's card with its
//! live instances. An entry belongs to the agent its **key** names
//! (`<agent>.<instance>`): a least-privilege bus lets an agent write only
//! keys under its own name, while the entry's body says whatever its
//! writer put there, so the body's `agent` and `instance` are replaced by
//! the key's.

use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracing::debug;

use super::Orchestrator;
use crate::agent::AgentCard;

/// The registry as listed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Agents {
    /// Every known agent (its card), with its live instances.
    pub agents: Vec<AgentInstances>,
    /// Live instances of agents no card names.
    pub unlisted_instances: Vec<Value>,
}

/// One agent and its live instances.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AgentInstances {
    /// The card the orchestrator loaded.
    pub card: AgentCard,
    /// Its workers' registry entries (`agent`, `instance`, `card`,
    /// `started_at`, `heartbeat_at`, `in_flight`).
    pub instances: Vec<Value>,
}

impl Orchestrator {
    /// The known agents with their live instances. A registry that cannot
    /// be read lists none (said in the log).
    pub async fn agents(&self) -> Agents {
        let mut live = self.live_instances().await;
        let agents = self
            .cards()
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
            .collect();
        Agents {
            agents,
            unlisted_instances: live.into_iter().map(|(_, entry)| entry).collect(),
        }
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
                live.push((agent.to_string(), Value::Object(entry)));
            }
        }
        live
    }
}
