//! Files written with the modes they need, whatever the umask: what holds
//! secrets or every task's data is its owner's alone, what others must
//! read (a public key) is readable and never writable by them.
//!
//! - [`private_dir`]: a directory only its owner may enter (0700): the
//!   data directory, the store, the keys.
//! - [`write_file`]: a file written whole with an exact mode, also when it
//!   existed with another (0600 for secrets and the settings the broker
//!   reads; 0644 for a public key).
//! - [`restrict_umask`]: the process's umask at 077, so files that a
//!   library creates (sled's, the managed broker's) are private too.
//! - [`open_to_others`]: what of a file's mode others may use, for
//!   `store verify`'s warning.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The mode of a file only its owner may read or write.
pub const PRIVATE: u32 = 0o600;

/// The mode of a file anyone may read and only its owner write.
pub const PUBLIC: u32 = 0o644;

/// Creates `path` (and its parents) when missing, and makes it its
/// owner's alone (0700), also when it existed.
pub fn private_dir(path: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))
}

/// Writes `bytes` to `path` (replacing what is there) with exactly
/// `mode`, and syncs it.
pub fn write_file(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)?;
    // The mode given at creation is masked by the umask, and a file that
    // existed keeps its own: set it exactly.
    file.set_permissions(std::fs::Permissions::from_mode(mode))?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// Makes the files this process creates from now on its owner's alone
/// (umask 077); returns the umask it had.
pub fn restrict_umask() -> u32 {
    use nix::sys::stat::{Mode, umask};
    umask(Mode::from_bits_truncate(0o077)).bits()
}

/// The permission bits of `path` that its group or others hold (0 when
/// none, or when it cannot be read).
pub fn open_to_others(path: &Path) -> u32 {
    std::fs::metadata(path).map_or(0, |m| m.permissions().mode() & 0o077)
}

/// `path` and everything under it that its group or others may use,
/// with those bits (`store verify`'s warning).
pub fn exposed(path: &Path) -> Vec<(std::path::PathBuf, u32)> {
    let mut out = Vec::new();
    let bits = open_to_others(path);
    if bits != 0 {
        out.push((path.to_path_buf(), bits));
    }
    if path.is_dir()
        && let Ok(entries) = std::fs::read_dir(path)
    {
        for entry in entries.flatten() {
            out.extend(exposed(&entry.path()));
        }
    }
    out
}

/// Makes `dir` its owner's alone (0700) and each file in it, at any depth,
/// 0600 (a store sled wrote under another umask).
pub fn make_private(dir: &Path) -> std::io::Result<()> {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            make_private(&path)?;
        } else {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(PRIVATE))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_are_exact_whatever_was_there() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "old").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
        write_file(&file, b"new", PRIVATE).unwrap();
        assert_eq!(open_to_others(&file), 0);
        write_file(&file, b"new", PUBLIC).unwrap();
        assert_eq!(open_to_others(&file), 0o044);
        let sub = dir.path().join("a/b");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o777)).unwrap();
        private_dir(&sub).unwrap();
        assert_eq!(open_to_others(&sub), 0);
        std::fs::write(sub.join("x"), "x").unwrap();
        std::fs::set_permissions(sub.join("x"), std::fs::Permissions::from_mode(0o666)).unwrap();
        // a (made under the test's umask) and x.
        assert_eq!(exposed(&dir.path().join("a")).len(), 2);
        make_private(&dir.path().join("a")).unwrap();
        assert_eq!(open_to_others(&sub.join("x")), 0);
        assert!(exposed(&dir.path().join("a")).is_empty());
    }
}
