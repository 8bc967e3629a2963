//! Why a message could not be decoded, naming the field.

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
    /// A value nests deeper than [`super::MAX_DEPTH`] levels.
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
