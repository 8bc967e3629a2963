//! Offline commands: `envelope check` and `store verify`.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use orchestrator::bus::{Bus, Servers};
use orchestrator::codec::{DEFAULT_MAX_BYTES, DecodeError};
use orchestrator::replication::LogCheck;
use orchestrator::service::DEFAULT_NATS_URL;
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
    /// Also check the store against the replicated log
    /// (`replication.enabled`): it must be the log's view at its position,
    /// entry for entry. Needs the broker (`--nats-url`, `--config`).
    #[arg(long)]
    against_log: bool,
    /// The settings file the node runs with (its `bus` and `replication`).
    #[arg(long)]
    config: Option<PathBuf>,
    /// The broker, with `--against-log` (overrides the settings file).
    #[arg(long, env = "NATS_URL")]
    nats_url: Option<Servers>,
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

/// Compares `store` with the log, for `store verify --against-log`.
async fn against_log(args: &VerifyArgs, store: &Store) -> Result<LogCheck, Failure> {
    let settings = super::serve::load_config(args.config.as_deref())
        .map_err(|e| Failure::new(2, "invalid_config", e))?;
    let config = settings.service;
    let url = args
        .nats_url
        .clone()
        .or(config.nats_url.clone())
        .map_or_else(|| DEFAULT_NATS_URL.to_string(), |s| s.to_string());
    let bus = Bus::connect_now(&url, config.bus.clone())
        .await
        .map_err(|e| Failure::new(2, "bus_unavailable", e.to_string()))?;
    orchestrator::replication::verify(&bus, config.replication.partition, store, &args.data_dir)
        .await
        .map_err(|e| Failure::new(2, "log_unavailable", e.to_string()))
}

pub async fn verify(args: &VerifyArgs) -> ExitCode {
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
    let log = match args.against_log {
        true => match against_log(args, &store).await {
            Ok(check) => Some(check),
            Err(failure) => return failure.report(args.json),
        },
        false => None,
    };
    let ok = audit.ok && indexes.ok() && log.as_ref().is_none_or(LogCheck::ok);
    if args.json {
        let mut out = json!({"ok": ok, "audit": audit, "indexes": indexes, "quarantined": quarantined, "exposed": exposed});
        if let Some(log) = &log {
            out["log"] = json!(log);
        }
        outln!("{out}");
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
        if let Some(log) = &log {
            let from = log
                .snapshot
                .as_deref()
                .map_or("the log from its start".to_string(), |s| {
                    format!("snapshot {s}")
                });
            if log.ok() {
                outln!(
                    "log: ok, the store is the log's view at position {} ({from} and {} records)",
                    log.position,
                    log.records
                );
            } else {
                outln!(
                    "log: {} entries differ from the log's view at position {} ({from} and {} records):",
                    log.differing,
                    log.position,
                    log.records
                );
                for d in &log.differences {
                    outln!("  - {d}");
                }
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
