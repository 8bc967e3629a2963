//! Why API access cannot be set up as configured: a setting, or a key file.

use std::path::PathBuf;

/// Why the authenticator (API keys, the JWT issuer) cannot open.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// A member of `api_auth` is wrong (`field` names it).
    #[error("{field}: {why}")]
    Setting {
        /// The member (`api_auth.api_keys[2]`).
        field: String,
        /// What is wrong with it.
        why: String,
    },
    /// Settings that contradict each other.
    #[error("{0}")]
    Conflict(&'static str),
    /// A key file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// A key file holds no key that can be used (`at`: where in it).
    #[error("{}: {at}{why}", path.display())]
    Key {
        /// The file.
        path: PathBuf,
        /// Where in the file, with its separator (`keys[0]: `), or empty.
        at: String,
        /// What is wrong.
        why: String,
    },
}

impl AccessError {
    pub(super) fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> AccessError + '_ {
        move |source| AccessError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    pub(super) fn key(path: &std::path::Path, why: impl Into<String>) -> AccessError {
        AccessError::Key {
            path: path.to_path_buf(),
            at: String::new(),
            why: why.into(),
        }
    }
}
