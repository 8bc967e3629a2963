//! The published JSON Schemas and the Rust types agree: what one accepts the
//! other accepts, so a worker written in any language against the schema
//! talks to this one.

use std::path::PathBuf;

use orchestrator::codec::DEFAULT_MAX_BYTES;
use orchestrator::event::RunAbandoned;
use orchestrator::{Envelope, WorkerEvent};
use serde_json::{Value, json};

fn docs() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs")
}

/// Serves `docs/schema/*` to the validator, so the event schema's references
/// into the envelope schema resolve without a network.
struct LocalSchemas;

impl jsonschema::Retrieve for LocalSchemas {
    fn retrieve(
        &self,
        uri: &jsonschema::Uri<String>,
    ) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        let name = uri
            .path()
            .as_str()
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_string();
        let text = std::fs::read_to_string(docs().join("schema").join(&name))?;
        Ok(serde_json::from_str(&text)?)
    }
}

fn validator(file: &str) -> jsonschema::Validator {
    let text = std::fs::read_to_string(docs().join("schema").join(file)).unwrap();
    let schema: Value = serde_json::from_str(&text).unwrap();
    jsonschema::options()
        .should_validate_formats(true)
        .with_retriever(LocalSchemas)
        .build(&schema)
        .unwrap_or_else(|e| panic!("{file} is not a valid schema: {e}"))
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Envelope,
    Event,
    Abandoned,
}

impl Kind {
    fn of(example: &Value) -> Kind {
        if example.get("header").is_some() {
            Kind::Envelope
        } else if example.get("finished").is_some() {
            Kind::Abandoned
        } else {
            Kind::Event
        }
    }

    fn parses(self, v: &Value) -> Result<(), String> {
        let bytes = serde_json::to_vec(v).unwrap();
        match self {
            Kind::Envelope => Envelope::from_user(&bytes, DEFAULT_MAX_BYTES).map(|_| ()),
            Kind::Event => WorkerEvent::from_user(&bytes, DEFAULT_MAX_BYTES).map(|_| ()),
            Kind::Abandoned => RunAbandoned::from_user(&bytes, DEFAULT_MAX_BYTES).map(|_| ()),
        }
        .map_err(|e| e.to_string())
    }
}

/// The JSON code blocks of `docs/protocol.md`.
fn examples() -> Vec<Value> {
    let text = std::fs::read_to_string(docs().join("protocol.md")).unwrap();
    let mut out = Vec::new();
    let mut block: Option<String> = None;
    for line in text.lines() {
        match (&mut block, line.trim_end()) {
            (None, "```json") => block = Some(String::new()),
            (Some(b), "```") => {
                out.push(
                    serde_json::from_str(b).unwrap_or_else(|e| panic!("bad example: {e}\n{b}")),
                );
                block = None;
            }
            (Some(b), l) => {
                b.push_str(l);
                b.push('\n');
            }
            (None, _) => {}
        }
    }
    out
}

/// Every example in the docs is valid for both the schema and the parser.
#[test]
fn every_documented_example_validates_and_parses() {
    let (envelope, event, abandoned) = (
        validator("envelope.schema.json"),
        validator("worker-event.schema.json"),
        validator("run-abandoned.schema.json"),
    );
    let examples = examples();
    assert!(examples.len() >= 5, "the protocol page lost its examples");
    for example in &examples {
        let kind = Kind::of(example);
        let schema = match kind {
            Kind::Envelope => &envelope,
            Kind::Event => &event,
            Kind::Abandoned => &abandoned,
        };
        let errors: Vec<String> = schema.iter_errors(example).map(|e| e.to_string()).collect();
        assert!(
            errors.is_empty(),
            "{kind:?} example fails its schema: {errors:?}\n{example:#}"
        );
        kind.parses(example)
            .unwrap_or_else(|e| panic!("{kind:?} example fails to parse: {e}"));
    }
}

/// Values a field is replaced with, one at a time.
fn replacements() -> Vec<Value> {
    vec![
        Value::Null,
        json!(0),
        json!(-1),
        json!(1.5),
        json!(4294967296u64),
        json!(true),
        json!(""),
        json!("x"),
        json!("Upper Case"),
        json!("a\u{0007}b"),
        json!("y".repeat(300)),
        json!("2026-11-22"),
        json!("2026-11-22T10:00:00"),
        json!("http://x"),
        json!("failed"),
        json!("callback"),
        json!([]),
        json!(["Files.Read"]),
        json!({}),
    ]
}

/// Every variant of `v` with one change: a field removed, replaced, or an
/// unknown field added to an object.
fn mutations(v: &Value) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    mutate(v, &mut Vec::new(), v, &mut out);
    out
}

fn mutate(root: &Value, path: &mut Vec<PathStep>, node: &Value, out: &mut Vec<(String, Value)>) {
    if let Value::Object(map) = node {
        let mut added = root.clone();
        if let Value::Object(m) = at_mut(&mut added, path) {
            m.insert("zz_unknown".into(), json!(1));
        }
        out.push((format!("{} + unknown field", show(path)), added));
        for (key, child) in map {
            path.push(PathStep::Key(key.clone()));
            let mut removed = root.clone();
            if let Value::Object(m) = at_mut(&mut removed, &path[..path.len() - 1]) {
                m.remove(key);
            }
            out.push((format!("{} removed", show(path)), removed));
            replace_all(root, path, out);
            mutate(root, path, child, out);
            path.pop();
        }
    } else if let Value::Array(items) = node {
        for (i, child) in items.iter().enumerate() {
            path.push(PathStep::Index(i));
            replace_all(root, path, out);
            mutate(root, path, child, out);
            path.pop();
        }
    }
}

fn replace_all(root: &Value, path: &[PathStep], out: &mut Vec<(String, Value)>) {
    for r in replacements() {
        let mut changed = root.clone();
        *at_mut(&mut changed, path) = r.clone();
        out.push((format!("{} = {r}", show(path)), changed));
    }
}

#[derive(Clone)]
enum PathStep {
    Key(String),
    Index(usize),
}

fn at_mut<'a>(v: &'a mut Value, path: &[PathStep]) -> &'a mut Value {
    path.iter().fold(v, |v, step| match step {
        PathStep::Key(k) => &mut v[k.as_str()],
        PathStep::Index(i) => &mut v[*i],
    })
}

fn show(path: &[PathStep]) -> String {
    let mut s = String::new();
    for step in path {
        match step {
            PathStep::Key(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(k);
            }
            PathStep::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    if s.is_empty() { "(root)".into() } else { s }
}

/// For every mutation of every documented example, the schema accepts it
/// exactly when the strict parser does: the schema rejects what the parser
/// rejects, and the other way round.
#[test]
fn schema_and_parser_agree_on_every_mutation() {
    let (envelope, event, abandoned) = (
        validator("envelope.schema.json"),
        validator("worker-event.schema.json"),
        validator("run-abandoned.schema.json"),
    );
    let mut checked = 0;
    let mut rejected = 0;
    let mut disagreements = Vec::new();
    for example in examples() {
        let kind = Kind::of(&example);
        let schema = match kind {
            Kind::Envelope => &envelope,
            Kind::Event => &event,
            Kind::Abandoned => &abandoned,
        };
        for (what, mutated) in mutations(&example) {
            let by_schema = schema.is_valid(&mutated);
            let by_parser = kind.parses(&mutated);
            checked += 1;
            rejected += usize::from(!by_schema);
            if by_schema != by_parser.is_ok() {
                disagreements.push(format!(
                    "{kind:?} {what}: schema {}, parser {}",
                    if by_schema { "accepts" } else { "rejects" },
                    match &by_parser {
                        Ok(()) => "accepts".to_string(),
                        Err(e) => format!("rejects ({e})"),
                    }
                ));
            }
        }
    }
    assert!(
        disagreements.is_empty(),
        "{} disagreements:\n{}",
        disagreements.len(),
        disagreements.join("\n")
    );
    // The corpus must exercise both sides, or agreement proves nothing.
    assert!(
        checked > 1000 && rejected > 300 && checked - rejected > 300,
        "{checked} checked, {rejected} rejected"
    );
    eprintln!("{checked} mutations checked, {rejected} rejected by both");
}
