//! One error type for every handler: `{"error":{"code","message","field"}}`
//! with a fitting status. Internal failures are logged and shown as
//! `internal_error` without their details.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tracing::error;

use crate::codec::DecodeError;
use crate::service::ServiceError;
use crate::store::StoreError;

/// An API error.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    field: Option<String>,
}

impl ApiError {
    /// An error with this status, code and message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            field: None,
        }
    }

    /// 404 for `what`.
    pub fn not_found(what: impl Into<String>) -> Self {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", what)
    }

    /// 400 about one query parameter.
    pub fn bad_param(field: &str, message: impl Into<String>) -> Self {
        ApiError {
            field: Some(field.to_string()),
            ..ApiError::new(StatusCode::BAD_REQUEST, "invalid_field", message)
        }
    }

    fn internal(e: impl std::fmt::Display) -> Self {
        error!(error = %e, "internal error");
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            "internal error",
        )
    }
}

impl From<DecodeError> for ApiError {
    fn from(e: DecodeError) -> Self {
        let status = match e {
            DecodeError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            DecodeError::TooDeep { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            _ => StatusCode::BAD_REQUEST,
        };
        ApiError {
            field: e.field().map(str::to_string),
            ..ApiError::new(status, e.code(), e.to_string())
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match &e {
            StoreError::NotFound(_) | StoreError::RunNotFound(_) => {
                ApiError::new(StatusCode::NOT_FOUND, e.code(), e.to_string())
            }
            StoreError::Quarantined { .. } => {
                ApiError::new(StatusCode::GONE, e.code(), e.to_string())
            }
            StoreError::RunRefused(_) => {
                ApiError::new(StatusCode::CONFLICT, e.code(), e.to_string())
            }
            StoreError::IdempotencyConflict { .. } | StoreError::RunKeyConflict { .. } => {
                ApiError {
                    field: Some("idempotency_key".into()),
                    ..ApiError::new(StatusCode::CONFLICT, e.code(), e.to_string())
                }
            }
            StoreError::Transition { .. } => {
                ApiError::new(StatusCode::CONFLICT, e.code(), e.to_string())
            }
            _ => ApiError::internal(e),
        }
    }
}

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        match e {
            ServiceError::UnknownAgent(_) => ApiError {
                field: Some("to".into()),
                ..ApiError::new(StatusCode::NOT_FOUND, "unknown_agent", e.to_string())
            },
            ServiceError::UnknownAction { .. } => ApiError {
                field: Some("action".into()),
                ..ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "unknown_action",
                    e.to_string(),
                )
            },
            ServiceError::Forbidden { .. } => {
                ApiError::new(StatusCode::FORBIDDEN, "insufficient_scope", e.to_string())
            }
            ServiceError::NotCancelable { .. } => {
                ApiError::new(StatusCode::CONFLICT, "not_cancelable", e.to_string())
            }
            ServiceError::ReplayRefused { .. } => {
                ApiError::new(StatusCode::CONFLICT, "replay_refused", e.to_string())
            }
            ServiceError::UnknownTrigger(_) | ServiceError::NoDeadLetter(_) => {
                ApiError::not_found(e.to_string())
            }
            ServiceError::BadInput(e) => ApiError {
                status: StatusCode::UNPROCESSABLE_ENTITY,
                ..e.into()
            },
            ServiceError::Store(e) => e.into(),
            ServiceError::Bus(e) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "bus_unavailable",
                e.to_string(),
            ),
            ServiceError::TooLarge { .. } => ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                e.to_string(),
            ),
            ServiceError::Keys(_) => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "keys_unavailable",
                e.to_string(),
            ),
            ServiceError::InvalidCard(_) => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "invalid_card",
                e.to_string(),
            ),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut error = json!({"code": self.code, "message": self.message});
        if let Some(field) = self.field {
            error["field"] = field.into();
        }
        (self.status, Json(json!({ "error": error }))).into_response()
    }
}
