//! The HTTP client push deliveries go out through: each address a name
//! resolves to is checked (`crate::target`), redirects are not followed
//! (a 3xx is an attempt that failed: the delivery's signature and token
//! are for its target alone, never for a host it points at), proxies
//! from the environment are not
//! used (a proxy would resolve names where they are not checked), and one
//! attempt, response included, is bounded by the configured timeout. The
//! response's body is never read: its status is the answer.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::header::HeaderMap;

use crate::target::{self, Reach};

/// Why one attempt at a delivery failed (recorded as the delivery's
/// last error, in words).
#[derive(Debug, thiserror::Error)]
pub(super) enum AttemptError {
    /// The target may not be sent to (the settings' allowed addresses).
    #[error(transparent)]
    Refused(#[from] target::Refused),
    /// A header's value cannot be sent (a token or credentials with
    /// characters a header cannot carry).
    #[error("`{0}` is no header value")]
    Header(String),
    /// The sender is stopping.
    #[error("the sender is stopping")]
    Stopping,
    /// The target redirected: not followed.
    #[error("the target answered {0} (a redirect: not followed)")]
    Redirect(reqwest::StatusCode),
    /// The target answered, but not with a 2xx.
    #[error("the target answered {0}")]
    Status(reqwest::StatusCode),
    /// No answer: timed out, not connected, or failed on the way.
    #[error("{}", describe(.0))]
    Transport(reqwest::Error),
}

/// Resolves names with the system's resolver, keeping only allowed
/// addresses.
struct Checked {
    allowed: Vec<Reach>,
}

impl Resolve for Checked {
    fn resolve(&self, name: Name) -> Resolving {
        let allowed = self.allowed.clone();
        Box::pin(async move {
            let host = name.as_str().to_string();
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let ok = target::resolved(&host, found, &allowed)?;
            Ok(Box::new(ok.into_iter()) as Addrs)
        })
    }
}

/// The outbox's client.
#[derive(Clone)]
pub(super) struct Client {
    http: reqwest::Client,
}

impl Client {
    /// A client for targets of the kinds in `allowed` (and public ones),
    /// each attempt bounded by `timeout`.
    pub(super) fn new(allowed: &[Reach], timeout: Duration) -> Client {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(5)))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .dns_resolver(Arc::new(Checked {
                allowed: allowed.to_vec(),
            }))
            .build()
            .expect("the delivery client's settings are valid");
        Client { http }
    }

    /// POSTs `body` to `url` with `headers`: `Ok` on a 2xx, else why not.
    pub(super) async fn post(
        &self,
        url: &str,
        allowed: &[Reach],
        headers: HeaderMap,
        body: Vec<u8>,
    ) -> Result<(), AttemptError> {
        // A literal address is not resolved: checked here (again: the
        // settings may have changed since the target was set).
        target::check(url, allowed)?;
        let sent = self.http.post(url).headers(headers).body(body).send().await;
        match sent {
            Ok(r) if r.status().is_success() => Ok(()),
            Ok(r) if r.status().is_redirection() => Err(AttemptError::Redirect(r.status())),
            Ok(r) => Err(AttemptError::Status(r.status())),
            Err(e) => Err(AttemptError::Transport(e)),
        }
    }
}

/// A transport error with its causes, in one line.
fn describe(e: &reqwest::Error) -> String {
    let mut out = if e.is_timeout() {
        "timed out".to_string()
    } else if e.is_connect() {
        "could not connect".to_string()
    } else {
        "failed".to_string()
    };
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
