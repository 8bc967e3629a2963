//! `orchestrator watch ID`: follows a task or a workflow run live until it
//! ends, printing each change as it happens: a task's history entries
//! (states, progress reports), a run's steps as they move and the gates it
//! waits at (it keeps watching while a person answers). Ctrl-C stops
//! watching; the task or run goes on.

use std::collections::BTreeSet;
use std::process::ExitCode;

use serde_json::Value;

use super::client::{Api, ClientArgs, Failure, finish};
use super::output::{encode, history_said, outln, print_task, s};
use super::runs::print_run;

pub async fn watch(args: &ClientArgs, id: String) -> ExitCode {
    let api = match Api::new(args) {
        Ok(api) => api,
        Err(f) => return f.report(args.json),
    };
    let path = encode(&id);
    // A task's id, else a run's.
    match api.get(&format!("/v1/tasks/{path}")).await {
        Ok(_) => {
            let result = task(&api, args, &path).await;
            finish(args, result, print_task)
        }
        Err(f) if f.error["code"] == "not_found" => {
            let result = run(&api, args, &path).await;
            finish(args, result, print_run)
        }
        Err(f) => f.report(args.json),
    }
}

fn ended(state: &str) -> bool {
    matches!(state, "completed" | "failed" | "canceled" | "rejected")
}

/// Prints `line` as it happens: a JSON line with `--json`, else text.
fn say(args: &ClientArgs, line: &str, entry: &Value) {
    if args.json {
        outln!("{entry}");
    } else {
        outln!("{line}");
    }
}

/// Follows a task: each new history entry, until it ends.
async fn task(api: &Api, args: &ClientArgs, id: &str) -> Result<(Value, u8), Failure> {
    let mut shown = 0;
    loop {
        let task = api.get(&format!("/v1/tasks/{id}?wait=1s")).await?.0;
        let history = task["history"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        for h in history.iter().skip(shown) {
            let said = history_said(h);
            let line = format!(
                "{}  {:<14} attempt {}  {}  ({said})",
                s(&h["at"]),
                s(&h["to"]),
                s(&h["attempt"]),
                s(&h["actor"])
            );
            say(args, &line, h);
        }
        shown = shown.max(history.len());
        let state = s(&task["state"]);
        if ended(&state) {
            return Ok((task, u8::from(state != "completed")));
        }
    }
}

/// Follows a run: each step's moves and each gate, until it ends.
async fn run(api: &Api, args: &ClientArgs, id: &str) -> Result<(Value, u8), Failure> {
    let mut seen = BTreeSet::new();
    loop {
        let run = api.get(&format!("/v1/runs/{id}?wait=1s")).await?.0;
        for st in run["steps"].as_array().into_iter().flatten() {
            let key = (s(&st["id"]), s(&st["state"]));
            if key.1 != "pending" && seen.insert(key.clone()) {
                say(args, &format!("step {:<16} {}", key.0, key.1), st);
            }
        }
        if let Some(w) = run["waiting"].as_object() {
            // Said once per gate, beside the step's own move.
            let key = (s(&w["step"]), "gate".to_string());
            if seen.insert(key) {
                let line = format!(
                    "waiting at `{}`: {} (orchestrator runs approve {} --reason TEXT)",
                    s(&w["step"]),
                    s(&w["prompt"]),
                    s(&run["run_id"])
                );
                say(args, &line, &run["waiting"]);
            }
        }
        let state = s(&run["state"]);
        if ended(&state) {
            return Ok((run, u8::from(state != "completed")));
        }
    }
}
