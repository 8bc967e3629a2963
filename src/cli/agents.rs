//! `orchestrator agents list|show|graph`: the declared agents (every
//! format) and the live ones together, from the API.

use std::process::ExitCode;

use clap::Subcommand;
use orchestrator::agent::{Edge, mermaid};
use serde_json::{Value, json};

use super::client::{Api, ClientArgs, finish};
use super::output::{ago, list_table, outln, s, table};

#[derive(Subcommand)]
pub enum AgentsCommand {
    /// The declared agents with their format, skills and live replicas,
    /// the cards' workflows, and the agent files' problems.
    #[command(after_help = "Examples:
  orchestrator agents list --context work,shared")]
    List {
        /// Only agents of these contexts (personal, work, shared;
        /// comma-separated).
        #[arg(long)]
        context: Option<String>,
        /// Agents usable only as tools too.
        #[arg(long)]
        tool_only: bool,
    },
    /// One agent: where it was read from (file, format, git commit), its
    /// skills, and each live replica with its last heartbeat.
    #[command(after_help = "Examples:
  orchestrator agents show knowledge-agent")]
    Show {
        /// The agent's id.
        name: String,
    },
    /// The topology as a Mermaid flowchart: who may call whom (agent
    /// dependencies, PromptPack tool references), the agents each card
    /// workflow and each trigger runs.
    #[command(after_help = "Examples:
  orchestrator agents graph > agents.mmd")]
    Graph,
}

pub async fn agents(args: &ClientArgs, command: AgentsCommand) -> ExitCode {
    let api = match Api::new(args) {
        Ok(api) => api,
        Err(f) => return f.report(args.json),
    };
    match command {
        AgentsCommand::List { context, tool_only } => {
            let mut query = Vec::new();
            if let Some(c) = context {
                query.push(format!("context={c}"));
            }
            if tool_only {
                query.push("tool_only=true".into());
            }
            let path = format!("/v1/agents?{}", query.join("&"));
            finish(args, api.get(&path).await, print_list)
        }
        AgentsCommand::Show { name } => finish(
            args,
            api.get(&format!("/v1/agents/{name}")).await,
            print_one,
        ),
        AgentsCommand::Graph => {
            let result = api.get("/v1/agents").await.map(|(v, code)| {
                let edges: Vec<Edge> =
                    serde_json::from_value(v["edges"].clone()).unwrap_or_default();
                (json!({"edges": edges, "mermaid": mermaid(&edges)}), code)
            });
            finish(args, result, |v| outln!("{}", s(&v["mermaid"]).trim_end()))
        }
    }
}

fn skills_of(card: &Value) -> String {
    card["skills"]
        .as_array()
        .map(|ss| {
            ss.iter()
                .map(|sk| s(&sk["id"]))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

fn print_list(v: &Value) {
    list_table(
        v,
        "agents",
        &["AGENT", "FORMAT", "VERSION", "SKILLS", "LIVE", "FILE"],
        |a| {
            let live = a["instances"].as_array().map(Vec::len).unwrap_or(0);
            vec![
                s(&a["card"]["name"]),
                s(&a["card"]["origin"]["format"]),
                s(&a["card"]["version"]),
                skills_of(&a["card"]),
                live.to_string(),
                s(&a["card"]["origin"]["file"]),
            ]
        },
    );
    let workflows: Vec<Vec<String>> = v["workflows"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|w| {
            let members = w["pattern"]
                .as_object()
                .map(|p| {
                    p.iter()
                        .filter(|(k, _)| *k != "type")
                        .flat_map(|(_, m)| match m {
                            Value::Array(list) => list.iter().map(s).collect(),
                            Value::String(one) => vec![one.clone()],
                            _ => Vec::new(),
                        })
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default();
            vec![
                s(&w["name"]),
                s(&w["pattern"]["type"]),
                members,
                s(&w["origin"]["file"]),
            ]
        })
        .collect();
    if !workflows.is_empty() {
        outln!();
        table(&["WORKFLOW", "TYPE", "AGENTS", "FILE"], &workflows);
    }
    let unlisted = v["unlisted_instances"]
        .as_array()
        .map(Vec::len)
        .unwrap_or(0);
    if unlisted > 0 {
        outln!("\n{unlisted} live instance(s) of agents no file declares");
    }
    for p in v["problems"].as_array().into_iter().flatten() {
        outln!("problem: {}", diagnostic(p));
    }
    let warnings = v["warnings"].as_array().map(Vec::len).unwrap_or(0);
    if warnings > 0 {
        outln!("{warnings} warning(s): `orchestrator validate` lists them");
    }
}

/// A diagnostic as `file:line: field: message`.
fn diagnostic(d: &Value) -> String {
    let line = d["line"]
        .as_u64()
        .map(|l| format!(":{l}"))
        .unwrap_or_default();
    let field = d["field"]
        .as_str()
        .map(|f| format!("{f}: "))
        .unwrap_or_default();
    format!("{}{line}: {field}{}", s(&d["file"]), s(&d["message"]))
}

fn print_one(v: &Value) {
    let card = &v["card"];
    outln!(
        "{} {} ({})",
        s(&card["name"]),
        s(&card["version"]),
        s(&card["origin"]["format"])
    );
    outln!("{}", s(&card["description"]));
    let origin = &card["origin"];
    if !origin.is_null() {
        outln!("file: {}", s(&origin["file"]));
        if let Some(commit) = origin["commit"].as_str() {
            outln!("commit: {commit}");
        }
        if let Some(registry) = origin["registry"].as_str() {
            outln!("registry: {registry}");
        }
    }
    for (label, key) in [("context", "context"), ("invocation", "invocation")] {
        let value = &card[key];
        if !value.is_null() {
            let shown = value.get("type").map(s).unwrap_or_else(|| s(value));
            outln!("{label}: {shown}");
        }
    }
    if card["toolOnly"].as_bool() == Some(true) {
        outln!("tool only: hidden from listings and the A2A card");
    }
    let skills: Vec<Vec<String>> = card["skills"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|sk| {
            let scopes = sk["scopes"]
                .as_array()
                .map(|a| a.iter().map(s).collect::<Vec<_>>().join(" "))
                .unwrap_or_default();
            vec![s(&sk["id"]), s(&sk["description"]), scopes]
        })
        .collect();
    outln!();
    table(&["SKILL", "DESCRIPTION", "SCOPES"], &skills);
    let replicas: Vec<Vec<String>> = v["instances"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| {
            vec![
                s(&i["instance"]),
                ago(&i["started_at"]),
                i["heartbeat_age_seconds"]
                    .as_f64()
                    .map(|a| format!("{a:.1}s ago"))
                    .unwrap_or_default(),
                s(&i["in_flight"]),
            ]
        })
        .collect();
    outln!();
    if replicas.is_empty() {
        outln!("no live replica: start one with `orchestrator worker --agent <its file>`");
    } else {
        table(&["REPLICA", "STARTED", "HEARTBEAT", "IN FLIGHT"], &replicas);
    }
}
