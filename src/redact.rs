//! Keeping secrets out of what is written down: the values of sensitive
//! params (by field name, at any depth) are replaced with `[redacted]` in
//! error messages before they are reported, logged or audited.
//!
//! Task tokens never need this: they are not stored, their `Debug` form is
//! redacted, and handlers never see them.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// What replaces a secret.
pub const REDACTED: &str = "[redacted]";

/// Param field names whose values are secrets (compared without case).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SensitiveFields(pub Vec<String>);

impl Default for SensitiveFields {
    fn default() -> Self {
        SensitiveFields(
            [
                "password",
                "passwd",
                "secret",
                "token",
                "api_key",
                "apikey",
                "authorization",
                "private_key",
                "client_secret",
            ]
            .map(String::from)
            .to_vec(),
        )
    }
}

impl SensitiveFields {
    /// Whether a field of this name holds a secret.
    pub fn is_sensitive(&self, name: &str) -> bool {
        self.0.iter().any(|f| f.eq_ignore_ascii_case(name))
    }

    /// The secret values in `params`: every scalar under a sensitive field,
    /// at any depth (a sensitive object's or array's leaves included).
    pub fn secrets(&self, params: &Map<String, Value>) -> Secrets {
        let mut found = Vec::new();
        for (name, value) in params {
            collect(self, value, self.is_sensitive(name), &mut found);
        }
        Secrets::of(found)
    }

    /// `value` with the value of every sensitive field, at any depth,
    /// replaced by [`REDACTED`]: for showing a task's params.
    pub fn redacted(&self, value: &Value) -> Value {
        match value {
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| {
                        let v = if self.is_sensitive(k) {
                            Value::String(REDACTED.into())
                        } else {
                            self.redacted(v)
                        };
                        (k.clone(), v)
                    })
                    .collect(),
            ),
            Value::Array(items) => Value::Array(items.iter().map(|v| self.redacted(v)).collect()),
            other => other.clone(),
        }
    }

    /// The secret values anywhere in `value` (a run's input, which need
    /// not be an object).
    pub fn secrets_in(&self, value: &Value) -> Secrets {
        let mut found = Vec::new();
        collect(self, value, false, &mut found);
        Secrets::of(found)
    }
}

/// A credential shorter than this is not scrubbed: it would replace
/// ordinary words, and no real key is that short.
const MIN_CREDENTIAL: usize = 8;

impl Secrets {
    /// Credentials the process holds (an API key, a password): each
    /// value of at least 8 characters; shorter and empty ones are left out.
    pub fn credentials(values: impl IntoIterator<Item = String>) -> Secrets {
        Secrets::of(
            values
                .into_iter()
                .filter(|v| v.chars().count() >= MIN_CREDENTIAL)
                .collect(),
        )
    }

    /// The values of the process's environment variables `names` (unset
    /// ones left out), as [`Secrets::credentials`].
    pub fn of_env<'a>(names: impl IntoIterator<Item = &'a str>) -> Secrets {
        Secrets::credentials(names.into_iter().filter_map(|n| std::env::var(n).ok()))
    }

    /// These secrets and `other`'s.
    pub fn and(&self, other: &Secrets) -> Secrets {
        if other.is_empty() {
            return self.clone();
        }
        Secrets::of(self.0.iter().chain(&other.0).cloned().collect())
    }

    fn of(mut found: Vec<String>) -> Secrets {
        // Longest first, so a secret containing another is replaced whole.
        found.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        found.dedup();
        Secrets(found)
    }
}

fn collect(fields: &SensitiveFields, value: &Value, secret: bool, found: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (name, v) in map {
                collect(fields, v, secret || fields.is_sensitive(name), found);
            }
        }
        Value::Array(items) => {
            for v in items {
                collect(fields, v, secret, found);
            }
        }
        Value::String(s) if secret && !s.is_empty() => found.push(s.clone()),
        Value::Number(n) if secret => found.push(n.to_string()),
        _ => {}
    }
}

/// A secret setting (a password, a token): read from configuration, never
/// shown by `Debug`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The secret itself, to hand to what needs it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(REDACTED)
    }
}

/// The secret values of one task.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Secrets(Vec<String>);

impl Secrets {
    /// `text` with every secret value replaced by [`REDACTED`].
    pub fn scrub(&self, text: &str) -> String {
        let mut out = text.to_string();
        for secret in &self.0 {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), REDACTED);
            }
        }
        out
    }

    /// Whether there is nothing to hide.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn sensitive_values_at_any_depth_are_scrubbed() {
        let fields = SensitiveFields::default();
        let params = json!({
            "user": "alice",
            "Password": "hunter2",
            "db": {"url": "pg://x", "api_key": "k-123", "nested": {"secret": ["s1", 42]}},
            "token": {"value": "tok-999"}
        });
        let secrets = fields.secrets(params.as_object().unwrap());
        let text = "login alice/hunter2 failed with k-123, s1, 42 and tok-999 at pg://x";
        assert_eq!(
            secrets.scrub(text),
            "login alice/[redacted] failed with [redacted], [redacted], [redacted] and [redacted] at pg://x"
        );
        assert!(
            fields
                .secrets(json!({"q": "x"}).as_object().unwrap())
                .is_empty()
        );
    }

    #[test]
    fn credentials_are_scrubbed_whole_and_short_values_are_left_alone() {
        let key = "sk-test-0123456789abcdef";
        let secrets = Secrets::credentials([key.to_string(), "short".to_string(), String::new()])
            .and(&Secrets::credentials(["sk-test-0123".to_string()]));
        assert_eq!(
            secrets.scrub(&format!(
                "401: Incorrect API key provided: {key} (Bearer {key}); short"
            )),
            "401: Incorrect API key provided: [redacted] (Bearer [redacted]); short"
        );
        assert!(Secrets::credentials(["abc".to_string()]).is_empty());
    }
}
