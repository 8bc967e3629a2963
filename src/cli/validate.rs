//! `orchestrator validate`: trigger files and agent cards checked offline.

use crate::cli::output::outln;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use orchestrator::trigger::validate as check;
use serde_json::json;

#[derive(Args)]
pub struct ValidateArgs {
    /// Trigger files, agent cards, agent directories, directories of
    /// agents or of triggers. Without any: `triggers` and `agents`.
    paths: Vec<PathBuf>,
    /// Print the outcome as JSON.
    #[arg(long)]
    json: bool,
}

/// Exit 0 when nothing is wrong, 1 listing every problem otherwise.
pub fn validate(args: ValidateArgs) -> ExitCode {
    let paths = if args.paths.is_empty() {
        vec![PathBuf::from("triggers"), PathBuf::from("agents")]
    } else {
        args.paths
    };
    let outcome = check(&paths);
    if args.json {
        outln!(
            "{}",
            json!({
                "ok": outcome.ok(),
                "triggers": outcome.triggers,
                "agents": outcome.agents,
                "problems": outcome.problems,
            })
        );
    } else {
        for p in &outcome.problems {
            outln!("{p}");
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
