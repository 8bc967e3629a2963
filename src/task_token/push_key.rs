//! The key the orchestrator signs what it sends out with (push
//! notifications, callbacks): Ed25519, its own (task tokens may be HS256,
//! whose secret cannot be published), its public half served as a JWKS so
//! a receiver can check that a delivery is genuine.
//!
//! A delivery's signature is a JWS (RFC 7515) over the request's body
//! exactly as sent, detached and unencoded (RFC 7797: `b64: false`,
//! `crit: ["b64"]`), in compact form `HEADER..SIGNATURE`. Its protected
//! header names the key (`kid`, the RFC 7638 thumbprint) and carries what
//! tells a replay from a delivery: the delivery's id (`jti`), when this
//! attempt was signed (`iat`) and the URL it was sent to (`aud`).

use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use ed25519_dalek::Signer;
use ed25519_dalek::pkcs8::{DecodePrivateKey, EncodePrivateKey, spki::der::pem::LineEnding};
use rand_core::OsRng;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::keys::{KeyError, write_private};

/// The key's file name in the key directory.
pub const DELIVERY_SIGNING_FILE: &str = "delivery-signing.pem";

/// The orchestrator's delivery key.
#[derive(Clone)]
pub struct PushKey {
    key: std::sync::Arc<ed25519_dalek::SigningKey>,
    kid: String,
    /// Where it was read from.
    pub path: PathBuf,
}

impl std::fmt::Debug for PushKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PushKey({})", self.kid)
    }
}

impl PushKey {
    /// The key at `path`, made first (mode 0600) when there is none;
    /// whether it was made.
    pub fn open_or_create(path: &Path) -> Result<(PushKey, bool), KeyError> {
        let bad = |message: String| KeyError {
            path: path.display().to_string(),
            message,
        };
        let made = !path.exists();
        if made {
            if let Some(dir) = path.parent() {
                crate::files::private_dir(dir).map_err(|e| bad(e.to_string()))?;
            }
            let key = ed25519_dalek::SigningKey::generate(&mut OsRng);
            let pem = key
                .to_pkcs8_pem(LineEnding::LF)
                .map_err(|e| bad(format!("cannot encode the key: {e}")))?;
            write_private(path, pem.as_bytes()).map_err(|e| bad(e.to_string()))?;
        }
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        let key = ed25519_dalek::SigningKey::from_pkcs8_pem(&text)
            .map_err(|e| bad(format!("not an Ed25519 private key (PKCS#8 PEM): {e}")))?;
        let kid = thumbprint(&key);
        Ok((
            PushKey {
                key: std::sync::Arc::new(key),
                kid,
                path: path.to_path_buf(),
            },
            made,
        ))
    }

    /// The key's id: its RFC 7638 JWK thumbprint.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The public key as a JWK Set (`{"keys": [...]}`).
    pub fn jwks(&self) -> Value {
        let mut jwk = public_jwk(&self.key);
        jwk["kid"] = self.kid.clone().into();
        jwk["use"] = "sig".into();
        jwk["alg"] = "EdDSA".into();
        json!({ "keys": [jwk] })
    }

    /// The detached, unencoded JWS of `body` with `claims` in its protected
    /// header (besides `alg`, `kid`, `b64` and `crit`).
    pub fn sign(&self, claims: Map<String, Value>, body: &[u8]) -> String {
        let mut header = Map::new();
        header.insert("alg".into(), "EdDSA".into());
        header.insert("kid".into(), self.kid.clone().into());
        header.insert("b64".into(), false.into());
        header.insert("crit".into(), json!(["b64"]));
        header.extend(claims);
        let protected = B64.encode(Value::Object(header).to_string());
        let mut input = Vec::with_capacity(protected.len() + 1 + body.len());
        input.extend_from_slice(protected.as_bytes());
        input.push(b'.');
        input.extend_from_slice(body);
        let signature = self.key.sign(&input);
        format!("{protected}..{}", B64.encode(signature.to_bytes()))
    }
}

fn public_jwk(key: &ed25519_dalek::SigningKey) -> Value {
    let x = B64.encode(key.verifying_key().as_bytes());
    // RFC 7638: the required members, in lexicographic order, no spaces.
    json!({ "crv": "Ed25519", "kty": "OKP", "x": x })
}

fn thumbprint(key: &ed25519_dalek::SigningKey) -> String {
    let canonical = public_jwk(key).to_string();
    B64.encode(Sha256::digest(canonical.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::Verifier;

    #[test]
    fn a_signature_verifies_over_the_body_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(DELIVERY_SIGNING_FILE);
        let (key, made) = PushKey::open_or_create(&path).unwrap();
        assert!(made);
        let (again, made) = PushKey::open_or_create(&path).unwrap();
        assert!(!made);
        assert_eq!(key.kid(), again.kid(), "the same file is the same key");
        let mut claims = Map::new();
        claims.insert("jti".into(), "d-1".into());
        let body = br#"{"statusUpdate":{}}"#;
        let jws = key.sign(claims, body);
        let (protected, rest) = jws.split_once("..").unwrap();
        let header: Value = serde_json::from_slice(&B64.decode(protected).unwrap()).unwrap();
        assert_eq!(header["kid"], key.kid());
        assert_eq!(header["jti"], "d-1");
        assert_eq!(header["b64"], false);
        let signature = ed25519_dalek::Signature::from_slice(&B64.decode(rest).unwrap()).unwrap();
        let public = key.key.verifying_key();
        let input = |b: &[u8]| [protected.as_bytes(), b".", b].concat();
        assert!(public.verify(&input(body), &signature).is_ok());
        assert!(public.verify(&input(b"{}"), &signature).is_err());
        let jwks = key.jwks();
        assert_eq!(jwks["keys"][0]["kid"], key.kid());
        assert_eq!(jwks["keys"][0]["kty"], "OKP");
    }
}
