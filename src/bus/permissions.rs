//! A least-privilege bus: one NATS user per process kind, each with the
//! subjects it needs and no others, written as a server `authorization`
//! block (`auth.conf`) and one nkey seed file per user.
//!
//! - `orchestrator`: everything (it provisions the bus, publishes tasks,
//!   reads every event, writes cancel marks, moves dead letters).
//! - `agent-<id>`, one per agent card: pulls, acks, creates and looks up
//!   only its own consumers; publishes only its own events
//!   (`<prefix>.events.<id>.>`), its own registry entries, its own claims
//!   (`<id>.<task>` keys) and dead letters of its own unreadable messages
//!   (`<prefix>.dlq.<id>`); reads its own events and claims by direct get;
//!   receives replies only under `_INBOX.agents.<id>` and the cancel
//!   broadcasts. It cannot publish tasks, create streams, ask for any
//!   stream's info (which lists every agent's subjects, task ids among
//!   them), touch another agent's consumers, claims or events, or read
//!   another agent's replies.
//!
//! Every permission is an allow-list: what is not listed is refused by the
//! broker, which drops the message and tells the client.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{Names, agent_inbox_prefix};
use crate::envelope::{AgentName, Priority};

/// What one user may publish and subscribe to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Permissions {
    /// Subjects it may publish on.
    pub publish: Vec<String>,
    /// Subjects it may subscribe to.
    pub subscribe: Vec<String>,
}

/// The orchestrator's permissions: every subject.
pub fn orchestrator() -> Permissions {
    Permissions {
        publish: vec![">".into()],
        subscribe: vec![">".into()],
    }
}

/// The permissions of agent `agent`'s workers.
pub fn agent(names: &Names, agent: &AgentName) -> Permissions {
    let tasks = names.tasks_stream();
    let events = names.events_stream();
    let (agents, deliveries) = (names.agents_bucket(), names.deliveries_bucket());
    // A worker learns the bus is provisioned from its own consumer, event
    // subject and claim key, never from a stream's info.
    let mut publish = Vec::new();
    for priority in Priority::ALL {
        let consumer = names.agent_consumer(agent, priority);
        let filter = names.task_subject(agent, priority);
        publish.extend([
            format!("$JS.API.CONSUMER.CREATE.{tasks}.{consumer}.{filter}"),
            format!("$JS.API.CONSUMER.INFO.{tasks}.{consumer}"),
            format!("$JS.API.CONSUMER.MSG.NEXT.{tasks}.{consumer}"),
            format!("$JS.ACK.{tasks}.{consumer}.>"),
        ]);
    }
    let own_events = names.agent_events(agent);
    publish.extend([
        format!("$JS.API.DIRECT.GET.{events}.{own_events}"),
        own_events,
        names.dlq_subject(agent.as_str()),
        format!("$KV.{agents}.{agent}.>"),
        format!("$KV.{deliveries}.{agent}.>"),
        format!("$JS.API.DIRECT.GET.KV_{deliveries}.$KV.{deliveries}.{agent}.>"),
    ]);
    Permissions {
        publish,
        subscribe: vec![
            format!("{}.>", agent_inbox_prefix(agent)),
            names.all_cancels(),
        ],
    }
}

/// A user of the bus: its name, its nkey seed file and public key, and its
/// permissions.
#[derive(Debug, Clone, Serialize)]
pub struct BusUser {
    /// `orchestrator` or `agent-<id>`.
    pub name: String,
    /// The seed file the process logs in with (`NATS_NKEY`).
    pub seed_file: PathBuf,
    /// The nkey's public key, as the server knows the user.
    pub public_key: String,
    /// What it may do.
    pub permissions: Permissions,
}

/// The files a deployment's bus configuration was written to.
#[derive(Debug, Clone, Serialize)]
pub struct BusFiles {
    /// The server's `authorization` block, to `include` from its config.
    pub auth_conf: PathBuf,
    /// The users, with their seed files.
    pub users: Vec<BusUser>,
}

/// The orchestrator user's seed file in `dir`.
pub fn orchestrator_seed(dir: &Path) -> PathBuf {
    dir.join("orchestrator.nk")
}

/// Agent `agent`'s seed file in `dir`.
pub fn agent_seed(dir: &Path, agent: &AgentName) -> PathBuf {
    dir.join(format!("agent-{agent}.nk"))
}

/// Why the bus's users could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PermissionsError {
    /// A file or directory could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// A seed file holds no user seed (or one could not be made).
    #[error("{}: {source}", path.display())]
    Seed {
        /// The seed file.
        path: PathBuf,
        /// What nkeys said.
        #[source]
        source: nkeys::error::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PermissionsError + '_ {
    move |source| PermissionsError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The public key of the user whose seed is at `path`, made (mode 0600)
/// when the file does not exist.
fn user_key(path: &Path) -> Result<String, PermissionsError> {
    let seed_error = |source| PermissionsError::Seed {
        path: path.to_path_buf(),
        source,
    };
    let pair = match std::fs::read_to_string(path) {
        Ok(seed) => nkeys::KeyPair::from_seed(seed.trim()).map_err(seed_error)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let pair = nkeys::KeyPair::new_user();
            let seed = pair.seed().map_err(seed_error)?;
            crate::task_token::keys::write_private(path, format!("{seed}\n").as_bytes())
                .map_err(io(path))?;
            pair
        }
        Err(e) => return Err(io(path)(e)),
    };
    Ok(pair.public_key())
}

/// Writes the bus configuration for the orchestrator and `agents` into
/// `dir`: `auth.conf` (rewritten) and a seed file per user (kept when it
/// exists, so re-running for a new agent does not log the others out).
pub fn write(
    dir: &Path,
    names: &Names,
    agents: &[AgentName],
) -> Result<BusFiles, PermissionsError> {
    crate::files::private_dir(dir).map_err(io(dir))?;
    let mut users = Vec::new();
    let seed = orchestrator_seed(dir);
    users.push(BusUser {
        name: "orchestrator".into(),
        public_key: user_key(&seed)?,
        seed_file: seed,
        permissions: orchestrator(),
    });
    for a in agents {
        let seed = agent_seed(dir, a);
        users.push(BusUser {
            name: format!("agent-{a}"),
            public_key: user_key(&seed)?,
            seed_file: seed,
            permissions: agent(names, a),
        });
    }
    let auth_conf = dir.join("auth.conf");
    crate::files::write_file(
        &auth_conf,
        auth_conf_text(&users).as_bytes(),
        crate::files::PRIVATE,
    )
    .map_err(io(&auth_conf))?;
    Ok(BusFiles { auth_conf, users })
}

/// The `authorization` block: subjects are JSON strings, which the NATS
/// configuration format reads as they are.
fn auth_conf_text(users: &[BusUser]) -> String {
    let list =
        |subjects: &[String]| serde_json::to_string(subjects).unwrap_or_else(|_| "[]".into());
    let mut out = String::from(
        "# Written by `orchestrator nats config`: one user per process kind, each\n\
         # allowed only the subjects it needs. Include it from the server's\n\
         # configuration (include \"auth.conf\"); each process logs in with its\n\
         # seed file (NATS_NKEY).\n\
         authorization {\n  users = [\n",
    );
    for user in users {
        out.push_str(&format!(
            "    # {}\n    {{\n      nkey: \"{}\"\n      permissions: {{\n        publish: {{ allow: {} }}\n        subscribe: {{ allow: {} }}\n      }}\n    }}\n",
            user.name,
            user.public_key,
            list(&user.permissions.publish),
            list(&user.permissions.subscribe),
        ));
    }
    out.push_str("  ]\n}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_is_allowed_only_its_own_subjects() {
        let names = Names::new("orch");
        let echo: AgentName = "echo".parse().unwrap();
        let p = agent(&names, &echo);
        let all = p.publish.join(" ");
        assert!(p.publish.contains(&"orch.events.echo.>".to_string()));
        assert!(
            p.publish
                .contains(&"$KV.ORCH_DELIVERIES.echo.>".to_string())
        );
        assert!(all.contains("$JS.API.CONSUMER.MSG.NEXT.ORCH_TASKS.agent_echo_high"));
        assert!(
            !p.publish.iter().any(|s| s.starts_with("orch.tasks.")),
            "agents never publish tasks: {all}"
        );
        assert!(!all.contains("STREAM.CREATE") && !all.contains("STREAM.UPDATE"));
        assert!(!all.contains('*'), "no wildcard but a trailing >: {all}");
        for subject in p.publish.iter().chain(&p.subscribe) {
            let wild = subject.find('>');
            assert!(
                wild.is_none() || wild == Some(subject.len() - 1),
                "{subject}"
            );
        }
        assert_eq!(
            p.subscribe,
            vec![
                "_INBOX.agents.echo.>".to_string(),
                "orch.control.cancel.*".to_string()
            ]
        );
    }

    #[test]
    fn seeds_are_kept_and_the_conf_names_every_user() {
        let dir = tempfile::tempdir().unwrap();
        let names = Names::new("orch");
        let agents: Vec<AgentName> = vec!["a".parse().unwrap(), "b".parse().unwrap()];
        let first = write(dir.path(), &names, &agents[..1]).unwrap();
        let second = write(dir.path(), &names, &agents).unwrap();
        assert_eq!(first.users[0].public_key, second.users[0].public_key);
        assert_eq!(first.users[1].public_key, second.users[1].public_key);
        assert_eq!(second.users.len(), 3);
        let conf = std::fs::read_to_string(&second.auth_conf).unwrap();
        for user in &second.users {
            assert!(conf.contains(&user.public_key), "{conf}");
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&user.seed_file)
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn a_seed_file_that_holds_no_seed_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let seed = orchestrator_seed(dir.path());
        std::fs::write(&seed, "not a seed\n").unwrap();
        match write(dir.path(), &Names::new("orch"), &[]) {
            Err(PermissionsError::Seed { path, .. }) => assert_eq!(path, seed),
            other => panic!("{other:?}"),
        }
    }
}
