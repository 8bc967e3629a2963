//! Agents: their cards (`agents/<id>/agent.json`, A2A-aligned) and how a
//! worker invokes them.

mod card;

pub use card::{AgentCard, CardError, Delivery, Forward, Invocation, RemoteAuth, Skill};
