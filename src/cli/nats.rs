//! `nats config`: the NATS users and permissions of a deployment.

use crate::cli::output::outln;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use orchestrator::agent::AgentCard;
use orchestrator::bus::{Names, permissions};
use serde_json::json;

use super::offline::fail;

#[derive(Args)]
pub struct ConfigArgs {
    /// Agent cards: every `*/agent.json` under this directory gets a user.
    #[arg(long, default_value = "agents")]
    agents: PathBuf,
    /// Where to write `auth.conf` and the seed files (created if missing;
    /// existing seeds are kept).
    #[arg(long, default_value = "data/nats-auth")]
    dir: PathBuf,
    /// The subject prefix of the deployment (`bus.prefix`).
    #[arg(long, default_value = "orch")]
    prefix: String,
    /// Print the outcome as JSON.
    #[arg(long)]
    json: bool,
}

pub fn config(args: &ConfigArgs) -> ExitCode {
    let cards = match AgentCard::load_all(&args.agents) {
        Ok(cards) => cards,
        Err(e) => return fail(args.json, "invalid_card", &e.to_string()),
    };
    let agents: Vec<_> = cards.into_iter().map(|(c, _)| c.name).collect();
    match permissions::write(&args.dir, &Names::new(&args.prefix), &agents) {
        Ok(files) => {
            if args.json {
                outln!("{}", json!({"ok": true, "files": files}));
            } else {
                outln!(
                    "server: include {} from the nats-server configuration",
                    files.auth_conf.display()
                );
                for user in &files.users {
                    outln!("{:<24} NATS_NKEY={}", user.name, user.seed_file.display());
                }
            }
            ExitCode::SUCCESS
        }
        Err(e) => fail(args.json, "write_failed", &e),
    }
}
