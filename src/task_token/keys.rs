//! Key material for task tokens: files, in PEM.
//!
//! - EdDSA (Ed25519), the default: the orchestrator holds `signing.pem`
//!   (PKCS#8 private key, mode 0600); workers get only `verify.pem` (the
//!   SPKI public key).
//! - HS256, for development only: one shared secret in `hs256.pem`
//!   (`-----BEGIN ORCHESTRATOR HS256 SECRET-----`, 32 random bytes in
//!   base64). Whoever can verify can also sign.
//!
//! The algorithm comes from the key file, never from a token's header: a
//! verifier holding an Ed25519 key accepts only EdDSA tokens.

use std::path::{Path, PathBuf};

use base64::Engine;
use ed25519_dalek::pkcs8::{EncodePrivateKey, EncodePublicKey, spki::der::pem::LineEnding};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey};
use rand_core::{OsRng, RngCore};

/// The private key's file name in a key directory.
pub const SIGNING_FILE: &str = "signing.pem";
/// The public key's file name in a key directory.
pub const VERIFY_FILE: &str = "verify.pem";
/// The development secret's file name in a key directory.
pub const HS256_FILE: &str = "hs256.pem";

const HS256_LABEL: &str = "ORCHESTRATOR HS256 SECRET";

/// A key file that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct KeyError {
    /// The file (or `ORCH_SIGNING_KEY` / `ORCH_VERIFY_KEY` for inline keys).
    pub path: String,
    /// What is wrong, and what was expected.
    pub message: String,
}

/// Which algorithm a key pair is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum KeyKind {
    /// Ed25519 signatures (JWT `alg: EdDSA`).
    #[serde(rename = "EdDSA")]
    EdDsa,
    /// HMAC-SHA256 with a shared secret (JWT `alg: HS256`); development only.
    #[serde(rename = "HS256")]
    Hs256,
}

impl KeyKind {
    /// The JWT algorithm.
    pub fn algorithm(self) -> Algorithm {
        match self {
            KeyKind::EdDsa => Algorithm::EdDSA,
            KeyKind::Hs256 => Algorithm::HS256,
        }
    }
}

/// The key the orchestrator signs task tokens with.
#[derive(Clone)]
pub struct SigningKey {
    pub(crate) kind: KeyKind,
    pub(crate) key: EncodingKey,
    /// The Ed25519 key, parsed once: jsonwebtoken parses the PKCS#8 key and
    /// derives its public half on every signature, which doubles the cost
    /// of minting (`cargo bench --bench tokens`).
    pub(crate) ed25519: Option<std::sync::Arc<ed25519_dalek::SigningKey>>,
}

/// The key a worker verifies task tokens with.
#[derive(Clone)]
pub struct VerifyKey {
    pub(crate) kind: KeyKind,
    pub(crate) key: DecodingKey,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SigningKey({:?}, redacted)", self.kind)
    }
}

impl std::fmt::Debug for VerifyKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "VerifyKey({:?})", self.kind)
    }
}

/// Where a key comes from: a file path, or the PEM text itself (as
/// `ORCH_SIGNING_KEY` / `ORCH_VERIFY_KEY` may hold either).
fn read_source(source: &str, what: &str) -> Result<(String, String), KeyError> {
    if source.trim_start().starts_with("-----BEGIN") {
        return Ok((source.to_string(), format!("{what} (inline PEM)")));
    }
    let text = std::fs::read_to_string(source).map_err(|e| KeyError {
        path: source.to_string(),
        message: format!("cannot read the {what}: {e}"),
    })?;
    Ok((text, source.to_string()))
}

fn pem_label(text: &str) -> Option<&str> {
    let start = text.find("-----BEGIN ")? + "-----BEGIN ".len();
    let end = text[start..].find("-----")? + start;
    Some(&text[start..end])
}

/// What a key file that is neither kind of key gets told.
fn unexpected(wanted: &str, found: Option<&str>) -> String {
    let found = found.map_or("no PEM block".to_string(), |l| format!("BEGIN {l}"));
    format!("expected a PEM {wanted} or an HS256 secret (BEGIN {HS256_LABEL}), found {found}")
}

fn hs256_secret(text: &str, path: &str) -> Result<Vec<u8>, KeyError> {
    let body: String = text
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect::<Vec<_>>()
        .concat();
    let secret = base64::engine::general_purpose::STANDARD
        .decode(body.trim())
        .map_err(|e| KeyError {
            path: path.to_string(),
            message: format!("the HS256 secret is not base64: {e}"),
        })?;
    if secret.len() < 32 {
        return Err(KeyError {
            path: path.to_string(),
            message: format!(
                "the HS256 secret has {} bytes; at least 32 are needed",
                secret.len()
            ),
        });
    }
    Ok(secret)
}

impl SigningKey {
    /// Loads a signing key: a PKCS#8 Ed25519 private key, or an HS256
    /// secret file; `source` is a path or the PEM text.
    pub fn load(source: &str) -> Result<SigningKey, KeyError> {
        let (text, path) = read_source(source, "signing key")?;
        let bad = |message: String| KeyError {
            path: path.clone(),
            message,
        };
        match pem_label(&text) {
            Some("PRIVATE KEY") => {
                use ed25519_dalek::pkcs8::DecodePrivateKey;
                let not_ed25519 =
                    |e: String| bad(format!("not an Ed25519 private key (PKCS#8): {e}"));
                let key = EncodingKey::from_ed_pem(text.as_bytes())
                    .map_err(|e| not_ed25519(e.to_string()))?;
                let parsed = ed25519_dalek::SigningKey::from_pkcs8_pem(&text)
                    .map_err(|e| not_ed25519(e.to_string()))?;
                Ok(SigningKey {
                    kind: KeyKind::EdDsa,
                    key,
                    ed25519: Some(std::sync::Arc::new(parsed)),
                })
            }
            Some(HS256_LABEL) => Ok(SigningKey {
                kind: KeyKind::Hs256,
                key: EncodingKey::from_secret(&hs256_secret(&text, &path)?),
                ed25519: None,
            }),
            Some("PUBLIC KEY") => Err(bad(
                "this is a public key: the orchestrator signs with the private key (signing.pem)"
                    .into(),
            )),
            other => Err(bad(unexpected(
                "an Ed25519 private key (BEGIN PRIVATE KEY)",
                other,
            ))),
        }
    }

    /// The algorithm this key signs with.
    pub fn kind(&self) -> KeyKind {
        self.kind
    }
}

impl VerifyKey {
    /// Loads a verification key: an SPKI Ed25519 public key, or an HS256
    /// secret file; `source` is a path or the PEM text.
    pub fn load(source: &str) -> Result<VerifyKey, KeyError> {
        let (text, path) = read_source(source, "verify key")?;
        let bad = |message: String| KeyError {
            path: path.clone(),
            message,
        };
        match pem_label(&text) {
            Some("PUBLIC KEY") => DecodingKey::from_ed_pem(text.as_bytes())
                .map(|key| VerifyKey {
                    kind: KeyKind::EdDsa,
                    key,
                })
                .map_err(|e| bad(format!("not an Ed25519 public key (SPKI): {e}"))),
            Some(HS256_LABEL) => Ok(VerifyKey {
                kind: KeyKind::Hs256,
                key: DecodingKey::from_secret(&hs256_secret(&text, &path)?),
            }),
            Some("PRIVATE KEY") => Err(bad(
                "this is the private key: give workers only the public key (verify.pem)".into(),
            )),
            other => Err(bad(unexpected(
                "an Ed25519 public key (BEGIN PUBLIC KEY)",
                other,
            ))),
        }
    }

    /// The algorithm this key accepts.
    pub fn kind(&self) -> KeyKind {
        self.kind
    }
}

/// The files a key generation wrote.
#[derive(Debug, Clone, serde::Serialize)]
pub struct KeyFiles {
    /// The algorithm.
    pub algorithm: KeyKind,
    /// What the orchestrator signs with (`ORCH_SIGNING_KEY`).
    pub signing: PathBuf,
    /// What workers verify with (`ORCH_VERIFY_KEY`); for HS256 the same
    /// secret file.
    pub verify: PathBuf,
}

impl KeyFiles {
    /// The files of `kind` in `dir`, whether or not they exist.
    pub fn in_dir(dir: &Path, kind: KeyKind) -> KeyFiles {
        match kind {
            KeyKind::EdDsa => KeyFiles {
                algorithm: kind,
                signing: dir.join(SIGNING_FILE),
                verify: dir.join(VERIFY_FILE),
            },
            KeyKind::Hs256 => KeyFiles {
                algorithm: kind,
                signing: dir.join(HS256_FILE),
                verify: dir.join(HS256_FILE),
            },
        }
    }
}

/// Generates a new key of `kind` into `dir` (created if missing). Existing
/// files are kept unless `replace`: replacing a key makes every token in
/// flight unverifiable.
pub fn generate(dir: &Path, kind: KeyKind, replace: bool) -> Result<KeyFiles, KeyError> {
    let files = KeyFiles::in_dir(dir, kind);
    let io = |path: &Path, e: std::io::Error| KeyError {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    crate::files::private_dir(dir).map_err(|e| io(dir, e))?;
    for path in [&files.signing, &files.verify] {
        if path.exists() && !replace {
            return Err(KeyError {
                path: path.display().to_string(),
                message: "already exists; pass --force to replace it (tokens signed with the old \
                          key will no longer verify)"
                    .into(),
            });
        }
    }
    match kind {
        KeyKind::EdDsa => {
            let key = ed25519_dalek::SigningKey::generate(&mut OsRng);
            let private = key.to_pkcs8_pem(LineEnding::LF).map_err(|e| KeyError {
                path: files.signing.display().to_string(),
                message: format!("cannot encode the key: {e}"),
            })?;
            let public = key
                .verifying_key()
                .to_public_key_pem(LineEnding::LF)
                .map_err(|e| KeyError {
                    path: files.verify.display().to_string(),
                    message: format!("cannot encode the key: {e}"),
                })?;
            write_private(&files.signing, private.as_bytes()).map_err(|e| io(&files.signing, e))?;
            // Workers read it, perhaps as other users: readable, never
            // writable by them.
            crate::files::write_file(&files.verify, public.as_bytes(), crate::files::PUBLIC)
                .map_err(|e| io(&files.verify, e))?;
        }
        KeyKind::Hs256 => {
            let mut secret = [0u8; 32];
            OsRng.fill_bytes(&mut secret);
            let body = base64::engine::general_purpose::STANDARD.encode(secret);
            let text =
                format!("-----BEGIN {HS256_LABEL}-----\n{body}\n-----END {HS256_LABEL}-----\n");
            write_private(&files.signing, text.as_bytes()).map_err(|e| io(&files.signing, e))?;
        }
    }
    Ok(files)
}

/// Writes a file only its owner can read (replacing one that exists).
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    crate::files::write_file(path, bytes, crate::files::PRIVATE)
}
