//! Identifiers and small validated values carried by envelopes.
//!
//! Each is a newtype that can only hold a valid value: it is checked when it
//! is parsed (`FromStr`) and when it is deserialized, with the same rule the
//! JSON Schema in `docs/schema/` states.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use uuid::Uuid;

use super::ParseError;

/// A task id: a UUIDv7 (time-ordered, so ids sort by creation time), written
/// in its canonical lowercase hyphenated form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TaskId(Uuid);

impl TaskId {
    /// A fresh id for a task created now.
    pub fn new() -> Self {
        TaskId(Uuid::now_v7())
    }

    /// The 16 bytes of the id, big-endian, so byte order is time order.
    pub fn as_bytes(&self) -> &[u8; 16] {
        self.0.as_bytes()
    }

    /// Rebuilds an id from the 16 bytes [`TaskId::as_bytes`] returned.
    pub fn from_bytes(bytes: [u8; 16]) -> Self {
        TaskId(Uuid::from_bytes(bytes))
    }

    /// Whether `text` is this id as written (lowercase hyphenated): the
    /// default a task gets for a label the caller left out, such as its
    /// correlation id or idempotency key. Compared without allocating.
    pub fn is_written_as(&self, text: &str) -> bool {
        let mut buf = [0u8; uuid::fmt::Hyphenated::LENGTH];
        text == self.0.hyphenated().encode_lower(&mut buf)
    }
}

impl Default for TaskId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0.hyphenated(), f)
    }
}

impl FromStr for TaskId {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let uuid = Uuid::try_parse(s).map_err(|_| ParseError::NotUuid(s.into()))?;
        if uuid.hyphenated().to_string() != s {
            return Err(ParseError::NotCanonical(s.into()));
        }
        if uuid.get_version_num() != 7 || uuid.get_variant() != uuid::Variant::RFC4122 {
            return Err(ParseError::NotV7(s.into()));
        }
        Ok(TaskId(uuid))
    }
}

impl TryFrom<String> for TaskId {
    type Error = ParseError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<TaskId> for String {
    fn from(id: TaskId) -> String {
        id.to_string()
    }
}

/// Declares a string newtype whose values are checked by `$check`.
macro_rules! checked_string {
    ($(#[$doc:meta])* $name:ident, $check:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// The value as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl FromStr for $name {
            type Err = ParseError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                let check: fn(&str) -> Result<(), ParseError> = $check;
                check(s)?;
                Ok($name(s.to_string()))
            }
        }

        impl TryFrom<String> for $name {
            type Error = ParseError;
            fn try_from(s: String) -> Result<Self, Self::Error> {
                let check: fn(&str) -> Result<(), ParseError> = $check;
                check(&s)?;
                Ok($name(s))
            }
        }

        impl From<$name> for String {
            fn from(v: $name) -> String {
                v.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
    };
}

/// Checks free text used as a key or label: 1 to `max` characters, none of
/// them a control character (so it can be a store key with a NUL separator).
pub(crate) fn check_label(s: &str, max: usize) -> Result<(), ParseError> {
    let len = s.chars().count();
    if len == 0 {
        return Err(ParseError::Empty);
    }
    if len > max {
        return Err(ParseError::TooLong { len, max });
    }
    if s.chars().any(|c| c.is_control()) {
        return Err(ParseError::ControlCharacter);
    }
    Ok(())
}

checked_string!(
    /// The id shared by every task of one user request or run
    /// (A2A's `contextId`): 1–256 characters, no control characters.
    CorrelationId,
    |s| check_label(s, 256)
);

checked_string!(
    /// The key that makes a retried request the same request:
    /// 1–256 characters, no control characters.
    IdempotencyKey,
    |s| check_label(s, 256)
);

checked_string!(
    /// An action: the id of one skill of the target agent (`search:kb`):
    /// 1–128 characters, no control characters.
    Action,
    |s| check_label(s, 128)
);

checked_string!(
    /// Who sent an envelope (`orchestrator`, an agent, a principal):
    /// 1–256 characters, no control characters.
    Sender,
    |s| check_label(s, 256)
);

checked_string!(
    /// An agent id. It becomes a NATS subject token, so it is 1–64 characters
    /// of `a-z`, `0-9`, `_` and `-`.
    AgentName,
    |s| {
        if s.is_empty() || s.len() > 64 {
            return Err(ParseError::Length { max: 64 });
        }
        if !s
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
        {
            return Err(ParseError::Characters {
                value: s.into(),
                allowed: "a-z, 0-9, `_` and `-`",
            });
        }
        Ok(())
    }
);

checked_string!(
    /// A permission scope (`Files.Read`): 1–128 printable ASCII characters,
    /// no spaces.
    Scope,
    |s| {
        if s.is_empty() || s.len() > 128 {
            return Err(ParseError::Length { max: 128 });
        }
        if !s.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ParseError::Characters {
                value: s.into(),
                allowed: "printable ASCII without spaces",
            });
        }
        Ok(())
    }
);

impl Sender {
    /// The orchestrator as sender.
    pub fn orchestrator() -> Sender {
        Sender("orchestrator".to_string())
    }
}

impl From<TaskId> for CorrelationId {
    /// A task's id as the correlation id of a request made of that one task.
    fn from(id: TaskId) -> Self {
        CorrelationId(id.to_string())
    }
}

impl From<TaskId> for IdempotencyKey {
    /// A task's id as its idempotency key, when the caller gave none.
    fn from(id: TaskId) -> Self {
        IdempotencyKey(id.to_string())
    }
}

/// A point in time, written as RFC 3339 (`2026-11-22T10:00:00Z`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Timestamp(OffsetDateTime);

impl Timestamp {
    /// The current time, in UTC.
    pub fn now() -> Self {
        Timestamp(OffsetDateTime::now_utc())
    }

    /// The time as a `time` value.
    pub fn as_offset_date_time(&self) -> OffsetDateTime {
        self.0
    }

    /// Nanoseconds since the Unix epoch.
    pub fn unix_nanos(&self) -> i128 {
        self.0.unix_timestamp_nanos()
    }

    /// Seconds since the Unix epoch.
    pub fn unix_seconds(&self) -> i64 {
        self.0.unix_timestamp()
    }

    /// This time moved forward by `d`.
    pub fn after(&self, d: std::time::Duration) -> Self {
        Timestamp(self.0 + d)
    }

    /// This time moved back by `d`.
    pub fn before(&self, d: std::time::Duration) -> Self {
        Timestamp(self.0 - d)
    }

    /// How long from now until this time; zero once it has passed.
    pub fn remaining(&self) -> std::time::Duration {
        (self.0 - OffsetDateTime::now_utc())
            .try_into()
            .unwrap_or_default()
    }
}

impl From<OffsetDateTime> for Timestamp {
    fn from(t: OffsetDateTime) -> Self {
        Timestamp(t)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let utc = self.0.to_offset(time::UtcOffset::UTC);
        match utc.format(&Rfc3339) {
            Ok(s) => f.write_str(&s),
            Err(_) => Err(fmt::Error),
        }
    }
}

impl FromStr for Timestamp {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        OffsetDateTime::parse(s, &Rfc3339)
            .map(Timestamp)
            .map_err(|e| ParseError::NotTimestamp {
                value: s.into(),
                why: e.to_string(),
            })
    }
}

impl TryFrom<String> for Timestamp {
    type Error = ParseError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<Timestamp> for String {
    fn from(t: Timestamp) -> String {
        t.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_id_is_written_only_one_way() {
        let a = TaskId::new();
        assert!(a.is_written_as(&a.to_string()));
        assert!(!a.is_written_as(&a.to_string().to_uppercase()));
        assert!(!a.is_written_as(&TaskId::new().to_string()));
        assert!(!a.is_written_as(""));
    }

    #[test]
    fn task_ids_are_v7_canonical_and_time_ordered() {
        let a = TaskId::new();
        let b = TaskId::new();
        assert!(a < b);
        assert_eq!(a.to_string().parse::<TaskId>().unwrap(), a);
        assert_eq!(TaskId::from_bytes(*a.as_bytes()), a);
        let upper = a.to_string().to_uppercase();
        assert_eq!(
            upper.parse::<TaskId>().unwrap_err(),
            ParseError::NotCanonical(upper.clone())
        );
        let v4 = "9b2d3f0e-1c2a-4b3c-8d4e-5f6a7b8c9d0e";
        assert_eq!(
            v4.parse::<TaskId>().unwrap_err(),
            ParseError::NotV7(v4.into())
        );
        assert_eq!(
            "not-a-uuid".parse::<TaskId>().unwrap_err(),
            ParseError::NotUuid("not-a-uuid".into())
        );
    }

    #[test]
    fn agent_names_are_subject_tokens() {
        assert!("knowledge-agent".parse::<AgentName>().is_ok());
        assert!("a_1".parse::<AgentName>().is_ok());
        for bad in ["", "Knowledge", "a.b", "a b", "a*", &"x".repeat(65)] {
            assert!(bad.parse::<AgentName>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn labels_refuse_empty_long_and_control_characters() {
        assert!("i-456".parse::<IdempotencyKey>().is_ok());
        assert!("".parse::<IdempotencyKey>().is_err());
        assert!("a\0b".parse::<IdempotencyKey>().is_err());
        assert!("x".repeat(257).parse::<IdempotencyKey>().is_err());
        assert!("é".repeat(256).parse::<IdempotencyKey>().is_ok());
        assert!("Files.Read".parse::<Scope>().is_ok());
        assert!("Files Read".parse::<Scope>().is_err());
    }

    #[test]
    fn timestamps_round_trip_as_rfc3339_utc() {
        let t: Timestamp = "2026-11-22T11:00:00+01:00".parse().unwrap();
        assert_eq!(t.to_string(), "2026-11-22T10:00:00Z");
        assert!("2026-11-22 10:00".parse::<Timestamp>().is_err());
        assert!("yesterday".parse::<Timestamp>().is_err());
    }
}
