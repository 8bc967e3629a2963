//! What a conversation does next, decided from what the store holds of
//! it: its turns (`turn-<n>`, from 1) and its tool calls
//! (`turn-<n>.call-<i>`, the `i`th call of turn `n`'s message), each a
//! task. A pure function, so a restarted orchestrator decides the same.
//!
//! - No turn yet: the first one starts.
//! - The last turn runs: wait. It failed: the conversation fails with
//!   its error.
//! - Its message calls no tool: the conversation's answer is its text.
//! - It calls tools: past the bounds (turns, tokens), the conversation
//!   fails; else the calls not started start, each refused call (a tool
//!   the card does not offer, arguments that are not a JSON object, too
//!   deep) answered with why (a call that started is not checked again);
//!   once every call ended, the next turn
//!   starts with the last request, the model's message and each call's
//!   result as a `tool` message, in the order of the calls.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::{AssistantMessage, ToolCall, TurnResult, Usage};
use crate::event::ErrorInfo;
use crate::run::StepTask;
use crate::task::TaskState;

/// The step of turn `n`.
pub fn turn_step(n: u32) -> String {
    format!("turn-{n}")
}

/// The step of the `i`th tool call of turn `n`.
pub fn call_step(n: u32, i: usize) -> String {
    format!("turn-{n}.call-{i}")
}

/// How far a conversation may go.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Model calls, at most.
    pub max_turns: u32,
    /// Tokens, at most.
    pub token_budget: Option<u64>,
    /// A router: the first turn must call a tool, whose result (once its
    /// call ends) is the answer.
    pub route: bool,
}

/// What to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// Start the first turn (its request comes from the card).
    First,
    /// Start turn `n` with `request`; `refused` are the calls of the turn
    /// before that were not run (their id, tool and why).
    Turn {
        /// Its number.
        n: u32,
        /// The Chat Completions request.
        request: Map<String, Value>,
        /// The calls refused.
        refused: Vec<(String, String, String)>,
    },
    /// Start these calls of turn `n` (with their index).
    Calls {
        /// The turn.
        n: u32,
        /// The calls not started yet.
        calls: Vec<(usize, ToolCall)>,
    },
    /// A turn or a call is running.
    Wait,
    /// The conversation's answer: the model's last text.
    Complete(String),
    /// A router's answer: the result of the agent its model called.
    Routed(Value),
    /// The conversation fails.
    Fail(ErrorInfo),
}

/// Decides from `steps` (the conversation's tasks by step), `last` (reads
/// the request of its last turn, only when the next turn needs it),
/// `refuse` (why a call may not run, if so)
/// and `limits`.
pub fn plan(
    steps: &BTreeMap<String, StepTask>,
    last: &dyn Fn() -> Option<Map<String, Value>>,
    refuse: &dyn Fn(&ToolCall) -> Option<String>,
    limits: Limits,
) -> Next {
    let Some(n) = last_turn(steps) else {
        return Next::First;
    };
    let turn = &steps[&turn_step(n)];
    match turn.state {
        TaskState::Completed => {}
        s if !s.is_terminal() => return Next::Wait,
        s => {
            return Next::Fail(turn.error.clone().unwrap_or_else(|| {
                ErrorInfo::new("model_call_failed", format!("turn {n} ended {s}"), false)
            }));
        }
    }
    let result = match read_turn(turn) {
        Ok(r) => r,
        Err(why) => {
            return Next::Fail(ErrorInfo::new(
                "bad_turn",
                format!("turn {n}: {why}"),
                false,
            ));
        }
    };
    let message = result.message;
    if limits.route {
        return route(steps, n, &message, refuse);
    }
    if message.tool_calls.is_empty() {
        return Next::Complete(message.content.unwrap_or_default());
    }
    let spent = spent(steps, n);
    if let Some(budget) = limits.token_budget
        && spent > budget
    {
        return Next::Fail(ErrorInfo::new(
            "token_budget",
            format!(
                "the conversation spent {spent} tokens, over its budget of {budget}: the model is not called again"
            ),
            false,
        ));
    }
    if n >= limits.max_turns {
        return Next::Fail(ErrorInfo::new(
            "turn_limit",
            format!(
                "the model still calls tools after {n} turns, the most a conversation may take (llm.max_turns, or the card's max_iterations)"
            ),
            false,
        ));
    }
    let mut to_start = Vec::new();
    let mut running = false;
    let mut answers = Vec::new();
    let mut refused = Vec::new();
    for (i, call) in message.tool_calls.iter().enumerate() {
        // A call that started passed the checks then: its task, not the
        // checks again, says how it went.
        let Some(t) = steps.get(&call_step(n, i)) else {
            match refuse(call) {
                Some(why) => {
                    answers.push(tool_message(call, json!({"error": why}).to_string()));
                    refused.push((call.id.clone(), call.function.name.clone(), why));
                }
                None => to_start.push((i, call.clone())),
            }
            continue;
        };
        if t.state.is_terminal() {
            answers.push(tool_message(call, call_answer(t)));
        } else {
            running = true;
        }
    }
    if !to_start.is_empty() {
        return Next::Calls { n, calls: to_start };
    }
    if running {
        return Next::Wait;
    }
    let Some(mut request) = last() else {
        return Next::Fail(ErrorInfo::new(
            "bad_turn",
            format!("turn {n}'s request cannot be read"),
            false,
        ));
    };
    let messages = request
        .entry("messages")
        .or_insert_with(|| Value::Array(Vec::new()));
    if let Value::Array(list) = messages {
        list.push(assistant(&message));
        list.extend(answers);
    }
    Next::Turn {
        n: n + 1,
        request,
        refused,
    }
}

/// A router's next step once its model answered: its first call runs
/// and its result is the answer; a model that calls none, or calls what
/// may not be, fails the task.
fn route(
    steps: &BTreeMap<String, StepTask>,
    n: u32,
    message: &AssistantMessage,
    refuse: &dyn Fn(&ToolCall) -> Option<String>,
) -> Next {
    let Some(call) = message.tool_calls.first() else {
        return Next::Fail(ErrorInfo::new(
            "no_route",
            format!(
                "the router's model chose no agent: {}",
                message.content.as_deref().unwrap_or_default()
            ),
            false,
        ));
    };
    if let Some(why) = refuse(call) {
        return Next::Fail(ErrorInfo::new("no_route", why, false));
    }
    match steps.get(&call_step(n, 0)) {
        None => Next::Calls {
            n,
            calls: vec![(0, call.clone())],
        },
        Some(t) if !t.state.is_terminal() => Next::Wait,
        Some(t) if t.state == TaskState::Completed => {
            Next::Routed(t.result.clone().unwrap_or(Value::Null))
        }
        Some(t) => Next::Fail(t.error.clone().unwrap_or_else(|| {
            ErrorInfo::new(
                "step_failed",
                format!("the agent routed to ended {}", t.state),
                false,
            )
        })),
    }
}

/// The number of the last turn started.
fn last_turn(steps: &BTreeMap<String, StepTask>) -> Option<u32> {
    steps
        .keys()
        .filter_map(|k| k.strip_prefix("turn-")?.parse::<u32>().ok())
        .max()
}

/// A turn's result.
pub fn read_turn(turn: &StepTask) -> Result<TurnResult, super::LlmError> {
    let value = turn.result.clone().ok_or(super::LlmError::NoResult)?;
    serde_json::from_value(value).map_err(|e| super::LlmError::NotAnAnswer(e.to_string()))
}

/// The tokens turns 1 to `n` spent.
pub fn spent(steps: &BTreeMap<String, StepTask>, n: u32) -> u64 {
    (1..=n)
        .filter_map(|k| steps.get(&turn_step(k)))
        .filter_map(|t| read_turn(t).ok()?.usage)
        .map(|u: Usage| u.total())
        .sum()
}

/// The model's message as the next request repeats it.
fn assistant(message: &AssistantMessage) -> Value {
    let mut m = json!({"role": "assistant", "content": message.content});
    if !message.tool_calls.is_empty() {
        m["tool_calls"] = json!(message.tool_calls);
    }
    m
}

fn tool_message(call: &ToolCall, content: String) -> Value {
    json!({"role": "tool", "tool_call_id": call.id, "content": content})
}

/// What an ended call's task tells the model.
fn call_answer(t: &StepTask) -> String {
    match (t.state, &t.result, &t.error) {
        (TaskState::Completed, Some(Value::String(s)), _) => s.clone(),
        (TaskState::Completed, Some(v), _) => v.to_string(),
        (TaskState::Completed, None, _) => "null".into(),
        (state, _, Some(e)) => {
            json!({"error": {"state": state, "code": e.code, "message": e.message}}).to_string()
        }
        (state, _, None) => json!({"error": {"state": state}}).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::{TaskId, Timestamp};

    fn step(state: TaskState, result: Option<Value>) -> StepTask {
        StepTask {
            task_id: TaskId::new(),
            state,
            result,
            error: None,
            updated_at: Timestamp::now(),
        }
    }

    fn said(text: &str, tokens: u64) -> Value {
        json!({"message": {"content": text}, "usage": {"prompt_tokens": tokens, "completion_tokens": 0}, "latency_ms": 1})
    }

    fn calls(names: &[&str], tokens: u64) -> Value {
        let calls: Vec<Value> = names
            .iter()
            .enumerate()
            .map(|(i, n)| json!({"id": format!("c{i}"), "type": "function", "function": {"name": n, "arguments": "{}"}}))
            .collect();
        json!({"message": {"content": null, "tool_calls": calls}, "usage": {"total_tokens": tokens}, "latency_ms": 1})
    }

    const LIMITS: Limits = Limits {
        max_turns: 3,
        token_budget: None,
        route: false,
    };

    fn none(_: &ToolCall) -> Option<String> {
        None
    }

    #[test]
    fn a_conversation_starts_with_its_first_turn_and_waits_for_it() {
        let mut steps = BTreeMap::new();
        assert_eq!(plan(&steps, &|| None, &none, LIMITS), Next::First);
        steps.insert(turn_step(1), step(TaskState::Working, None));
        assert_eq!(plan(&steps, &|| None, &none, LIMITS), Next::Wait);
    }

    #[test]
    fn an_answer_without_tools_ends_it() {
        let steps = BTreeMap::from([(
            turn_step(1),
            step(TaskState::Completed, Some(said("hi", 5))),
        )]);
        assert_eq!(
            plan(&steps, &|| None, &none, LIMITS),
            Next::Complete("hi".into())
        );
    }

    #[test]
    fn a_failed_turn_fails_it_with_the_turns_error() {
        let mut t = step(TaskState::Failed, None);
        t.error = Some(ErrorInfo::new("model_refused", "bad key", false));
        let steps = BTreeMap::from([(turn_step(1), t)]);
        let Next::Fail(e) = plan(&steps, &|| None, &none, LIMITS) else {
            panic!()
        };
        assert_eq!(e.code.as_str(), "model_refused");
    }

    #[test]
    fn tool_calls_start_once_then_the_next_turn_has_their_results_in_order() {
        let mut steps = BTreeMap::from([(
            turn_step(1),
            step(TaskState::Completed, Some(calls(&["a", "b"], 10))),
        )]);
        let request = json!({"messages": [{"role": "user", "content": "q"}]});
        let last = || request.as_object().cloned();
        let Next::Calls { n, calls: started } = plan(&steps, &last, &none, LIMITS) else {
            panic!()
        };
        assert_eq!((n, started.len()), (1, 2));
        steps.insert(
            call_step(1, 1),
            step(TaskState::Completed, Some(json!({"b": 2}))),
        );
        let Next::Calls { calls: started, .. } = plan(&steps, &last, &none, LIMITS) else {
            panic!()
        };
        assert_eq!(started.iter().map(|c| c.0).collect::<Vec<_>>(), [0]);
        steps.insert(call_step(1, 0), step(TaskState::Working, None));
        assert_eq!(plan(&steps, &last, &none, LIMITS), Next::Wait);
        steps.insert(
            call_step(1, 0),
            step(TaskState::Completed, Some(json!("A"))),
        );
        let Next::Turn {
            n,
            request,
            refused,
        } = plan(&steps, &last, &none, LIMITS)
        else {
            panic!()
        };
        assert_eq!(n, 2);
        assert!(refused.is_empty());
        let m = request["messages"].as_array().unwrap();
        assert_eq!(m.len(), 4);
        assert_eq!(m[1]["role"], "assistant");
        assert_eq!(m[1]["tool_calls"][1]["function"]["name"], "b");
        assert_eq!(
            (m[2]["tool_call_id"].as_str(), m[2]["content"].as_str()),
            (Some("c0"), Some("A"))
        );
        assert_eq!(
            (m[3]["tool_call_id"].as_str(), m[3]["content"].as_str()),
            (Some("c1"), Some(r#"{"b":2}"#))
        );
    }

    #[test]
    fn a_refused_call_runs_nothing_and_the_model_is_told_why() {
        let steps = BTreeMap::from([(
            turn_step(1),
            step(TaskState::Completed, Some(calls(&["evil"], 1))),
        )]);
        let request = json!({"messages": []});
        let last = || request.as_object().cloned();
        let refuse = |c: &ToolCall| (c.function.name == "evil").then(|| "not offered".to_string());
        let Next::Turn {
            request, refused, ..
        } = plan(&steps, &last, &refuse, LIMITS)
        else {
            panic!()
        };
        assert_eq!(
            refused,
            [("c0".into(), "evil".into(), "not offered".into())]
        );
        assert_eq!(
            request["messages"][1]["content"],
            r#"{"error":"not offered"}"#
        );
    }

    #[test]
    fn the_bounds_stop_a_runaway_loop() {
        let mut steps = BTreeMap::new();
        for n in 1..=3 {
            steps.insert(
                turn_step(n),
                step(TaskState::Completed, Some(calls(&["a"], 10))),
            );
            steps.insert(call_step(n, 0), step(TaskState::Completed, Some(json!(1))));
        }
        let Next::Fail(e) = plan(&steps, &|| None, &none, LIMITS) else {
            panic!()
        };
        assert_eq!(e.code.as_str(), "turn_limit");
        let budget = Limits {
            max_turns: 10,
            token_budget: Some(25),
            route: false,
        };
        let Next::Fail(e) = plan(&steps, &|| None, &none, budget) else {
            panic!()
        };
        assert_eq!(e.code.as_str(), "token_budget");
        assert!(e.message.contains("30 tokens"), "{}", e.message);
    }
}
