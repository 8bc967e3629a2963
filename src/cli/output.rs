//! How client commands print: tables for people, task details.

use serde_json::Value;

pub fn print_task(t: &Value) {
    println!("task     {}", s(&t["task_id"]));
    println!("agent    {} / {}", s(&t["agent"]), s(&t["action"]));
    println!(
        "state    {} (attempt {} of {})",
        s(&t["state"]),
        s(&t["attempt"]),
        s(&t["max_attempts"])
    );
    println!("request  {}", s(&t["correlation_id"]));
    match (t["trace_url"].as_str(), t["trace_id"].as_str()) {
        (Some(url), _) => println!("trace    {url}"),
        (None, Some(id)) => println!("trace    {id}"),
        _ => {}
    }
    if !t["result"].is_null() {
        println!("result   {}", t["result"]);
    }
    if !t["error"].is_null() {
        println!(
            "error    {}: {}",
            s(&t["error"]["code"]),
            s(&t["error"]["message"])
        );
    }
    if let Some(history) = t["history"].as_array() {
        println!("history");
        for h in history {
            println!(
                "  {}  {:<14} {}  ({})",
                s(&h["at"]),
                s(&h["to"]),
                s(&h["actor"]),
                s(&h["reason"])
            );
        }
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
        println!("more: --cursor {next}");
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
        println!("{}", padded.join("  ").trim_end());
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
