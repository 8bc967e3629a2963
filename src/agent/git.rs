//! Agents that live in git repositories: cloned on first use, fetched
//! again on reload, read at a recorded commit. Uses the `git` program.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What loading may do to a registry's git agents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GitMode {
    /// Nothing: a clone that is there is read as it is, one that is not
    /// is a problem (`orchestrator validate` works offline).
    Offline,
    /// Clone what is not there yet; read what is as it is.
    Clone,
    /// Clone what is not there, fetch and check out again what is (a
    /// reload).
    Fetch,
}

/// Where and how git agents are fetched.
#[derive(Debug, Clone)]
pub struct GitOptions {
    /// What loading may do.
    pub mode: GitMode,
    /// Where an agent without a `localPath` is cloned (`<dir>/<name>`).
    pub dir: PathBuf,
    /// How long one git command may take.
    pub timeout: Duration,
}

impl Default for GitOptions {
    fn default() -> Self {
        GitOptions {
            mode: GitMode::Offline,
            dir: PathBuf::from("data/agents-git"),
            timeout: Duration::from_secs(120),
        }
    }
}

/// Why a git agent cannot be checked out.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// Offline, and no clone is there yet.
    #[error("not cloned yet into {} (it is cloned when the orchestrator starts)", .0.display())]
    NotCloned(PathBuf),
    /// The clone's parent directory cannot be made.
    #[error("{}: {source}", path.display())]
    Directory {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The `git` program cannot be run or waited for.
    #[error("cannot run git: {0}")]
    Run(#[source] std::io::Error),
    /// A git command ran past its time.
    #[error("`git {command}` took longer than {timeout:?}")]
    TimedOut {
        /// The command (`clone`, `fetch`…).
        command: String,
        /// `timeout`.
        timeout: Duration,
    },
    /// A git command failed.
    #[error("`git {command}`: {said}")]
    Failed {
        /// The command.
        command: String,
        /// The last line it wrote to standard error.
        said: String,
    },
    /// The reference asked for cannot be checked out.
    #[error("`{reference}` is not a branch, tag or commit of {url}: {source}")]
    NoSuchReference {
        /// The branch, tag or commit (`HEAD` without one).
        reference: String,
        /// The repository.
        url: String,
        /// Why the checkout failed.
        #[source]
        source: Box<GitError>,
    },
}

/// The URL git is given for `repo` as a registry writes it: a URL, a
/// `git@` address or a path as it is (a relative path from `base`), a
/// bare `host/owner/name` as `https://`.
pub(super) fn url_of(repo: &str, base: &Path) -> String {
    if repo.contains("://") || repo.starts_with("git@") || repo.starts_with('/') {
        return repo.to_string();
    }
    let local = base.join(repo);
    if local.exists() {
        return local.to_string_lossy().into_owned();
    }
    format!("https://{repo}")
}

/// Makes `dest` a checkout of `reference` (a branch, tag or commit; the
/// remote's default branch without one) of `url`, as `options` allow; the
/// commit checked out.
pub(super) fn checkout(
    url: &str,
    reference: Option<&str>,
    dest: &Path,
    options: &GitOptions,
) -> Result<String, GitError> {
    let cloned = dest.join(".git").exists();
    if !cloned {
        if options.mode == GitMode::Offline {
            return Err(GitError::NotCloned(dest.to_path_buf()));
        }
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent).map_err(|source| GitError::Directory {
                path: parent.to_path_buf(),
                source,
            })?;
        }
        git(
            None,
            &[
                "clone",
                "--quiet",
                "--no-checkout",
                url,
                &dest.to_string_lossy(),
            ],
            options.timeout,
        )?;
    } else if options.mode == GitMode::Fetch {
        git(
            Some(dest),
            &["fetch", "--quiet", "--tags", "--force", "origin"],
            options.timeout,
        )?;
    }
    if !cloned || options.mode == GitMode::Fetch {
        let target = match reference {
            None => "origin/HEAD".to_string(),
            Some(r)
                if git(
                    Some(dest),
                    &[
                        "rev-parse",
                        "--verify",
                        "--quiet",
                        &format!("origin/{r}^{{commit}}"),
                    ],
                    options.timeout,
                )
                .is_ok() =>
            {
                format!("origin/{r}")
            }
            Some(r) => r.to_string(),
        };
        git(
            Some(dest),
            &["checkout", "--quiet", "--force", "--detach", &target],
            options.timeout,
        )
        .map_err(|e| GitError::NoSuchReference {
            reference: reference.unwrap_or("HEAD").to_string(),
            url: url.to_string(),
            source: Box::new(e),
        })?;
    }
    git(Some(dest), &["rev-parse", "HEAD"], options.timeout).map(|out| out.trim().to_string())
}

/// Runs git with `args` (in `dir`), never asking for credentials; its
/// standard output, or why it failed.
fn git(dir: Option<&Path>, args: &[&str], timeout: Duration) -> Result<String, GitError> {
    let mut command = Command::new("git");
    if let Some(dir) = dir {
        command.arg("-C").arg(dir);
    }
    let mut child = command
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(GitError::Run)?;
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(GitError::TimedOut {
                    command: args[0].to_string(),
                    timeout,
                });
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(GitError::Run(e)),
        }
    }
    let out = child.wait_with_output().map_err(GitError::Run)?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err
            .lines()
            .rfind(|l| !l.trim().is_empty())
            .unwrap_or("failed");
        Err(GitError::Failed {
            command: args[0].to_string(),
            said: last.trim().to_string(),
        })
    }
}
