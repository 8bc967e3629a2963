//! How a prompt card's tasks run, by its type (`docs/llm.md`, "Workflow
//! types that need a model"): a conversation (a plain prompt,
//! `orchestrator`, `iterative_planner`, a `router` with a model), or the
//! steps of `evaluator_optimizer` or `MAKER`, with the attributes each
//! reads. Read when the card is loaded (a wrong attribute is a problem
//! then) and when its task is planned (`crate::llm::patterns`).

use serde_json::{Map, Value};

use crate::envelope::AgentName;

/// How a card's task runs.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// A conversation (a plain prompt, `orchestrator`,
    /// `iterative_planner`, a `router` with a model).
    Conversation(Conversation),
    /// `evaluator_optimizer`.
    EvaluatorOptimizer(EvaluatorOptimizer),
    /// `MAKER`.
    Maker(Maker),
}

/// What a pattern changes in a conversation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Conversation {
    /// Model calls, at most (else the settings' or the card's).
    pub max_turns: Option<u32>,
    /// Put before the card's instruction.
    pub preamble: Option<&'static str>,
    /// One model call that must call one tool, whose result is the
    /// answer (a router).
    pub route: bool,
}

/// `evaluator_optimizer`'s attributes.
#[derive(Debug, Clone, PartialEq)]
pub struct EvaluatorOptimizer {
    /// Writes (and refines) the answer.
    pub generator: AgentName,
    /// Rates it.
    pub evaluator: AgentName,
    /// The rating that ends the loop.
    pub min_rating: Rating,
    /// Refinements after the first answer, at most.
    pub max_refinements: u32,
    /// What the generator is told when refining.
    pub refinement_instruction: Option<String>,
}

/// `MAKER`'s attributes.
#[derive(Debug, Clone, PartialEq)]
pub struct Maker {
    /// The agent sampled.
    pub worker: AgentName,
    /// The lead (in votes) an answer needs.
    pub k: u32,
    /// Samples, at most.
    pub max_samples: u32,
    /// When two answers are the same.
    pub match_strategy: MatchStrategy,
    /// Answers longer than this (characters) are discarded.
    pub red_flag_max_length: Option<usize>,
}

/// How MAKER compares answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchStrategy {
    /// The same text.
    Exact,
    /// The same text once trimmed, lowercased and its runs of whitespace
    /// made one space.
    Normalized,
    /// The same JSON value (text that is not JSON: as `normalized`).
    Structured,
}

/// An evaluator's rating, worst first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rating {
    /// Poor.
    Poor,
    /// Fair.
    Fair,
    /// Good.
    Good,
    /// Excellent.
    Excellent,
}

impl Rating {
    const ALL: [(&'static str, Rating); 4] = [
        ("EXCELLENT", Rating::Excellent),
        ("GOOD", Rating::Good),
        ("FAIR", Rating::Fair),
        ("POOR", Rating::Poor),
    ];

    /// The rating a word names (any case), if any.
    pub fn parse(s: &str) -> Option<Rating> {
        Rating::ALL
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(s.trim()))
            .map(|(_, r)| *r)
    }

    /// Its word, in capitals.
    pub fn name(self) -> &'static str {
        Rating::ALL
            .iter()
            .find(|(_, r)| *r == self)
            .map_or("POOR", |(n, _)| n)
    }
}

const ORCHESTRATOR: &str = "You coordinate the agents offered to you as tools. Plan the work, give each agent the part it is for (call agents whose parts do not depend on each other at once), read their results, and go on until you can answer. Then answer with the final result, calling no tool.";

const ITERATIVE: &str = "You coordinate the agents offered to you as tools. Work one step at a time: decide the next step, call the agent for it, read its result, and decide again. When the request is met, answer with the final result, calling no tool.";

const ROUTER: &str = "Choose the one agent, among the tools offered, best suited to the request, and call it with the request as its arguments. Call exactly one tool.";

impl Kind {
    /// How a card of type `pattern` (none: a plain prompt) with
    /// `attributes` (and `agents`, the agents it names) runs, or the
    /// attribute that is wrong and why.
    pub fn of(
        pattern: Option<&str>,
        attributes: &Map<String, Value>,
    ) -> Result<Kind, (String, String)> {
        let uint = |key: &str, default: u32| -> Result<u32, (String, String)> {
            match attributes.get(key) {
                None | Some(Value::Null) => Ok(default),
                Some(v) => v
                    .as_u64()
                    .filter(|n| *n >= 1)
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| {
                        (
                            key.to_string(),
                            format!("must be a positive integer, not {v}"),
                        )
                    }),
            }
        };
        let agent = |key: &str| -> Result<AgentName, (String, String)> {
            attributes
                .get(key)
                .and_then(Value::as_str)
                .ok_or_else(|| (key.to_string(), "missing: the agent's name".to_string()))?
                .parse()
                .map_err(|e: crate::envelope::ParseError| (key.to_string(), e.to_string()))
        };
        match pattern {
            None => Ok(Kind::Conversation(Conversation::default())),
            Some(p @ ("orchestrator" | "iterative_planner")) => {
                let iterations = uint("plan_iterations", 5)?;
                if let Some(t) = attributes.get("plan_type")
                    && !matches!(t.as_str(), Some("full" | "iterative"))
                {
                    return Err((
                        "plan_type".into(),
                        format!("must be `full` or `iterative`, not {t}"),
                    ));
                }
                let iterative = p == "iterative_planner"
                    || attributes.get("plan_type").and_then(Value::as_str) == Some("iterative");
                Ok(Kind::Conversation(Conversation {
                    max_turns: Some(iterations.saturating_add(1)),
                    preamble: Some(if iterative { ITERATIVE } else { ORCHESTRATOR }),
                    route: false,
                }))
            }
            Some("router") => Ok(Kind::Conversation(Conversation {
                max_turns: Some(1),
                preamble: Some(ROUTER),
                route: true,
            })),
            Some("evaluator_optimizer") => {
                let min_rating = match attributes.get("min_rating") {
                    None | Some(Value::Null) => Rating::Good,
                    Some(v) => v.as_str().and_then(Rating::parse).ok_or_else(|| {
                        (
                            "min_rating".to_string(),
                            format!("must be EXCELLENT, GOOD, FAIR or POOR, not {v}"),
                        )
                    })?,
                };
                let max_refinements = match attributes.get("max_refinements") {
                    None | Some(Value::Null) => 3,
                    Some(v) => v
                        .as_u64()
                        .and_then(|n| u32::try_from(n).ok())
                        .ok_or_else(|| {
                            (
                                "max_refinements".to_string(),
                                format!("must be a whole number, not {v}"),
                            )
                        })?,
                };
                Ok(Kind::EvaluatorOptimizer(EvaluatorOptimizer {
                    generator: agent("generator")?,
                    evaluator: agent("evaluator")?,
                    min_rating,
                    max_refinements,
                    refinement_instruction: attributes
                        .get("refinement_instruction")
                        .and_then(Value::as_str)
                        .map(str::to_string),
                }))
            }
            Some("MAKER") => {
                let match_strategy = match attributes.get("match_strategy") {
                    None | Some(Value::Null) => MatchStrategy::Exact,
                    Some(v) => match v.as_str() {
                        Some("exact") => MatchStrategy::Exact,
                        Some("normalized") => MatchStrategy::Normalized,
                        Some("structured") => MatchStrategy::Structured,
                        _ => {
                            return Err((
                                "match_strategy".into(),
                                format!("must be `exact`, `normalized` or `structured`, not {v}"),
                            ));
                        }
                    },
                };
                let red_flag_max_length = match attributes.get("red_flag_max_length") {
                    None | Some(Value::Null) => None,
                    Some(_) => Some(uint("red_flag_max_length", 1)? as usize),
                };
                Ok(Kind::Maker(Maker {
                    worker: agent("worker")?,
                    k: uint("k", 3)?,
                    max_samples: uint("max_samples", 50)?,
                    match_strategy,
                    red_flag_max_length,
                }))
            }
            Some(other) => Err((
                "type".into(),
                format!("`{other}` is not a type a prompt runs as"),
            )),
        }
    }

    /// Whether a task of this kind makes model calls of its own (its
    /// agent needs a worker for them).
    pub fn calls_a_model(&self) -> bool {
        matches!(self, Kind::Conversation(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn attributes_are_read_and_wrong_ones_named() {
        let attrs = |v: Value| v.as_object().unwrap().clone();
        let k = Kind::of(Some("MAKER"), &attrs(json!({"worker": "w", "k": 2}))).unwrap();
        assert!(matches!(
            k,
            Kind::Maker(Maker {
                k: 2,
                max_samples: 50,
                ..
            })
        ));
        let e = Kind::of(Some("MAKER"), &attrs(json!({"worker": "w", "k": 0}))).unwrap_err();
        assert_eq!(e.0, "k");
        let e = Kind::of(
            Some("evaluator_optimizer"),
            &attrs(json!({"generator": "g"})),
        )
        .unwrap_err();
        assert_eq!(e.0, "evaluator");
        let e = Kind::of(
            Some("evaluator_optimizer"),
            &attrs(json!({"generator": "g", "evaluator": "e", "min_rating": "SUPERB"})),
        )
        .unwrap_err();
        assert_eq!(e.0, "min_rating");
        let Kind::Conversation(c) =
            Kind::of(Some("orchestrator"), &attrs(json!({"plan_iterations": 2}))).unwrap()
        else {
            panic!()
        };
        assert_eq!(c.max_turns, Some(3));
    }
}
