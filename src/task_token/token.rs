//! Task tokens: one JWT per published attempt, minted by the orchestrator,
//! checked by the worker before anything runs.
//!
//! Claims (all required):
//!
//! | claim | value |
//! |---|---|
//! | `iss` | the orchestrator (`token_issuer`, default `orchestrator`) |
//! | `sub` | the principal who asked for the task |
//! | `aud` | the target agent's name |
//! | `scope` | the task's required scopes, space-separated (RFC 8693) |
//! | `jti` | the task id |
//! | `iat`, `nbf`, `exp` | seconds since the epoch; `exp` = `nbf` + `token_ttl` |
//! | `act` | the delegation chain, RFC 8693 style: `{"sub": "<iss>"}`, the orchestrator acting for `sub`; for a model's tool call, the calling agent acting through it (`{"sub": "<agent>", "act": {"sub": "<iss>"}}`), one level more per agent up the chain |
//! | `env_sha256` | base64url SHA-256 of the canonical `{control, payload}` (see `canonical.rs`) |

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Header, Validation};
use serde::{Deserialize, Serialize};

use super::canonical::{CanonicalError, envelope_hash, wire_hash};
use super::keys::{KeyKind, SigningKey, VerifyKey};
use crate::envelope::{BearerToken, Envelope, Scope, TaskId};

/// The issuer named in tokens unless configured otherwise.
pub const DEFAULT_ISSUER: &str = "orchestrator";

/// base64url of `{"typ":"JWT","alg":"EdDSA"}`, the header of every EdDSA
/// task token.
const EDDSA_HEADER: &str = "eyJ0eXAiOiJKV1QiLCJhbGciOiJFZERTQSJ9";

/// A task token's claims.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskClaims {
    /// Who minted it.
    pub iss: String,
    /// The principal the task acts for.
    pub sub: String,
    /// The agent it is for.
    pub aud: String,
    /// Granted scopes, space-separated.
    pub scope: String,
    /// The task id.
    pub jti: String,
    /// When it was minted.
    pub iat: u64,
    /// Not valid before.
    pub nbf: u64,
    /// Not valid after.
    pub exp: u64,
    /// Who acts for `sub`.
    pub act: Actor,
    /// The hash of the envelope's control and payload.
    pub env_sha256: String,
}

impl TaskClaims {
    /// Every claim a task token carries (the fields of [`TaskClaims`]).
    pub const CLAIMS: [&'static str; 10] = [
        "iss",
        "sub",
        "aud",
        "scope",
        "jti",
        "iat",
        "nbf",
        "exp",
        "act",
        "env_sha256",
    ];
}

/// The first task claim `token`'s payload lacks, read once its claims
/// failed to decode: told from its members, not from the decoder's words.
fn missing_claim(token: &BearerToken) -> Option<&'static str> {
    use base64::Engine;
    let payload = token.expose().split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .ok()?;
    let claims: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&bytes).ok()?;
    TaskClaims::CLAIMS
        .into_iter()
        .find(|claim| !claims.contains_key(*claim))
}

/// One link of an RFC 8693 delegation chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Actor {
    /// The acting party.
    pub sub: String,
    /// Who it in turn acts for, if that was itself delegated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub act: Option<Box<Actor>>,
}

/// The delegation chain of a task: the orchestrator acting for the
/// principal, and for a tool call each agent whose model called, the last
/// (the current actor) outermost.
fn chain(issuer: &str, callers: &[crate::envelope::AgentName]) -> Actor {
    let mut act = Actor {
        sub: issuer.to_string(),
        act: None,
    };
    for caller in callers {
        act = Actor {
            sub: caller.to_string(),
            act: Some(Box::new(act)),
        };
    }
    act
}

impl TaskClaims {
    /// The granted scopes.
    pub fn scopes(&self) -> impl Iterator<Item = &str> {
        self.scope.split(' ').filter(|s| !s.is_empty())
    }
}

/// Why a token could not be minted.
#[derive(Debug, thiserror::Error)]
pub enum MintError {
    /// The envelope has no canonical form (an integer beyond 2^53).
    #[error("the envelope cannot be signed: {0}")]
    Canonical(#[from] CanonicalError),
    /// The signer failed.
    #[error("cannot sign the task token: {0}")]
    Sign(String),
}

/// Mints task tokens.
#[derive(Debug, Clone)]
pub struct Minter {
    key: SigningKey,
    issuer: String,
    ttl: Duration,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Minter {
    /// A minter signing with `key`, naming itself `issuer`, for tokens
    /// that live `ttl`.
    pub fn new(key: SigningKey, issuer: impl Into<String>, ttl: Duration) -> Minter {
        Minter {
            key,
            issuer: issuer.into(),
            ttl,
        }
    }

    /// A token for this attempt of `envelope`, acting for `principal`.
    pub fn mint(&self, envelope: &Envelope, principal: &str) -> Result<BearerToken, MintError> {
        let now = now_secs();
        let claims = TaskClaims {
            iss: self.issuer.clone(),
            sub: principal.to_string(),
            aud: envelope.header.to.to_string(),
            scope: scope_text(&envelope.control.required_scopes),
            jti: envelope.header.task_id.to_string(),
            iat: now,
            nbf: now,
            exp: now + self.ttl.as_secs().max(1),
            act: chain(&self.issuer, &envelope.payload.meta.callers),
            env_sha256: envelope_hash(envelope)?,
        };
        self.sign(&claims)
    }

    /// Signs `claims` as they are.
    pub fn sign(&self, claims: &TaskClaims) -> Result<BearerToken, MintError> {
        let Some(ed25519) = &self.key.ed25519 else {
            let header = Header::new(self.key.kind.algorithm());
            return jsonwebtoken::encode(&header, claims, &self.key.key)
                .map(BearerToken::new)
                .map_err(|e| MintError::Sign(e.to_string()));
        };
        // The compact JWS jsonwebtoken would write, with the key parsed once.
        use base64::Engine;
        use ed25519_dalek::Signer;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let body = serde_json::to_vec(claims).map_err(|e| MintError::Sign(e.to_string()))?;
        let mut token = String::with_capacity(64 + body.len() * 4 / 3 + 90);
        token.push_str(EDDSA_HEADER);
        token.push('.');
        b64.encode_string(&body, &mut token);
        let signature = ed25519.sign(token.as_bytes());
        token.push('.');
        b64.encode_string(signature.to_bytes(), &mut token);
        Ok(BearerToken::new(token))
    }
}

fn scope_text(scopes: &[Scope]) -> String {
    let mut names: Vec<&str> = scopes.iter().map(Scope::as_str).collect();
    names.sort_unstable();
    names.dedup();
    names.join(" ")
}

/// What a refused token means for the task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The task needs a new token (missing, expired, not valid yet).
    AuthRequired,
    /// The task is refused (wrong agent, missing scope, tampered, forged).
    Rejected,
}

/// Why a worker refused a task's token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct Refusal {
    /// What it means for the task.
    pub verdict: Verdict,
    /// A stable snake_case code (`token_expired`).
    pub code: &'static str,
    /// What was wrong, for people; never the token itself.
    pub message: String,
}

fn refuse(verdict: Verdict, code: &'static str, message: impl Into<String>) -> Refusal {
    Refusal {
        verdict,
        code,
        message: message.into(),
    }
}

/// Checks task tokens for one agent.
#[derive(Debug)]
pub struct Verifier {
    key: VerifyKey,
    issuer: String,
    audience: String,
    leeway: Duration,
    seen: Mutex<Seen>,
}

impl Verifier {
    /// A verifier for tokens from `issuer` to agent `audience`, allowing
    /// `leeway` of clock difference on `exp` and `nbf`.
    pub fn new(
        key: VerifyKey,
        issuer: impl Into<String>,
        audience: impl Into<String>,
        leeway: Duration,
    ) -> Verifier {
        Verifier {
            key,
            issuer: issuer.into(),
            audience: audience.into(),
            leeway,
            seen: Mutex::new(Seen::default()),
        }
    }

    /// Checks the token of `envelope` (received as the bytes `wire`) for a
    /// task whose action needs `needed` scopes. Every check runs before
    /// anything else happens to the task; the first failure is the answer.
    pub fn verify(
        &self,
        wire: &[u8],
        envelope: &Envelope,
        needed: &[Scope],
    ) -> Result<TaskClaims, Refusal> {
        let Some(token) = envelope.header.token.as_ref() else {
            return Err(refuse(
                Verdict::AuthRequired,
                "token_missing",
                "the envelope carries no task token",
            ));
        };
        let claims = self.signed_claims(token)?;
        let hash = bound_to(&claims, envelope, wire)?;
        covers(&claims, envelope, needed)?;
        self.first_use(&claims, envelope, &hash)?;
        Ok(claims)
    }

    /// The claims of `token`, once its algorithm, signature, lifetime,
    /// issuer and audience are this worker's.
    fn signed_claims(&self, token: &BearerToken) -> Result<TaskClaims, Refusal> {
        let algorithm = self.key.kind.algorithm();
        let header = jsonwebtoken::decode_header(token.expose()).map_err(|e| {
            refuse(
                Verdict::Rejected,
                "token_malformed",
                format!("the token's header cannot be read ({e}); an unsigned (alg none) token is never accepted"),
            )
        })?;
        if header.alg != algorithm {
            return Err(refuse(
                Verdict::Rejected,
                "token_algorithm",
                format!(
                    "the token is signed with {:?}; this worker accepts only {algorithm:?}",
                    header.alg
                ),
            ));
        }
        let mut validation = Validation::new(algorithm);
        validation.leeway = self.leeway.as_secs();
        validation.validate_nbf = true;
        validation.set_required_spec_claims(&["exp", "nbf", "iss", "aud", "sub"]);
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&[&self.audience]);
        jsonwebtoken::decode::<TaskClaims>(token.expose(), &self.key.key, &validation)
            .map(|data| data.claims)
            .map_err(|e| self.explain(e.kind(), token))
    }

    /// Refuses a second envelope under the token of one attempt.
    fn first_use(
        &self,
        claims: &TaskClaims,
        envelope: &Envelope,
        hash: &str,
    ) -> Result<(), Refusal> {
        let attempt = envelope.control.attempt.get();
        let first = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .first_use(envelope.header.task_id, attempt, hash, claims.exp);
        if first {
            return Ok(());
        }
        Err(refuse(
            Verdict::Rejected,
            "token_replayed",
            format!(
                "a token for task {} attempt {attempt} was already used with another envelope",
                envelope.header.task_id
            ),
        ))
    }

    fn explain(&self, kind: &ErrorKind, token: &BearerToken) -> Refusal {
        use Verdict::{AuthRequired, Rejected};
        match kind {
            ErrorKind::ExpiredSignature => {
                refuse(AuthRequired, "token_expired", "the task token has expired")
            }
            ErrorKind::ImmatureSignature => refuse(
                AuthRequired,
                "token_not_yet_valid",
                "the task token is not valid yet (nbf is in the future)",
            ),
            ErrorKind::InvalidAudience => refuse(
                Rejected,
                "token_audience",
                format!("the token is not for `{}`", self.audience),
            ),
            ErrorKind::InvalidIssuer => refuse(
                Rejected,
                "token_issuer",
                format!("the token was not issued by `{}`", self.issuer),
            ),
            ErrorKind::MissingRequiredClaim(claim) => refuse(
                Rejected,
                "token_claim_missing",
                format!("the token has no `{claim}` claim"),
            ),
            ErrorKind::InvalidClaimFormat(claim) => refuse(
                Rejected,
                "token_claim_invalid",
                format!("the token's `{claim}` claim is not a number of seconds"),
            ),
            ErrorKind::InvalidSignature => refuse(
                Rejected,
                "token_signature",
                "the token's signature does not verify",
            ),
            ErrorKind::InvalidAlgorithm => refuse(
                Rejected,
                "token_algorithm",
                format!("this worker accepts only {:?}", self.key.kind.algorithm()),
            ),
            ErrorKind::Json(_) if let Some(claim) = missing_claim(token) => refuse(
                Rejected,
                "token_claim_missing",
                format!("the token has no `{claim}` claim: its claims are not task claims"),
            ),
            ErrorKind::Json(e) => refuse(
                Rejected,
                "token_claim_invalid",
                format!("the token's claims are not task claims: {e}"),
            ),
            other => refuse(
                Rejected,
                "token_malformed",
                format!("the token cannot be read: {other:?}"),
            ),
        }
    }

    /// The agent this verifier accepts tokens for.
    pub fn audience(&self) -> &str {
        &self.audience
    }

    /// The algorithm this verifier accepts.
    pub fn kind(&self) -> KeyKind {
        self.key.kind
    }
}

/// The most (task, attempt) pairs remembered for the replay check.
const SEEN_MAX: usize = 100_000;

/// The envelope each (task, attempt) was first seen with, until its
/// token expires (after that the token is refused anyway).
#[derive(Debug, Default)]
struct Seen {
    by_attempt: HashMap<(TaskId, u32), (String, u64)>,
    order: VecDeque<(u64, TaskId, u32)>,
}

impl Seen {
    /// Whether this (task, attempt) is new or was seen with the same
    /// envelope; records it.
    fn first_use(&mut self, task: TaskId, attempt: u32, hash: &str, exp: u64) -> bool {
        let now = now_secs();
        while let Some(&(expires, t, a)) = self.order.front() {
            if expires >= now && self.order.len() < SEEN_MAX {
                break;
            }
            self.order.pop_front();
            if self
                .by_attempt
                .get(&(t, a))
                .is_some_and(|(_, e)| *e == expires)
            {
                self.by_attempt.remove(&(t, a));
            }
        }
        match self.by_attempt.get(&(task, attempt)) {
            Some((seen, _)) => seen == hash,
            None => {
                self.by_attempt
                    .insert((task, attempt), (hash.to_string(), exp));
                self.order.push_back((exp, task, attempt));
                true
            }
        }
    }
}

/// Whether the claims are for this envelope: its task, and its payload and
/// control as sent (`wire`); the envelope's hash.
fn bound_to(claims: &TaskClaims, envelope: &Envelope, wire: &[u8]) -> Result<String, Refusal> {
    if claims.jti != envelope.header.task_id.to_string() {
        return Err(refuse(
            Verdict::Rejected,
            "token_task_mismatch",
            format!(
                "the token is for task {}, the envelope is task {}",
                claims.jti, envelope.header.task_id
            ),
        ));
    }
    let hash = wire_hash(wire)
        .map_err(|e| refuse(Verdict::Rejected, "envelope_tampered", e.to_string()))?;
    if claims.env_sha256 != hash {
        return Err(refuse(
            Verdict::Rejected,
            "envelope_tampered",
            "the envelope's payload or control differs from what the token was signed for",
        ));
    }
    Ok(hash)
}

/// Whether the claims grant every scope the action needs.
fn covers(claims: &TaskClaims, envelope: &Envelope, needed: &[Scope]) -> Result<(), Refusal> {
    let granted: Vec<&str> = claims.scopes().collect();
    let missing: Vec<&str> = needed
        .iter()
        .map(Scope::as_str)
        .filter(|s| !granted.contains(s))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(refuse(
        Verdict::Rejected,
        "scope_missing",
        format!(
            "`{}` needs scopes the token does not grant: {}",
            envelope.payload.action,
            missing.join(", ")
        ),
    ))
}

#[cfg(test)]
mod tests {
    use base64::Engine;

    use super::*;

    /// The header written without jsonwebtoken is the one it would write.
    #[test]
    fn the_eddsa_header_is_jsonwebtokens() {
        let decoded = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(EDDSA_HEADER)
            .unwrap();
        let ours: Header = serde_json::from_slice(&decoded).unwrap();
        assert_eq!(ours, Header::new(jsonwebtoken::Algorithm::EdDSA));
        assert_eq!(
            serde_json::to_vec(&Header::new(jsonwebtoken::Algorithm::EdDSA)).unwrap(),
            decoded
        );
    }

    /// `CLAIMS` names every field of the claims, no more.
    #[test]
    fn the_claims_listed_are_the_fields_of_task_claims() {
        let claims = TaskClaims {
            iss: "orchestrator".into(),
            sub: "alice".into(),
            aud: "echo".into(),
            scope: String::new(),
            jti: TaskId::new().to_string(),
            iat: 0,
            nbf: 0,
            exp: 0,
            act: Actor {
                sub: "orchestrator".into(),
                act: None,
            },
            env_sha256: String::new(),
        };
        let value = serde_json::to_value(claims).unwrap();
        let mut fields: Vec<&str> = value
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut listed = TaskClaims::CLAIMS.to_vec();
        fields.sort_unstable();
        listed.sort_unstable();
        assert_eq!(fields, listed);
    }
}
