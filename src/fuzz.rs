//! Machines try every parser that takes outside bytes: property tests
//! (proptest, on stable Rust) throw arbitrary bytes, arbitrary JSON and
//! valid documents with random edits at each, and hold that nothing
//! panics or hangs, that every refusal is a typed error naming the field
//! (where one field is to blame), and that what decodes encodes back to
//! itself.
//!
//! The parsers here: the envelope and worker events (as a worker and as a
//! user send them), task requests, trigger files, every agent format
//! (`agent.json`, AgentCards in Markdown and YAML, PromptPacks), step
//! templates, the codec's depth and canonical-form checks. The A2A face's
//! JSON-RPC envelope and `Last-Event-ID`, the store's log messages
//! (`replication::frame`) and snapshots (`store::snapshot`) are tried in
//! their own modules, with the strategies here ([`json`], [`edited`]) or
//! their own.
//!
//! Budget: `PROPTEST_CASES` cases per property (256 when unset, the CI
//! budget); the long mode is `PROPTEST_CASES=20000 cargo test --lib fuzz`
//! (docs/security.md). A failure found becomes a test of its own below
//! (`regression_…`), so it is tried at every run whatever the budget.

use proptest::prelude::*;
use serde_json::{Map, Value, json};

use crate::codec::{DEFAULT_MAX_BYTES, DecodeError, MAX_DEPTH, Strictness};

/// The settings of every property here: the case budget from
/// `PROPTEST_CASES`, and no failure files written into the source tree
/// (a failure becomes a regression test by hand).
pub(crate) fn config() -> ProptestConfig {
    ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Field names the parsers know, so that edits reach real fields as
/// often as made-up ones.
const KEYS: &[&str] = &[
    "v",
    "header",
    "payload",
    "control",
    "task_id",
    "correlation_id",
    "causation_id",
    "from",
    "to",
    "timestamp",
    "token",
    "action",
    "params",
    "meta",
    "idempotency_key",
    "priority",
    "response_mode",
    "required_scopes",
    "callback_url",
    "deadline",
    "attempt",
    "max_attempts",
    "state",
    "result",
    "error",
    "code",
    "message",
    "retryable",
    "agent",
    "at",
    "progress",
    "artifacts",
    "id",
    "name",
    "steps",
    "input_schema",
    "when",
    "approval",
    "skills",
    "invocation",
    "type",
    "prompt",
    "model",
    "parts",
    "text",
    "data",
    "kind",
    "jsonrpc",
    "method",
    "messageId",
    "role",
    "seq",
];

/// Strings that parsers treat specially: empty, long, odd unicode, times,
/// ids, numbers written as text, template and YAML syntax.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "\\PC{0,24}",
        Just(String::new()),
        Just("x".repeat(5000)),
        Just("2026-11-22T10:00:00Z".into()),
        Just("0193a1b2-0000-7000-8000-000000000000".into()),
        Just("9007199254740993".into()),
        Just("{{ input.x }}".into()),
        Just("{% for i in range(10) %}{{ i }}{% endfor %}".into()),
        Just("&anchor *alias".into()),
        Just("\u{0}\u{feff}\u{202e}".into()),
        proptest::sample::select(KEYS).prop_map(str::to_string),
    ]
}

/// Any JSON value, nested a few levels.
pub(crate) fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        text().prop_map(Value::from),
    ];
    leaf.prop_recursive(5, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec((key(), inner), 0..6)
                .prop_map(|members| Value::Object(members.into_iter().collect())),
        ]
    })
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => proptest::sample::select(KEYS).prop_map(str::to_string),
        1 => "\\PC{0,12}",
    ]
}

/// One change to a document: at the `n`th place (of all its values, in
/// order), a new value, the member removed, a member added, or the
/// value written as a string.
#[derive(Debug, Clone)]
pub(crate) enum Edit {
    Replace(usize, Value),
    Remove(usize),
    Insert(usize, String, Value),
    Stringify(usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), json()).prop_map(|(n, v)| Edit::Replace(n, v)),
        any::<usize>().prop_map(Edit::Remove),
        (any::<usize>(), key(), json()).prop_map(|(n, k, v)| Edit::Insert(n, k, v)),
        any::<usize>().prop_map(Edit::Stringify),
    ]
}

/// One to four edits.
pub(crate) fn edits() -> impl Strategy<Value = Vec<Edit>> {
    proptest::collection::vec(edit(), 1..5)
}

/// Every place in `value`, as JSON pointers, the whole first.
fn places(value: &Value, at: String, out: &mut Vec<String>) {
    out.push(at.clone());
    match value {
        Value::Object(m) => {
            for (k, v) in m {
                let k = k.replace('~', "~0").replace('/', "~1");
                places(v, format!("{at}/{k}"), out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                places(v, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// `seed` with `edits` made, in order.
pub(crate) fn edited(seed: &Value, edits: &[Edit]) -> Value {
    let mut doc = seed.clone();
    for e in edits {
        let mut all = Vec::new();
        places(&doc, String::new(), &mut all);
        let pick = |n: usize| all[n % all.len()].clone();
        match e {
            Edit::Replace(n, v) => {
                if let Some(slot) = doc.pointer_mut(&pick(*n)) {
                    *slot = v.clone();
                }
            }
            Edit::Stringify(n) => {
                if let Some(slot) = doc.pointer_mut(&pick(*n)) {
                    *slot = Value::String(slot.to_string());
                }
            }
            Edit::Remove(n) => {
                let at = pick(*n);
                if let Some((parent, last)) = at.rsplit_once('/')
                    && let Some(Value::Object(m)) = doc.pointer_mut(parent)
                {
                    m.remove(&last.replace("~1", "/").replace("~0", "~"));
                }
            }
            Edit::Insert(n, k, v) => {
                if let Some(Value::Object(m)) = doc.pointer_mut(&pick(*n)) {
                    m.insert(k.clone(), v.clone());
                }
            }
        }
    }
    doc
}

/// A refusal of a JSON object names a field, unless the object as a
/// whole is at fault (over the size limit, or not an object at all).
fn names_its_field(e: &DecodeError, doc: &Value) {
    match e {
        DecodeError::TooLarge { .. } => {}
        DecodeError::Syntax { .. } => panic!("valid JSON refused as malformed: {e}"),
        _ if !doc.is_object() => {}
        _ => assert!(
            e.field().is_some_and(|f| !f.is_empty()),
            "a refusal without its field: {e:?} of {doc}"
        ),
    }
}

fn envelope_seed() -> Value {
    json!({
        "v": 1,
        "header": {
            "task_id": "0193a1b2-0000-7000-8000-000000000000",
            "correlation_id": "c-1", "causation_id": "c-0",
            "from": "orchestrator", "to": "knowledge-agent",
            "timestamp": "2026-11-22T10:00:00Z", "token": "a.b.c"
        },
        "payload": {"action": "search:kb", "params": {"query": "x", "n": [1, 2.5, {"d": null}]},
                    "meta": {"trigger_id": "t", "system_prompt": "You are…"}},
        "control": {"idempotency_key": "i-456", "priority": "high", "response_mode": "callback",
                    "required_scopes": ["Files.Read"], "callback_url": "https://example.com/cb",
                    "deadline": "2026-11-22T10:01:00Z", "attempt": 2, "max_attempts": 3}
    })
}

fn event_seed() -> Value {
    json!({
        "v": 1, "task_id": "0193a1b2-0000-7000-8000-000000000000", "correlation_id": "c",
        "agent": "echo", "attempt": 1, "state": "failed",
        "result": {"r": [1, "x"]}, "artifacts": [{"artifact_id": "a", "parts": [{"text": "t"}]}],
        "error": {"code": "upstream_timeout", "message": "m", "retryable": true},
        "retry_after_seconds": 3, "at": "2026-11-22T10:00:00Z"
    })
}

fn request_seed() -> Value {
    json!({
        "to": "echo", "action": "echo", "params": {"q": "x", "deep": {"a": [1, 2]}},
        "idempotency_key": "k-1", "priority": "low", "response_mode": "sync",
        "required_scopes": ["a.b"], "deadline": "2026-11-22T10:01:00Z", "max_attempts": 2,
        "correlation_id": "c-9"
    })
}

fn trigger_seed() -> Value {
    json!({
        "id": "email-stakeholders", "name": "Email", "description": "Summarize",
        "default_system_prompt": "You are concise.", "required_scopes": ["Files.Read"],
        "run_mode": "on_demand", "defaults": {"timeout": "60s", "max_attempts": 3, "priority": "normal"},
        "input_schema": {"type": "object", "required": ["query"], "properties": {"query": {"type": "string"}}},
        "steps": [
            {"id": "search", "agent": "knowledge", "action": "search", "params": {"q": "{{ input.query }}"}},
            {"id": "ask", "approval": {"prompt": "Send?"}},
            {"id": "send", "agent": "mail", "action": "send", "when": "steps.search.result.ok",
             "params": {"body": "{{ steps.search.result | tojson }}"}}
        ]
    })
}

/// A directory the properties write files into, one per test thread.
fn scratch() -> tempfile::TempDir {
    tempfile::tempdir().expect("a temporary directory")
}

/// The agent files of the seeds (the formats as their authors write
/// them): (file name, text).
fn agent_seeds() -> Vec<(String, String)> {
    let base = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/seeds");
    let mut out = Vec::new();
    for dir in ["agentcards/md", "agentcards/yaml", "promptpack"] {
        if let Ok(entries) = std::fs::read_dir(base.join(dir)) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if let Ok(text) = std::fs::read_to_string(e.path()) {
                    out.push((name, text));
                }
            }
        }
    }
    let agent = base.join("conventions/agents/calendar-agent/agent.json");
    if let Ok(text) = std::fs::read_to_string(agent) {
        out.push(("agent.json".into(), text));
    }
    out.sort();
    out
}

/// `text` of an agent file as a JSON value (YAML, JSON, or a Markdown
/// card's frontmatter), and how to write a value back in its format.
fn agent_value(name: &str, text: &str) -> Option<(Value, Option<String>)> {
    if name.ends_with(".md") {
        let rest = text.strip_prefix("---\n")?;
        let (front, body) = rest.split_once("\n---")?;
        let v: Value = serde_norway::from_str(front).ok()?;
        return Some((v, Some(body.to_string())));
    }
    if name.ends_with(".json") {
        return serde_json::from_str(text).ok().map(|v| (v, None));
    }
    serde_norway::from_str(text).ok().map(|v| (v, None))
}

fn agent_text(name: &str, value: &Value, body: &Option<String>) -> String {
    if name.ends_with(".json") {
        return value.to_string();
    }
    let yaml = serde_norway::to_string(value).unwrap_or_default();
    match body {
        Some(body) => format!("---\n{yaml}---{body}"),
        None => yaml,
    }
}

/// Loads the agent file `name` holding `text`: whatever it holds, an
/// answer (cards, or problems each with words), never a panic.
fn load_agent_file(dir: &std::path::Path, name: &str, text: &str) {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("a scratch file");
    let git = crate::agent::GitOptions {
        mode: crate::agent::GitMode::Clone,
        dir: dir.join("git"),
        timeout: std::time::Duration::from_secs(1),
    };
    let catalog = crate::agent::Catalog::load(&[path], &git);
    for problem in &catalog.errors {
        assert!(!problem.message.is_empty(), "a problem without words");
    }
}

proptest! {
    #![proptest_config(config())]

    /// The envelope, from a worker's side (tolerant) and a user's
    /// (strict): edits of a valid one are decoded or refused naming the
    /// field; what decodes encodes back to itself.
    #[test]
    fn envelopes(edits in edits(), strict in any::<bool>()) {
        let doc = edited(&envelope_seed(), &edits);
        let bytes = serde_json::to_vec(&doc).unwrap();
        let decoded = if strict {
            crate::Envelope::from_user(&bytes, DEFAULT_MAX_BYTES)
        } else {
            crate::Envelope::from_wire(&bytes, DEFAULT_MAX_BYTES)
        };
        match decoded {
            Ok(env) => {
                let again = crate::Envelope::from_user(&env.to_vec(), DEFAULT_MAX_BYTES);
                prop_assert_eq!(again.as_ref(), Ok(&env));
            }
            Err(e) => names_its_field(&e, &doc),
        }
    }

    /// Bytes that are not JSON at all, or JSON of any shape.
    #[test]
    fn envelopes_and_events_from_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512), doc in json()) {
        let _ = crate::Envelope::from_wire(&bytes, DEFAULT_MAX_BYTES);
        let _ = crate::WorkerEvent::from_wire(&bytes, DEFAULT_MAX_BYTES);
        let text = serde_json::to_vec(&doc).unwrap();
        if let Err(e) = crate::Envelope::from_user(&text, DEFAULT_MAX_BYTES) {
            names_its_field(&e, &doc);
        }
        if let Err(e) = crate::WorkerEvent::from_wire(&text, DEFAULT_MAX_BYTES) {
            names_its_field(&e, &doc);
        }
    }

    /// A worker's status and result events.
    #[test]
    fn worker_events(edits in edits(), strict in any::<bool>()) {
        let doc = edited(&event_seed(), &edits);
        let bytes = serde_json::to_vec(&doc).unwrap();
        let decoded = if strict {
            crate::WorkerEvent::from_user(&bytes, DEFAULT_MAX_BYTES)
        } else {
            crate::WorkerEvent::from_wire(&bytes, DEFAULT_MAX_BYTES)
        };
        match decoded {
            Ok(event) => {
                let encoded = serde_json::to_vec(&event).unwrap();
                let again = crate::WorkerEvent::from_wire(&encoded, DEFAULT_MAX_BYTES);
                prop_assert_eq!(again.as_ref(), Ok(&event));
            }
            Err(e) => names_its_field(&e, &doc),
        }
    }

    /// `POST /v1/tasks` bodies, read strictly.
    #[test]
    fn task_requests(edits in edits()) {
        let doc = edited(&request_seed(), &edits);
        let bytes = serde_json::to_vec(&doc).unwrap();
        let decoded: Result<crate::service::TaskRequest, _> =
            crate::codec::decode(&bytes, Strictness::Strict, DEFAULT_MAX_BYTES);
        match decoded {
            Ok(request) => {
                let encoded = serde_json::to_vec(&request).unwrap();
                let again: Result<crate::service::TaskRequest, _> =
                    crate::codec::decode(&encoded, Strictness::Strict, DEFAULT_MAX_BYTES);
                prop_assert_eq!(again.as_ref(), Ok(&request));
            }
            Err(e) => names_its_field(&e, &doc),
        }
    }

    /// Trigger files: edits of a valid one (written as YAML), and any
    /// text; each problem found says what and, when it can, where.
    #[test]
    fn trigger_files(edits in edits(), raw in "\\PC{0,200}") {
        let dir = scratch();
        let doc = edited(&trigger_seed(), &edits);
        for (name, text) in [
            ("t.yaml", serde_norway::to_string(&doc).unwrap_or_default()),
            ("t.json", doc.to_string()),
            ("r.yaml", raw.clone()),
        ] {
            let path = dir.path().join(name);
            std::fs::write(&path, &text).unwrap();
            if let Err(problems) = crate::trigger::Trigger::load(&path) {
                prop_assert!(!problems.is_empty());
                for p in problems {
                    prop_assert!(!p.message.is_empty(), "a problem without words in {}", text);
                }
            }
        }
    }

    /// Every agent format, from the seeds' own files: edits of each, in
    /// its own format, and any text under each name.
    #[test]
    fn agent_files(pick in any::<usize>(), edits in edits(), raw in "\\PC{0,200}") {
        let seeds = agent_seeds();
        prop_assume!(!seeds.is_empty());
        let (name, text) = &seeds[pick % seeds.len()];
        let dir = scratch();
        if let Some((value, body)) = agent_value(name, text) {
            let doc = edited(&value, &edits);
            load_agent_file(dir.path(), name, &agent_text(name, &doc, &body));
        }
        load_agent_file(dir.path(), name, &raw);
    }

    /// Step templates: whatever the text, a value or an error, never a
    /// panic, and never longer than the fuel allows.
    #[test]
    fn templates(parts in proptest::collection::vec(prop_oneof![
        Just("{{".to_string()), Just("}}".to_string()), Just("{%".to_string()),
        Just("%}".to_string()), Just(" for x in range(100000) ".to_string()),
        Just(" endfor ".to_string()), Just(" input.a ".to_string()),
        Just(" | join(',') ".to_string()), Just(" * 1000000 ".to_string()),
        Just(" ~ ".to_string()), Just("'".to_string()), "\\PC{0,8}",
    ], 0..12), input in json()) {
        let template: String = parts.concat();
        let context = json!({"input": input, "steps": {}});
        let _ = crate::trigger::template::render_text(&template, &context);
        let params: Map<String, Value> = [("p".to_string(), Value::String(template))].into_iter().collect();
        let _ = crate::trigger::template::render(&params, &context);
    }

    /// The depth bound: a value nested `n` levels passes exactly when
    /// `n` is within the limit. (Values from outside come through
    /// serde_json, which stops at 128 levels; deeper ones exist only when
    /// built in memory, and dropping them recurses, so `n` stays modest.)
    #[test]
    fn depth(n in 0usize..600) {
        let mut v = json!(1);
        for _ in 0..n {
            v = json!([v]);
        }
        let checked = crate::codec::check_depth("x", [&v], 0);
        prop_assert_eq!(checked.is_ok(), n <= MAX_DEPTH);
    }

    /// The canonical form a token binds: `check` (made at submit) says
    /// exactly whether there is one, refusing with the path; and the form
    /// of a value is that of its JSON text read back (what a worker hashes).
    #[test]
    fn canonical_form(doc in json()) {
        let mut path = String::from("params");
        let checked = crate::task_token::canonical::check(&doc, &mut path);
        let form = crate::task_token::canonical::canonical(&doc);
        prop_assert_eq!(checked.is_ok(), form.is_ok());
        match (checked, form) {
            (Ok(()), Ok(text)) => {
                let wire: Value = serde_json::from_slice(&serde_json::to_vec(&doc).unwrap()).unwrap();
                prop_assert_eq!(crate::task_token::canonical::canonical(&wire).ok(), Some(text));
            }
            (Err(e), _) => prop_assert!(e.path.starts_with("params")),
            _ => {}
        }
    }
}

/// A template of loops within loops ends, as an error, where it used to
/// run for hours (ten billion iterations): the fuel bound.
#[test]
fn regression_nested_loops_end_for_lack_of_fuel() {
    let template =
        "{% for a in range(100000) %}{% for b in range(100000) %}x{% endfor %}{% endfor %}";
    let started = std::time::Instant::now();
    let rendered = crate::trigger::template::render_text(template, &json!({}));
    assert!(rendered.is_err(), "{rendered:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
}

/// A `null` where a worker event's state must be was refused as
/// "malformed JSON" with no field (found by [`worker_events`]): serde_json
/// calls a type's refusal of a well-formed value a syntax error. Now the
/// field is named.
#[test]
fn regression_a_null_state_names_its_field() {
    let mut doc = event_seed();
    doc["state"] = Value::Null;
    let e = crate::WorkerEvent::from_wire(&serde_json::to_vec(&doc).unwrap(), DEFAULT_MAX_BYTES)
        .unwrap_err();
    assert_eq!(e.field(), Some("state"), "{e:?}");
    // Malformed JSON is still malformed JSON.
    let e = crate::WorkerEvent::from_wire(b"{\"state\": nul", DEFAULT_MAX_BYTES).unwrap_err();
    assert_eq!(e.code(), "malformed_json");
}

/// A member named "" was refused as an unknown field named "" (found by
/// [`envelopes`] in the long run): a blank the caller cannot act on. It
/// is named `""` now.
#[test]
fn regression_an_unknown_member_named_blank_is_named() {
    let mut doc = envelope_seed();
    doc[""] = Value::Null;
    let e = crate::Envelope::from_user(&serde_json::to_vec(&doc).unwrap(), DEFAULT_MAX_BYTES)
        .unwrap_err();
    assert_eq!(e.field(), Some("\"\""), "{e:?}");
}

/// A trigger file whose text put a non-ASCII character after a `]` in a
/// field's path panicked while its problem's line was looked for (found
/// by [`trigger_files`] in the long run: `locate` sliced inside the
/// character). Now the problem is reported.
#[test]
fn regression_a_path_with_text_after_a_bracket_is_located() {
    let dir = scratch();
    let path = dir.path().join("t.yaml");
    std::fs::write(&path, "Ἐ[]🮔]:").unwrap();
    let problems = crate::trigger::Trigger::load(&path).unwrap_err();
    assert!(!problems.is_empty());
}

/// The seeds the edits start from are valid, so the properties try the
/// parsers past their first check, not only their refusals.
#[test]
fn the_seeds_are_valid() {
    let bytes = |v: Value| serde_json::to_vec(&v).unwrap();
    crate::Envelope::from_user(&bytes(envelope_seed()), DEFAULT_MAX_BYTES).unwrap();
    crate::WorkerEvent::from_user(&bytes(event_seed()), DEFAULT_MAX_BYTES).unwrap();
    let _: crate::service::TaskRequest = crate::codec::decode(
        &bytes(request_seed()),
        Strictness::Strict,
        DEFAULT_MAX_BYTES,
    )
    .unwrap();
    let dir = scratch();
    let path = dir.path().join("t.yaml");
    std::fs::write(&path, serde_norway::to_string(&trigger_seed()).unwrap()).unwrap();
    if let Err(problems) = crate::trigger::Trigger::load(&path) {
        panic!(
            "{:?}",
            problems.iter().map(|p| &p.message).collect::<Vec<_>>()
        );
    }
    // (history.md is a card's history, not a card: tried as text only.)
    let seeds = agent_seeds();
    let cards = seeds
        .iter()
        .filter(|(name, text)| agent_value(name, text).is_some())
        .count();
    assert!(cards >= 7, "{seeds:?}");
}
