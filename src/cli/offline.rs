//! Offline commands: `envelope check` and `store verify`.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use orchestrator::codec::{DEFAULT_MAX_BYTES, DecodeError};
use orchestrator::{Envelope, Store, StoreSettings, WorkerEvent};
use serde_json::json;

use super::output::{Failure, outln};

#[derive(Args)]
pub struct CheckArgs {
    /// The JSON file, or `-` for standard input.
    file: PathBuf,
    /// The file is a worker event, not an envelope.
    #[arg(long)]
    event: bool,
    /// Size limit in bytes.
    #[arg(long, default_value_t = DEFAULT_MAX_BYTES)]
    max_bytes: usize,
    /// Print JSON (the global `--json`).
    #[arg(skip)]
    pub json: bool,
}

#[derive(Args)]
pub struct VerifyArgs {
    /// The orchestrator's data directory (the store is its `store/`).
    #[arg(long, env = "ORCH_DATA_DIR", default_value = "data")]
    data_dir: PathBuf,
    /// Print JSON (the global `--json`).
    #[arg(skip)]
    pub json: bool,
}

pub fn check(args: &CheckArgs) -> ExitCode {
    let bytes = match read_input(&args.file) {
        Ok(bytes) => bytes,
        Err(e) => {
            return fail(
                args.json,
                "io_error",
                &format!("{}: {e}", args.file.display()),
            );
        }
    };
    let outcome = if args.event {
        WorkerEvent::from_user(&bytes, args.max_bytes).map(|_| "worker event")
    } else {
        Envelope::from_user(&bytes, args.max_bytes).map(|_| "envelope")
    };
    match outcome {
        Ok(kind) => {
            if args.json {
                outln!("{}", json!({"ok": true, "kind": kind}));
            } else {
                outln!("{}: valid {kind}", args.file.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            report_invalid(&args.file, &e, args.json);
            ExitCode::from(1)
        }
    }
}

fn report_invalid(file: &Path, e: &DecodeError, as_json: bool) {
    if as_json {
        let mut error = json!({"code": e.code(), "message": e.to_string()});
        if let Some(field) = e.field() {
            error["field"] = field.into();
        }
        if let DecodeError::Syntax { line, column, .. } = e {
            error["line"] = (*line).into();
            error["column"] = (*column).into();
        }
        outln!("{}", json!({"ok": false, "error": error}));
    } else {
        eprintln!("{}: {e}", file.display());
    }
}

fn read_input(file: &Path) -> std::io::Result<Vec<u8>> {
    if file == Path::new("-") {
        let mut bytes = Vec::new();
        std::io::stdin().read_to_end(&mut bytes)?;
        Ok(bytes)
    } else {
        std::fs::read(file)
    }
}

pub fn verify(args: &VerifyArgs) -> ExitCode {
    let config = StoreSettings::in_data_dir(&args.data_dir);
    // Looked at before opening: opening makes the store private.
    let exposed: Vec<serde_json::Value> = orchestrator::files::exposed(&config.path)
        .into_iter()
        .map(|(path, bits)| json!({"path": path, "mode_for_others": format!("{bits:03o}")}))
        .collect();
    let store = match Store::open_existing(&config) {
        Ok(store) => store,
        Err(e) => return fail(args.json, e.code(), &e.to_string()),
    };
    let (audit, indexes) = match (store.verify_audit(), store.check_indexes()) {
        (Ok(a), Ok(i)) => (a, i),
        (Err(e), _) | (_, Err(e)) => {
            return Failure::new(1, e.code(), e.to_string()).report(args.json);
        }
    };
    let quarantined: Vec<_> = match store.quarantined_tasks() {
        Ok(list) => list.into_iter().map(|(q, _)| q).collect(),
        Err(e) => return fail(args.json, e.code(), &e.to_string()),
    };
    let ok = audit.ok && indexes.ok();
    if args.json {
        outln!(
            "{}",
            json!({"ok": ok, "audit": audit, "indexes": indexes, "quarantined": quarantined, "exposed": exposed})
        );
    } else {
        outln!("store {}", store.path().display());
        if !exposed.is_empty() {
            outln!(
                "warning: others could read or change {} of the store's files, which hold every task's params and push credentials; made private now (0700 directories, 0600 files):",
                exposed.len()
            );
            for e in &exposed {
                outln!(
                    "  - {} (group/others: {})",
                    e["path"].as_str().unwrap_or_default(),
                    e["mode_for_others"].as_str().unwrap_or_default()
                );
            }
        }
        match (&audit.first_bad_seq, &audit.problem) {
            (Some(seq), Some(problem)) => {
                outln!(
                    "audit chain: BROKEN at record {seq}: {problem} ({} good records before it)",
                    audit.records
                )
            }
            _ => outln!("audit chain: ok, {} records", audit.records),
        }
        if indexes.ok() {
            outln!("indexes: ok, {} tasks", indexes.tasks);
        } else {
            outln!(
                "indexes: {} problems in {} tasks",
                indexes.problems.len(),
                indexes.tasks
            );
            for p in &indexes.problems {
                outln!("  - {p}");
            }
        }
        if !quarantined.is_empty() {
            outln!(
                "quarantined: {} tasks whose records could not be read were set aside (kept in `meta`, audited):",
                quarantined.len()
            );
            for q in &quarantined {
                outln!("  - {} at {}: {}", q.task_id, q.at, q.reason);
            }
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// A refusal (exit 2), printed in the one error shape.
pub fn fail(as_json: bool, code: &str, message: &str) -> ExitCode {
    Failure::new(2, code, message).report(as_json)
}
