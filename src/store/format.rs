//! The store's format marker, and the formats it migrates from.

use std::path::Path;

use super::StoreError;

/// The format marker written in `meta` when a store is created.
pub(super) const FORMAT: &[u8] = b"orchestrator-store-v6";

/// The store's format, as `orchestrator version` names it (`v6`).
pub fn format_name() -> &'static str {
    std::str::from_utf8(FORMAT)
        .ok()
        .and_then(|f| f.strip_prefix("orchestrator-store-"))
        .unwrap_or("unknown")
}

/// Earlier formats, migrated on open: v1 had no audit-by-task index; v2
/// kept each task's envelope and history in its record; v3 had no run
/// indexes; v4 kept an audit index key per record and indexed every task
/// by correlation id; v5 had no `by_label` index.
pub(super) const FORMAT_V1: &[u8] = b"orchestrator-store-v1";
pub(super) const FORMAT_V2: &[u8] = b"orchestrator-store-v2";
pub(super) const FORMAT_V3: &[u8] = b"orchestrator-store-v3";
pub(super) const FORMAT_V4: &[u8] = b"orchestrator-store-v4";
pub(super) const FORMAT_V5: &[u8] = b"orchestrator-store-v5";

/// Every format a store may be found in, oldest first: format `n` is at
/// `n - 1`, and a store in format `n` runs every migration after it.
pub(super) const FORMATS: [&[u8]; 6] = [
    FORMAT_V1, FORMAT_V2, FORMAT_V3, FORMAT_V4, FORMAT_V5, FORMAT,
];

/// Checks the format marker of a store that has a commit mark; returns
/// its version (this format's, or one that is migrated on open).
pub(super) fn check_format(path: &Path, meta: &sled::Tree) -> Result<usize, StoreError> {
    match meta.get("format")? {
        Some(found) if let Some(at) = FORMATS.iter().position(|f| *f == found.as_ref()) => {
            Ok(at + 1)
        }
        Some(found) => Err(StoreError::NotAStore {
            path: path.to_path_buf(),
            found: String::from_utf8_lossy(&found).into_owned(),
        }),
        None => Err(StoreError::Open {
            path: path.to_path_buf(),
            message: "the store files are corrupt or truncated: the format marker is gone".into(),
        }),
    }
}
