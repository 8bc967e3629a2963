//! {{name}}: an agent that `orchestrator worker` runs, one process per
//! task (build it first: `cargo build --release` in this directory).
//!
//! The task's envelope (JSON, without its token) arrives on stdin; the
//! result (JSON) goes to stdout. The exit code says how the task ended:
//! 0 completed, with the result on stdout; 75 failed for now, and the
//! worker runs the task again (a retry); any other: failed, with the last
//! line of stderr as the message. Progress reports, one JSON object per
//! line, go to the file descriptor that `ORCH_PROGRESS_FD` names.
//! docs/first-agent.md walks through it.

use std::io::{Read, Write};
use std::process::ExitCode;

use serde_json::{Value, json};

/// How a task ends.
enum Outcome {
    Done(Value),
    Retry(String),
    Failed(String),
}

/// The skill `greet`: a greeting for `params.name`.
fn greet(params: &Value, attempt: u32) -> Outcome {
    if params["retry_once"] == json!(true) && attempt == 1 {
        return Outcome::Retry(
            "the first attempt fails on purpose (retry_once): exit 75 asks for a retry".into(),
        );
    }
    match params["name"].as_str().map(str::trim) {
        Some(name) if !name.is_empty() => {
            progress(&format!("greeting {name}"));
            Outcome::Done(json!({"greeting": format!("Hello, {name}!")}))
        }
        _ => Outcome::Failed("params.name must not be empty".into()),
    }
}

/// Sends one progress report; it shows in the task's history.
fn progress(message: &str) {
    use std::os::fd::FromRawFd;
    let Some(fd) = std::env::var("ORCH_PROGRESS_FD")
        .ok()
        .and_then(|v| v.parse::<i32>().ok())
    else {
        return;
    };
    // SAFETY: the worker opened this descriptor for us; ManuallyDrop keeps
    // it open for the next report.
    let mut out = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(fd) });
    let _ = writeln!(out, "{}", json!({"message": message}));
}

fn main() -> ExitCode {
    let mut input = String::new();
    if let Err(e) = std::io::stdin().read_to_string(&mut input) {
        eprintln!("cannot read the envelope: {e}");
        return ExitCode::from(1);
    }
    let envelope: Value = match serde_json::from_str(&input) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("the envelope is not JSON: {e}");
            return ExitCode::from(1);
        }
    };
    let attempt = std::env::var("ORCH_ATTEMPT")
        .ok()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1);
    let payload = &envelope["payload"];
    let outcome = match payload["action"].as_str() {
        Some("greet") => greet(&payload["params"], attempt),
        other => Outcome::Failed(format!("no skill {other:?}")),
    };
    match outcome {
        Outcome::Done(result) => {
            println!("{result}");
            ExitCode::SUCCESS
        }
        Outcome::Retry(why) => {
            eprintln!("{why}");
            ExitCode::from(75)
        }
        Outcome::Failed(why) => {
            eprintln!("{why}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greets_by_name() {
        let Outcome::Done(v) = greet(&json!({"name": "Ada"}), 1) else {
            panic!("not done");
        };
        assert_eq!(v, json!({"greeting": "Hello, Ada!"}));
    }

    #[test]
    fn an_empty_name_fails() {
        assert!(matches!(greet(&json!({"name": " "}), 1), Outcome::Failed(_)));
    }

    #[test]
    fn retry_once_asks_for_a_retry_then_completes() {
        let params = json!({"name": "Ada", "retry_once": true});
        assert!(matches!(greet(&params, 1), Outcome::Retry(_)));
        assert!(matches!(greet(&params, 2), Outcome::Done(_)));
    }
}
