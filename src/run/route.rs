//! The router: picks the agent and skill for a free-text request from the
//! agents' cards (their skill index). A pure function, so the choice and
//! the reason it records can be tested against a table.
//!
//! Scoring: each of a skill's trigger phrases found in the text counts 3,
//! each of the agent's signals and the skill's tags found as a word counts
//! one. The highest score wins; a tie goes to the agent whose name sorts
//! first, then to the skill listed first. A registry's routing comes
//! first and last: a switch command naming an agent (`talk to
//! knowledge-agent`) picks it, whatever scores; when nothing matches, its
//! default agent is chosen. Else nothing matching is no choice. Agents
//! usable only as tools are chosen only when `allowed` names them.

use std::collections::BTreeMap;

use super::record::RouteChoice;
use crate::agent::{AgentCard, Catalog};
use crate::envelope::AgentName;

/// Chooses for each part of `text`, split at the registry's multi-agent
/// trigger phrases (`find the notes and also draft a mail` is two
/// requests): the first part's choice, with the others' in `also`. No
/// choice when a part has none.
pub fn choose_parts(text: &str, catalog: &Catalog, allowed: &[AgentName]) -> Option<RouteChoice> {
    let parts = split(text, &catalog.routing.multi_agent_triggers);
    let mut choices = Vec::with_capacity(parts.len());
    for part in parts {
        choices.push(choose(&part, catalog, allowed)?);
    }
    let mut first = choices.remove(0);
    first.also = choices;
    Some(first)
}

/// `text` cut at each of `phrases` found as whole words (case aside),
/// the pieces trimmed, empty ones dropped; `text` whole when none is
/// found.
fn split(text: &str, phrases: &[String]) -> Vec<String> {
    let lower = text.to_lowercase();
    let mut cuts: Vec<(usize, usize)> = Vec::new();
    for phrase in phrases
        .iter()
        .map(|p| p.trim().to_lowercase())
        .filter(|p| !p.is_empty())
    {
        for (at, _) in lower.match_indices(&phrase) {
            let end = at + phrase.len();
            let word_before = lower[..at]
                .chars()
                .next_back()
                .is_some_and(char::is_alphanumeric);
            let word_after = lower[end..]
                .chars()
                .next()
                .is_some_and(char::is_alphanumeric);
            if !word_before && !word_after && !cuts.iter().any(|(a, b)| at < *b && end > *a) {
                cuts.push((at, end));
            }
        }
    }
    cuts.sort_unstable();
    let mut parts = Vec::new();
    let mut from = 0;
    for (at, end) in cuts {
        parts.push(text[from..at].to_string());
        from = end;
    }
    parts.push(text[from..].to_string());
    let parts: Vec<String> = parts
        .into_iter()
        .map(|p| {
            p.trim()
                .trim_matches(|c: char| c == ',' || c == ';')
                .trim()
                .to_string()
        })
        .filter(|p| !p.is_empty())
        .collect();
    if parts.is_empty() {
        vec![text.to_string()]
    } else {
        parts
    }
}

/// Chooses among the catalog's agents (only `allowed` ones, unless it is
/// empty), with its routing rules, for the whole of `text`.
pub fn choose(text: &str, catalog: &Catalog, allowed: &[AgentName]) -> Option<RouteChoice> {
    let may = |card: &AgentCard| {
        if allowed.is_empty() {
            !card.tool_only
        } else {
            allowed.contains(&card.name)
        }
    };
    let first_skill = |card: &AgentCard, why: String| {
        card.skills().first().map(|skill| RouteChoice {
            agent: card.name.clone(),
            skill: skill.id.clone(),
            score: 0,
            matched: vec![why],
            text: text.to_string(),
            also: Vec::new(),
        })
    };
    let lower = text.to_lowercase();
    for command in &catalog.routing.switch_commands {
        let command = command.to_lowercase();
        let Some(at) = lower.find(&command) else {
            continue;
        };
        let rest = lower[at + command.len()..].trim_start();
        let named = catalog.agents.values().filter(|c| may(c)).find(|c| {
            [c.name.as_str().to_string(), c.label().to_lowercase()]
                .iter()
                .any(|n| rest.starts_with(n.as_str()))
        });
        if let Some(card) = named {
            let mut choice = scored(text, &BTreeMap::from([(card.name.clone(), card)]))
                .or_else(|| first_skill(card, String::new()))?;
            choice.matched.retain(|m| !m.is_empty());
            choice.matched.insert(
                0,
                format!("switch command `{command}` naming `{}`", card.name),
            );
            return Some(choice);
        }
    }
    let candidates: BTreeMap<AgentName, &AgentCard> = catalog
        .agents
        .values()
        .filter(|c| may(c))
        .map(|c| (c.name.clone(), c))
        .collect();
    scored(text, &candidates).or_else(|| {
        let default = catalog.routing.default_agent.as_ref()?;
        let card = catalog
            .agents
            .get(default)
            .filter(|c| allowed.is_empty() || may(c))?;
        first_skill(card, "the registry's default agent".into())
    })
}

/// The best-scoring skill of `cards` for `text`, if any scores.
fn scored(text: &str, cards: &BTreeMap<AgentName, &AgentCard>) -> Option<RouteChoice> {
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
                    also: Vec::new(),
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

    fn cards() -> Catalog {
        let agents = [
            card(serde_json::json!({"name": "knowledge-agent", "version": "1.0.0", "description": "kb",
                "signals": ["project", "decision", "notes"],
                "skills": [{"id": "search:kb", "triggers": ["what did we decide"], "tags": ["search"]}]})),
            card(serde_json::json!({"name": "outlook-agent", "version": "1.0.0", "description": "mail",
                "signals": ["email", "draft", "mail"],
                "skills": [{"id": "compose:draft", "tags": ["compose"]},
                           {"id": "send:draft", "triggers": ["send the draft"], "tags": ["send"]}]})),
        ]
        .into_iter()
        .map(|(_, card)| card)
        .collect::<Vec<_>>();
        Catalog::of(agents)
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

    #[test]
    fn a_switch_command_names_the_agent_and_the_default_catches_the_rest() {
        let mut catalog = cards();
        catalog.routing = crate::agent::Routing {
            default_agent: Some("knowledge-agent".parse().unwrap()),
            switch_commands: vec!["talk to".into()],
            multi_agent_triggers: Vec::new(),
        };
        // The words would pick the knowledge agent; the command wins.
        let c = choose("talk to outlook-agent: what did we decide?", &catalog, &[]).unwrap();
        assert_eq!(c.agent.as_str(), "outlook-agent");
        assert_eq!(
            c.matched[0],
            "switch command `talk to` naming `outlook-agent`"
        );
        let c = choose("order a pizza", &catalog, &[]).unwrap();
        assert_eq!(
            (c.agent.as_str(), c.skill.as_str()),
            ("knowledge-agent", "search:kb")
        );
        assert_eq!(c.matched, ["the registry's default agent"]);
        // A tool-only agent is not routed to unless named.
        catalog
            .agents
            .get_mut(&"outlook-agent".parse::<AgentName>().unwrap())
            .unwrap()
            .tool_only = true;
        let c = choose("send the draft to the team by email", &catalog, &[]).unwrap();
        assert_eq!(c.agent.as_str(), "knowledge-agent");
        let only: Vec<AgentName> = vec!["outlook-agent".parse().unwrap()];
        let c = choose("send the draft", &catalog, &only).unwrap();
        assert_eq!(c.agent.as_str(), "outlook-agent");
    }

    #[test]
    fn a_multi_agent_phrase_splits_the_request() {
        let mut catalog = cards();
        catalog.routing.multi_agent_triggers = vec!["and also".into(), "then".into()];
        let c = choose_parts(
            "what did we decide about the project, and also send the draft by email",
            &catalog,
            &[],
        )
        .unwrap();
        assert_eq!(
            (c.agent.as_str(), c.text.as_str()),
            ("knowledge-agent", "what did we decide about the project")
        );
        let also: Vec<(&str, &str, &str)> = c
            .also
            .iter()
            .map(|a| (a.agent.as_str(), a.skill.as_str(), a.text.as_str()))
            .collect();
        assert_eq!(
            also,
            [("outlook-agent", "send:draft", "send the draft by email")]
        );
        // A phrase inside a word does not cut; without one, one part.
        assert_eq!(
            split("authentication notes", &["then".into()]),
            ["authentication notes"]
        );
        let c = choose_parts("what did we decide about the project", &catalog, &[]).unwrap();
        assert!(c.also.is_empty());
        // A part nothing matches: no choice.
        assert!(choose_parts("what did we decide, then order a pizza", &catalog, &[]).is_none());
    }
}
