//! Who may use the HTTP API: callers authenticate with an API key or a
//! bearer JWT from a configured issuer, and become a principal with
//! scopes. Below `service` (which checks the scopes) and `http` (which
//! reads the credentials); `docs/security.md` states the rules.
//!
//! - `grants`: scopes granted and the API's own operation scopes.
//! - `api_keys`: keys stored hashed, and the generated administrator key.
//! - `issuer`: bearer JWTs checked against an issuer's public key or JWKS.

pub mod api_keys;
mod authenticator;
mod error;
pub mod grants;
pub mod issuer;
mod principal;

pub use api_keys::{ApiKeyEntry, ApiKeys};
pub use authenticator::{ApiAuthSettings, Authenticator, Mode};
pub use error::AccessError;
pub use grants::Grants;
pub use issuer::{Issuer, IssuerSettings};
pub use principal::{ANONYMOUS, Denied, ISSUER_SEPARATOR, Principal};
