//! One error type for every handler: `{"error":{"code","message","field"}}`
//! with a fitting status. Internal failures are logged and shown as
//! `internal_error` without their details.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tracing::error;

use crate::codec::DecodeError;
use crate::service::{ErrorKind, ServiceError};

/// Seconds an overloaded orchestrator asks a client to wait.
const OVERLOAD_RETRY_AFTER: u32 = 5;

/// An API error.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    field: Option<String>,
    /// Seconds to wait before trying again (`Retry-After`), for refusals
    /// that pass.
    retry_after: Option<u32>,
}

impl ApiError {
    /// An error with this status, code and message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            field: None,
            retry_after: None,
        }
    }

    /// With `Retry-After: seconds`.
    pub fn retry_after(mut self, seconds: u32) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    /// 404 for `what`.
    pub fn not_found(what: impl Into<String>) -> Self {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", what)
    }

    /// 400 about one query parameter.
    pub fn bad_param(field: &str, message: impl std::fmt::Display) -> Self {
        ApiError {
            field: Some(field.to_string()),
            ..ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_field",
                message.to_string(),
            )
        }
    }

    /// Its status and message (for the A2A face's own error shapes).
    pub(crate) fn parts(self) -> (StatusCode, String) {
        (self.status, self.message)
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

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        let status = match e.kind() {
            ErrorKind::Invalid => StatusCode::UNPROCESSABLE_ENTITY,
            ErrorKind::Forbidden => StatusCode::FORBIDDEN,
            ErrorKind::NotFound => StatusCode::NOT_FOUND,
            ErrorKind::Conflict => StatusCode::CONFLICT,
            ErrorKind::Gone => StatusCode::GONE,
            ErrorKind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            ErrorKind::Overloaded => {
                return ApiError::new(StatusCode::TOO_MANY_REQUESTS, e.code(), e.to_string())
                    .retry_after(OVERLOAD_RETRY_AFTER);
            }
            ErrorKind::Internal => return ApiError::internal(e),
        };
        ApiError {
            field: e.field().map(str::to_string),
            ..ApiError::new(status, e.code(), e.to_string())
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut error = json!({"code": self.code, "message": self.message});
        if let Some(field) = self.field {
            error["field"] = field.into();
        }
        let mut response = (self.status, Json(json!({ "error": error }))).into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, seconds.into());
        }
        response
    }
}

impl From<super::streams::StreamRefused> for ApiError {
    fn from(refused: super::streams::StreamRefused) -> Self {
        let (status, code) = match refused {
            super::streams::StreamRefused::Full => {
                (StatusCode::SERVICE_UNAVAILABLE, "too_many_streams")
            }
            super::streams::StreamRefused::PrincipalShare(_) => {
                (StatusCode::TOO_MANY_REQUESTS, "too_many_requests")
            }
        };
        ApiError::new(status, code, refused.message()).retry_after(1)
    }
}

/// What every answer of the API gets on its way out: `X-Content-Type-Options:
/// nosniff` (no browser reads an answer as other than its type says), and
/// a refusal of axum's own extractors (a query string or path that does
/// not parse, in `text/plain`) in the API's error shape.
pub(super) async fn every_answer(response: Response) -> Response {
    let mut response = if response.status().is_client_error()
        && response
            .headers()
            .get(axum::http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/plain"))
    {
        let status = response.status();
        let text = axum::body::to_bytes(response.into_body(), 64 * 1024)
            .await
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        ApiError::new(status, "invalid_request", text).into_response()
    } else {
        response
    };
    response.headers_mut().insert(
        axum::http::header::X_CONTENT_TYPE_OPTIONS,
        axum::http::HeaderValue::from_static("nosniff"),
    );
    response
}
