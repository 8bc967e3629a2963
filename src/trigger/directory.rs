//! The triggers of a directory: every file read and checked (alone, and
//! against the agents' cards), one id per trigger, and each problem at its
//! file and line; what a watcher compares to see what it missed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{Problem, Trigger};
use crate::source::Diagnostic;

/// The triggers loaded from a directory, and what could not be loaded.
#[derive(Debug, Clone, Default)]
pub struct Triggers {
    /// The usable triggers, by id.
    pub loaded: BTreeMap<String, std::sync::Arc<Trigger>>,
    /// Every problem found, by file and line; those files are skipped.
    pub errors: Vec<Diagnostic>,
    /// The directory they were loaded from, watched while the
    /// orchestrator runs.
    pub dir: Option<PathBuf>,
    /// When the directory was read.
    pub loaded_at: Option<crate::envelope::Timestamp>,
    /// The directory's trigger files as they were when read: a watcher
    /// that starts later compares it to see what it missed.
    pub stamp: crate::source::Stamp,
}

/// The stamp of the trigger files of `dir` (its own files, as loading
/// reads them).
pub fn stamp(dir: &Path) -> crate::source::Stamp {
    crate::source::stamp(&[dir.to_path_buf()], is_trigger_file, 1)
}

impl Triggers {
    /// Loads every trigger file of `dir` and checks each against `cards`
    /// (when there are cards): a trigger with a problem is skipped and its
    /// problems kept.
    pub fn load(
        dir: &Path,
        cards: &BTreeMap<crate::envelope::AgentName, crate::agent::AgentCard>,
    ) -> Triggers {
        // Taken first: a file written while the others are read makes the
        // stamp older than what was read, so a watcher reads it again.
        let stamp = stamp(dir);
        let mut triggers = match trigger_files(dir) {
            Ok(paths) => Triggers::load_files(&paths, cards),
            Err(e) => Triggers {
                errors: vec![e],
                ..Triggers::default()
            },
        };
        triggers.dir = Some(dir.to_path_buf());
        triggers.loaded_at = Some(crate::envelope::Timestamp::now());
        triggers.stamp = stamp;
        triggers
    }

    /// Loads `paths` in order and checks each trigger on its own and
    /// against `cards` (when there are cards); every problem of a file is
    /// kept, and a file with any is skipped. A second file with an id
    /// already seen is a problem.
    pub fn load_files(
        paths: &[PathBuf],
        cards: &BTreeMap<crate::envelope::AgentName, crate::agent::AgentCard>,
    ) -> Triggers {
        let mut loaded = BTreeMap::new();
        let mut errors = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for path in paths {
            let (trigger, text) = match Trigger::read(path) {
                Ok(read) => read,
                Err(e) => {
                    errors.extend(e);
                    continue;
                }
            };
            let mut problems = trigger.problems();
            if !cards.is_empty() {
                problems.extend(trigger.problems_with(cards));
            }
            if !seen.insert(trigger.id.clone()) {
                problems.push(Problem {
                    path: "id".into(),
                    message: format!("`{}` is the id of another trigger", trigger.id),
                });
            }
            if problems.is_empty() {
                loaded.insert(trigger.id.clone(), std::sync::Arc::new(trigger));
            } else {
                errors.extend(locate(path, &text, problems));
            }
        }
        Triggers {
            loaded,
            errors,
            ..Triggers::default()
        }
    }
}

/// The trigger files of `dir`, sorted.
pub fn trigger_files(dir: &Path) -> Result<Vec<PathBuf>, Diagnostic> {
    let entries = std::fs::read_dir(dir).map_err(|e| Diagnostic {
        file: dir.to_path_buf(),
        line: None,
        field: None,
        message: e.to_string(),
    })?;
    let mut paths: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| is_trigger_file(p))
        .collect();
    paths.sort();
    Ok(paths)
}

/// Whether `path` names a trigger file: by its extension, and not hidden
/// (editors save through hidden files).
pub fn is_trigger_file(path: &Path) -> bool {
    let hidden = path
        .file_name()
        .and_then(|n| n.to_str())
        .is_none_or(|n| n.starts_with('.'));
    !hidden
        && path
            .extension()
            .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
}

/// Turns problems found after parsing into errors with lines, in the
/// order of the file.
pub fn locate(file: &Path, text: &str, problems: Vec<Problem>) -> Vec<Diagnostic> {
    let mut errors: Vec<Diagnostic> = problems
        .into_iter()
        .map(|p| Diagnostic {
            file: file.to_path_buf(),
            line: crate::source::line_of(text, &p.path),
            field: Some(p.path),
            message: p.message,
        })
        .collect();
    errors.sort_by_key(|e| e.line);
    errors
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trigger::testing::{GOOD, write};

    #[test]
    fn a_directory_loads_good_files_and_reports_broken_ones_with_lines() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.yaml", GOOD);
        write(
            dir.path(),
            "b.yaml",
            "id: two\nsteps:\n  - id: a\n    agent: x\n    action: y\n  - id: b\n    agent: x\n    action: y\n    agnet: x\n",
        );
        write(dir.path(), "c.yml", "id: [unclosed\n");
        write(
            dir.path(),
            "d.json",
            r#"{"id": "d", "steps": [{"id": "s", "agent": "x", "action": "y"}], "colour": 1}"#,
        );
        write(
            dir.path(),
            "e.yaml",
            &GOOD.replace("id: search", "id: Search"),
        );
        write(dir.path(), "notes.txt", "ignored");
        let Triggers {
            loaded: triggers,
            errors,
            ..
        } = Triggers::load(dir.path(), &BTreeMap::new());
        assert_eq!(triggers.keys().collect::<Vec<_>>(), ["summarize"]);
        let messages: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
        assert_eq!(messages.len(), 4, "{messages:?}");
        assert_eq!(errors[0].line, Some(9), "{}", messages[0]);
        assert!(
            messages[0].ends_with("b.yaml:9: steps[1].agnet: unknown field"),
            "{}",
            messages[0]
        );
        assert!(
            messages[1].contains("c.yml:") && errors[1].line.is_some(),
            "{}",
            messages[1]
        );
        assert!(
            messages[2].contains("d.json") && messages[2].contains("colour"),
            "{}",
            messages[2]
        );
        assert!(
            messages[3].contains("e.yaml:5") && messages[3].contains("Search"),
            "{}",
            messages[3]
        );
    }
}
