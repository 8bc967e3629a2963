//! The authenticator: the settings (`api_auth`), and what a request's
//! credentials make of its caller.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{
    ANONYMOUS, AccessError, ApiKeyEntry, ApiKeys, Denied, Grants, Issuer, IssuerSettings,
    Principal, api_keys,
};

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
