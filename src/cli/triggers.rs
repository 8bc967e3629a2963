//! `orchestrator triggers list`: the triggers the orchestrator has loaded,
//! and the files it could not load with why.

use std::process::ExitCode;

use clap::Subcommand;

use super::client::{Api, ClientArgs, finish};
use super::output::{ago, outln, s, table};

#[derive(Subcommand)]
pub enum TriggersCommand {
    /// List the loaded triggers, then the trigger files that have a
    /// problem.
    #[command(after_help = "Examples:
  orchestrator triggers list
  orchestrator triggers list --json")]
    List,
}

pub async fn triggers(args: &ClientArgs, command: TriggersCommand) -> ExitCode {
    let api = match Api::new(args) {
        Ok(api) => api,
        Err(f) => return f.report(args.json),
    };
    let TriggersCommand::List = command;
    let result = api.get("/v1/triggers").await;
    finish(args, result, |v| {
        let rows: Vec<Vec<String>> = v["triggers"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| {
                let steps = t["steps"].as_array().map_or(0, Vec::len);
                vec![
                    s(&t["id"]),
                    s(&t["run_mode"]),
                    steps.to_string(),
                    s(&t["name"]),
                ]
            })
            .collect();
        table(&["TRIGGER", "MODE", "STEPS", "NAME"], &rows);
        for e in v["errors"].as_array().into_iter().flatten() {
            let at = match e["line"].as_u64() {
                Some(line) => format!("{}:{line}", s(&e["file"])),
                None => s(&e["file"]),
            };
            let field = e["field"]
                .as_str()
                .map(|f| format!("{f}: "))
                .unwrap_or_default();
            eprintln!("not loaded: {at}: {field}{}", s(&e["message"]));
        }
        if !v["loaded_at"].is_null() {
            outln!("(read {})", ago(&v["loaded_at"]));
        }
        outln!("start one: orchestrator trigger ID --input JSON --wait");
    })
}
