//! Hot reload: the triggers directory is watched, and when a file in it
//! changes the whole directory is loaded again and replaces the triggers.
//! New runs use the new definitions; a running run keeps the one it
//! started with (it is stored with the run). A broken file is reported
//! (file, line, what is wrong) and skipped; the others keep working.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::Orchestrator;
use crate::trigger::{Triggers, is_trigger_file};

/// How long the directory must be quiet before it is read again: an
/// editor's save is several events.
const SETTLE: Duration = Duration::from_millis(200);

/// Watches `dir` until `stop` fires, replacing the orchestrator's
/// triggers after each change.
pub(crate) async fn watch(o: Orchestrator, dir: PathBuf, stop: CancellationToken) {
    let (tx, mut changes) = mpsc::unbounded_channel();
    let watcher =
        notify::recommended_watcher(move |event: notify::Result<notify::Event>| match event {
            Ok(event) if changes_content(&event) => {
                let _ = tx.send(());
            }
            Ok(_) => {}
            Err(e) => warn!(error = %e, "watching the triggers directory"),
        })
        .and_then(|mut w| w.watch(&dir, RecursiveMode::NonRecursive).map(|()| w));
    // Kept until the loop ends: dropping it stops the watch.
    let _watcher = match watcher {
        Ok(w) => w,
        Err(e) => {
            warn!(error = %e, dir = %dir.display(), "cannot watch the triggers directory: changes need a restart");
            return;
        }
    };
    info!(dir = %dir.display(), "watching the triggers directory");
    // A change made between the load and the watch's start has no event:
    // the files are compared with those that were read.
    reload(&o, &dir);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            changed = changes.recv() => if changed.is_none() { return },
        }
        // Wait for the directory to settle, taking every event meanwhile.
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(SETTLE) => break,
                _ = changes.recv() => {}
            }
        }
        reload(&o, &dir);
    }
}

/// Whether `event` may change what a trigger file holds: a file created,
/// written, renamed, removed or touched. Opening and reading one (the
/// reload's own reads among them) is not: reacting to it would reload
/// forever.
fn changes_content(event: &notify::Event) -> bool {
    use notify::EventKind;
    let kind = matches!(
        event.kind,
        EventKind::Create(_) | EventKind::Modify(_) | EventKind::Remove(_) | EventKind::Any
    );
    kind && event.paths.iter().any(|p| is_trigger_file(p))
}

/// Loads `dir` again and replaces the triggers, saying what changed;
/// does nothing when no file changed since the triggers were read (an
/// event of a change already read, or of none).
pub(crate) fn reload(o: &Orchestrator, dir: &Path) {
    let before = o.triggers();
    if crate::trigger::stamp(dir) == before.stamp {
        return;
    }
    let after = Triggers::load(dir, o.cards());
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
