//! `keys generate`: a key pair for task tokens; `keys api-key`: a key for
//! a caller of the API.

use crate::cli::output::outln;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use orchestrator::task_token::keys::{self, KeyKind};
use serde_json::json;

use super::offline::fail;

#[derive(Args)]
pub struct GenerateArgs {
    /// Where to write the files (created if missing).
    #[arg(long, default_value = "data/keys")]
    dir: PathBuf,
    /// EdDSA (Ed25519, the default) or HS256 (a shared secret, for
    /// development only: whoever can verify can also sign).
    #[arg(long, value_enum, default_value_t = Algorithm::Eddsa)]
    algorithm: Algorithm,
    /// Replace existing key files (tokens signed with the old key no
    /// longer verify).
    #[arg(long)]
    force: bool,
    /// Print JSON (the global `--json`).
    #[arg(skip)]
    pub json: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum Algorithm {
    #[value(name = "EdDSA", alias = "eddsa")]
    Eddsa,
    #[value(name = "HS256", alias = "hs256")]
    Hs256,
}

pub fn generate(args: &GenerateArgs) -> ExitCode {
    let kind = match args.algorithm {
        Algorithm::Eddsa => KeyKind::EdDsa,
        Algorithm::Hs256 => KeyKind::Hs256,
    };
    match keys::generate(&args.dir, kind, args.force) {
        Ok(files) => {
            if args.json {
                outln!("{}", json!({"ok": true, "keys": files}));
            } else {
                outln!(
                    "signing key (orchestrator, ORCH_SIGNING_KEY): {}",
                    files.signing.display()
                );
                outln!(
                    "verify key  (workers, ORCH_VERIFY_KEY):       {}",
                    files.verify.display()
                );
                if kind == KeyKind::Hs256 {
                    outln!("HS256 is for development: the same secret signs and verifies.");
                }
            }
            ExitCode::SUCCESS
        }
        Err(e) => fail(args.json, "key_error", &e.to_string()),
    }
}

#[derive(Args)]
pub struct ApiKeyArgs {
    /// Who the key's holder is (the `sub` of its tasks, the actor in the
    /// audit trail).
    #[arg(long)]
    principal: String,
    /// A scope it may use (repeat; `Files.*` grants every `Files.` scope,
    /// `*` every scope). See docs/security.md for the API's own scopes.
    #[arg(long = "scope")]
    scopes: Vec<String>,
    /// Print JSON (the global `--json`).
    #[arg(skip)]
    pub json: bool,
}

pub fn api_key(args: &ApiKeyArgs) -> ExitCode {
    use orchestrator::access::{ApiKeyEntry, ApiKeys, Grants, api_keys};
    let key = api_keys::generate();
    let entry = ApiKeyEntry {
        principal: args.principal.clone(),
        scopes: Grants::new(args.scopes.iter().cloned()),
        sha256: api_keys::hash(&key),
    };
    // The entry must be one the orchestrator accepts.
    if let Err(e) = ApiKeys::new(std::slice::from_ref(&entry)) {
        // Said of the entry being made, not of a settings file's.
        let why = match e {
            orchestrator::access::AccessError::Setting { why, .. } => why,
            other => other.to_string(),
        };
        return fail(args.json, "invalid_field", &why);
    }
    if args.json {
        outln!("{}", json!({"ok": true, "api_key": key, "entry": entry}));
    } else {
        outln!("API key (give it to the caller; it is not stored anywhere):\n  {key}\n");
        outln!("add this to `api_auth.api_keys` in the settings file:");
        outln!("  {}", json!(entry));
    }
    ExitCode::SUCCESS
}
