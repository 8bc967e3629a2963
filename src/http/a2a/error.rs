//! A2A errors, in either binding's words: a JSON-RPC error object (the
//! spec's codes, `data` holding a `google.rpc.ErrorInfo` of domain
//! `a2a-protocol.org`), or a `google.rpc.Status` with the spec's HTTP
//! status (AIP-193). Internal failures are logged and shown without their
//! details.

use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::envelope::Timestamp;
use crate::service::{ErrorKind, ServiceError};

/// The domain of the protocol's own reasons.
const DOMAIN: &str = "a2a-protocol.org";

/// The domain of reasons the protocol has no word for (a missing scope).
const OUR_DOMAIN: &str = "orchestrator";

/// One error, whichever binding answers it.
#[derive(Debug)]
pub(super) struct A2aError {
    /// The JSON-RPC code.
    pub(super) code: i32,
    /// For people; never internal detail.
    pub(super) message: String,
    /// The request field at fault, when one is.
    pub(super) field: Option<String>,
    /// What else a client can act on (`taskId`, ...).
    pub(super) metadata: serde_json::Map<String, Value>,
}

/// The spec's table (section 5.4), and the codes of JSON-RPC itself.
fn describe(code: i32) -> (&'static str, StatusCode, &'static str) {
    match code {
        -32700 => ("PARSE_ERROR", StatusCode::BAD_REQUEST, DOMAIN),
        -32600 => ("INVALID_REQUEST", StatusCode::BAD_REQUEST, DOMAIN),
        -32601 => ("METHOD_NOT_FOUND", StatusCode::NOT_FOUND, DOMAIN),
        -32602 => ("INVALID_PARAMS", StatusCode::BAD_REQUEST, DOMAIN),
        -32001 => ("TASK_NOT_FOUND", StatusCode::NOT_FOUND, DOMAIN),
        -32002 => ("TASK_NOT_CANCELABLE", StatusCode::CONFLICT, DOMAIN),
        -32003 => (
            "PUSH_NOTIFICATION_NOT_SUPPORTED",
            StatusCode::BAD_REQUEST,
            DOMAIN,
        ),
        -32004 => ("UNSUPPORTED_OPERATION", StatusCode::BAD_REQUEST, DOMAIN),
        -32005 => (
            "CONTENT_TYPE_NOT_SUPPORTED",
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            DOMAIN,
        ),
        -32006 => ("INVALID_AGENT_RESPONSE", StatusCode::BAD_GATEWAY, DOMAIN),
        -32007 => (
            "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
            StatusCode::BAD_REQUEST,
            DOMAIN,
        ),
        -32008 => (
            "EXTENSION_SUPPORT_REQUIRED",
            StatusCode::BAD_REQUEST,
            DOMAIN,
        ),
        -32009 => ("VERSION_NOT_SUPPORTED", StatusCode::BAD_REQUEST, DOMAIN),
        FORBIDDEN => ("PERMISSION_DENIED", StatusCode::FORBIDDEN, OUR_DOMAIN),
        CONFLICT => ("IDEMPOTENCY_CONFLICT", StatusCode::CONFLICT, OUR_DOMAIN),
        TOO_LARGE => (
            "REQUEST_TOO_LARGE",
            StatusCode::PAYLOAD_TOO_LARGE,
            OUR_DOMAIN,
        ),
        UNAVAILABLE => ("UNAVAILABLE", StatusCode::SERVICE_UNAVAILABLE, OUR_DOMAIN),
        TOO_MANY => (
            "TOO_MANY_REQUESTS",
            StatusCode::TOO_MANY_REQUESTS,
            OUR_DOMAIN,
        ),
        _ => ("INTERNAL", StatusCode::INTERNAL_SERVER_ERROR, DOMAIN),
    }
}

/// Codes of ours, in the JSON-RPC range for server errors that A2A's
/// (-32001 to -32099) leaves free.
const FORBIDDEN: i32 = -32000;
const CONFLICT: i32 = -32100;
const TOO_LARGE: i32 = -32101;
const UNAVAILABLE: i32 = -32102;
const TOO_MANY: i32 = -32103;

impl A2aError {
    pub(super) fn new(code: i32, message: impl Into<String>) -> Self {
        A2aError {
            code,
            message: message.into(),
            field: None,
            metadata: serde_json::Map::new(),
        }
    }

    pub(super) fn parse(message: impl Into<String>) -> Self {
        A2aError::new(-32700, message)
    }

    pub(super) fn invalid_request(message: impl Into<String>) -> Self {
        A2aError::new(-32600, message)
    }

    pub(super) fn method_not_found(method: &str) -> Self {
        A2aError::new(-32601, format!("no method `{method}` in this version"))
    }

    /// -32602 about `field`.
    pub(super) fn invalid_params(
        field: impl Into<String>,
        message: impl std::fmt::Display,
    ) -> Self {
        let mut e = A2aError::new(-32602, message.to_string());
        e.field = Some(field.into());
        e
    }

    pub(super) fn task_not_found(id: &str) -> Self {
        A2aError::new(-32001, format!("task {id} not found")).with("taskId", id)
    }

    pub(super) fn not_cancelable(id: &str, message: impl Into<String>) -> Self {
        A2aError::new(-32002, message).with("taskId", id)
    }

    pub(super) fn unsupported(message: impl Into<String>) -> Self {
        A2aError::new(-32004, message)
    }

    pub(super) fn content_type(message: impl Into<String>) -> Self {
        A2aError::new(-32005, message)
    }

    pub(super) fn version(asked: &str) -> Self {
        A2aError::new(
            -32009,
            format!("A2A version `{asked}` is not supported: use 1.0, or 0.3 (no header)"),
        )
        .with("supportedVersions", "1.0,0.3")
    }

    pub(super) fn too_large(message: impl Into<String>) -> Self {
        A2aError::new(TOO_LARGE, message)
    }

    pub(super) fn unavailable(message: impl Into<String>) -> Self {
        A2aError::new(UNAVAILABLE, message)
    }

    /// The caller's principal holds its share (429); retry later.
    pub(super) fn too_many(message: impl Into<String>) -> Self {
        A2aError::new(TOO_MANY, message)
    }

    /// A conflict (a message id reused) with the message's id in its
    /// metadata; any other error as it is.
    pub(super) fn naming_message(self, message_id: &str) -> Self {
        if self.code == CONFLICT {
            self.with("messageId", message_id)
        } else {
            self
        }
    }

    /// With `key: value` in the `ErrorInfo`'s metadata.
    pub(super) fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    /// The HTTP status the HTTP+JSON binding answers with.
    pub(super) fn status(&self) -> StatusCode {
        describe(self.code).1
    }

    /// The details: an `ErrorInfo`, and a `BadRequest` naming the field.
    fn details(&self) -> Vec<Value> {
        let (reason, _, domain) = describe(self.code);
        let mut metadata = self.metadata.clone();
        metadata.insert("timestamp".into(), Timestamp::now().to_string().into());
        if let Some(f) = &self.field {
            metadata.insert("field".into(), f.clone().into());
        }
        let mut details = vec![json!({
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": reason,
            "domain": domain,
            "metadata": metadata,
        })];
        if let Some(f) = &self.field {
            details.push(json!({
                "@type": "type.googleapis.com/google.rpc.BadRequest",
                "fieldViolations": [{"field": f, "description": self.message}],
            }));
        }
        details
    }

    /// The JSON-RPC error object.
    pub(super) fn rpc(&self) -> Value {
        json!({"code": self.code, "message": self.message, "data": self.details()})
    }

    /// The `google.rpc.Status` of the HTTP+JSON binding.
    pub(super) fn rest(&self) -> Value {
        let status = self.status();
        let name = match status {
            StatusCode::BAD_REQUEST => "INVALID_ARGUMENT",
            StatusCode::NOT_FOUND => "NOT_FOUND",
            StatusCode::CONFLICT => "FAILED_PRECONDITION",
            StatusCode::FORBIDDEN => "PERMISSION_DENIED",
            StatusCode::UNSUPPORTED_MEDIA_TYPE => "INVALID_ARGUMENT",
            StatusCode::PAYLOAD_TOO_LARGE => "RESOURCE_EXHAUSTED",
            StatusCode::SERVICE_UNAVAILABLE => "UNAVAILABLE",
            StatusCode::TOO_MANY_REQUESTS => "RESOURCE_EXHAUSTED",
            StatusCode::BAD_GATEWAY => "INTERNAL",
            _ => "INTERNAL",
        };
        json!({"error": {
            "code": status.as_u16(),
            "status": name,
            "message": self.message,
            "details": self.details(),
        }})
    }
}

impl From<ServiceError> for A2aError {
    fn from(e: ServiceError) -> Self {
        let field = e.field().map(str::to_string);
        let mut out = match e.kind() {
            ErrorKind::Invalid => A2aError::new(-32602, e.to_string()),
            ErrorKind::Forbidden => A2aError::new(FORBIDDEN, e.to_string()),
            ErrorKind::NotFound => A2aError::new(-32001, e.to_string()),
            ErrorKind::Conflict => A2aError::new(CONFLICT, e.to_string()),
            ErrorKind::Gone => A2aError::new(-32001, e.to_string()),
            ErrorKind::TooLarge => A2aError::too_large(e.to_string()),
            ErrorKind::Unavailable => A2aError::unavailable(e.to_string()),
            ErrorKind::Overloaded => A2aError::too_many(e.to_string()),
            ErrorKind::Internal => {
                tracing::error!(error = %e, "internal error");
                A2aError::new(-32603, "internal error")
            }
        };
        out.field = field;
        out
    }
}

impl From<super::super::ApiError> for A2aError {
    /// A refusal of the shared HTTP layer (a body too large or too slow).
    fn from(e: super::super::ApiError) -> Self {
        let (status, message) = e.parts();
        match status {
            StatusCode::PAYLOAD_TOO_LARGE => A2aError::too_large(message),
            StatusCode::INTERNAL_SERVER_ERROR => A2aError::new(-32603, "internal error"),
            _ => A2aError::invalid_request(message),
        }
    }
}
