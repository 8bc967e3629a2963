//! The AgentCard types and the attributes each allows (the RFC's strict
//! validator table), and the checks of a card's type and attributes
//! against it.

use serde_json::{Map, Value};

use crate::source::{FieldProblem, nearest};

/// The card types.
pub(super) const TYPES: [&str; 8] = [
    "agent",
    "chain",
    "parallel",
    "evaluator_optimizer",
    "router",
    "orchestrator",
    "iterative_planner",
    "MAKER",
];

/// Every type's attributes; `schema_version` and `type` are allowed on
/// all.
pub(super) const COMMON: [&str; 5] = ["name", "instruction", "description", "default", "tool_only"];

pub(super) fn allowed(kind: &str) -> &'static [&'static str] {
    match kind {
        "agent" => &[
            "agents",
            "servers",
            "tools",
            "resources",
            "prompts",
            "skills",
            "model",
            "use_history",
            "request_params",
            "human_input",
            "api_key",
            "history_mode",
            "max_parallel",
            "child_timeout_sec",
            "max_display_instances",
            "function_tools",
            "tool_hooks",
            "shell",
            "cwd",
            "messages",
        ],
        "chain" => &["sequence", "cumulative"],
        "parallel" => &["fan_out", "fan_in", "include_request"],
        "evaluator_optimizer" => &[
            "generator",
            "evaluator",
            "min_rating",
            "max_refinements",
            "refinement_instruction",
            "messages",
        ],
        "router" => &[
            "agents",
            "servers",
            "tools",
            "resources",
            "prompts",
            "model",
            "use_history",
            "request_params",
            "human_input",
            "api_key",
            "messages",
        ],
        "orchestrator" => &[
            "agents",
            "model",
            "use_history",
            "request_params",
            "human_input",
            "api_key",
            "plan_type",
            "plan_iterations",
            "messages",
        ],
        "iterative_planner" => &[
            "agents",
            "model",
            "request_params",
            "api_key",
            "plan_iterations",
            "messages",
        ],
        "MAKER" => &[
            "worker",
            "k",
            "max_samples",
            "match_strategy",
            "red_flag_max_length",
            "messages",
        ],
        _ => &[],
    }
}

/// The attributes that name other agents, and whether each is a list.
pub(super) const REFERENCES: [(&str, bool); 7] = [
    ("agents", true),
    ("sequence", true),
    ("fan_out", true),
    ("fan_in", false),
    ("generator", false),
    ("evaluator", false),
    ("worker", false),
];

/// The card's `type` (taken out of `v`; `agent` when absent), or the
/// problem of one that is not a type.
pub(super) fn kind_of(v: &mut Map<String, Value>) -> Result<String, FieldProblem> {
    match v.remove("type") {
        None => Ok("agent".to_string()),
        Some(Value::String(t)) if TYPES.contains(&t.as_str()) => Ok(t),
        Some(other) => {
            let written = other
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| other.to_string());
            let mut m = format!("`{written}` is not a card type ({})", TYPES.join(", "));
            if let Some(near) = nearest(&written, TYPES) {
                m.push_str(&format!("; did you mean `{near}`?"));
            }
            Err(FieldProblem::new("type", m))
        }
    }
}

/// The problems of `v`'s attributes as a `kind` card's: a
/// `schema_version` that is not an integer (taken out), and each attribute
/// the type does not allow, with where it belongs or the nearest allowed.
pub(super) fn check_attributes(
    kind: &str,
    v: &mut Map<String, Value>,
    problems: &mut Vec<FieldProblem>,
) {
    if let Some(s) = v.remove("schema_version")
        && !s.is_i64()
        && !s.is_u64()
    {
        problems.push(FieldProblem::new(
            "schema_version",
            format!("must be an integer, not {s}"),
        ));
    }
    let own = allowed(kind);
    for key in v.keys() {
        if COMMON.contains(&key.as_str()) || own.contains(&key.as_str()) {
            continue;
        }
        let mut m = format!("not an attribute of `{kind}` cards");
        let others: Vec<&str> = TYPES
            .iter()
            .filter(|t| allowed(t).contains(&key.as_str()))
            .copied()
            .collect();
        let everywhere = TYPES.iter().flat_map(|t| allowed(t).iter().copied());
        if !others.is_empty() {
            m.push_str(&format!(" (it is one of `{}` cards)", others.join("`, `")));
        } else if let Some(near) = nearest(key, COMMON.iter().chain(own).copied()) {
            m.push_str(&format!("; did you mean `{near}`?"));
        } else if let Some(near) = nearest(key, everywhere) {
            let of: Vec<&str> = TYPES
                .iter()
                .filter(|t| allowed(t).contains(&near))
                .copied()
                .collect();
            m.push_str(&format!(
                "; did you mean `{near}` (of `{}` cards)?",
                of.join("`, `")
            ));
        }
        problems.push(FieldProblem::new(key.clone(), m));
    }
}
