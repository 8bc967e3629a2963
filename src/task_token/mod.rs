//! Delegation tokens for tasks: the orchestrator mints one per published
//! attempt, narrowly scoped and short-lived; a worker checks it before
//! anything runs. A contract between processes, so it lives below both
//! (like `claim`); `docs/security.md` states it for workers in other
//! languages.
//!
//! - `canonical`: the RFC 8785 form of the envelope a token is bound to.
//! - `keys`: key files (Ed25519 by default, HS256 for development).
//! - `token`: the claims, minting, and the worker's checks.
//! - `settings`: the `tokens` settings and where keys are found.
//! - `push_key`: the key push notifications and callbacks are signed
//!   with, and its JWKS.

pub mod canonical;
pub mod keys;
pub mod push_key;
pub mod settings;
pub mod token;

pub use canonical::{CanonicalError, envelope_hash, wire_hash};
pub use keys::{KeyError, KeyFiles, KeyKind, SigningKey, VerifyKey};
pub use push_key::PushKey;
pub use settings::TokenSettings;
pub use token::{DEFAULT_ISSUER, MintError, Minter, Refusal, TaskClaims, Verdict, Verifier};
