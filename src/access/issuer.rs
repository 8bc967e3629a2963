//! Bearer JWTs from a configured identity provider: checked against its
//! public key (a PEM file) or its key set (a JWKS file), issuer and
//! audience; the caller is the token's `sub`, its scopes the `scope`
//! (space-separated) or `scp` (list or string) claim.
//!
//! Only public-key algorithms are accepted (EdDSA, ES256/384, RS*, PS*):
//! a shared secret would let the orchestrator mint callers' tokens. The
//! algorithm comes from the key, never from the token alone.

use std::path::{Path, PathBuf};
use std::time::Duration;

use jsonwebtoken::jwk::{JwkSet, KeyAlgorithm};
use jsonwebtoken::{Algorithm, DecodingKey, Validation, errors::ErrorKind};
use jsonwebtoken::{AlgorithmFamily, jwk::AlgorithmParameters};
use serde::{Deserialize, Serialize};

use super::grants::Grants;
use super::{AccessError, Denied, Principal};

/// The `api_auth.jwt` settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IssuerSettings {
    /// The `iss` every token must carry.
    pub issuer: String,
    /// The `aud` every token must name (this API's identifier at the
    /// provider).
    pub audience: String,
    /// The provider's public key (PEM: Ed25519, EC or RSA).
    #[serde(default)]
    pub public_key: Option<PathBuf>,
    /// The provider's key set (a JWKS document, as served at its
    /// `jwks_uri`); a token's `kid` picks the key.
    #[serde(default)]
    pub jwks_file: Option<PathBuf>,
    /// Clock difference allowed on `exp` and `nbf`.
    #[serde(default = "default_leeway", with = "humantime_serde")]
    pub leeway: Duration,
}

fn default_leeway() -> Duration {
    Duration::from_secs(30)
}

/// One key the provider signs with.
struct IssuerKey {
    kid: Option<String>,
    key: DecodingKey,
    algorithms: Vec<Algorithm>,
}

/// Checks callers' bearer JWTs.
pub struct Issuer {
    keys: Vec<IssuerKey>,
    issuer: String,
    audience: String,
    leeway: Duration,
}

impl std::fmt::Debug for Issuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Issuer({}, {} keys)", self.issuer, self.keys.len())
    }
}

/// The algorithms a public key of `family` may verify.
fn algorithms(family: AlgorithmFamily) -> Vec<Algorithm> {
    use Algorithm::*;
    match family {
        AlgorithmFamily::Ed => vec![EdDSA],
        AlgorithmFamily::Ec => vec![ES256, ES384],
        AlgorithmFamily::Rsa => vec![RS256, RS384, RS512, PS256, PS384, PS512],
        AlgorithmFamily::Hmac => Vec::new(),
    }
}

fn pem_key(path: &Path) -> Result<IssuerKey, AccessError> {
    let text = std::fs::read(path).map_err(AccessError::io(path))?;
    let key = DecodingKey::from_ed_pem(&text)
        .or_else(|_| DecodingKey::from_ec_pem(&text))
        .or_else(|_| DecodingKey::from_rsa_pem(&text))
        .map_err(|_| {
            AccessError::key(
                path,
                "not a PEM public key (Ed25519, EC or RSA, BEGIN PUBLIC KEY)",
            )
        })?;
    Ok(IssuerKey {
        kid: None,
        algorithms: algorithms(key.family()),
        key,
    })
}

fn jwks_keys(path: &Path) -> Result<Vec<IssuerKey>, AccessError> {
    let text = std::fs::read(path).map_err(AccessError::io(path))?;
    let set: JwkSet = serde_json::from_slice(&text)
        .map_err(|e| AccessError::key(path, format!("not a JWKS document ({e})")))?;
    let mut keys = Vec::new();
    for (i, jwk) in set.keys.iter().enumerate() {
        let at = |why: String| AccessError::Key {
            path: path.to_path_buf(),
            at: format!("keys[{i}]: "),
            why,
        };
        if matches!(jwk.algorithm, AlgorithmParameters::OctetKey(_)) {
            return Err(at(
                "a shared-secret (oct) key; only public keys are accepted".into(),
            ));
        }
        let key = DecodingKey::from_jwk(jwk).map_err(|e| at(e.to_string()))?;
        let family_algorithms = algorithms(key.family());
        let algorithms = match jwk.common.key_algorithm {
            None => family_algorithms,
            Some(KeyAlgorithm::UNKNOWN_ALGORITHM) => {
                return Err(at("its `alg` is not a signature algorithm".into()));
            }
            Some(alg) => {
                let alg: Algorithm = alg
                    .to_string()
                    .parse()
                    .map_err(|_| at(format!("its `alg` {alg} is not a signature algorithm")))?;
                if !family_algorithms.contains(&alg) {
                    return Err(at(format!("its `alg` {alg:?} does not fit its key type")));
                }
                vec![alg]
            }
        };
        keys.push(IssuerKey {
            kid: jwk.common.key_id.clone(),
            key,
            algorithms,
        });
    }
    if keys.is_empty() {
        return Err(AccessError::key(path, "the key set has no keys"));
    }
    Ok(keys)
}

/// The claims read from a caller's token (the standard ones are checked by
/// the validation).
#[derive(Deserialize)]
struct CallerClaims {
    sub: String,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    scp: Option<Scp>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Scp {
    List(Vec<String>),
    Text(String),
}

impl Issuer {
    /// Loads the provider's keys named by `settings`.
    pub fn open(settings: &IssuerSettings) -> Result<Issuer, AccessError> {
        let keys = match (&settings.public_key, &settings.jwks_file) {
            (Some(path), None) => vec![pem_key(path)?],
            (None, Some(path)) => jwks_keys(path)?,
            _ => {
                return Err(AccessError::Setting {
                    field: "api_auth.jwt".into(),
                    why: "give exactly one of `public_key` and `jwks_file`".into(),
                });
            }
        };
        Ok(Issuer {
            keys,
            issuer: settings.issuer.clone(),
            audience: settings.audience.clone(),
            leeway: settings.leeway,
        })
    }

    /// The caller a bearer JWT names, once its signature, issuer, audience
    /// and lifetime hold.
    pub fn verify(&self, token: &str) -> Result<Principal, Denied> {
        let header = jsonwebtoken::decode_header(token)
            .map_err(|e| Denied::invalid(format!("the bearer token cannot be read: {e}")))?;
        let key = match &header.kid {
            Some(kid) => self
                .keys
                .iter()
                .find(|k| k.kid.as_deref() == Some(kid.as_str())),
            None if self.keys.len() == 1 => self.keys.first(),
            None => None,
        }
        .ok_or_else(|| {
            Denied::invalid(match &header.kid {
                Some(kid) => format!("no key `{kid}` in the issuer's key set"),
                None => "the token names no key (`kid`) and the issuer has several".into(),
            })
        })?;
        if !key.algorithms.contains(&header.alg) {
            return Err(Denied::invalid(format!(
                "the token is signed with {:?}; its key accepts only {:?}",
                header.alg, key.algorithms
            )));
        }
        let mut validation = Validation::new(header.alg);
        validation.algorithms = key.algorithms.clone();
        validation.leeway = self.leeway.as_secs();
        validation.validate_nbf = true;
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&[&self.audience]);
        let claims = jsonwebtoken::decode::<CallerClaims>(token, &key.key, &validation)
            .map_err(|e| {
                Denied::invalid(match e.kind() {
                    ErrorKind::ExpiredSignature => "the bearer token has expired".to_string(),
                    ErrorKind::ImmatureSignature => "the bearer token is not valid yet".into(),
                    ErrorKind::InvalidIssuer => "the bearer token is from another issuer".into(),
                    ErrorKind::InvalidAudience => "the bearer token is for another audience".into(),
                    ErrorKind::InvalidSignature => "the bearer token's signature is wrong".into(),
                    ErrorKind::MissingRequiredClaim(c) => {
                        format!("the bearer token has no `{c}` claim")
                    }
                    other => format!("the bearer token is not valid: {other:?}"),
                })
            })?
            .claims;
        let mut scopes: Vec<String> = claims
            .scope
            .iter()
            .flat_map(|s| s.split_whitespace().map(str::to_string))
            .collect();
        match claims.scp {
            Some(Scp::List(list)) => scopes.extend(list),
            Some(Scp::Text(text)) => scopes.extend(text.split_whitespace().map(str::to_string)),
            None => {}
        }
        Principal::of_issuer(&self.issuer, &claims.sub, Grants::new(scopes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{EncodingKey, Header};
    use serde_json::{Value, json};

    const ISS: &str = "https://idp.example";
    const AUD: &str = "orchestrator";

    /// An Ed25519 pair in a temp dir: (dir, signing key, public key file).
    fn pair() -> (tempfile::TempDir, EncodingKey, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let files =
            crate::task_token::keys::generate(dir.path(), crate::task_token::KeyKind::EdDsa, false)
                .unwrap();
        let pem = std::fs::read(&files.signing).unwrap();
        (dir, EncodingKey::from_ed_pem(&pem).unwrap(), files.verify)
    }

    fn settings(public_key: Option<PathBuf>, jwks_file: Option<PathBuf>) -> IssuerSettings {
        IssuerSettings {
            issuer: ISS.into(),
            audience: AUD.into(),
            public_key,
            jwks_file,
            leeway: Duration::from_secs(5),
        }
    }

    fn now() -> i64 {
        time::OffsetDateTime::now_utc().unix_timestamp()
    }

    fn claims(edit: impl FnOnce(&mut Value)) -> Value {
        let mut c = json!({"iss": ISS, "aud": AUD, "sub": "dave", "exp": now() + 300,
                           "scope": "Files.Read orch:audit:read", "scp": ["Mail.Send"]});
        edit(&mut c);
        c
    }

    fn sign(key: &EncodingKey, kid: Option<&str>, claims: &Value) -> String {
        let mut header = Header::new(Algorithm::EdDSA);
        header.kid = kid.map(str::to_string);
        jsonwebtoken::encode(&header, claims, key).unwrap()
    }

    #[test]
    fn a_good_token_names_its_subject_and_scopes() {
        let (_dir, key, public) = pair();
        let issuer = Issuer::open(&settings(Some(public), None)).unwrap();
        let p = issuer.verify(&sign(&key, None, &claims(|_| {}))).unwrap();
        assert_eq!(p.name, "https://idp.example#dave");
        assert_eq!(
            p.grants.as_slice(),
            ["Files.Read", "orch:audit:read", "Mail.Send"]
        );
    }

    #[test]
    fn every_bad_token_is_refused_with_its_reason() {
        let (_dir, key, public) = pair();
        let issuer = Issuer::open(&settings(Some(public), None)).unwrap();
        let refused = |token: String| issuer.verify(&token).unwrap_err().message;
        let with = |edit: fn(&mut Value)| sign(&key, None, &claims(edit));
        assert!(refused(with(|c| c["exp"] = json!(now() - 60))).contains("expired"));
        assert!(refused(with(|c| c["nbf"] = json!(now() + 600))).contains("not valid yet"));
        assert!(refused(with(|c| c["aud"] = json!("another-api"))).contains("audience"));
        assert!(refused(with(|c| c["iss"] = json!("https://evil.example"))).contains("issuer"));
        let no_sub = refused(with(|c| {
            c.as_object_mut().unwrap().remove("sub");
        }));
        assert!(no_sub.contains("sub"), "{no_sub}");
        let no_exp = refused(with(|c| {
            c.as_object_mut().unwrap().remove("exp");
        }));
        assert!(no_exp.contains("exp"), "{no_exp}");
        // Signed by another key.
        let (_other_dir, other, _) = pair();
        assert!(refused(sign(&other, None, &claims(|_| {}))).contains("signature"));
        // HS256 with the public key's bytes as the secret (the classic
        // algorithm confusion), and an unsigned token.
        let hs = jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims(|_| {}),
            &EncodingKey::from_secret(b"anything at all"),
        )
        .unwrap();
        assert!(refused(hs).contains("HS256"));
        let body = base64::Engine::encode(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD,
            claims(|_| {}).to_string(),
        );
        let none = format!("eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.{body}.");
        assert!(refused(none).contains("cannot be read"));
        // An empty subject.
        assert!(refused(with(|c| c["sub"] = json!(""))).contains("empty"));
    }

    #[test]
    fn a_key_set_picks_the_key_by_kid() {
        let (dir, key, public) = pair();
        let (_d2, second, second_public) = pair();
        let jwk = |public: &Path, kid: &str| {
            use ed25519_dalek::pkcs8::DecodePublicKey;
            let pem = std::fs::read_to_string(public).unwrap();
            let key = ed25519_dalek::VerifyingKey::from_public_key_pem(&pem).unwrap();
            let x = base64::Engine::encode(
                &base64::engine::general_purpose::URL_SAFE_NO_PAD,
                key.as_bytes(),
            );
            json!({"kty": "OKP", "crv": "Ed25519", "x": x, "kid": kid, "alg": "EdDSA"})
        };
        let jwks = dir.path().join("jwks.json");
        std::fs::write(
            &jwks,
            json!({"keys": [jwk(&public, "one"), jwk(&second_public, "two")]}).to_string(),
        )
        .unwrap();
        let issuer = Issuer::open(&settings(None, Some(jwks))).unwrap();
        assert_eq!(
            issuer
                .verify(&sign(&key, Some("one"), &claims(|_| {})))
                .unwrap()
                .name,
            "https://idp.example#dave"
        );
        assert_eq!(
            issuer
                .verify(&sign(&second, Some("two"), &claims(|_| {})))
                .unwrap()
                .name,
            "https://idp.example#dave"
        );
        let wrong = issuer
            .verify(&sign(&key, Some("two"), &claims(|_| {})))
            .unwrap_err();
        assert!(wrong.message.contains("signature"), "{wrong:?}");
        let unknown = issuer
            .verify(&sign(&key, Some("three"), &claims(|_| {})))
            .unwrap_err();
        assert!(unknown.message.contains("no key `three`"), "{unknown:?}");
        let none = issuer
            .verify(&sign(&key, None, &claims(|_| {})))
            .unwrap_err();
        assert!(none.message.contains("kid"), "{none:?}");
    }

    #[test]
    fn key_files_that_cannot_serve_are_refused_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("oct.json");
        std::fs::write(&secret, r#"{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}"#).unwrap();
        let e = Issuer::open(&settings(None, Some(secret.clone()))).unwrap_err();
        assert!(
            matches!(&e, AccessError::Key { path, at, why }
                if *path == secret && at == "keys[0]: " && why.contains("shared-secret")),
            "{e:?}"
        );
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a key").unwrap();
        let e = Issuer::open(&settings(Some(junk.clone()), None)).unwrap_err();
        assert!(
            matches!(&e, AccessError::Key { path, at, .. } if *path == junk && at.is_empty()),
            "{e:?}"
        );
        let e = Issuer::open(&settings(None, None)).unwrap_err();
        assert!(
            matches!(&e, AccessError::Setting { field, .. } if field == "api_auth.jwt"),
            "{e:?}"
        );
        let missing = dir.path().join("missing.pem");
        let e = Issuer::open(&settings(Some(missing), None)).unwrap_err();
        assert!(matches!(&e, AccessError::Io { .. }), "{e:?}");
    }
}
