//! Stamps of definition files: which there are, with their sizes and
//! modification times, so a watcher that starts after they were read can
//! tell whether it missed a change, and a change event that changed
//! nothing is told apart.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Files with their sizes and modification times: two stamps differ when
/// a file was written, added or removed between them.
pub type Stamp = Vec<(PathBuf, u64, Option<SystemTime>)>;

/// The stamp of the files under `paths` (files, or directories searched
/// `depth` levels down: 1 for a directory's own files) for which
/// `relevant` holds, sorted.
pub fn stamp(paths: &[PathBuf], relevant: fn(&Path) -> bool, depth: usize) -> Stamp {
    let mut out = Vec::new();
    for p in paths {
        walk(p, relevant, 0, depth, &mut out);
    }
    out.sort();
    out
}

fn walk(path: &Path, relevant: fn(&Path) -> bool, level: usize, depth: usize, out: &mut Stamp) {
    let Ok(meta) = std::fs::metadata(path) else {
        return;
    };
    if meta.is_dir() {
        if level >= depth {
            return;
        }
        for entry in std::fs::read_dir(path).into_iter().flatten().flatten() {
            walk(&entry.path(), relevant, level + 1, depth, out);
        }
    } else if level == 0 || relevant(path) {
        out.push((path.to_path_buf(), meta.len(), meta.modified().ok()));
    }
}
