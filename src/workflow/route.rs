//! The router: picks the agent and skill for a free-text request from the
//! agents' cards (their skill index). A pure function, so the choice and
//! the reason it records can be tested against a table.
//!
//! Scoring: each of a skill's trigger phrases found in the text counts 3,
//! each of the agent's signals and the skill's tags found as a word counts
//! one. The highest score wins; a tie goes to the agent whose name sorts
//! first, then to the skill listed first. Nothing matching is no choice.

use std::collections::BTreeMap;

use super::record::RouteChoice;
use crate::agent::AgentCard;
use crate::envelope::AgentName;

/// Chooses among `cards` (only `allowed` ones, unless it is empty).
pub fn choose(
    text: &str,
    cards: &BTreeMap<AgentName, AgentCard>,
    allowed: &[AgentName],
) -> Option<RouteChoice> {
    let lower = text.to_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !c.is_alphanumeric() && c != '-' && c != '_')
        .filter(|w| !w.is_empty())
        .collect();
    let has_word = |w: &str| {
        let w = w.to_lowercase();
        words.iter().any(|x| *x == w)
    };
    let mut best: Option<RouteChoice> = None;
    for card in cards.values() {
        if !allowed.is_empty() && !allowed.contains(&card.name) {
            continue;
        }
        let signals: Vec<String> = card
            .signals
            .iter()
            .filter(|s| has_word(s))
            .map(|s| format!("signal `{s}`"))
            .collect();
        for skill in card.skills() {
            let mut matched = Vec::new();
            let mut score = 0;
            for phrase in &skill.triggers {
                if !phrase.trim().is_empty() && lower.contains(&phrase.to_lowercase()) {
                    score += 3;
                    matched.push(format!("trigger `{phrase}`"));
                }
            }
            for tag in skill.tags.iter().filter(|t| has_word(t)) {
                score += 1;
                matched.push(format!("tag `{tag}`"));
            }
            score += signals.len() as u32;
            matched.extend(signals.iter().cloned());
            if score > 0 && best.as_ref().is_none_or(|b| score > b.score) {
                best = Some(RouteChoice {
                    agent: card.name.clone(),
                    skill: skill.id.clone(),
                    score,
                    matched,
                    text: text.to_string(),
                });
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(json: serde_json::Value) -> (AgentName, AgentCard) {
        let card: AgentCard = serde_json::from_value(json).unwrap();
        (card.name.clone(), card)
    }

    fn cards() -> BTreeMap<AgentName, AgentCard> {
        [
            card(serde_json::json!({"name": "knowledge-agent", "version": "1.0.0", "description": "kb",
                "signals": ["project", "decision", "notes"],
                "skills": [{"id": "search:kb", "triggers": ["what did we decide"], "tags": ["search"]}]})),
            card(serde_json::json!({"name": "outlook-agent", "version": "1.0.0", "description": "mail",
                "signals": ["email", "draft", "mail"],
                "skills": [{"id": "compose:draft", "tags": ["compose"]},
                           {"id": "send:draft", "triggers": ["send the draft"], "tags": ["send"]}]})),
        ]
        .into_iter()
        .collect()
    }

    #[test]
    fn the_agent_whose_signals_and_triggers_match_is_chosen_with_its_reasons() {
        let table = [
            (
                "What did we decide about the project?",
                Some(("knowledge-agent", "search:kb")),
            ),
            (
                "Please compose an email draft",
                Some(("outlook-agent", "compose:draft")),
            ),
            (
                "send the draft to the team by email",
                Some(("outlook-agent", "send:draft")),
            ),
            ("order a pizza", None),
        ];
        for (text, want) in table {
            let got = choose(text, &cards(), &[]);
            assert_eq!(
                got.as_ref().map(|c| (c.agent.as_str(), c.skill.as_str())),
                want,
                "{text}"
            );
        }
        let c = choose("What did we decide about the project?", &cards(), &[]).unwrap();
        assert_eq!(c.score, 4);
        assert!(
            c.matched
                .contains(&"trigger `what did we decide`".to_string()),
            "{:?}",
            c.matched
        );
        assert!(
            c.matched.contains(&"signal `project`".to_string()),
            "{:?}",
            c.matched
        );
    }

    #[test]
    fn only_the_allowed_agents_are_considered() {
        let only: Vec<AgentName> = vec!["outlook-agent".parse().unwrap()];
        assert_eq!(
            choose("what did we decide about the project", &cards(), &only),
            None
        );
    }
}
