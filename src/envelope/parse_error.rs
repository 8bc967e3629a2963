//! Why text is not the value it should be: an id, a timestamp, a label, a
//! name from a fixed list. One error for every `FromStr` of the model, so
//! a caller matches on what was wrong, not on a message.

/// Why text is not a value of its type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Not a UUID at all.
    #[error("`{0}` is not a UUID")]
    NotUuid(String),
    /// A UUID, but not written lowercase and hyphenated.
    #[error("`{0}` is not a lowercase hyphenated UUID")]
    NotCanonical(String),
    /// A UUID, but not a version 7 one.
    #[error("`{0}` is not a UUIDv7")]
    NotV7(String),
    /// Not an RFC 3339 timestamp.
    #[error("`{value}` is not an RFC 3339 timestamp: {why}")]
    NotTimestamp {
        /// The text.
        value: String,
        /// What the timestamp parser said.
        why: String,
    },
    /// Empty where a value is needed.
    #[error("must not be empty")]
    Empty,
    /// Longer than its type allows.
    #[error("is {len} characters, over the limit of {max}")]
    TooLong {
        /// Its length, in characters.
        len: usize,
        /// The most allowed.
        max: usize,
    },
    /// Outside its type's length bounds.
    #[error("must be 1 to {max} characters")]
    Length {
        /// The most allowed.
        max: usize,
    },
    /// Holds a control character.
    #[error("must not contain control characters")]
    ControlCharacter,
    /// Holds characters its type does not allow.
    #[error("`{value}` may only hold {allowed}")]
    Characters {
        /// The text.
        value: String,
        /// What it may hold.
        allowed: &'static str,
    },
    /// Not one of a fixed list of names.
    #[error("`{value}` is not {what} ({names})")]
    NotOneOf {
        /// The text.
        value: String,
        /// What it should have been (`a task state`).
        what: &'static str,
        /// The names it may be.
        names: String,
    },
    /// Not a NATS server URL.
    #[error("`{url}` is not a NATS server URL: {why}")]
    NotServerUrl {
        /// The text.
        url: String,
        /// What the URL parser said.
        why: String,
    },
    /// A list of NATS server URLs with none in it.
    #[error("no NATS server URL given")]
    NoServers,
}
