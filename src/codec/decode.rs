//! Decoding one message: the size limit first, then the value with the
//! path of any field that fails, unknown fields (strict), the value's own
//! rules.

use serde::de::DeserializeOwned;

use super::{DecodeError, MAX_DEPTH, Strictness, object};

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
pub(super) fn decode_sharing<T>(
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
    use super::super::check_depth;
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
