//! The canonical JSON form a task token is bound to: RFC 8785 (JSON
//! Canonicalization Scheme). A worker in any language recomputes it from
//! the envelope it received (Python: the `rfc8785` package) and compares
//! its hash with the token's `env_sha256` claim.
//!
//! The form: no whitespace; object members sorted by their names' UTF-16
//! code units; strings with only `"`, `\` and control characters escaped
//! (`\b \t \n \f \r`, the rest as `\u00xx`); numbers as ECMAScript prints a
//! double (`1`, `1.5`, `1e+21`, `1e-7`). Integers beyond ±(2^53 − 1) have no
//! exact double and are refused, as I-JSON (RFC 7493) advises.

use base64::Engine;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::envelope::Envelope;

/// The largest integer every JSON implementation reads exactly.
const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// A value with no canonical form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct CanonicalError {
    /// Where in the value (`params.count`).
    pub path: String,
    /// What is wrong.
    pub message: String,
}

/// The hash a token binds: SHA-256 of the canonical form of
/// `{"control": …, "payload": …}`, base64url without padding. The minter's
/// side: from the envelope it is about to publish.
pub fn envelope_hash(envelope: &Envelope) -> Result<String, CanonicalError> {
    hash_bound(serde_json::json!({
        "control": envelope.control,
        "payload": envelope.payload,
    }))
}

/// The same hash, the verifier's side: from the message as received, so a
/// field this build does not know still counts (and a reader that drops or
/// adds a field cannot make a changed envelope pass).
pub fn wire_hash(message: &[u8]) -> Result<String, CanonicalError> {
    let mut value: Value = serde_json::from_slice(message).map_err(|e| CanonicalError {
        path: "envelope".into(),
        message: format!("not JSON: {e}"),
    })?;
    let mut part = |name: &str| value.get_mut(name).map(Value::take).unwrap_or(Value::Null);
    let (control, payload) = (part("control"), part("payload"));
    hash_bound(serde_json::json!({"control": control, "payload": payload}))
}

fn hash_bound(bound: Value) -> Result<String, CanonicalError> {
    let canonical = canonical(&bound)?;
    let digest = Sha256::digest(canonical.as_bytes());
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest))
}

/// The canonical (RFC 8785) text of `value`.
pub fn canonical(value: &Value) -> Result<String, CanonicalError> {
    let mut out = String::new();
    write_value(&mut out, value, &mut String::new())?;
    Ok(out)
}

fn write_value(out: &mut String, value: &Value, path: &mut String) -> Result<(), CanonicalError> {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(out, n, path)?,
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                write_value(out, item, path)?;
                path.truncate(len);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            out.push('{');
            for (i, (name, member)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, name);
                out.push(':');
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(name);
                write_value(out, member, path)?;
                path.truncate(len);
            }
            out.push('}');
        }
    }
    Ok(())
}

fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{c}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Whether `value` has a canonical form, without building it: the check a
/// submission gets before anything is stored (only numbers can lack one).
pub fn check(value: &Value, path: &mut String) -> Result<(), CanonicalError> {
    match value {
        Value::Number(n) => exact(n, path).map(|_| ()),
        Value::Array(items) => items.iter().enumerate().try_for_each(|(i, item)| {
            let len = path.len();
            path.push_str(&format!("[{i}]"));
            check(item, path)?;
            path.truncate(len);
            Ok(())
        }),
        Value::Object(map) => map.iter().try_for_each(|(name, member)| {
            let len = path.len();
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(name);
            check(member, path)?;
            path.truncate(len);
            Ok(())
        }),
        _ => Ok(()),
    }
}

/// An integer's exact value, or `None` for a non-integer; an error for an
/// integer beyond ±(2^53 − 1).
fn exact(n: &serde_json::Number, path: &str) -> Result<Option<i128>, CanonicalError> {
    let Some(i) = n
        .as_i64()
        .map(i128::from)
        .or_else(|| n.as_u64().map(i128::from))
    else {
        return Ok(None);
    };
    if i.unsigned_abs() > u128::from(MAX_SAFE_INTEGER) {
        return Err(CanonicalError {
            path: if path.is_empty() {
                "value".into()
            } else {
                path.into()
            },
            // Never the value itself: it may be a secret, and the path
            // names it well enough.
            message: format!(
                "an integer beyond ±{MAX_SAFE_INTEGER} has no exact JSON number (RFC 8785); send it as a string"
            ),
        });
    }
    Ok(Some(i))
}

fn write_number(
    out: &mut String,
    n: &serde_json::Number,
    path: &str,
) -> Result<(), CanonicalError> {
    match exact(n, path)? {
        Some(i) => out.push_str(&i.to_string()),
        None => write_double(out, n.as_f64().unwrap_or_default()),
    }
    Ok(())
}

/// A finite double as ECMAScript's `Number.prototype.toString` prints it
/// (ECMA-262, Number::toString), from the shortest digits that read back
/// as the same double.
fn write_double(out: &mut String, f: f64) {
    if f == 0.0 {
        out.push('0');
        return;
    }
    if f < 0.0 {
        out.push('-');
    }
    let mut buffer = ryu::Buffer::new();
    let shortest = buffer.format_finite(f.abs());
    let (mantissa, exponent) = match shortest.split_once('e') {
        Some((m, e)) => (m, e.parse::<i32>().unwrap_or(0)),
        None => (shortest, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    // value = 0.digits × 10^point
    let mut digits: String = format!("{whole}{fraction}");
    let mut point = whole.len() as i32 + exponent;
    let leading = digits.len() - digits.trim_start_matches('0').len();
    digits.drain(..leading);
    point -= leading as i32;
    let trailing = digits.len() - digits.trim_end_matches('0').len();
    digits.truncate(digits.len() - trailing);
    let k = digits.len() as i32;
    let n = point;
    if k <= n && n <= 21 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', (n - k) as usize));
    } else if 0 < n && n <= 21 {
        out.push_str(&digits[..n as usize]);
        out.push('.');
        out.push_str(&digits[n as usize..]);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-n) as usize));
        out.push_str(&digits);
    } else {
        out.push_str(&digits[..1]);
        if k > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if n > 0 { '+' } else { '-' });
        out.push_str(&(n - 1).abs().to_string());
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn number(f: f64) -> String {
        let mut out = String::new();
        write_double(&mut out, f);
        out
    }

    /// The number examples of RFC 8785 (appendix B) and ECMAScript's rules.
    #[test]
    fn doubles_print_as_ecmascript_prints_them() {
        let cases = [
            (0.0, "0"),
            (-0.0, "0"),
            (1.0, "1"),
            (-1.5, "-1.5"),
            (0.1, "0.1"),
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (123456789012345680000.0, "123456789012345680000"),
            (1e-6, "0.000001"),
            (1e-7, "1e-7"),
            (4.5e-7, "4.5e-7"),
            (5e-324, "5e-324"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (9007199254740992.0, "9007199254740992"),
            (295147905179352830000.0, "295147905179352830000"),
            (0.000001234, "0.000001234"),
            (333333333.3333333, "333333333.3333333"),
        ];
        for (f, want) in cases {
            assert_eq!(number(f), want, "{f:e}");
        }
    }

    /// RFC 8785's own example (section 3.2.2), member order and escapes.
    #[test]
    fn objects_sort_by_utf16_and_strings_escape_only_what_they_must() {
        let value = json!({
            "numbers": [333333333.3333333, 1e30, 4.50, 2e-3, 0.000000000000000000000000001],
            "string": "\u{20ac}$\u{000F}\u{000a}A'\u{0042}\u{0022}\u{005c}\\\"/",
            "literals": [null, true, false]
        });
        assert_eq!(
            canonical(&value).unwrap(),
            r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#
        );
        // U+E000 sorts before U+1F600 in UTF-8 and code points, after it in UTF-16.
        let order = json!({"\u{1F600}": 1, "\u{E000}": 2, "a": 3});
        assert_eq!(
            canonical(&order).unwrap(),
            "{\"a\":3,\"\u{1F600}\":1,\"\u{E000}\":2}"
        );
    }

    #[test]
    fn integers_beyond_2_pow_53_are_refused_with_their_path() {
        assert_eq!(
            canonical(&json!({"a": [9007199254740991i64]})).unwrap(),
            r#"{"a":[9007199254740991]}"#
        );
        let err = canonical(&json!({"params": {"ids": [1, 9007199254740993u64]}})).unwrap_err();
        assert_eq!(err.path, "params.ids[1]");
        let err = canonical(&json!({"n": -9007199254740993i64})).unwrap_err();
        assert_eq!(err.path, "n");
        // The check without the text finds the same, by the same path.
        let params = json!({"ids": [1, 9007199254740993u64]});
        let err = check(&params, &mut String::new()).unwrap_err();
        assert_eq!(err.path, "ids[1]");
        assert!(check(&json!({"a": [1.5, -3, {"b": 2}]}), &mut String::new()).is_ok());
    }
}
