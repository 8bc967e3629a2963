//! Workflows that cards declare over other agents (AgentCards of type
//! `chain`, `parallel` and `router`): the trigger module turns each into
//! a trigger, so a card runs as the workflows of `triggers/` do.

use serde::Serialize;

use super::card::Origin;
use crate::envelope::AgentName;

/// A workflow a card declares.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CardWorkflow {
    /// Its id (the card's name, as an agent id): the trigger's id.
    pub name: AgentName,
    /// The name as the card writes it.
    pub display_name: String,
    /// What it does.
    pub description: String,
    /// The card's instruction, when it gives one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instruction: Option<String>,
    /// How it runs its agents.
    pub pattern: Pattern,
    /// Where it was read from.
    pub origin: Origin,
}

/// How a card's workflow runs its agents.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Pattern {
    /// One after another, each given the one before's result (a
    /// cascade).
    Chain {
        /// The agents, in order.
        sequence: Vec<AgentName>,
        /// Each is given every result before it, not only the last.
        cumulative: bool,
    },
    /// All at once, then their results merged, optionally by an agent.
    Parallel {
        /// The agents that run at once.
        fan_out: Vec<AgentName>,
        /// The agent given their results, if any.
        #[serde(skip_serializing_if = "Option::is_none")]
        fan_in: Option<AgentName>,
        /// The fan-in agent is given the request too.
        include_request: bool,
    },
    /// One of the agents, picked for the request.
    Router {
        /// The agents it picks from.
        agents: Vec<AgentName>,
    },
}

impl Pattern {
    /// The agents it runs, in order.
    pub fn members(&self) -> Vec<&AgentName> {
        match self {
            Pattern::Chain { sequence, .. } => sequence.iter().collect(),
            Pattern::Parallel {
                fan_out, fan_in, ..
            } => fan_out.iter().chain(fan_in).collect(),
            Pattern::Router { agents } => agents.iter().collect(),
        }
    }

    /// The card type it comes from.
    pub fn kind(&self) -> &'static str {
        match self {
            Pattern::Chain { .. } => "chain",
            Pattern::Parallel { .. } => "parallel",
            Pattern::Router { .. } => "router",
        }
    }
}
