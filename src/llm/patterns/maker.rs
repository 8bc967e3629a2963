//! `MAKER`: samples of one agent, voted on, until one answer leads by
//! `k`.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{Maker, MatchStrategy, Next, Start, message, text};
use crate::event::ErrorInfo;
use crate::run::StepTask;
use crate::task::TaskState;

/// MAKER's voting over `request`: `sample-<i>` steps, from 1, as many at
/// once as could still decide.
pub fn maker(cfg: &Maker, request: &str, steps: &BTreeMap<String, StepTask>) -> Next {
    let samples: Vec<&StepTask> = (1..)
        .map_while(|i| steps.get(&format!("sample-{i}")))
        .collect();
    let started = samples.len() as u32;
    let mut running = 0u32;
    // Votes by key: count, the first answer with that key.
    let mut votes: BTreeMap<String, (u32, usize, Value)> = BTreeMap::new();
    for (i, s) in samples.iter().enumerate() {
        if !s.state.is_terminal() {
            running += 1;
            continue;
        }
        if s.state != TaskState::Completed {
            continue;
        }
        let answer = s.result.clone().unwrap_or(Value::Null);
        let shown = text(&answer);
        if cfg
            .red_flag_max_length
            .is_some_and(|max| shown.chars().count() > max)
        {
            continue;
        }
        let entry = votes
            .entry(key(cfg.match_strategy, &shown))
            .or_insert((0, i, answer));
        entry.0 += 1;
    }
    let mut ranked: Vec<&(u32, usize, Value)> = votes.values().collect();
    // Most votes first; of equals, the one seen first.
    ranked.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let leader = ranked.first().map_or(0, |v| v.0);
    let second = ranked.get(1).map_or(0, |v| v.0);
    if leader >= second + cfg.k {
        return Next::Complete(ranked[0].2.clone());
    }
    // The samples that could still give the leader its lead.
    let needed = second + cfg.k - leader;
    let more = needed
        .saturating_sub(running)
        .min(cfg.max_samples.saturating_sub(started));
    if more > 0 {
        return Next::Start(
            (started + 1..=started + more)
                .map(|i| Start {
                    step: format!("sample-{i}"),
                    agent: cfg.worker.clone(),
                    params: message(request.to_string()),
                })
                .collect(),
        );
    }
    if running > 0 {
        return Next::Wait;
    }
    let tally: Vec<Value> = ranked
        .iter()
        .map(|(n, _, a)| json!({"votes": n, "answer": a}))
        .collect();
    Next::Fail(ErrorInfo::new(
        "no_consensus",
        format!(
            "no answer was {} votes ahead after {started} samples (max_samples): {}",
            cfg.k,
            Value::Array(tally)
        ),
        false,
    ))
}

/// What two answers must share to be one vote.
fn key(strategy: MatchStrategy, answer: &str) -> String {
    let normalized = || {
        answer
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .to_lowercase()
    };
    match strategy {
        MatchStrategy::Exact => answer.to_string(),
        MatchStrategy::Normalized => normalized(),
        // serde_json's maps are ordered: equal values print the same.
        MatchStrategy::Structured => match serde_json::from_str::<Value>(answer.trim()) {
            Ok(v) => v.to_string(),
            Err(_) => normalized(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{done, running, started};
    use super::*;

    fn maker_cfg(k: u32, max: u32, strategy: MatchStrategy) -> Maker {
        Maker {
            worker: "w".parse().unwrap(),
            k,
            max_samples: max,
            match_strategy: strategy,
            red_flag_max_length: Some(10),
        }
    }

    #[test]
    fn maker_starts_k_samples_then_only_what_could_decide() {
        let cfg = maker_cfg(2, 5, MatchStrategy::Normalized);
        let mut steps = BTreeMap::new();
        assert_eq!(started(&maker(&cfg, "q", &steps)), ["sample-1", "sample-2"]);
        steps.insert("sample-1".into(), done(json!("Four")));
        steps.insert("sample-2".into(), running());
        // 1 vote to 0: one more could decide, and one runs.
        assert_eq!(maker(&cfg, "q", &steps), Next::Wait);
        steps.insert("sample-2".into(), done(json!("five")));
        assert_eq!(started(&maker(&cfg, "q", &steps)), ["sample-3", "sample-4"]);
        steps.insert("sample-3".into(), done(json!(" four ")));
        // Too long: discarded.
        steps.insert("sample-4".into(), done(json!("four, surely four")));
        assert_eq!(started(&maker(&cfg, "q", &steps)), ["sample-5"]);
        steps.insert("sample-5".into(), done(json!("FOUR")));
        // four: 3 votes, five: 1; the first answer of the winner.
        assert_eq!(maker(&cfg, "q", &steps), Next::Complete(json!("Four")));
    }

    #[test]
    fn maker_fails_without_a_lead_at_max_samples() {
        let cfg = maker_cfg(2, 2, MatchStrategy::Exact);
        let steps = BTreeMap::from([
            ("sample-1".to_string(), done(json!("a"))),
            ("sample-2".to_string(), done(json!("b"))),
        ]);
        match maker(&cfg, "q", &steps) {
            Next::Fail(e) => assert_eq!(e.code.as_str(), "no_consensus"),
            other => panic!("{other:?}"),
        }
        let structured = Maker {
            red_flag_max_length: None,
            ..maker_cfg(2, 2, MatchStrategy::Structured)
        };
        let same = BTreeMap::from([
            ("sample-1".to_string(), done(json!("{\"a\":1,\"b\":2}"))),
            ("sample-2".to_string(), done(json!({"b": 2, "a": 1}))),
        ]);
        assert!(matches!(maker(&structured, "q", &same), Next::Complete(_)));
    }
}
