//! `orchestrator new agent NAME`: a working agent to start from — its
//! card (`agent.json`), a handler in Python, Rust or sh that follows the
//! command protocol (envelope on stdin, result on stdout, exit 75 for a
//! retry, progress on `ORCH_PROGRESS_FD`), and a test of the handler.
//! `docs/first-agent.md` walks from here to a trigger that uses it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand, ValueEnum};
use serde_json::{Value, json};

use orchestrator::envelope::AgentName;

use super::output::outln;

#[derive(Subcommand)]
pub enum NewCommand {
    /// Scaffold an agent: its card, a handler and a test.
    #[command(after_help = "Examples:
  orchestrator new agent greeter
  orchestrator new agent greeter --lang rust
  orchestrator new agent greeter --lang sh --dir my-agents")]
    Agent(NewAgentArgs),
}

#[derive(Args)]
pub struct NewAgentArgs {
    /// The agent's name: lowercase letters, digits, `-` and `_`.
    name: String,
    /// The handler's language.
    #[arg(long, value_enum, default_value = "python")]
    lang: Lang,
    /// The agents directory the agent's own directory is made in.
    #[arg(long, default_value = "agents")]
    dir: PathBuf,
    /// Print JSON (the global `--json`).
    #[arg(skip)]
    pub json: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Lang {
    Python,
    Rust,
    Sh,
}

impl Lang {
    /// The files of a handler in this language, and how its tests run.
    fn files(self) -> (&'static [(&'static str, &'static str)], &'static str) {
        match self {
            Lang::Python => (
                &[
                    ("agent.py", include_str!("scaffold/python/agent.py")),
                    (
                        "test_agent.py",
                        include_str!("scaffold/python/test_agent.py"),
                    ),
                ],
                "python3 -m unittest",
            ),
            Lang::Sh => (
                &[
                    ("agent.sh", include_str!("scaffold/sh/agent.sh")),
                    ("test.sh", include_str!("scaffold/sh/test.sh")),
                ],
                "sh test.sh",
            ),
            Lang::Rust => (
                &[
                    ("Cargo.toml", include_str!("scaffold/rust/Cargo.toml")),
                    ("src/main.rs", include_str!("scaffold/rust/src/main.rs")),
                    (".gitignore", "/target\n"),
                ],
                "cargo test",
            ),
        }
    }

    /// The command the worker runs for each task, in the agent's
    /// directory.
    fn command(self, name: &str) -> Vec<String> {
        match self {
            Lang::Python => vec!["python3".into(), "agent.py".into()],
            Lang::Sh => vec!["sh".into(), "agent.sh".into()],
            Lang::Rust => vec![format!("target/release/{name}")],
        }
    }
}

/// The card of a scaffolded agent: one skill, `greet`.
fn card(name: &str, lang: Lang) -> Value {
    json!({
        "name": name,
        "version": "0.1.0",
        "description": format!("{name}: greets the name a task gives (scaffolded by `orchestrator new agent`)."),
        "skills": [{
            "id": "greet",
            "name": "Greet",
            "description": "Answers {\"greeting\": \"Hello, <name>!\"}. With retry_once, the first attempt asks for a retry.",
            "inputSchema": {
                "type": "object",
                "required": ["name"],
                "properties": {
                    "name": {"type": "string"},
                    "retry_once": {"type": "boolean"}
                }
            }
        }],
        "invocation": {"type": "command", "command": lang.command(name), "timeout": "30s"},
        "delivery": {"concurrency": 4}
    })
}

pub fn new(command: NewCommand, json: bool) -> ExitCode {
    let NewCommand::Agent(mut args) = command;
    args.json = json;
    match scaffold(&args) {
        Ok(made) => {
            report(&args, &made);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// Writes the agent's files; the paths written.
fn scaffold(args: &NewAgentArgs) -> Result<Vec<PathBuf>, String> {
    let name: AgentName = args
        .name
        .parse()
        .map_err(|e: orchestrator::envelope::ParseError| {
            format!("the name `{}`: {e}", args.name)
        })?;
    let root = args.dir.join(name.as_str());
    if root.exists() {
        return Err(format!(
            "{} exists already: choose another name, or remove it",
            root.display()
        ));
    }
    let mut made = Vec::new();
    let mut write = |relative: &str, text: &str| -> Result<(), String> {
        let path = root.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        made.push(path);
        Ok(())
    };
    let card =
        serde_json::to_string_pretty(&card(name.as_str(), args.lang)).map_err(|e| e.to_string())?;
    write("agent.json", &format!("{card}\n"))?;
    for (relative, template) in args.lang.files().0 {
        write(relative, &template.replace("{{name}}", name.as_str()))?;
    }
    for path in &made {
        if path.extension().is_some_and(|e| e == "py" || e == "sh") {
            executable(path)?;
        }
    }
    Ok(made)
}

/// Makes `path` executable by its owner and everyone who may read it.
fn executable(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let at = |e: std::io::Error| format!("{}: {e}", path.display());
    let mut permissions = std::fs::metadata(path).map_err(at)?.permissions();
    permissions.set_mode(permissions.mode() | 0o111);
    std::fs::set_permissions(path, permissions).map_err(at)
}

/// Says what was made and what to do next.
fn report(args: &NewAgentArgs, made: &[PathBuf]) {
    let dir = args.dir.join(&args.name);
    let test = args.lang.files().1;
    let mut next = Vec::new();
    if args.lang == Lang::Rust {
        next.push(format!("(cd {} && cargo build --release)", dir.display()));
    }
    next.extend([
        format!("(cd {} && {test})", dir.display()),
        format!("orchestrator validate {}", dir.display()),
        if args.dir == Path::new("agents") {
            "orchestrator dev".to_string()
        } else {
            format!("orchestrator dev --agents {}", args.dir.display())
        },
        format!(
            "orchestrator tasks submit --to {} --action greet --params '{{\"name\": \"Ada\"}}' --wait",
            args.name
        ),
    ]);
    if args.json {
        let files: Vec<String> = made.iter().map(|p| p.display().to_string()).collect();
        outln!(
            "{}",
            json!({"agent": args.name, "dir": dir.display().to_string(), "files": files, "next": next})
        );
        return;
    }
    outln!("made the agent {} in {}:", args.name, dir.display());
    for path in made {
        outln!("  {}", path.display());
    }
    outln!("next (docs/first-agent.md):");
    for step in next {
        outln!("  {step}");
    }
}
