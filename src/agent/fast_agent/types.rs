//! The AgentCard types and the attributes each allows (the RFC's strict
//! validator table).

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
