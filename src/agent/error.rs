//! Why the one agent a worker is to run cannot be read.

use std::path::PathBuf;

use crate::source::Diagnostic;

/// Why `Catalog::one` finds no single agent.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// Its files have problems (each at file and line).
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Files(Vec<Diagnostic>),
    /// The path declares no agent of the name asked for.
    #[error("{} declares no agent `{name}`", path.display())]
    NoSuchAgent {
        /// The file or directory.
        path: PathBuf,
        /// The name asked for.
        name: String,
    },
    /// The path declares no agent at all.
    #[error("{}: no agent declared", path.display())]
    NoAgent {
        /// The file or directory.
        path: PathBuf,
    },
    /// The path declares several, and none was named.
    #[error("{} declares several agents ({}): say which with --name", path.display(), names.join(", "))]
    Several {
        /// The file or directory.
        path: PathBuf,
        /// Their names.
        names: Vec<String>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::Catalog;

    fn agent(dir: &std::path::Path, name: &str) {
        let card = serde_json::json!({
            "name": name, "version": "1.0.0", "description": "d",
            "skills": [{"id": "s", "description": "s"}],
            "invocation": {"type": "builtin", "handler": "echo"}
        });
        let at = dir.join(name);
        std::fs::create_dir_all(&at).unwrap();
        std::fs::write(at.join("agent.json"), card.to_string()).unwrap();
    }

    #[test]
    fn one_agent_is_found_or_the_error_says_why_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        assert!(matches!(
            Catalog::one(&path, None),
            Err(AgentError::NoAgent { .. })
        ));
        agent(&path, "a");
        assert_eq!(Catalog::one(&path, None).unwrap().name.as_str(), "a");
        agent(&path, "b");
        match Catalog::one(&path, None) {
            Err(AgentError::Several { names, .. }) => assert_eq!(names, ["a", "b"]),
            other => panic!("{:?}", other.map(|c| c.name)),
        }
        assert_eq!(Catalog::one(&path, Some("b")).unwrap().name.as_str(), "b");
        match Catalog::one(&path, Some("c")) {
            Err(AgentError::NoSuchAgent { name, .. }) => assert_eq!(name, "c"),
            other => panic!("{:?}", other.map(|c| c.name)),
        }
        std::fs::write(path.join("a").join("agent.json"), "{").unwrap();
        assert!(matches!(
            Catalog::one(&path, Some("b")),
            Err(AgentError::Files(_))
        ));
    }
}
