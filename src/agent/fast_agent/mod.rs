//! AgentCards in fast-agent's text format: a Markdown file (YAML
//! frontmatter, then the instruction as the body) or a YAML file, one
//! card per file (`../shared/seeds/fast-agent-agentcard-rfc.md`).
//!
//! `type` (default `agent`) decides which attributes a card may have; any
//! other is an error naming it. `agent` cards and the patterns that need a
//! model (`evaluator_optimizer`, `orchestrator`, `iterative_planner`,
//! `MAKER`) become agents that are prompts for a model; `chain`,
//! `parallel` and `router` cards become workflows over other agents.
//!
//! The rooms: reading a card's file (`file`), the types and the
//! attributes each allows (`types`), the attributes that need more than a
//! type check (`attributes`), and what a card makes (`made`).

mod attributes;
mod file;
mod made;
mod types;

pub(super) use file::{has_frontmatter, is_card_file, read};
