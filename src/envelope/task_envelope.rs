//! The envelope whole: its three parts, made for a new task, checked
//! beyond its schema, decoded strictly from users and tolerantly from the
//! bus, and encoded.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::control::{default_max_attempts, one};
use super::{
    Action, AgentName, Control, Header, Meta, Payload, Priority, ResponseMode, Sender, TaskId,
    Timestamp, Version,
};
use crate::codec::{self, DecodeError, Strictness, Validate};

/// One task as it travels to an agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// Wire format version; always [`VERSION`](super::VERSION).
    pub v: Version,
    /// Who, to whom, when, and the ids that tie tasks together.
    #[serde(deserialize_with = "codec::object")]
    pub header: Header,
    /// What the agent is asked to do.
    #[serde(deserialize_with = "codec::object")]
    pub payload: Payload,
    /// How the task is to be delivered, retried and answered.
    #[serde(deserialize_with = "codec::object")]
    pub control: Control,
}

impl Validate for Envelope {
    fn validate(&self) -> Result<(), DecodeError> {
        let control = &self.control;
        if control.response_mode == ResponseMode::Callback && control.callback_url.is_none() {
            return Err(DecodeError::invalid(
                "control.callback_url",
                "is required when response_mode is `callback`",
            ));
        }
        if let Some(url) = &control.callback_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(DecodeError::invalid(
                "control.callback_url",
                format!("`{url}` is not an http(s) URL"),
            ));
        }
        Ok(())
    }
}

impl Envelope {
    /// A new envelope with a fresh task id, stamped now, with default control
    /// settings. The task id doubles as correlation id and idempotency key
    /// until the caller sets its own.
    pub fn new(from: Sender, to: AgentName, action: Action, params: Map<String, Value>) -> Self {
        let task_id = TaskId::new();
        Envelope {
            v: Version,
            header: Header {
                task_id,
                correlation_id: task_id.into(),
                causation_id: None,
                from,
                to,
                timestamp: Timestamp::now(),
                token: None,
            },
            payload: Payload {
                action,
                params,
                meta: Meta::default(),
                input: None,
            },
            control: Control {
                idempotency_key: task_id.into(),
                priority: Priority::default(),
                response_mode: ResponseMode::default(),
                required_scopes: Vec::new(),
                callback_url: None,
                deadline: None,
                attempt: one(),
                max_attempts: default_max_attempts(),
            },
        }
    }

    /// Decodes an envelope given by a user or client: unknown fields are refused.
    pub fn from_user(bytes: &[u8], max_bytes: usize) -> Result<Self, DecodeError> {
        codec::decode(bytes, Strictness::Strict, max_bytes)
    }

    /// Decodes an envelope from the bus: unknown fields are ignored.
    pub fn from_wire(bytes: &[u8], max_bytes: usize) -> Result<Self, DecodeError> {
        codec::decode(bytes, Strictness::Tolerant, max_bytes)
    }

    /// The envelope as JSON bytes.
    pub fn to_vec(&self) -> Vec<u8> {
        // Serializing these types cannot fail: every map key is a string.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// The length of [`Envelope::to_vec`], counted without building it.
    pub fn encoded_len(&self) -> usize {
        /// Counts what is written and keeps nothing.
        struct Count(usize);
        impl std::io::Write for Count {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0 += buf.len();
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut count = Count(0);
        // As in `to_vec`: these types always serialize.
        let _ = serde_json::to_writer(&mut count, self);
        count.0
    }

    /// This envelope for `attempt`: a retry is the same envelope with its
    /// attempt raised (0 leaves it as it is).
    pub fn for_attempt(mut self, attempt: u32) -> Envelope {
        if let Some(attempt) = std::num::NonZeroU32::new(attempt) {
            self.control.attempt = attempt;
        }
        self
    }

    /// Whether the idempotency key is one the caller gave, rather than the
    /// task id [`Envelope::new`] fills in when none is given (a key no other
    /// request can hold).
    pub fn has_given_key(&self) -> bool {
        !self
            .header
            .task_id
            .is_written_as(self.control.idempotency_key.as_str())
    }

    /// A copy without the token, as it is stored and handed to subprocesses.
    pub fn without_token(&self) -> Envelope {
        let mut copy = self.clone();
        copy.header.token = None;
        copy
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_encoded_length_is_the_length_of_the_encoding() {
        let env = Envelope::new(
            Sender::orchestrator(),
            "echo".parse().unwrap(),
            "echo".parse().unwrap(),
            serde_json::json!({"text": "héllo"})
                .as_object()
                .cloned()
                .unwrap(),
        );
        assert_eq!(env.encoded_len(), env.to_vec().len());
    }
    use super::*;
    use crate::codec::DEFAULT_MAX_BYTES;

    fn example() -> Value {
        serde_json::json!({
            "v": 1,
            "header": {
                "task_id": TaskId::new().to_string(),
                "correlation_id": "c-1",
                "from": "orchestrator",
                "to": "knowledge-agent",
                "timestamp": "2026-11-22T10:00:00Z",
                "token": "secret.jwt.value"
            },
            "payload": {"action": "search:kb", "params": {"query": "x"}},
            "control": {"idempotency_key": "i-456"}
        })
    }

    fn parse(v: &Value) -> Result<Envelope, DecodeError> {
        Envelope::from_user(&serde_json::to_vec(v).unwrap(), DEFAULT_MAX_BYTES)
    }

    #[test]
    fn defaults_fill_optional_control_fields() {
        let env = parse(&example()).unwrap();
        assert_eq!(env.control.priority, Priority::Normal);
        assert_eq!(env.control.response_mode, ResponseMode::Async);
        assert_eq!(env.control.attempt.get(), 1);
        assert_eq!(env.control.max_attempts.get(), 3);
        let again = Envelope::from_user(&env.to_vec(), DEFAULT_MAX_BYTES).unwrap();
        assert_eq!(again, env);
    }

    #[test]
    fn the_token_is_never_in_debug_output() {
        let env = parse(&example()).unwrap();
        let shown = format!("{env:?}");
        assert!(!shown.contains("secret.jwt.value"));
        assert!(shown.contains("<redacted>"));
        assert!(env.without_token().header.token.is_none());
    }

    #[test]
    fn a_missing_idempotency_key_is_named() {
        let mut v = example();
        v["control"]
            .as_object_mut()
            .unwrap()
            .remove("idempotency_key");
        let err = parse(&v).unwrap_err();
        assert_eq!(
            err,
            DecodeError::MissingField {
                field: "control.idempotency_key".into()
            }
        );
    }

    #[test]
    fn a_bad_timestamp_is_named() {
        let mut v = example();
        v["header"]["timestamp"] = "22/11/2026".into();
        assert_eq!(parse(&v).unwrap_err().field(), Some("header.timestamp"));
    }

    #[test]
    fn an_unknown_field_is_refused_from_users_but_tolerated_on_the_wire() {
        let mut v = example();
        v["control"]["colour"] = "blue".into();
        assert_eq!(
            parse(&v).unwrap_err(),
            DecodeError::UnknownField {
                field: "control.colour".into()
            }
        );
        let bytes = serde_json::to_vec(&v).unwrap();
        assert!(Envelope::from_wire(&bytes, DEFAULT_MAX_BYTES).is_ok());
    }

    #[test]
    fn other_versions_are_refused() {
        let mut v = example();
        v["v"] = 2.into();
        assert_eq!(parse(&v).unwrap_err().field(), Some("v"));
    }

    #[test]
    fn callback_mode_needs_an_http_url() {
        let mut v = example();
        v["control"]["response_mode"] = "callback".into();
        assert_eq!(parse(&v).unwrap_err().field(), Some("control.callback_url"));
        v["control"]["callback_url"] = "ftp://x".into();
        assert_eq!(parse(&v).unwrap_err().field(), Some("control.callback_url"));
        v["control"]["callback_url"] = "https://example.test/cb".into();
        assert!(parse(&v).is_ok());
    }

    #[test]
    fn an_oversized_envelope_is_refused_at_the_configured_limit() {
        let mut v = example();
        v["payload"]["params"]["blob"] = "x".repeat(2000).into();
        let bytes = serde_json::to_vec(&v).unwrap();
        let err = Envelope::from_wire(&bytes, 1000).unwrap_err();
        assert!(matches!(err, DecodeError::TooLarge { limit: 1000, .. }));
        assert!(Envelope::from_wire(&bytes, DEFAULT_MAX_BYTES).is_ok());
    }
}
