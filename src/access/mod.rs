//! Who may use the HTTP API: callers authenticate with an API key or a
//! bearer JWT from a configured issuer, and become a principal with
//! scopes. Below `service` (which checks the scopes) and `http` (which
//! reads the credentials); `docs/security.md` states the rules.
//!
//! - `grants`: scopes granted and the API's own operation scopes.
//! - `api_keys`: keys stored hashed, and the generated administrator key.
//! - `issuer`: bearer JWTs checked against an issuer's public key or JWKS.

pub mod api_keys;
mod error;
pub mod grants;
pub mod issuer;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use api_keys::{ApiKeyEntry, ApiKeys};
pub use error::AccessError;
pub use grants::Grants;
pub use issuer::{Issuer, IssuerSettings};

/// The principal of every caller when authentication is off.
pub const ANONYMOUS: &str = "anonymous";

/// Whether callers must authenticate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Every call but health and the API description needs credentials.
    #[default]
    Required,
    /// Nobody authenticates: every caller is `anonymous` with every scope.
    /// For local development only; said at start-up and on every response.
    None,
}

/// The `api_auth` settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApiAuthSettings {
    /// `required` (the default) or `none`.
    pub mode: Mode,
    /// API keys, stored as hashes.
    pub api_keys: Vec<ApiKeyEntry>,
    /// An identity provider whose bearer JWTs are accepted.
    pub jwt: Option<IssuerSettings>,
}

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// Its name: the `sub` of its tasks' tokens, the actor in the audit.
    pub name: String,
    /// What it may do.
    pub grants: Grants,
}

/// The longest principal name accepted.
const MAX_PRINCIPAL: usize = 256;

/// Separates an issuer from a subject in the name of a bearer token's
/// principal (`<issuer>#<sub>`); no API key's principal holds it.
pub const ISSUER_SEPARATOR: char = '#';

/// Names the orchestrator itself uses as actors (the audit's
/// `orchestrator`, `agent:<id>`, a run's `run:<id>`): no caller may take
/// them.
const RESERVED_PREFIXES: [&str; 2] = ["agent:", "run:"];

impl Principal {
    /// The principal of an API key named `name`: refused when the name is
    /// not a usable name ([`Principal::checked`]), holds `#` (the bearer
    /// tokens' namespace) or is one the orchestrator uses itself
    /// (`anonymous`, `orchestrator`, `agent:…`, `run:…`).
    pub fn of_api_key(name: String, grants: Grants) -> Result<Principal, Denied> {
        let reserved = name == ANONYMOUS
            || name == "orchestrator"
            || RESERVED_PREFIXES.iter().any(|p| name.starts_with(p));
        if reserved {
            return Err(Denied::invalid(format!(
                "the api key's principal `{name}` is a name the orchestrator uses itself"
            )));
        }
        if name.contains(ISSUER_SEPARATOR) {
            return Err(Denied::invalid(format!(
                "the api key's principal `{name}` holds `{ISSUER_SEPARATOR}`, which names a bearer token's issuer"
            )));
        }
        Principal::checked(name, grants, "api key")
    }

    /// The principal of a bearer token from `issuer` for subject `sub`:
    /// `<issuer>#<sub>`, so that no subject of one issuer is an API key's
    /// principal or another issuer's subject.
    pub fn of_issuer(issuer: &str, sub: &str, grants: Grants) -> Result<Principal, Denied> {
        if sub.trim().is_empty() {
            return Err(Denied::invalid("the bearer token's `sub` is empty"));
        }
        let name = format!("{issuer}{ISSUER_SEPARATOR}{sub}");
        Principal::checked(name, grants, "bearer token")
    }

    /// A principal named `name`, refused when the name is empty, too long
    /// or holds control characters; `from` says where the name came from.
    fn checked(name: String, grants: Grants, from: &str) -> Result<Principal, Denied> {
        let problem = if name.trim().is_empty() {
            Some("is empty".to_string())
        } else if name.len() > MAX_PRINCIPAL {
            Some(format!("is longer than {MAX_PRINCIPAL} bytes"))
        } else if name.chars().any(char::is_control) {
            Some("holds control characters".into())
        } else {
            None
        };
        match problem {
            Some(p) => Err(Denied::invalid(format!("the {from}'s principal {p}"))),
            None => Ok(Principal { name, grants }),
        }
    }
}

/// Why a caller was not let in (answered 401).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    /// `unauthenticated` (no credentials) or `invalid_credentials`.
    pub code: &'static str,
    /// What was wrong, without the credential itself.
    pub message: String,
}

impl Denied {
    fn missing() -> Denied {
        Denied {
            code: "unauthenticated",
            message: "this call needs `Authorization: Bearer <API key or JWT>`".into(),
        }
    }

    fn invalid(message: impl Into<String>) -> Denied {
        Denied {
            code: "invalid_credentials",
            message: message.into(),
        }
    }
}

/// Checks the credentials of each call.
#[derive(Debug)]
pub struct Authenticator {
    mode: Mode,
    keys: ApiKeys,
    issuer: Option<Issuer>,
    generated: Option<PathBuf>,
}

impl Authenticator {
    /// The authenticator `settings` describe. With authentication required
    /// and no keys and no issuer configured, an administrator key (every
    /// scope) is read from, or generated into, `key_dir`.
    pub fn open(settings: &ApiAuthSettings, key_dir: &Path) -> Result<Authenticator, AccessError> {
        if settings.mode == Mode::None {
            if !settings.api_keys.is_empty() || settings.jwt.is_some() {
                return Err(AccessError::Conflict(
                    "api_auth.mode is `none` but credentials are configured: \
                     remove `api_keys` and `jwt`, or drop `mode: none`",
                ));
            }
            return Ok(Authenticator {
                mode: Mode::None,
                keys: ApiKeys::default(),
                issuer: None,
                generated: None,
            });
        }
        let issuer = settings.jwt.as_ref().map(Issuer::open).transpose()?;
        let mut entries = settings.api_keys.clone();
        let mut generated = None;
        if entries.is_empty() && issuer.is_none() {
            let (admin, made) = api_keys::admin_key(key_dir)?;
            entries.push(admin);
            generated = made;
        }
        Ok(Authenticator {
            mode: Mode::Required,
            keys: ApiKeys::new(&entries)?,
            issuer,
            generated,
        })
    }

    /// Whether authentication is off.
    pub fn is_off(&self) -> bool {
        self.mode == Mode::None
    }

    /// The administrator key file written at open, if one was.
    pub fn generated_admin_key(&self) -> Option<&Path> {
        self.generated.as_deref()
    }

    /// The caller an `Authorization` header value names.
    pub fn authenticate(&self, authorization: Option<&str>) -> Result<Principal, Denied> {
        if self.is_off() {
            return Ok(Principal {
                name: ANONYMOUS.to_string(),
                grants: Grants::all(),
            });
        }
        let value = authorization.ok_or_else(Denied::missing)?;
        let credential = value
            .strip_prefix("Bearer ")
            .or_else(|| value.strip_prefix("bearer "))
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .ok_or_else(|| {
                Denied::invalid("the Authorization header must be `Bearer <API key or JWT>`")
            })?;
        if credential.starts_with(api_keys::PREFIX) {
            return self
                .keys
                .find(credential)
                .cloned()
                .ok_or_else(|| Denied::invalid("unknown API key"));
        }
        match &self.issuer {
            Some(issuer) => issuer.verify(credential),
            None => Err(Denied::invalid(
                "not an API key, and no JWT issuer is configured",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An API key's principal cannot be a bearer token's (`issuer#sub`)
    /// nor a name the orchestrator acts under; a token's principal always
    /// names its issuer.
    #[test]
    fn api_keys_and_issuers_have_their_own_principals() {
        for taken in [
            "https://idp.test#alice",
            "anonymous",
            "orchestrator",
            "agent:echo",
            "run:0193",
        ] {
            assert!(
                Principal::of_api_key(taken.into(), Grants::default()).is_err(),
                "{taken}"
            );
        }
        assert!(Principal::of_api_key("alice".into(), Grants::default()).is_ok());
        let token = Principal::of_issuer("https://idp.test", "alice", Grants::default()).unwrap();
        assert_eq!(token.name, "https://idp.test#alice");
        assert!(Principal::of_issuer("https://idp.test", " ", Grants::default()).is_err());
    }
}
