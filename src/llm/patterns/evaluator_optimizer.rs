//! `evaluator_optimizer`: the generator answers, the evaluator rates,
//! the generator refines, until the rating or the refinement limit.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{EvaluatorOptimizer, Next, Rating, Start, message, step_error, text};
use crate::event::ErrorInfo;
use crate::run::StepTask;
use crate::task::TaskState;

/// The evaluator-optimizer loop over `request`: `generate-<n>` and
/// `evaluate-<n>` steps, from 1.
pub fn evaluator_optimizer(
    cfg: &EvaluatorOptimizer,
    request: &str,
    steps: &BTreeMap<String, StepTask>,
) -> Next {
    let mut best: Option<(Rating, Value)> = None;
    let mut n = 1;
    loop {
        let generate = format!("generate-{n}");
        let Some(g) = steps.get(&generate) else {
            let params = match n {
                1 => message(request.to_string()),
                _ => {
                    let (answer, feedback) = last_round(steps, n - 1);
                    let how = cfg.refinement_instruction.as_deref().unwrap_or(
                        "Improve your answer to the request below, following the feedback on it.",
                    );
                    message(format!(
                        "{how}\n\nRequest:\n{request}\n\nYour answer:\n{answer}\n\nFeedback:\n{feedback}"
                    ))
                }
            };
            return Next::Start(vec![Start {
                step: generate,
                agent: cfg.generator.clone(),
                params,
            }]);
        };
        match g.state {
            TaskState::Completed => {}
            s if !s.is_terminal() => return Next::Wait,
            _ => return Next::Fail(step_error(&generate, g)),
        }
        let answer = g.result.clone().unwrap_or(Value::Null);
        let evaluate = format!("evaluate-{n}");
        let Some(e) = steps.get(&evaluate) else {
            return Next::Start(vec![Start {
                step: evaluate,
                agent: cfg.evaluator.clone(),
                params: message(format!(
                    "Rate the answer to the request below as EXCELLENT, GOOD, FAIR or POOR, and say how it could be better. Reply with JSON only: {{\"rating\": \"GOOD\", \"feedback\": \"...\"}}\n\nRequest:\n{request}\n\nAnswer:\n{}",
                    text(&answer)
                )),
            }]);
        };
        match e.state {
            TaskState::Completed => {}
            s if !s.is_terminal() => return Next::Wait,
            _ => return Next::Fail(step_error(&evaluate, e)),
        }
        let Some((rating, _)) = e.result.as_ref().and_then(evaluation) else {
            return Next::Fail(ErrorInfo::new(
                "bad_evaluation",
                format!(
                    "step `{evaluate}`: the evaluator's answer names no rating (EXCELLENT, GOOD, FAIR or POOR): {}",
                    e.result.as_ref().map(text).unwrap_or_default()
                ),
                false,
            ));
        };
        if rating >= cfg.min_rating {
            return Next::Complete(answer);
        }
        // The best so far, the later one of equals.
        if best.as_ref().is_none_or(|(r, _)| rating >= *r) {
            best = Some((rating, answer));
        }
        if n > cfg.max_refinements {
            // Out of refinements: the best answer, short of the rating.
            return Next::Complete(best.map(|(_, a)| a).unwrap_or(Value::Null));
        }
        n += 1;
    }
}

/// Round `n`'s answer and its feedback, as text.
fn last_round(steps: &BTreeMap<String, StepTask>, n: u32) -> (String, String) {
    let answer = steps
        .get(&format!("generate-{n}"))
        .and_then(|t| t.result.as_ref())
        .map(text)
        .unwrap_or_default();
    let (rating, feedback) = steps
        .get(&format!("evaluate-{n}"))
        .and_then(|t| t.result.as_ref())
        .and_then(evaluation)
        .unwrap_or((Rating::Poor, String::new()));
    (answer, format!("rated {}: {feedback}", rating.name()))
}

/// An evaluator's rating and feedback: `{"rating", "feedback"}` (as a
/// value or as JSON text, in a code fence or not), else the first rating
/// word of its text, the text being the feedback.
fn evaluation(v: &Value) -> Option<(Rating, String)> {
    let object = match v {
        Value::Object(_) => Some(v.clone()),
        Value::String(s) => {
            let t = s
                .trim()
                .trim_start_matches("```json")
                .trim_start_matches("```")
                .trim_end_matches("```")
                .trim();
            serde_json::from_str::<Value>(t)
                .ok()
                .filter(Value::is_object)
        }
        _ => None,
    };
    if let Some(o) = object
        && let Some(r) = o
            .get("rating")
            .and_then(Value::as_str)
            .and_then(Rating::parse)
    {
        let feedback = o.get("feedback").map(text).unwrap_or_default();
        return Some((r, feedback));
    }
    let t = text(v);
    t.split(|c: char| !c.is_ascii_alphabetic())
        .find_map(|w| {
            (w == w.to_ascii_uppercase())
                .then(|| Rating::parse(w))
                .flatten()
        })
        .map(|r| (r, t.clone()))
}

#[cfg(test)]
mod tests {
    use super::super::testing::{done, started};
    use super::*;
    use serde_json::json;

    fn eo_cfg() -> EvaluatorOptimizer {
        EvaluatorOptimizer {
            generator: "g".parse().unwrap(),
            evaluator: "e".parse().unwrap(),
            min_rating: Rating::Good,
            max_refinements: 1,
            refinement_instruction: None,
        }
    }

    #[test]
    fn evaluator_optimizer_refines_until_the_rating_or_the_limit() {
        let cfg = eo_cfg();
        let mut steps = BTreeMap::new();
        assert_eq!(
            started(&evaluator_optimizer(&cfg, "q", &steps)),
            ["generate-1"]
        );
        steps.insert("generate-1".into(), done(json!("draft")));
        assert_eq!(
            started(&evaluator_optimizer(&cfg, "q", &steps)),
            ["evaluate-1"]
        );
        steps.insert(
            "evaluate-1".into(),
            done(json!(
                "```json\n{\"rating\": \"FAIR\", \"feedback\": \"shorter\"}\n```"
            )),
        );
        let next = evaluator_optimizer(&cfg, "q", &steps);
        let Next::Start(s) = &next else {
            panic!("{next:?}")
        };
        assert_eq!(s[0].step, "generate-2");
        let told = s[0].params["message"].as_str().unwrap();
        assert!(
            told.contains("draft") && told.contains("rated FAIR: shorter"),
            "{told}"
        );
        steps.insert("generate-2".into(), done(json!("worse")));
        steps.insert("evaluate-2".into(), done(json!("POOR, sadly")));
        // Out of refinements: the best answer.
        assert_eq!(
            evaluator_optimizer(&cfg, "q", &steps),
            Next::Complete(json!("draft"))
        );
        steps.insert("evaluate-2".into(), done(json!({"rating": "excellent"})));
        assert_eq!(
            evaluator_optimizer(&cfg, "q", &steps),
            Next::Complete(json!("worse"))
        );
        steps.insert("evaluate-2".into(), done(json!("no idea")));
        assert!(
            matches!(evaluator_optimizer(&cfg, "q", &steps), Next::Fail(e) if e.code.as_str() == "bad_evaluation")
        );
    }
}
