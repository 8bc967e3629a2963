//! Token settings (the `tokens` section of the settings file), and finding
//! the keys they name.

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::keys::{self, KeyError, KeyFiles, KeyKind, SigningKey, VerifyKey};
use super::token::{DEFAULT_ISSUER, Minter, Verifier};

/// How task tokens are minted and checked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TokenSettings {
    /// The orchestrator's signing key: a path or the PEM text
    /// (`ORCH_SIGNING_KEY`). `None`: `<data_dir>/keys/signing.pem`,
    /// generated on the first start.
    pub signing_key: Option<String>,
    /// A worker's verification key: a path or the PEM text
    /// (`ORCH_VERIFY_KEY`). `None`: `<data_dir>/keys/verify.pem` when it
    /// exists (a worker beside its orchestrator).
    pub verify_key: Option<String>,
    /// The `iss` of every token, and what workers expect.
    pub issuer: String,
    /// How long a token is valid after it is minted (each publish of an
    /// attempt mints a fresh one).
    #[serde(with = "humantime_serde")]
    pub ttl: Duration,
    /// Clock difference allowed on `exp` and `nbf`.
    #[serde(with = "humantime_serde")]
    pub leeway: Duration,
    /// Whether workers check tokens. `false` is for development only: a
    /// worker then runs whatever reaches its subject, and says so at start.
    pub verify: bool,
}

impl Default for TokenSettings {
    fn default() -> Self {
        TokenSettings {
            signing_key: None,
            verify_key: None,
            issuer: DEFAULT_ISSUER.to_string(),
            ttl: Duration::from_secs(15 * 60),
            leeway: Duration::from_secs(30),
            verify: true,
        }
    }
}

/// The key directory inside a data directory.
pub fn key_dir(data_dir: &Path) -> std::path::PathBuf {
    data_dir.join("keys")
}

/// The first key file of `dir` that exists, of either kind (`pick` chooses
/// the signing or the verify file).
fn existing(dir: &Path, pick: fn(&KeyFiles) -> &std::path::PathBuf) -> Option<std::path::PathBuf> {
    [KeyKind::EdDsa, KeyKind::Hs256]
        .into_iter()
        .map(|kind| pick(&KeyFiles::in_dir(dir, kind)).clone())
        .find(|path| path.exists())
}

impl TokenSettings {
    /// The minter for an orchestrator with this data directory, and the
    /// files it generated if it had to make a key.
    pub fn minter(&self, data_dir: &Path) -> Result<(Minter, Option<KeyFiles>), KeyError> {
        let (key, generated) = match &self.signing_key {
            Some(source) => (SigningKey::load(source)?, None),
            None => {
                let dir = key_dir(data_dir);
                match existing(&dir, |files| &files.signing) {
                    Some(path) => (SigningKey::load(&path.to_string_lossy())?, None),
                    None => {
                        let files = keys::generate(&dir, KeyKind::EdDsa, false)?;
                        let key = SigningKey::load(&files.signing.to_string_lossy())?;
                        (key, Some(files))
                    }
                }
            }
        };
        Ok((Minter::new(key, self.issuer.clone(), self.ttl), generated))
    }

    /// The verifier for a worker of `agent`: `None` only when `verify` is
    /// off. No key found is an error that says where keys come from.
    pub fn verifier(&self, data_dir: &Path, agent: &str) -> Result<Option<Verifier>, KeyError> {
        if !self.verify {
            return Ok(None);
        }
        let source = match &self.verify_key {
            Some(source) => source.clone(),
            None => {
                let dir = key_dir(data_dir);
                match existing(&dir, |files| &files.verify) {
                    Some(path) => path.to_string_lossy().into_owned(),
                    None => {
                        return Err(KeyError {
                            path: dir.join(keys::VERIFY_FILE).display().to_string(),
                            message: "no key to verify task tokens with: set ORCH_VERIFY_KEY \
                                      (or `tokens.verify_key`) to the orchestrator's public key, \
                                      which `orchestrator run` writes to <data_dir>/keys/verify.pem \
                                      and `orchestrator keys generate` writes where you say; \
                                      `tokens.verify: false` turns checking off (development only)"
                                .into(),
                        });
                    }
                }
            }
        };
        let key = VerifyKey::load(&source)?;
        Ok(Some(Verifier::new(
            key,
            self.issuer.clone(),
            agent,
            self.leeway,
        )))
    }
}
