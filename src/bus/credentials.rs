//! How every process authenticates to NATS and secures the connection: the
//! `bus.auth` settings, passed through to the client (user and password, a
//! token, an nkey seed or a credentials file; TLS with a CA and optionally
//! a client certificate). Environment variables `NATS_USER`,
//! `NATS_PASSWORD`, `NATS_TOKEN`, `NATS_CREDS` and `NATS_NKEY` (a seed
//! file) override the file.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::codec::DecodeError;
use crate::redact::Secret;

/// Why `bus.auth` cannot be turned into a connection's options.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// The settings contradict each other.
    #[error(transparent)]
    Settings(#[from] DecodeError),
    /// A file they name cannot be read.
    #[error("bus.auth.{field} {}: {source}", path.display())]
    Unreadable {
        /// The setting naming the file.
        field: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// NATS authentication and TLS (`bus.auth`); every field optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NatsAuth {
    /// User name, with `password`.
    pub user: Option<String>,
    /// Password, with `user`.
    pub password: Option<Secret>,
    /// A token.
    pub token: Option<Secret>,
    /// A file holding an nkey seed (`SU...`).
    pub nkey_seed_file: Option<PathBuf>,
    /// A `.creds` file (JWT and nkey seed, as `nsc` writes them).
    pub creds_file: Option<PathBuf>,
    /// CA certificate(s) to verify the server with (PEM).
    pub tls_ca_file: Option<PathBuf>,
    /// Client certificate for mutual TLS (PEM), with `tls_key_file`.
    pub tls_cert_file: Option<PathBuf>,
    /// Client key for mutual TLS (PEM), with `tls_cert_file`.
    pub tls_key_file: Option<PathBuf>,
    /// Refuse a connection without TLS.
    pub tls_required: bool,
}

impl NatsAuth {
    /// Applies the `NATS_*` environment variables over these settings.
    pub fn with_env(mut self, var: impl Fn(&str) -> Option<String>) -> NatsAuth {
        if let Some(v) = var("NATS_USER") {
            self.user = Some(v);
        }
        if let Some(v) = var("NATS_PASSWORD") {
            self.password = Some(Secret::new(v));
        }
        if let Some(v) = var("NATS_TOKEN") {
            self.token = Some(Secret::new(v));
        }
        if let Some(v) = var("NATS_CREDS") {
            self.creds_file = Some(v.into());
        }
        if let Some(v) = var("NATS_NKEY") {
            self.nkey_seed_file = Some(v.into());
        }
        self
    }

    /// Checks that the settings make one way to log in, whole.
    pub fn check(&self) -> Result<(), DecodeError> {
        let ways = [
            self.user.is_some() || self.password.is_some(),
            self.token.is_some(),
            self.nkey_seed_file.is_some(),
            self.creds_file.is_some(),
        ];
        if ways.iter().filter(|w| **w).count() > 1 {
            return Err(DecodeError::invalid(
                "bus.auth",
                "give one way to log in: user and password, token, nkey_seed_file or creds_file",
            ));
        }
        if self.user.is_some() != self.password.is_some() {
            return Err(DecodeError::invalid(
                "bus.auth",
                "user and password go together",
            ));
        }
        if self.tls_cert_file.is_some() != self.tls_key_file.is_some() {
            return Err(DecodeError::invalid(
                "bus.auth",
                "tls_cert_file and tls_key_file go together",
            ));
        }
        Ok(())
    }

    /// Client options carrying these settings.
    pub(crate) async fn options(&self) -> Result<async_nats::ConnectOptions, CredentialsError> {
        self.check()?;
        let mut options = async_nats::ConnectOptions::new();
        if let (Some(user), Some(password)) = (&self.user, &self.password) {
            options = options.user_and_password(user.clone(), password.expose().to_string());
        }
        if let Some(token) = &self.token {
            options = options.token(token.expose().to_string());
        }
        if let Some(path) = &self.nkey_seed_file {
            let seed =
                std::fs::read_to_string(path).map_err(|source| CredentialsError::Unreadable {
                    field: "nkey_seed_file",
                    path: path.clone(),
                    source,
                })?;
            options = options.nkey(seed.trim().to_string());
        }
        if let Some(path) = &self.creds_file {
            options = options.credentials_file(path).await.map_err(|source| {
                CredentialsError::Unreadable {
                    field: "creds_file",
                    path: path.clone(),
                    source,
                }
            })?;
        }
        if let Some(ca) = &self.tls_ca_file {
            options = options.add_root_certificates(ca.clone());
        }
        if let (Some(cert), Some(key)) = (&self.tls_cert_file, &self.tls_key_file) {
            options = options.add_client_certificate(cert.clone(), key.clone());
        }
        Ok(options.require_tls(self.tls_required))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_way_to_log_in_and_pairs_that_go_together() {
        assert!(NatsAuth::default().check().is_ok());
        let both = NatsAuth {
            user: Some("u".into()),
            password: Some(Secret::new("p")),
            token: Some(Secret::new("t")),
            ..NatsAuth::default()
        };
        assert!(both.check().unwrap_err().to_string().contains("one way"));
        let half = NatsAuth {
            user: Some("u".into()),
            ..NatsAuth::default()
        };
        assert!(half.check().unwrap_err().to_string().contains("together"));
        // The environment wins over the file, and the password never shows.
        let env = NatsAuth::default().with_env(|k| match k {
            "NATS_USER" => Some("orch".into()),
            "NATS_PASSWORD" => Some("s3cret".into()),
            _ => None,
        });
        assert_eq!(env.user.as_deref(), Some("orch"));
        assert!(!format!("{env:?}").contains("s3cret"));
        assert!(env.check().is_ok());
    }
}
