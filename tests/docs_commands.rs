//! The commands the README and the docs show cannot drift from the CLI:
//!
//! - every `orchestrator …` line of every `sh` block in `README.md` and
//!   `docs/` parses (`ORCH_CHECK_ARGS=1` parses a command line and runs
//!   nothing), and no block uses `|` to mean "or";
//! - the blocks marked `<!-- run -->` (the README's first agent, the whole
//!   of `docs/first-agent.md`) run as written, in order, in an empty
//!   directory, against the real binary, broker and Python: `orchestrator
//!   dev` and `orchestrator worker` lines start in the background (another
//!   terminal), every other block must exit 0 (or the code its marker
//!   names, `<!-- run: exit 2 -->`);
//! - every command's `--help` shows examples, and each example parses.

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::dev::{BROKER_PORT, Running, listening};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_orchestrator")
}

/// `PATH` with this build's `orchestrator` first.
fn path_with_bin() -> String {
    let dir = Path::new(bin()).parent().unwrap().display().to_string();
    format!("{dir}:{}", std::env::var("PATH").unwrap_or_default())
}

/// One fenced block of a Markdown file.
struct Block {
    /// Its language (`sh`, `json`, empty).
    lang: String,
    file: PathBuf,
    /// The line of its opening fence.
    line: usize,
    /// Its lines.
    text: Vec<String>,
    /// The `<!-- run … -->` marker just above it, if any.
    marker: Option<String>,
}

fn blocks(file: &Path) -> Vec<Block> {
    let text = std::fs::read_to_string(file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if let Some(lang) = lines[i].trim().strip_prefix("```") {
            let lang = lang.to_string();
            let marker = lines[..i]
                .iter()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(|l| l.trim())
                .filter(|l| l.starts_with("<!-- run"))
                .map(String::from);
            let start = i;
            let mut body = Vec::new();
            i += 1;
            while i < lines.len() && lines[i].trim() != "```" {
                body.push(lines[i].to_string());
                i += 1;
            }
            out.push(Block {
                lang,
                file: file.to_path_buf(),
                line: start + 1,
                text: body,
                marker,
            });
        }
        i += 1;
    }
    out
}

fn markdown_files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md")];
    let mut dirs = vec![root.join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// A block's commands: `\`-continued lines joined, heredoc bodies kept
/// with the line that opens them.
fn commands(block: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < block.len() {
        let mut command = block[i].clone();
        while command.trim_end().ends_with('\\') && i + 1 < block.len() {
            command = format!("{}\n{}", command.trim_end(), block[i + 1]);
            i += 1;
        }
        if let Some(end) = heredoc_end(&command) {
            while i + 1 < block.len() {
                i += 1;
                command.push('\n');
                command.push_str(&block[i]);
                if block[i].trim() == end {
                    break;
                }
            }
        }
        if !command.trim().is_empty() && !command.trim_start().starts_with('#') {
            out.push(command);
        }
        i += 1;
    }
    out
}

/// The terminator of a heredoc the line opens (`<<'EOF'`, `<<EOF`).
fn heredoc_end(line: &str) -> Option<String> {
    let at = line.find("<<")?;
    let word: String = line[at + 2..]
        .trim_start_matches('-')
        .trim()
        .trim_matches(|c| c == '\'' || c == '"')
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!word.is_empty()).then_some(word)
}

/// The part of `line` before its first unquoted `stop` character (a
/// comment, a pipe, a redirection), and the rest.
fn split_unquoted(line: &str, stops: &[char]) -> (String, Option<String>) {
    let (mut single, mut double) = (false, false);
    for (i, c) in line.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            c if !single && !double && stops.contains(&c) => {
                return (line[..i].to_string(), Some(line[i + 1..].to_string()));
            }
            _ => {}
        }
    }
    (line.to_string(), None)
}

/// The top-level command names, from `--help`.
fn top_commands() -> BTreeSet<String> {
    subcommands(&[])
}

/// The subcommands `orchestrator PATH --help` lists.
fn subcommands(path: &[String]) -> BTreeSet<String> {
    let out = Command::new(bin())
        .args(path)
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout).to_string();
    let mut names = BTreeSet::new();
    let mut inside = false;
    for line in help.lines() {
        if line.starts_with("Commands:") {
            inside = true;
            continue;
        }
        if inside {
            if line.trim().is_empty() {
                break;
            }
            if let Some(name) = line.split_whitespace().next()
                && name != "help"
            {
                names.insert(name.to_string());
            }
        }
    }
    names
}

/// Runs `command` in bash with `ORCH_CHECK_ARGS=1`: it parses or says
/// why not.
fn parses(command: &str, dir: &Path) -> Result<(), String> {
    let out = Command::new("bash")
        .arg("-c")
        .arg(command)
        .current_dir(dir)
        .env("PATH", path_with_bin())
        .env("ORCH_CHECK_ARGS", "1")
        .output()
        .unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

#[test]
fn every_command_in_the_readme_and_the_docs_parses_and_no_block_uses_a_pipe_for_or() {
    let names = top_commands();
    assert!(
        names.contains("tasks") && names.contains("dev"),
        "{names:?}"
    );
    let scratch = tempfile::tempdir().unwrap();
    let mut problems = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        for block in blocks(&file) {
            // A shell block's commands; elsewhere (a session's transcript)
            // the lines after a `$ ` prompt.
            let shown: Vec<String> = if block.lang == "sh" {
                commands(&block.text)
            } else {
                block
                    .text
                    .iter()
                    .filter_map(|l| l.trim_start().strip_prefix("$ ").map(String::from))
                    .collect()
            };
            for command in shown {
                let first = command.lines().next().unwrap_or_default();
                let (code, _) = split_unquoted(first, &['#']);
                let (before_pipe, piped) = split_unquoted(&code, &['|']);
                if let Some(rest) = &piped {
                    let next = rest.split_whitespace().next().unwrap_or_default();
                    if names.contains(next) {
                        problems.push(format!(
                            "{}:{}: `|` before `{next}` reads as \"or\"; give each command its own line",
                            block.file.display(),
                            block.line
                        ));
                    }
                }
                let (command_only, _) = split_unquoted(&before_pipe, &['>', ';', '&']);
                // Past the variables set for it (`KEY=value orchestrator …`).
                let words = command_only
                    .trim()
                    .split(' ')
                    .skip_while(|w| w.contains('=') && !w.starts_with('-'))
                    .collect::<Vec<_>>()
                    .join(" ");
                let words = words.as_str();
                if !words.starts_with("orchestrator ") {
                    continue;
                }
                checked += 1;
                // A file of this repository it names is there.
                let root = Path::new(env!("CARGO_MANIFEST_DIR"));
                for named in words.split(' ').filter(|w| w.starts_with("examples/")) {
                    if !root.join(named).exists() {
                        problems.push(format!(
                            "{}:{}: `{words}` names {named}, which the repository does not hold",
                            block.file.display(),
                            block.line
                        ));
                    }
                }
                if let Err(why) = parses(words, scratch.path()) {
                    problems.push(format!(
                        "{}:{}: `{words}` does not parse: {why}",
                        block.file.display(),
                        block.line
                    ));
                }
            }
        }
    }
    assert!(checked > 40, "only {checked} commands found");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Runs the `<!-- run -->` blocks of `file` in order in an empty
/// directory with `agents/` and `triggers/`.
fn run_doc(file: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("agents")).unwrap();
    std::fs::create_dir(dir.path().join("triggers")).unwrap();
    // The repository's scripts, as "in this repository" has them.
    std::os::unix::fs::symlink(root.join("scripts"), dir.path().join("scripts")).unwrap();
    let port = common::process::free_port();
    let env = [
        ("PATH", path_with_bin()),
        ("ORCH_HTTP_ADDR", format!("127.0.0.1:{port}")),
        ("ORCH_SERVER", format!("http://127.0.0.1:{port}")),
        (
            "ORCH_CLIENT_CONFIG",
            dir.path().join("none.json").display().to_string(),
        ),
    ];
    let mut background: Vec<Running> = Vec::new();
    let mut ran = 0;
    // Runs what a block has gathered so far; it must exit `expected`.
    let run = |script: &mut Vec<String>, block: &Block, expected: i32| {
        if script.is_empty() {
            return;
        }
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!("set -e\n{}", script.join("\n")))
            .current_dir(dir.path())
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(expected),
            "{file}:{}: the block exited {:?}, the doc says {expected}\n{}\nstdout:\n{}\nstderr:\n{}",
            block.line,
            out.status.code(),
            script.join("\n"),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        script.clear();
    };
    for block in blocks(&root.join(file)) {
        let Some(marker) = block.marker.as_ref().filter(|_| block.lang == "sh") else {
            continue;
        };
        let expected: i32 = marker
            .strip_prefix("<!-- run: exit ")
            .and_then(|r| r.strip_suffix(" -->"))
            .map_or(0, |n| n.parse().unwrap());
        ran += 1;
        // A person reads the text between two blocks: the orchestrator
        // reloads a file the block before wrote in that time.
        std::thread::sleep(Duration::from_millis(1500));
        let mut script = Vec::new();
        for command in commands(&block.text) {
            let (code, _) = split_unquoted(command.lines().next().unwrap(), &['#']);
            let words = code.trim().to_string();
            if words.starts_with("cargo install") {
                continue; // the binary under test is on PATH already
            }
            let what = format!("{file}:{}: `{words}`", block.line);
            let started = if words.starts_with("orchestrator dev") {
                Some("orchestrator dev is up")
            } else if words.starts_with("orchestrator worker") {
                Some("worker started")
            } else {
                None
            };
            match started {
                Some(ready) => {
                    // What came before it in the block runs first.
                    run(&mut script, &block, 0);
                    let mut command = Command::new("bash");
                    command
                        .arg("-c")
                        .arg(format!("exec {words}"))
                        .current_dir(dir.path())
                        .envs(env.iter().map(|(k, v)| (*k, v.as_str())));
                    let b = Running::start(command);
                    b.wait_for(ready, &what, Duration::from_secs(90));
                    background.push(b);
                }
                None => script.push(command),
            }
        }
        run(&mut script, &block, expected);
    }
    assert!(ran > 0, "{file} has no block marked <!-- run -->");
    // Ctrl-C in each terminal, the last started first.
    for mut b in background.into_iter().rev() {
        b.interrupt(Duration::from_secs(30));
    }
    assert!(
        !listening(port),
        "{file}: the API still answers after Ctrl-C"
    );
}

#[test]
fn the_readme_first_agent_and_the_first_agent_guide_run_as_written() {
    let _one = BROKER_PORT.lock().unwrap_or_else(|e| e.into_inner());
    run_doc("README.md");
    assert!(!listening(4222), "the managed broker outlived `dev`");
    run_doc("docs/first-agent.md");
    assert!(!listening(4222), "the managed broker outlived `dev`");
}

#[test]
fn every_command_has_examples_in_its_help_and_each_parses() {
    let scratch = tempfile::tempdir().unwrap();
    let mut todo: Vec<Vec<String>> = vec![vec![]];
    let mut problems = Vec::new();
    let mut seen = 0;
    while let Some(path) = todo.pop() {
        seen += 1;
        for name in subcommands(&path) {
            let mut sub = path.clone();
            sub.push(name);
            todo.push(sub);
        }
        let out = Command::new(bin())
            .args(&path)
            .arg("--help")
            .output()
            .unwrap();
        let help = String::from_utf8_lossy(&out.stdout).to_string();
        let Some((_, examples)) = help.split_once("Examples:\n") else {
            problems.push(format!(
                "`orchestrator {}` --help has no examples",
                path.join(" ")
            ));
            continue;
        };
        let lines: Vec<&str> = examples
            .lines()
            .take_while(|l| !l.trim().is_empty())
            .map(str::trim)
            .collect();
        if lines.is_empty() {
            problems.push(format!(
                "`orchestrator {}`: an empty Examples:",
                path.join(" ")
            ));
        }
        for line in lines {
            if let Err(why) = parses(line, scratch.path()) {
                problems.push(format!("`{line}` does not parse: {why}"));
            }
        }
    }
    assert!(seen > 30, "only {seen} commands walked");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// GitHub's anchor for a heading: lowercase, punctuation dropped, spaces
/// as hyphens.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown file's headings.
fn anchors(file: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let mut in_code = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        }
        if !in_code && let Some(h) = line.strip_prefix('#') {
            out.insert(anchor(h.trim_start_matches('#')));
        }
    }
    out
}

#[test]
fn every_link_of_the_readme_and_the_docs_reaches_a_file_and_heading_of_the_repository() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut problems = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let dir = file.parent().unwrap();
        for (at, _) in text.match_indices("](") {
            let rest = &text[at + 2..];
            let Some(end) = rest.find(')') else { continue };
            let target = &rest[..end];
            if target.starts_with("http://")
                || target.starts_with("https://")
                || target.contains(' ')
            {
                continue;
            }
            checked += 1;
            let (path, fragment) = target.split_once('#').unwrap_or((target, ""));
            let resolved = if path.is_empty() {
                file.clone()
            } else {
                dir.join(path)
            };
            let line = text[..at].lines().count();
            let shown = format!(
                "{}:{line}: ({target})",
                file.strip_prefix(root).unwrap().display()
            );
            match resolved.canonicalize() {
                Ok(p) if p.starts_with(root.canonicalize().unwrap()) => {
                    if !fragment.is_empty()
                        && p.extension().is_some_and(|e| e == "md")
                        && !anchors(&p).contains(fragment)
                    {
                        problems.push(format!("{shown}: no heading `#{fragment}`"));
                    }
                }
                Ok(_) => problems.push(format!("{shown}: outside the repository")),
                Err(_) => problems.push(format!("{shown}: no such file")),
            }
        }
        if text.contains("../shared") {
            problems.push(format!(
                "{}: points at ../shared, outside the repository",
                file.display()
            ));
        }
    }
    assert!(checked > 100, "only {checked} links found");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
