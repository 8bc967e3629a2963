//! What a caller is allowed: the scopes it was granted, and the scopes the
//! API's own operations need.

use serde::{Deserialize, Serialize};

/// Read every principal's tasks (without it, a caller sees only its own).
pub const READ_ALL: &str = "orch:tasks:read_all";
/// Cancel every principal's tasks (without it, only its own).
pub const CANCEL_ALL: &str = "orch:tasks:cancel_all";
/// Read the audit trail and check its chain.
pub const AUDIT_READ: &str = "orch:audit:read";
/// Answer the approval gates of every principal's runs (without it, only
/// one's own).
pub const RUNS_APPROVE: &str = "orch:runs:approve";
/// List and replay dead letters.
pub const DLQ_MANAGE: &str = "orch:dlq:manage";

/// The scopes granted to a caller. A grant is a scope, `*` (every scope),
/// or a prefix ending in `*` (`Files.*` grants `Files.Read`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Grants(Vec<String>);

impl Grants {
    /// These grants.
    pub fn new(grants: impl IntoIterator<Item = impl Into<String>>) -> Grants {
        Grants(grants.into_iter().map(Into::into).collect())
    }

    /// Every scope: for trusted in-process callers and `api_auth.mode:
    /// none`.
    pub fn all() -> Grants {
        Grants(vec!["*".to_string()])
    }

    /// Whether `scope` is granted.
    pub fn covers(&self, scope: &str) -> bool {
        self.0.iter().any(|g| match g.strip_suffix('*') {
            Some(prefix) => scope.starts_with(prefix),
            None => g == scope,
        })
    }

    /// The scopes of `needed` that are not granted, in order.
    pub fn missing<'a>(&self, needed: impl IntoIterator<Item = &'a str>) -> Vec<String> {
        needed
            .into_iter()
            .filter(|s| !self.covers(s))
            .map(str::to_string)
            .collect()
    }

    /// The grants as listed.
    pub fn as_slice(&self) -> &[String] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_prefix_and_everything() {
        let g = Grants::new(["Files.Read", "Mail.*"]);
        assert!(g.covers("Files.Read"));
        assert!(!g.covers("Files.ReadWrite"));
        assert!(!g.covers("Files"));
        assert!(g.covers("Mail.Send"));
        assert!(g.covers("Mail."));
        assert!(!g.covers("Mailx"));
        assert!(Grants::all().covers("anything:at:all"));
        assert!(!Grants::default().covers(READ_ALL));
        assert_eq!(
            g.missing(["Files.Read", "Calendar.Read", "Mail.Send", READ_ALL]),
            vec!["Calendar.Read".to_string(), READ_ALL.to_string()]
        );
    }
}
