//! How commands print: results on stdout (a closed pipe ends the command
//! quietly: `orchestrator audit list | head -1`), everything else on
//! stderr, errors in one shape; tables for people, task details.

use std::io::Write;
use std::process::ExitCode;

use serde_json::{Value, json};

/// `println!` for results: a reader that closed the pipe ends the
/// command with success, instead of a panic.
macro_rules! outln {
    () => {
        $crate::cli::output::out(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::cli::output::out(format_args!($($arg)*))
    };
}
pub(crate) use outln;

/// Writes one line of a result to stdout (see [`outln`]).
pub fn out(line: std::fmt::Arguments<'_>) {
    let mut stdout = std::io::stdout().lock();
    let written = stdout
        .write_fmt(line)
        .and_then(|()| stdout.write_all(b"\n"))
        .and_then(|()| stdout.flush());
    if let Err(e) = written {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: cannot write the result: {e}");
        std::process::exit(3);
    }
}

/// A command's failure: its exit code and an error in the API's shape
/// (`{"code", "message", "field"?}`; one from the API is kept as it came).
#[derive(Debug)]
pub struct Failure {
    /// 2 refused, 3 unreachable or failed, 4 a wait ran out (see
    /// docs/cli.md).
    pub exit: u8,
    /// The error object.
    pub error: Value,
}

impl Failure {
    /// A failure found here, not answered by the orchestrator.
    pub fn new(exit: u8, code: &str, message: impl Into<String>) -> Failure {
        Failure {
            exit,
            error: json!({"code": code, "message": message.into()}),
        }
    }

    /// Prints it (`{"error": …}` on stdout with `--json`, `error: …` on
    /// stderr otherwise) and gives its exit code.
    pub fn report(&self, as_json: bool) -> ExitCode {
        if as_json {
            outln!("{}", json!({ "error": self.error }));
        } else {
            let e = &self.error;
            let mut line = format!("error: {}", s(&e["message"]));
            if let Some(field) = e["field"].as_str() {
                line.push_str(&format!(" (field `{field}`)"));
            }
            if let Some(code) = e["code"].as_str() {
                line.push_str(&format!(" [{code}]"));
            }
            eprintln!("{line}");
            if let Some(hint) = e["hint"].as_str() {
                eprintln!("hint: {hint}");
            }
        }
        ExitCode::from(self.exit)
    }
}

pub fn print_task(t: &Value) {
    outln!("task     {}", s(&t["task_id"]));
    outln!("agent    {} / {}", s(&t["agent"]), s(&t["action"]));
    outln!(
        "state    {} (attempt {} of {})",
        s(&t["state"]),
        s(&t["attempt"]),
        s(&t["max_attempts"])
    );
    outln!("request  {}", s(&t["correlation_id"]));
    match (t["trace_url"].as_str(), t["trace_id"].as_str()) {
        (Some(url), _) => outln!("trace    {url}"),
        (None, Some(id)) => outln!("trace    {id}"),
        _ => {}
    }
    if !t["result"].is_null() {
        outln!("result   {}", full(&t["result"]));
    }
    if !t["error"].is_null() {
        outln!(
            "error    {}: {}",
            s(&t["error"]["code"]),
            s(&t["error"]["message"])
        );
    }
    print_model_use(&t["model_use"]);
    if let Some(history) = t["history"].as_array() {
        outln!("history");
        for h in history {
            let said = history_said(h);
            outln!(
                "  {}  {:<14} {}  ({said})",
                s(&h["at"]),
                s(&h["to"]),
                s(&h["actor"]),
            );
        }
    }
}

/// The models' use of a task or run (`model_use`), when it has one.
pub fn print_model_use(used: &Value) {
    if used.is_object() {
        outln!(
            "models   {} calls, {} tokens in, {} out",
            used["model_calls"],
            used["input_tokens"],
            used["output_tokens"]
        );
    }
}

/// What a history entry says: a progress report's words, else the
/// reason of its move.
pub fn history_said(h: &Value) -> String {
    match h["progress"]["message"].as_str() {
        Some(m) => format!("progress: {m}"),
        None => s(&h["reason"]),
    }
}

/// A result in full: a string as it is, anything else as indented JSON
/// (its lines after the first indented under the label).
pub fn full(v: &Value) -> String {
    match v {
        Value::String(text) => text.clone(),
        other => serde_json::to_string_pretty(other)
            .unwrap_or_else(|_| other.to_string())
            .replace('\n', "\n         "),
    }
}

/// An RFC 3339 time as how long ago it was (`12s ago`, `5m ago`, `3h
/// ago`, `2d ago`), for tables; `--json` keeps the time itself. Anything
/// else as it is.
pub fn ago(v: &Value) -> String {
    let Some(at) = v.as_str().and_then(|t| {
        time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339).ok()
    }) else {
        return s(v);
    };
    let secs = (time::OffsetDateTime::now_utc() - at).whole_seconds();
    match secs {
        ..0 => "just now".into(),
        0..60 => format!("{secs}s ago"),
        60..3600 => format!("{}m ago", secs / 60),
        3600..86_400 => format!("{}h ago", secs / 3600),
        _ => format!("{}d ago", secs / 86_400),
    }
}

/// A JSON value as table text: strings bare, null empty.
pub fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

pub fn summary(detail: &Value) -> String {
    let text = detail.to_string();
    if text.chars().count() > 60 {
        format!("{}…", text.chars().take(59).collect::<String>())
    } else {
        text
    }
}

/// Prints the array `list` of `value` as a table, a row per item, then how
/// to get the next page when there is one.
pub fn list_table(
    value: &Value,
    list: &str,
    headers: &[&str],
    row: impl Fn(&Value) -> Vec<String>,
) {
    let rows: Vec<Vec<String>> = value[list]
        .as_array()
        .map(|items| items.iter().map(&row).collect())
        .unwrap_or_default();
    table(headers, &rows);
    let next = s(&value["next_cursor"]);
    if !next.is_empty() {
        eprintln!("more: --cursor {next}");
    }
}

pub fn table(headers: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        outln!("{}", padded.join("  ").trim_end());
    };
    line(headers.iter().map(|h| h.to_string()).collect());
    for row in rows {
        line(row.clone());
    }
}

pub fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            b => format!("%{b:02X}"),
        })
        .collect()
}
