//! Decoding JSON messages with typed errors that name the offending field.
//!
//! Every boundary of the system decodes through [`decode`]: user input with
//! [`Strictness::Strict`] (an unknown field is an error), messages from peers on
//! the bus with [`Strictness::Tolerant`] (unknown fields from newer peers are
//! ignored). Both refuse a message over the size limit before parsing it.

use serde::de::DeserializeOwned;

mod parts;

pub use parts::{Parts, fields_of};

/// The default size limit for one message: 1 MiB.
pub const DEFAULT_MAX_BYTES: usize = 1024 * 1024;

/// How deeply a JSON value from outside may nest (task params, a run's
/// input, a gate's answer, a worker's result and artifacts): an object or
/// array is one level, and what it holds one more. Well inside every
/// decoder on the path: serde_json stops at 128 levels, and a stored
/// envelope or run record wraps the value in a few levels of its own, so
/// a value accepted here can always be read back.
pub const MAX_DEPTH: usize = 64;

/// How a decoder treats fields it does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strictness {
    /// Unknown fields are an error (input from users and clients).
    Strict,
    /// Unknown fields are ignored (messages from possibly newer peers).
    Tolerant,
}

/// Why a message could not be decoded. Each variant that concerns one field
/// names it as a dotted path (`control.idempotency_key`, `history[2].at`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The message is larger than the configured limit; it was not parsed.
    #[error("message is {size} bytes, over the limit of {limit} bytes")]
    TooLarge {
        /// Size of the refused message in bytes.
        size: usize,
        /// The limit in force.
        limit: usize,
    },
    /// The bytes are not well-formed JSON (or are truncated).
    #[error("malformed JSON at line {line}, column {column}: {message}")]
    Syntax {
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error.
        column: usize,
        /// What the JSON parser expected.
        message: String,
    },
    /// A field the schema does not define (strict decoding only).
    #[error("unknown field `{field}`")]
    UnknownField {
        /// Path of the unknown field.
        field: String,
    },
    /// A required field is absent.
    #[error("missing field `{field}`")]
    MissingField {
        /// Path of the missing field.
        field: String,
    },
    /// A field is present but its value is not acceptable.
    #[error("field `{field}`: {message}")]
    InvalidField {
        /// Path of the field.
        field: String,
        /// What was expected.
        message: String,
    },
    /// A value nests deeper than [`MAX_DEPTH`] levels.
    #[error("field `{field}` nests deeper than {limit} levels of objects and arrays, the limit")]
    TooDeep {
        /// Path of the field whose value is too deep.
        field: String,
        /// The limit in force.
        limit: usize,
    },
}

impl DecodeError {
    /// A stable machine-readable code, used in API error bodies.
    pub fn code(&self) -> &'static str {
        match self {
            DecodeError::TooLarge { .. } => "payload_too_large",
            DecodeError::Syntax { .. } => "malformed_json",
            DecodeError::UnknownField { .. } => "unknown_field",
            DecodeError::MissingField { .. } => "missing_field",
            DecodeError::InvalidField { .. } => "invalid_field",
            DecodeError::TooDeep { .. } => "too_deep",
        }
    }

    /// The path of the field concerned, when one field is to blame.
    pub fn field(&self) -> Option<&str> {
        match self {
            DecodeError::UnknownField { field }
            | DecodeError::MissingField { field }
            | DecodeError::InvalidField { field, .. }
            | DecodeError::TooDeep { field, .. } => Some(field),
            DecodeError::TooLarge { .. } | DecodeError::Syntax { .. } => None,
        }
    }

    /// This error with every secret value scrubbed from its message.
    pub fn scrubbed(self, secrets: &crate::redact::Secrets) -> Self {
        match self {
            DecodeError::InvalidField { field, message } => DecodeError::InvalidField {
                field,
                message: secrets.scrub(&message),
            },
            other => other,
        }
    }

    /// An error about one field, for checks made after deserialization.
    pub fn invalid(field: impl Into<String>, message: impl std::fmt::Display) -> Self {
        DecodeError::InvalidField {
            field: field.into(),
            message: message.to_string(),
        }
    }
}

/// Refuses `values` (the value of `field`, or the members of the object
/// or array that is `field`'s value, one level down) when they nest
/// deeper than [`MAX_DEPTH`]. Walks without recursion, so no value can
/// exhaust the stack here.
pub fn check_depth<'a>(
    field: &str,
    values: impl IntoIterator<Item = &'a serde_json::Value>,
    level: usize,
) -> Result<(), DecodeError> {
    use serde_json::Value;
    let mut stack: Vec<(&Value, usize)> = values.into_iter().map(|v| (v, level)).collect();
    while let Some((value, above)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match value {
            Value::Object(map) => Box::new(map.values()),
            Value::Array(items) => Box::new(items.iter()),
            _ => continue,
        };
        let here = above + 1;
        if here > MAX_DEPTH {
            return Err(DecodeError::TooDeep {
                field: field.to_string(),
                limit: MAX_DEPTH,
            });
        }
        stack.extend(children.map(|v| (v, here)));
    }
    Ok(())
}

/// Checks `instance` against a compiled JSON Schema. The first error names
/// its field under `root` (`params.query`) and says whose schema it is.
pub fn check_schema(
    validator: &jsonschema::Validator,
    instance: &serde_json::Value,
    root: &str,
    whose: &str,
) -> Result<(), DecodeError> {
    let Some(error) = validator.iter_errors(instance).next() else {
        return Ok(());
    };
    let pointer = error.instance_path().to_string();
    let field = format!("{root}{}", pointer.replace('/', "."));
    Err(DecodeError::invalid(field, format!("{error} ({whose})")))
}

/// Deserializes a struct from a JSON object only.
///
/// serde's derived structs also accept a JSON array, filling the fields by
/// position (`["search:kb"]` as a payload); the published schemas do not, so
/// neither does this reader. Use as `#[serde(deserialize_with = "object")]`
/// on struct-valued fields; [`decode`] applies it to the message itself.
pub fn object<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    deserializer.deserialize_map(ObjectVisitor(std::marker::PhantomData))
}

/// [`object`] for each item of an array field.
pub fn objects<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    struct Item<T>(T);
    impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for Item<T> {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            object(d).map(Item)
        }
    }
    let items = <Vec<Item<T>> as serde::Deserialize>::deserialize(deserializer)?;
    Ok(items.into_iter().map(|i| i.0).collect())
}

/// [`object`] for an optional field: `null` or absent is `None`.
pub fn optional_object<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    deserializer.deserialize_option(OptionalObjectVisitor(std::marker::PhantomData))
}

struct ObjectVisitor<T>(std::marker::PhantomData<T>);

impl<'de, T: serde::Deserialize<'de>> serde::de::Visitor<'de> for ObjectVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
    }
}

struct OptionalObjectVisitor<T>(std::marker::PhantomData<T>);

impl<'de, T: serde::Deserialize<'de>> serde::de::Visitor<'de> for OptionalObjectVisitor<T> {
    type Value = Option<T>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object or null")
    }

    fn visit_none<E>(self) -> Result<Option<T>, E> {
        Ok(None)
    }

    fn visit_unit<E>(self) -> Result<Option<T>, E> {
        Ok(None)
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Option<T>, D::Error> {
        object(d).map(Some)
    }
}

/// Cross-field rules that a type checks once all its fields are decoded.
pub trait Validate {
    /// Returns the first rule broken, naming the field to blame.
    fn validate(&self) -> Result<(), DecodeError>;
}

/// Decodes one JSON message of type `T`, refusing it unparsed when it is
/// larger than `max_bytes`, then checks its cross-field rules.
pub fn decode<T>(bytes: &[u8], strictness: Strictness, max_bytes: usize) -> Result<T, DecodeError>
where
    T: DeserializeOwned + Validate,
{
    decode_sharing(bytes, strictness, max_bytes, &[])
}

/// [`decode`] for one part of an object shared by several types (the
/// settings file: the service's part and the faces'): a top-level member
/// named in `others` (the other parts' fields) is theirs, not unknown.
fn decode_sharing<T>(
    bytes: &[u8],
    strictness: Strictness,
    max_bytes: usize,
    others: &[&str],
) -> Result<T, DecodeError>
where
    T: DeserializeOwned + Validate,
{
    if bytes.len() > max_bytes {
        return Err(DecodeError::TooLarge {
            size: bytes.len(),
            limit: max_bytes,
        });
    }
    let mut unknown: Option<String> = None;
    let mut json = serde_json::Deserializer::from_slice(bytes);
    let value: T = {
        let mut note_unknown = |path: serde_ignored::Path<'_>| {
            let theirs = matches!(&path, serde_ignored::Path::Map { parent: serde_ignored::Path::Root, key } if others.contains(&key.as_str()));
            if unknown.is_none() && !theirs {
                // A member named "" is named so, not left blank.
                let path = path.to_string();
                unknown = Some(if path.is_empty() { "\"\"".into() } else { path });
            }
        };
        let tracked = serde_ignored::Deserializer::new(&mut json, &mut note_unknown);
        let mut track = serde_path_to_error::Track::new();
        let with_path = serde_path_to_error::Deserializer::new(tracked, &mut track);
        match object(with_path) {
            Ok(value) => value,
            Err(e) => return Err(from_path_error(track.path(), e, bytes)),
        }
    };
    json.end().map_err(syntax)?;
    if strictness == Strictness::Strict
        && let Some(field) = unknown
    {
        return Err(DecodeError::UnknownField { field });
    }
    value.validate()?;
    Ok(value)
}

/// How deep the arrays and objects of a JSON text nest (strings skipped).
fn nesting(bytes: &[u8]) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &b in bytes {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

fn from_path_error(
    path: serde_path_to_error::Path,
    inner: serde_json::Error,
    bytes: &[u8],
) -> DecodeError {
    let path = path.to_string();
    // serde_json's own limit (128 levels) is far past [`MAX_DEPTH`]: a
    // document that fails to decode and nests deeper than that is refused
    // as too deep, naming the outermost field on the way down (counted
    // here, since serde_json gives that failure no kind of its own).
    if nesting(bytes) > MAX_DEPTH {
        let outermost = path.split(['.', '[']).next().unwrap_or_default();
        return DecodeError::TooDeep {
            field: outermost.to_string(),
            limit: MAX_DEPTH,
        };
    }
    if inner.is_syntax() || inner.is_eof() || inner.is_io() {
        // serde_json says "expected value" (a syntax error) also when a
        // type's own reader refuses a well-formed value (a `null` where a
        // string must be): that is the field's fault, not the JSON's.
        let well_formed = serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok();
        if !well_formed || path.is_empty() || path == "." {
            return syntax(inner);
        }
        return DecodeError::InvalidField {
            field: path,
            message: "not a value this field takes".into(),
        };
    }
    let message = strip_position(&inner.to_string());
    if let Some(name) = message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.strip_suffix('`'))
    {
        return DecodeError::MissingField {
            field: join(&path, name),
        };
    }
    DecodeError::InvalidField {
        field: if path == "." { String::new() } else { path },
        message,
    }
}

fn syntax(err: serde_json::Error) -> DecodeError {
    DecodeError::Syntax {
        line: err.line(),
        column: err.column(),
        message: strip_position(&err.to_string()),
    }
}

/// serde_json appends " at line L column C" to its messages; the position is
/// reported in its own fields, so it is removed from the text.
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_string(),
        None => message.to_string(),
    }
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() || path == "." {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    struct Outer {
        #[serde(deserialize_with = "object")]
        inner: Inner,
        #[serde(default)]
        #[allow(dead_code)] // read only to exercise paths into lists
        list: Vec<Inner>,
    }
    #[derive(Debug, Deserialize)]
    struct Inner {
        n: u8,
    }
    impl Validate for Outer {
        fn validate(&self) -> Result<(), DecodeError> {
            if self.inner.n == 7 {
                return Err(DecodeError::invalid("inner.n", "7 is not allowed"));
            }
            Ok(())
        }
    }

    fn strict(s: &str) -> Result<Outer, DecodeError> {
        decode(s.as_bytes(), Strictness::Strict, 100)
    }

    #[test]
    fn names_the_missing_field_with_its_path() {
        let err = strict(r#"{"inner":{}}"#).unwrap_err();
        assert_eq!(
            err,
            DecodeError::MissingField {
                field: "inner.n".into()
            }
        );
        let err = strict(r#"{}"#).unwrap_err();
        assert_eq!(
            err,
            DecodeError::MissingField {
                field: "inner".into()
            }
        );
    }

    #[test]
    fn names_the_invalid_field_inside_a_list() {
        let err = strict(r#"{"inner":{"n":1},"list":[{"n":1},{"n":"x"}]}"#).unwrap_err();
        assert_eq!(err.field(), Some("list[1].n"));
        assert_eq!(err.code(), "invalid_field");
    }

    #[test]
    fn unknown_fields_are_refused_when_strict_and_ignored_when_tolerant() {
        let text = r#"{"inner":{"n":1,"extra":true}}"#;
        let err = strict(text).unwrap_err();
        assert_eq!(
            err,
            DecodeError::UnknownField {
                field: "inner.extra".into()
            }
        );
        let ok: Outer = decode(text.as_bytes(), Strictness::Tolerant, 100).unwrap();
        assert_eq!(ok.inner.n, 1);
    }

    #[test]
    fn oversized_input_is_refused_before_parsing() {
        // Not JSON at all: a parse would fail with a syntax error instead.
        let err = decode::<Outer>(&[b'x'; 101], Strictness::Strict, 100).unwrap_err();
        assert_eq!(
            err,
            DecodeError::TooLarge {
                size: 101,
                limit: 100
            }
        );
    }

    #[test]
    fn malformed_and_truncated_json_report_the_position() {
        let err = strict("{\n \"inner\": {\"n\": 1").unwrap_err();
        assert!(
            matches!(err, DecodeError::Syntax { line: 2, .. }),
            "{err:?}"
        );
        let err = strict(r#"{"inner":{"n":1}} trailing"#).unwrap_err();
        assert!(
            matches!(err, DecodeError::Syntax { line: 1, .. }),
            "{err:?}"
        );
    }

    #[test]
    fn structs_are_read_from_objects_only() {
        let err = strict(r#"{"inner":[1]}"#).unwrap_err();
        assert_eq!(err.field(), Some("inner"));
        let err = strict(r#"[{"n":1}]"#).unwrap_err();
        assert_eq!(err.code(), "invalid_field");
    }

    /// `{"a":{"a":…{}}}` with `levels` objects.
    fn nested(levels: usize) -> serde_json::Value {
        let mut value = serde_json::json!({});
        for _ in 1..levels {
            value = serde_json::json!({ "a": value });
        }
        value
    }

    #[test]
    fn values_nest_at_most_max_depth_levels() {
        let at_limit = nested(MAX_DEPTH);
        assert_eq!(check_depth("input", [&at_limit], 0), Ok(()));
        let over = nested(MAX_DEPTH + 1);
        assert_eq!(
            check_depth("input", [&over], 0),
            Err(DecodeError::TooDeep {
                field: "input".into(),
                limit: MAX_DEPTH
            })
        );
        // Members of an object that is itself one level.
        let members = serde_json::Map::from_iter([("q".to_string(), nested(MAX_DEPTH - 1))]);
        assert_eq!(check_depth("params", members.values(), 1), Ok(()));
        let members = serde_json::Map::from_iter([("q".to_string(), nested(MAX_DEPTH))]);
        assert_eq!(
            check_depth("params", members.values(), 1)
                .unwrap_err()
                .code(),
            "too_deep"
        );
        let scalars = serde_json::json!([1, "two", null, [3]]);
        assert_eq!(check_depth("x", [&scalars], 0), Ok(()));
    }

    #[test]
    fn past_serde_jsons_own_limit_is_the_same_refusal() {
        #[derive(Debug, Deserialize)]
        struct Holder {
            #[allow(dead_code)] // read only to be decoded
            params: serde_json::Value,
        }
        impl Validate for Holder {
            fn validate(&self) -> Result<(), DecodeError> {
                Ok(())
            }
        }
        let text = format!(r#"{{"params": {}}}"#, nested(200));
        let err = decode::<Holder>(text.as_bytes(), Strictness::Strict, 1 << 20).unwrap_err();
        assert_eq!(
            err,
            DecodeError::TooDeep {
                field: "params".into(),
                limit: MAX_DEPTH
            }
        );
    }

    #[test]
    fn nesting_counts_arrays_and_objects_but_not_brackets_in_strings() {
        assert_eq!(nesting(br#"{"a": [1, {"b": []}]}"#), 4);
        assert_eq!(nesting(br#"{"a": "[[[{{{", "b": "\"[["}"#), 1);
        assert_eq!(nesting(b"12"), 0);
    }

    #[test]
    fn cross_field_rules_run_after_decoding() {
        let err = strict(r#"{"inner":{"n":7}}"#).unwrap_err();
        assert_eq!(err.field(), Some("inner.n"));
    }
}
