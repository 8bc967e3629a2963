//! Where a client command calls, and with which credential: each from its
//! flag, else its variable (clap reads both), else the chosen profile of
//! the client file, else the default. `docs/cli.md` ("Client profiles")
//! is the contract.
//!
//! The client file is `$ORCH_CLIENT_CONFIG`, else
//! `$XDG_CONFIG_HOME/orchestrator/client.json`, else
//! `~/.config/orchestrator/client.json`:
//!
//! ```json
//! {"profiles": {
//!   "default": {"server": "http://127.0.0.1:8080", "api_key_file": "data/keys/admin.api-key"},
//!   "prod": {"server": "https://orchestrator.example.com", "api_key": "orch_…"}
//! }}
//! ```
//!
//! The profile is `--profile` (`ORCH_PROFILE`), else `default`. With no
//! credential from any of them, the administrator key that `orchestrator
//! run` makes in `./data/keys/admin.api-key` is used when it exists, and
//! a note on a terminal says so.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The default address.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:8080";

/// The key `orchestrator run` makes in its default data directory.
const LOCAL_ADMIN_KEY: &str = "data/keys/admin.api-key";

/// The client file.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ClientFile {
    #[serde(default)]
    profiles: BTreeMap<String, Profile>,
}

/// One profile: an orchestrator and a credential for it.
#[derive(Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
struct Profile {
    server: Option<String>,
    api_key: Option<String>,
    /// A file holding the API key (relative to the client file's
    /// directory).
    api_key_file: Option<PathBuf>,
    bearer_token: Option<String>,
}

/// What a client command calls with.
pub struct Chosen {
    pub server: String,
    pub credential: Option<String>,
}

/// The client file's path, by the search order.
pub fn client_file() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("ORCH_CLIENT_CONFIG") {
        return Some(PathBuf::from(p));
    }
    let config = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(config.join("orchestrator").join("client.json"))
}

/// The address and credential from `server` and `credential` (flags or
/// variables), the profile `profile` and the defaults.
pub fn resolve(
    server: Option<String>,
    credential: Option<String>,
    profile: Option<&str>,
) -> Result<Chosen, String> {
    let file = client_file();
    let from_file = match &file {
        Some(path) if path.exists() => Some((path.clone(), read(path)?)),
        _ => None,
    };
    let chosen = match (&from_file, profile) {
        (Some((path, f)), Some(name)) => Some(f.profiles.get(name).cloned().ok_or_else(|| {
            format!(
                "{}: no profile `{name}` (it has: {})",
                path.display(),
                f.profiles.keys().cloned().collect::<Vec<_>>().join(", ")
            )
        })?),
        (Some((_, f)), None) => f.profiles.get("default").cloned(),
        (None, Some(name)) => {
            return Err(format!(
                "--profile {name}: there is no client file ({})",
                file.map(|p| p.display().to_string())
                    .unwrap_or_else(|| "no HOME to find it in".into())
            ));
        }
        (None, None) => None,
    }
    .unwrap_or_default();
    let base = from_file
        .as_ref()
        .and_then(|(p, _)| p.parent())
        .unwrap_or(Path::new("."));
    let credential = match credential {
        Some(c) => Some(c),
        None => match (&chosen.api_key, &chosen.api_key_file, &chosen.bearer_token) {
            (Some(k), _, _) => Some(k.clone()),
            (None, Some(f), _) => Some(key_from(&base.join(f))?),
            (None, None, Some(t)) => Some(t.clone()),
            (None, None, None) => local_admin_key(),
        },
    };
    Ok(Chosen {
        server: server
            .or(chosen.server)
            .unwrap_or_else(|| DEFAULT_SERVER.to_string()),
        credential,
    })
}

fn read(path: &Path) -> Result<ClientFile, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

fn key_from(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(text.trim().to_string())
}

/// The administrator key `orchestrator run` made in this directory, if
/// there is one; a terminal is told it is used.
fn local_admin_key() -> Option<String> {
    let key = key_from(Path::new(LOCAL_ADMIN_KEY)).ok()?;
    if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        eprintln!(
            "note: calling with the administrator key in {LOCAL_ADMIN_KEY} (set ORCH_API_KEY or a profile to use another)"
        );
    }
    Some(key)
}
