//! `nats config`: the NATS users and permissions of a deployment.

use crate::cli::output::outln;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use orchestrator::agent::{Catalog, GitOptions};
use orchestrator::bus::{Names, permissions};
use serde_json::json;

use super::offline::fail;

#[derive(Args)]
pub struct ConfigArgs {
    /// Agent files or directories (any format `run --agents` reads):
    /// every agent declared gets a user. Repeatable.
    #[arg(long, default_value = "agents")]
    agents: Vec<PathBuf>,
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
    let catalog = Catalog::load(&args.agents, &GitOptions::default());
    if let Some(e) = catalog.errors.first() {
        return fail(args.json, "invalid_card", &e.to_string());
    }
    let agents: Vec<_> = catalog.agents.into_keys().collect();
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
        Err(e) => fail(args.json, "write_failed", &e.to_string()),
    }
}
