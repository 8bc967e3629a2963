//! API keys: random secrets a caller sends as `Authorization: Bearer
//! orch_…`. The settings keep only each key's SHA-256, with the principal
//! and scopes it stands for; `orchestrator keys api-key` makes one.
//!
//! A key is 32 random bytes, so a plain SHA-256 is enough to store it (no
//! password hashing: there is nothing to guess), and looking its hash up
//! leaks nothing a caller could use.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use base64::Engine;
use rand_core::{OsRng, RngCore};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::grants::Grants;
use super::{AccessError, Principal};

/// What every API key starts with (a JWT never does).
pub const PREFIX: &str = "orch_";

/// The generated administrator key's file in the key directory.
pub const ADMIN_FILE: &str = "admin.api-key";

/// The generated administrator key's principal.
pub const ADMIN_PRINCIPAL: &str = "admin";

/// One configured API key (`api_auth.api_keys[]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKeyEntry {
    /// Who the key's holder is: the `sub` of every task it causes, the
    /// actor of every audit record.
    pub principal: String,
    /// What it may do.
    #[serde(default)]
    pub scopes: Grants,
    /// The key's SHA-256, in hex.
    pub sha256: String,
}

/// A new random key.
pub fn generate() -> String {
    let mut bytes = [0u8; 32];
    OsRng.fill_bytes(&mut bytes);
    format!(
        "{PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}

/// A key's SHA-256, in hex (what the settings keep).
pub fn hash(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// The configured keys, by hash.
#[derive(Debug, Default)]
pub struct ApiKeys(HashMap<String, Principal>);

impl ApiKeys {
    /// The keys of `entries`; a malformed hash or principal is an error
    /// naming the entry.
    pub fn new(entries: &[ApiKeyEntry]) -> Result<ApiKeys, AccessError> {
        let mut keys = HashMap::new();
        for (i, e) in entries.iter().enumerate() {
            let at = |why: String| AccessError::Setting {
                field: format!("api_auth.api_keys[{i}]"),
                why,
            };
            let hash = e.sha256.to_ascii_lowercase();
            if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(at(
                    "`sha256` must be 64 hex digits (what `orchestrator keys api-key` prints)"
                        .into(),
                ));
            }
            let principal = Principal::of_api_key(e.principal.clone(), e.scopes.clone())
                .map_err(|d| at(d.message))?;
            if keys.insert(hash, principal).is_some() {
                return Err(at("the same key is listed twice".into()));
            }
        }
        Ok(ApiKeys(keys))
    }

    /// Whether no key is configured.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The principal a presented key stands for.
    pub fn find(&self, key: &str) -> Option<&Principal> {
        self.0.get(&hash(key))
    }
}

/// The administrator key an orchestrator with no credentials configured
/// uses: read from `<key_dir>/admin.api-key`, or generated there (mode
/// 0600) on the first start. Returns its entry, and the file when it was
/// just written.
pub fn admin_key(key_dir: &Path) -> Result<(ApiKeyEntry, Option<PathBuf>), AccessError> {
    let path = key_dir.join(ADMIN_FILE);
    let (key, generated) = match std::fs::read_to_string(&path) {
        Ok(text) => (text.trim().to_string(), None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            crate::files::private_dir(key_dir).map_err(AccessError::io(&path))?;
            let key = generate();
            crate::task_token::keys::write_private(&path, format!("{key}\n").as_bytes())
                .map_err(AccessError::io(&path))?;
            (key, Some(path.clone()))
        }
        Err(e) => return Err(AccessError::io(&path)(e)),
    };
    if !key.starts_with(PREFIX) {
        let why = format!("not an API key (it should start with `{PREFIX}`)");
        return Err(AccessError::key(&path, why));
    }
    let entry = ApiKeyEntry {
        principal: ADMIN_PRINCIPAL.to_string(),
        scopes: Grants::all(),
        sha256: hash(&key),
    };
    Ok((entry, generated))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_found_by_its_hash_only() {
        let key = generate();
        assert!(key.starts_with(PREFIX) && key.len() == PREFIX.len() + 43);
        let keys = ApiKeys::new(&[ApiKeyEntry {
            principal: "alice".into(),
            scopes: Grants::new(["Files.Read"]),
            sha256: hash(&key).to_uppercase(),
        }])
        .unwrap();
        assert_eq!(keys.find(&key).unwrap().name, "alice");
        assert!(keys.find(&generate()).is_none());
        assert!(keys.find(&key[..key.len() - 1]).is_none());
    }

    #[test]
    fn bad_entries_are_named() {
        let entry = |principal: &str, sha256: &str| ApiKeyEntry {
            principal: principal.into(),
            scopes: Grants::default(),
            sha256: sha256.into(),
        };
        let named = |e: AccessError, i: usize, says: &str| match e {
            AccessError::Setting { field, why } => {
                assert_eq!(field, format!("api_auth.api_keys[{i}]"));
                assert!(why.contains(says), "{why}");
            }
            other => panic!("{other:?}"),
        };
        named(
            ApiKeys::new(&[entry("alice", "abc")]).unwrap_err(),
            0,
            "64 hex",
        );
        let h = hash("x");
        let e = ApiKeys::new(&[entry("alice", &h), entry("", &h)]).unwrap_err();
        named(e, 1, "principal");
        let e = ApiKeys::new(&[entry("alice", &h), entry("bob", &h)]).unwrap_err();
        named(e, 1, "twice");
    }

    #[test]
    fn the_admin_key_is_made_once_and_private() {
        let dir = tempfile::tempdir().unwrap();
        let (first, made) = admin_key(dir.path()).unwrap();
        let path = made.expect("generated on the first call");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let (second, made) = admin_key(dir.path()).unwrap();
        assert!(made.is_none());
        assert_eq!(first, second);
        let key = std::fs::read_to_string(&path).unwrap();
        assert_eq!(hash(key.trim()), first.sha256);
    }
}
