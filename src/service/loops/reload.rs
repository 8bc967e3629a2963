//! Hot reload: the triggers directory and the agent paths are watched.
//! When a trigger file changes, the directory is loaded again and
//! replaces the triggers; when an agent file changes, the agents are read
//! again (a file that now has an error keeps its last good version), and
//! the triggers with them. New runs use the new definitions; a running
//! run keeps the one it started with (it is stored with the run). A
//! broken file is reported (file, line, what is wrong) and skipped; the
//! others keep working.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::agent::is_agent_file;
use crate::service::Orchestrator;
use crate::trigger::{Triggers, is_trigger_file};

/// How long the files must be quiet before they are read again: an
/// editor's save is several events.
const SETTLE: Duration = Duration::from_millis(200);

/// What is watched.
#[derive(Clone, Copy)]
pub(crate) enum Watched {
    /// The triggers directory.
    Triggers,
    /// The agent files and directories.
    Agents,
}

impl Watched {
    fn label(self) -> &'static str {
        match self {
            Watched::Triggers => "the triggers directory",
            Watched::Agents => "the agent files",
        }
    }

    fn relevant(self) -> fn(&Path) -> bool {
        match self {
            Watched::Triggers => is_trigger_file,
            Watched::Agents => is_agent_file,
        }
    }
}

/// Watches `paths` until `stop` fires, reloading what changed.
pub(crate) async fn watch(
    o: Orchestrator,
    what: Watched,
    paths: Vec<PathBuf>,
    stop: CancellationToken,
) {
    let (tx, mut changes) = mpsc::unbounded_channel();
    let relevant = what.relevant();
    let watcher =
        notify::recommended_watcher(move |event: notify::Result<notify::Event>| match event {
            Ok(event) if changes_content(&event, relevant) => {
                let _ = tx.send(());
            }
            Ok(_) => {}
            Err(e) => warn!(error = %e, "watching {}", what.label()),
        });
    let mut watcher = match watcher {
        Ok(w) => w,
        Err(e) => {
            warn!(error = %e, "cannot watch {}: changes need a restart", what.label());
            return;
        }
    };
    for p in &paths {
        // A file is watched through its directory: editors replace files.
        let (target, mode) = match what {
            Watched::Triggers => (p.clone(), RecursiveMode::NonRecursive),
            Watched::Agents if p.is_dir() => (p.clone(), RecursiveMode::Recursive),
            Watched::Agents => (
                p.parent()
                    .filter(|d| !d.as_os_str().is_empty())
                    .unwrap_or(Path::new("."))
                    .to_path_buf(),
                RecursiveMode::NonRecursive,
            ),
        };
        if let Err(e) = watcher.watch(&target, mode) {
            warn!(error = %e, path = %target.display(), "cannot watch {}: changes need a restart", what.label());
        }
    }
    info!(paths = ?paths, "watching {}", what.label());
    // A change made between the load and the watch's start has no event:
    // the files are compared with those that were read.
    reload(&o, what).await;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            changed = changes.recv() => if changed.is_none() { return },
        }
        // Wait for the files to settle, taking every event meanwhile.
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(SETTLE) => break,
                _ = changes.recv() => {}
            }
        }
        reload(&o, what).await;
    }
}

/// Whether `event` may change what a file holds: a file created,
/// written, renamed, removed or touched. Opening and reading one (the
/// reload's own reads among them) is not: reacting to it would reload
/// forever.
fn changes_content(event: &notify::Event, relevant: fn(&Path) -> bool) -> bool {
    use notify::EventKind;
    let kind = matches!(
        event.kind,
        EventKind::Create(_) | EventKind::Modify(_) | EventKind::Remove(_) | EventKind::Any
    );
    kind && event.paths.iter().any(|p| relevant(p))
}

/// Reads again what changed, if anything did.
pub(crate) async fn reload(o: &Orchestrator, what: Watched) {
    match what {
        Watched::Triggers => reload_triggers(o, false),
        Watched::Agents => reload_agents(o).await,
    }
}

/// Reads the agent files again when they changed (fetching git agents:
/// off the async threads), then the triggers against them.
async fn reload_agents(o: &Orchestrator) {
    let before = o.catalog();
    if before.unchanged() {
        return;
    }
    let git = o.settings().git_options(true);
    let current = before.catalog.clone();
    let Ok(after) = tokio::task::spawn_blocking(move || current.reload(&git)).await else {
        return;
    };
    let names = |c: &crate::agent::Catalog| {
        c.agents
            .keys()
            .chain(c.workflows.keys())
            .cloned()
            .collect::<BTreeSet<_>>()
    };
    let (old, new) = (names(&before), names(&after));
    let added: Vec<_> = new.difference(&old).collect();
    let removed: Vec<_> = old.difference(&new).collect();
    for e in &after.errors {
        warn!("agent file skipped: {e}");
    }
    info!(
        agents = after.agents.len(),
        workflows = after.workflows.len(),
        ?added,
        ?removed,
        problems = after.errors.len(),
        "agents reloaded"
    );
    if let Err(e) = o.replace_agents(after) {
        warn!(error = %e, "the agents were not replaced");
        return;
    }
    reload_triggers(o, true);
}

/// Loads the triggers directory again and replaces the triggers, saying
/// what changed; unless `force`, does nothing when no file changed since
/// the triggers were read (an event of a change already read, or of
/// none).
fn reload_triggers(o: &Orchestrator, force: bool) {
    let before = o.triggers();
    let Some(dir) = before.dir.clone() else {
        // No triggers directory: the cards' workflows are all there is.
        if force {
            o.replace_triggers(Triggers::default().with_cards(&o.catalog()));
        }
        return;
    };
    if !force && crate::trigger::stamp(&dir) == before.stamp {
        return;
    }
    let declared = o.catalog();
    let after = Triggers::load(&dir, &declared.agents).with_cards(&declared);
    let ids = |t: &Triggers| t.loaded.keys().cloned().collect::<BTreeSet<_>>();
    let (old, new) = (ids(&before), ids(&after));
    let added: Vec<&String> = new.difference(&old).collect();
    let removed: Vec<&String> = old.difference(&new).collect();
    let changed: Vec<&String> = new
        .intersection(&old)
        .filter(|id| before.loaded[*id].hash() != after.loaded[*id].hash())
        .collect();
    for e in &after.errors {
        warn!("trigger skipped: {e}");
    }
    info!(
        triggers = after.loaded.len(),
        ?added,
        ?changed,
        ?removed,
        problems = after.errors.len(),
        "triggers reloaded"
    );
    o.replace_triggers(after);
}
