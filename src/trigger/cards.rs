//! Workflows that cards declare (`chain`, `parallel` and `router`
//! AgentCards), as triggers: a card is then started as a trigger is (the
//! CLI, the REST API, an A2A skill `trigger:<name>`), and runs as the
//! cascade, fan-out and router the engine already has.
//!
//! Input `{"message": "..."}`. Each agent is given `{"message": ...}` for
//! its first skill: in a chain, the request for the first and the result
//! before it for the others (`cumulative`: the request, and every result
//! before it under `previous`); in a parallel card, the request for each
//! fan-out agent, and their results (by agent) for the fan-in agent, with
//! the request under `request` unless `include_request` is false; a
//! router card routes the request among its agents (each part of it,
//! when a registry's multi-agent phrase splits it, to its own agent).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::{Trigger, Triggers};
use crate::agent::{AgentCard, CardWorkflow, Catalog, Pattern};
use crate::envelope::AgentName;
use crate::source::Diagnostic;

/// Why a card's workflow makes no trigger.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CardWorkflowError {
    /// A member has no skill to run.
    #[error("agent `{0}` has no skill to run")]
    NoSkillToRun(AgentName),
    /// What the card says does not read as a workflow.
    #[error("{kind} `{name}` does not make a workflow: {why}")]
    NotAWorkflow {
        /// The card's type (`chain`, `parallel`, `router`).
        kind: &'static str,
        /// The card's name.
        name: String,
        /// What the trigger reader said.
        why: String,
    },
}

impl Trigger {
    /// The trigger that runs card workflow `w` over `agents` (every member
    /// is among them: the catalog checked).
    pub fn from_card(
        w: &CardWorkflow,
        agents: &BTreeMap<AgentName, AgentCard>,
    ) -> Result<Trigger, CardWorkflowError> {
        let skill = |m: &AgentName| -> Result<String, CardWorkflowError> {
            agents
                .get(m)
                .and_then(|a| a.skills().first())
                .map(|s| s.id.clone())
                .ok_or_else(|| CardWorkflowError::NoSkillToRun(m.clone()))
        };
        let mut used = BTreeSet::new();
        // A step's id is its agent's, as a template can name it
        // (`steps.<id>.result`: `_` for `-`), made unique.
        let mut step_id = |name: &str| -> String {
            let mut base = name.replace('-', "_");
            if !base.starts_with(|c: char| c.is_ascii_lowercase()) {
                base = format!("s_{base}");
            }
            let mut id = base.clone();
            let mut n = 1;
            while !used.insert(id.clone()) {
                n += 1;
                id = format!("{base}_{n}");
            }
            id
        };
        let task = |id: &str, m: &AgentName, params: Value| -> Result<Value, CardWorkflowError> {
            Ok(json!({"id": id, "agent": m, "action": skill(m)?, "params": params}))
        };
        let steps: Vec<Value> = match &w.pattern {
            Pattern::Chain {
                sequence,
                cumulative,
            } => {
                let mut steps = Vec::new();
                let mut before: Vec<String> = Vec::new();
                for m in sequence {
                    let id = step_id(m.as_str());
                    let params = match (before.last(), cumulative) {
                        (None, _) => json!({"message": "{{ input.message }}"}),
                        (Some(last), false) => {
                            json!({"message": format!("{{{{ steps.{last}.result }}}}")})
                        }
                        (Some(_), true) => {
                            let previous: Map<String, Value> = before
                                .iter()
                                .map(|b| {
                                    (
                                        b.clone(),
                                        Value::from(format!("{{{{ steps.{b}.result }}}}")),
                                    )
                                })
                                .collect();
                            json!({"message": "{{ input.message }}", "previous": previous})
                        }
                    };
                    steps.push(task(&id, m, params)?);
                    before.push(id);
                }
                steps
            }
            Pattern::Parallel {
                fan_out,
                fan_in,
                include_request,
            } => {
                let branches = fan_out
                    .iter()
                    .map(|m| {
                        task(
                            &step_id(m.as_str()),
                            m,
                            json!({"message": "{{ input.message }}"}),
                        )
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let fan = step_id("fan_out");
                let mut steps = vec![json!({"id": fan, "parallel": branches, "merge": "object"})];
                if let Some(m) = fan_in {
                    let mut params = json!({"message": format!("{{{{ steps.{fan}.result }}}}")});
                    if *include_request {
                        params["request"] = json!("{{ input.message }}");
                    }
                    steps.push(task(&step_id(m.as_str()), m, params)?);
                }
                steps
            }
            Pattern::Router { agents: members } => vec![json!({
                "id": "route",
                "route": {"text": "{{ input.message }}", "agents": members},
                "params": {"message": "{{ route.text }}"},
            })],
        };
        let scopes: BTreeSet<String> = w
            .pattern
            .members()
            .into_iter()
            .filter_map(|m| agents.get(m))
            .flat_map(|a| {
                a.skills()
                    .iter()
                    .flat_map(|s| s.scopes.iter().map(|s| s.to_string()))
            })
            .collect();
        serde_json::from_value(json!({
            "id": w.name,
            "name": w.display_name,
            "description": w.description,
            "required_scopes": scopes,
            "input_schema": {
                "type": "object",
                "required": ["message"],
                "properties": {"message": {"type": "string", "description": "the request"}},
            },
            "steps": steps,
        }))
        .map_err(|e| CardWorkflowError::NotAWorkflow {
            kind: w.pattern.kind(),
            name: w.name.to_string(),
            why: e.to_string(),
        })
    }
}

impl Triggers {
    /// These triggers with the workflows of `catalog`'s cards among them:
    /// one whose name is a trigger's id is a problem (the file's trigger
    /// is kept).
    pub fn with_cards(mut self, catalog: &Catalog) -> Triggers {
        for w in catalog.workflows.values() {
            let refused = |message: String| Diagnostic::file(&w.origin.file, message);
            if self.loaded.contains_key(w.name.as_str()) {
                self.errors.push(refused(format!(
                    "`{}` is also the id of a trigger: the card's workflow is left out",
                    w.name
                )));
                continue;
            }
            match Trigger::from_card(w, &catalog.agents) {
                Ok(t) => {
                    let mut problems = t.problems();
                    problems.extend(t.problems_with(&catalog.agents));
                    if problems.is_empty() {
                        self.loaded.insert(t.id.clone(), Arc::new(t));
                    } else {
                        for p in problems {
                            self.errors
                                .push(refused(format!("{}: {}", p.path, p.message)));
                        }
                    }
                }
                Err(e) => self.errors.push(refused(e.to_string())),
            }
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::{AgentCard, Origin, Skill};
    use std::path::Path;

    fn agents(names: &[&str]) -> BTreeMap<AgentName, AgentCard> {
        names
            .iter()
            .map(|n| {
                let mut card = AgentCard::new(n.parse().unwrap(), "1.0.0", "d");
                card.skills = vec![Skill::new(format!("{n}-skill"), "d")];
                (card.name.clone(), card)
            })
            .collect()
    }

    fn workflow(pattern: Pattern) -> CardWorkflow {
        CardWorkflow {
            name: "w".parse().unwrap(),
            display_name: "w".into(),
            description: "d".into(),
            instruction: None,
            pattern,
            origin: Origin::new(crate::agent::Format::AgentCardMarkdown, Path::new("w.md")),
        }
    }

    /// Agent ids that a template cannot name as written (`-`, a leading
    /// digit), and an agent twice, still make steps the checks accept.
    #[test]
    fn any_agent_ids_make_steps_templates_can_name() {
        let names = ["knowledge-agent", "9lives"];
        let seq: Vec<AgentName> = ["knowledge-agent", "9lives", "knowledge-agent"]
            .iter()
            .map(|n| n.parse().unwrap())
            .collect();
        let chain = Trigger::from_card(
            &workflow(Pattern::Chain {
                sequence: seq.clone(),
                cumulative: true,
            }),
            &agents(&names),
        )
        .unwrap();
        let ids: Vec<&str> = chain.steps.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["knowledge_agent", "s_9lives", "knowledge_agent_2"]);
        assert!(chain.problems().is_empty(), "{:?}", chain.problems());
        assert!(chain.problems_with(&agents(&names)).is_empty());
        let fan = Trigger::from_card(
            &workflow(Pattern::Parallel {
                fan_out: seq[..2].to_vec(),
                fan_in: Some(seq[0].clone()),
                include_request: false,
            }),
            &agents(&names),
        )
        .unwrap();
        assert!(fan.problems().is_empty(), "{:?}", fan.problems());
        let ids: Vec<&str> = fan.steps.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["fan_out", "knowledge_agent_2"]);
    }
}
