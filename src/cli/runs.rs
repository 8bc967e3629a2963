//! `trigger ID` and `runs …`: start workflow runs, follow them, show their
//! steps, answer their approval gates, cancel them.
//!
//! Exit codes as for every client command; with `--wait`, 1 when the run
//! ended other than completed, 0 when it completed or waits at an approval
//! gate, 4 when the wait ran out (the run goes on).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::client::{Api, ClientArgs, Failure, finish, list_path};
use super::output::{encode, list_table, outln, s};

/// `trigger ID --input JSON [--wait]`.
#[derive(Args)]
pub struct TriggerArgs {
    /// The trigger's id.
    id: String,
    /// The run's input, as JSON.
    #[arg(long, default_value = "{}")]
    input: String,
    /// Makes a retried start the same run.
    #[arg(long)]
    idempotency_key: Option<String>,
    /// Follow the run, showing each step as it moves, until it ends or
    /// waits at an approval gate (shown with the command that answers it).
    #[arg(long)]
    wait: bool,
    /// Longest wait with --wait.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    timeout: Duration,
}

#[derive(Subcommand)]
pub enum RunsCommand {
    /// Show one run with its steps.
    #[command(after_help = "Examples:
  orchestrator runs get 01a21c15-1a2b-7c3d-8e4f-5a6b7c8d9e0f
  orchestrator runs get 01a21c15-1a2b-7c3d-8e4f-5a6b7c8d9e0f --wait --timeout 30m")]
    Get {
        /// The run id.
        id: String,
        /// Wait until the run has ended or waits at an approval gate.
        #[arg(long)]
        wait: bool,
        /// Longest wait with --wait.
        #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
        timeout: Duration,
    },
    /// List runs, newest first.
    #[command(after_help = "Examples:
  orchestrator runs list
  orchestrator runs list --trigger-id email-stakeholders --state input_required")]
    List {
        /// Only this trigger's runs.
        #[arg(long)]
        trigger_id: Option<String>,
        /// Only runs in this state.
        #[arg(long)]
        state: Option<String>,
        /// Page size.
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Continue after this run id.
        #[arg(long)]
        cursor: Option<String>,
    },
    /// Approve the gate a run waits at.
    #[command(after_help = "Examples:
  orchestrator runs approve 01a21c15-1a2b-7c3d-8e4f-5a6b7c8d9e0f --reason \"the draft reads well\"")]
    Approve(AnswerArgs),
    /// Reject the gate a run waits at: the run ends `rejected`.
    #[command(after_help = "Examples:
  orchestrator runs reject 01a21c15-1a2b-7c3d-8e4f-5a6b7c8d9e0f --reason \"wrong audience\"")]
    Reject(AnswerArgs),
    /// Answer the gate a run waits at with input (its step's result).
    #[command(after_help = "Examples:
  orchestrator runs input 01a21c15-1a2b-7c3d-8e4f-5a6b7c8d9e0f --input '{\"to\": [\"team@example.com\"]}'")]
    Input {
        #[command(flatten)]
        answer: AnswerArgs,
        /// The input, as JSON.
        #[arg(long)]
        input: String,
    },
    /// Cancel a run and its running steps.
    #[command(after_help = "Examples:
  orchestrator runs cancel 01a21c15-1a2b-7c3d-8e4f-5a6b7c8d9e0f --reason \"not needed any more\"")]
    Cancel(AnswerArgs),
}

#[derive(Args)]
pub struct AnswerArgs {
    /// The run id.
    id: String,
    /// Why (recorded in the audit trail).
    #[arg(long, default_value = "")]
    reason: String,
}

fn json_arg(text: &str, flag: &str) -> Result<Value, Failure> {
    serde_json::from_str(text)
        .map_err(|e| Failure::new(2, "invalid_json", format!("{flag} is not JSON: {e}")))
}

pub async fn trigger(args: &ClientArgs, t: TriggerArgs) -> ExitCode {
    let api = match Api::new(args) {
        Ok(api) => api,
        Err(f) => return f.report(args.json),
    };
    let result = async {
        let mut body = json!({ "input": json_arg(&t.input, "--input")? });
        if let Some(k) = t.idempotency_key {
            body["idempotency_key"] = k.into();
        }
        let run = api
            .call(
                reqwest::Method::POST,
                &format!("/v1/triggers/{}/runs", encode(&t.id)),
                Some(body),
            )
            .await?;
        if !t.wait {
            return Ok((run, 0));
        }
        follow(&api, args, &s(&run["run_id"]), t.timeout).await
    }
    .await;
    finish(args, result, print_run)
}

pub async fn runs(args: &ClientArgs, command: RunsCommand) -> ExitCode {
    let api = match Api::new(args) {
        Ok(api) => api,
        Err(f) => return f.report(args.json),
    };
    let answer = |verb: &'static str, a: AnswerArgs, input: Option<Value>| {
        let api = &api;
        async move {
            let mut body = json!({ "reason": a.reason });
            if let Some(input) = input {
                body["input"] = input;
            }
            api.call(
                reqwest::Method::POST,
                &format!("/v1/runs/{}/{verb}", encode(&a.id)),
                Some(body),
            )
            .await
            .map(|v| (v, 0))
        }
    };
    let result = match command {
        RunsCommand::Get { id, wait, timeout } => {
            if wait {
                follow(&api, args, &id, timeout).await
            } else {
                api.get(&format!("/v1/runs/{}", encode(&id))).await
            }
        }
        RunsCommand::List {
            trigger_id,
            state,
            limit,
            cursor,
        } => {
            let path = list_path(
                "/v1/runs",
                limit,
                &[
                    ("trigger_id", trigger_id),
                    ("state", state),
                    ("cursor", cursor),
                ],
            );
            let result = api.get(&path).await;
            return finish(args, result, |page| {
                list_table(
                    page,
                    "runs",
                    &["RUN", "TRIGGER", "STATE", "STEPS", "BY", "STARTED"],
                    |r| {
                        vec![
                            s(&r["run_id"]),
                            s(&r["trigger_id"]),
                            s(&r["state"]),
                            step_summary(r),
                            s(&r["started_by"]),
                            super::output::ago(&r["created_at"]),
                        ]
                    },
                )
            });
        }
        RunsCommand::Approve(a) => answer("approve", a, None).await,
        RunsCommand::Reject(a) => answer("reject", a, None).await,
        RunsCommand::Input { answer: a, input } => match json_arg(&input, "--input") {
            Ok(v) => answer("input", a, Some(v)).await,
            Err(f) => Err(f),
        },
        RunsCommand::Cancel(a) => answer("cancel", a, None).await,
    };
    finish(args, result, print_run)
}

/// `3/4 done` for a run's steps.
fn step_summary(run: &Value) -> String {
    let steps = run["steps"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let done = steps
        .iter()
        .filter(|st| matches!(st["state"].as_str(), Some("completed" | "skipped")))
        .count();
    format!("{done}/{} done", steps.len())
}

fn is_end(state: &str) -> bool {
    matches!(state, "completed" | "failed" | "canceled" | "rejected")
}

/// Follows a run with long polls until it ends or waits at a gate,
/// printing each step's moves on stderr.
async fn follow(
    api: &Api,
    args: &ClientArgs,
    id: &str,
    timeout: Duration,
) -> Result<(Value, u8), Failure> {
    let started = Instant::now();
    let mut seen: Vec<(String, String)> = Vec::new();
    loop {
        let run = api
            .call(
                reqwest::Method::GET,
                &format!("/v1/runs/{}?wait=2s", encode(id)),
                None,
            )
            .await?;
        if !args.json {
            for st in run["steps"].as_array().into_iter().flatten() {
                let key = (s(&st["id"]), s(&st["state"]));
                if key.1 != "pending" && !seen.contains(&key) {
                    eprintln!("step {:<16} {}", key.0, key.1);
                    seen.push(key);
                }
            }
        }
        let state = s(&run["state"]);
        if is_end(&state) {
            let code = if state == "completed" { 0 } else { 1 };
            return Ok((run, code));
        }
        if state == "input_required" {
            return Ok((run, 0));
        }
        if started.elapsed() > timeout {
            return Err(Failure::new(
                4,
                "wait_timeout",
                format!(
                    "run {id} is still {state} after {}; it goes on (orchestrator runs get {id} --wait)",
                    humantime::format_duration(timeout)
                ),
            ));
        }
    }
}

/// A run for people: its state, then a line per step.
pub fn print_run(r: &Value) {
    outln!("run      {}", s(&r["run_id"]));
    outln!("trigger  {}", s(&r["trigger_id"]));
    outln!("state    {}", s(&r["state"]));
    outln!("by       {}", s(&r["started_by"]));
    if let Some(url) = r["trace_url"].as_str() {
        outln!("trace    {url}");
    }
    if !r["waiting"].is_null() {
        outln!(
            "waiting  step `{}`: {}",
            s(&r["waiting"]["step"]),
            s(&r["waiting"]["prompt"])
        );
        let id = s(&r["run_id"]);
        outln!("         approve: orchestrator runs approve {id} --reason TEXT");
        outln!("         reject:  orchestrator runs reject {id} --reason TEXT");
    }
    if !r["result"].is_null() {
        outln!("result   {}", super::output::full(&r["result"]));
    }
    if !r["error"].is_null() {
        outln!(
            "error    {}: {}",
            s(&r["error"]["code"]),
            s(&r["error"]["message"])
        );
    }
    super::output::print_model_use(&r["model_use"]);
    let rows: Vec<Vec<String>> = r["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|st| {
            let name = match (st["branch_of"].as_str(), st["compensates"].as_str()) {
                (Some(_), _) => format!("  {}", s(&st["id"])),
                (_, Some(of)) => format!("{} (undoes {of})", s(&st["id"])),
                _ => s(&st["id"]),
            };
            let outcome = if !st["error"].is_null() {
                format!(
                    "{}: {}",
                    s(&st["error"]["code"]),
                    s(&st["error"]["message"])
                )
            } else if !st["decision"].is_null() {
                let d = &st["decision"];
                format!(
                    "{} by {}{}",
                    if d["approved"] == true {
                        "approved"
                    } else {
                        "rejected"
                    },
                    s(&d["by"]),
                    d["reason"]
                        .as_str()
                        .filter(|r| !r.is_empty())
                        .map(|r| format!(": {r}"))
                        .unwrap_or_default()
                )
            } else if !st["result"].is_null() {
                super::output::summary(&st["result"])
            } else {
                String::new()
            };
            vec![
                name,
                s(&st["kind"]),
                s(&st["state"]),
                s(&st["agent"]),
                s(&st["attempt"]),
                took(st),
                outcome,
            ]
        })
        .collect();
    outln!();
    super::output::table(
        &[
            "STEP", "KIND", "STATE", "AGENT", "ATTEMPT", "TOOK", "RESULT",
        ],
        &rows,
    );
}

/// How long a step's task took (or has taken so far: empty).
fn took(step: &Value) -> String {
    let parse = |v: &Value| {
        v.as_str().and_then(|t| {
            time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339).ok()
        })
    };
    match (parse(&step["started_at"]), parse(&step["ended_at"])) {
        (Some(a), Some(b)) => format!("{:.1}s", (b - a).as_seconds_f64()),
        _ => String::new(),
    }
}
