//! `orchestrator validate`: trigger files and agent cards checked offline.

use crate::cli::output::outln;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use orchestrator::trigger::validate as check;
use serde_json::json;

#[derive(Args)]
pub struct ValidateArgs {
    /// Trigger files, agent files of any format (agent.json,
    /// registry.json, PromptPacks, AgentCards), agent directories,
    /// directories of agents or of triggers. Without any: `triggers` and
    /// `agents`.
    paths: Vec<PathBuf>,
    /// Where `orchestrator run` keeps its data: a registry's git agents
    /// already cloned there are checked (validate clones nothing).
    #[arg(long, env = "ORCH_DATA_DIR", default_value = "data")]
    data_dir: PathBuf,
    /// Print JSON (the global `--json`).
    #[arg(skip)]
    pub json: bool,
}

/// Exit 0 when nothing is wrong, 1 listing every problem otherwise.
pub fn validate(args: ValidateArgs) -> ExitCode {
    let paths = if args.paths.is_empty() {
        vec![PathBuf::from("triggers"), PathBuf::from("agents")]
    } else {
        args.paths
    };
    let git = orchestrator::agent::GitOptions {
        dir: args.data_dir.join("agents-git"),
        ..orchestrator::agent::GitOptions::default()
    };
    let outcome = check(&paths, &git);
    if args.json {
        outln!(
            "{}",
            json!({
                "ok": outcome.ok(),
                "triggers": outcome.triggers,
                "agents": outcome.agents,
                "problems": outcome.problems,
                "warnings": outcome.warnings,
            })
        );
    } else {
        for p in &outcome.problems {
            outln!("{p}");
        }
        for w in &outcome.warnings {
            outln!("warning: {w}");
        }
        let checked = format!(
            "{} trigger(s) and {} agent(s) without problems",
            outcome.triggers.len(),
            outcome.agents.len()
        );
        if outcome.ok() {
            outln!("ok: {checked}");
        } else {
            outln!("{} problem(s); {checked}", outcome.problems.len());
        }
        if outcome.agents.is_empty() {
            outln!(
                "note: no agent card loaded, so the triggers' agents, skills and scopes were not checked"
            );
        }
    }
    if outcome.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
