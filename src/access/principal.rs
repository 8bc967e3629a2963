//! Who a caller is once authenticated, and why one is refused.

use super::Grants;

/// The principal of every caller when authentication is off.
pub const ANONYMOUS: &str = "anonymous";

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
    pub(super) fn missing() -> Denied {
        Denied {
            code: "unauthenticated",
            message: "this call needs `Authorization: Bearer <API key or JWT>`".into(),
        }
    }

    pub(super) fn invalid(message: impl Into<String>) -> Denied {
        Denied {
            code: "invalid_credentials",
            message: message.into(),
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
