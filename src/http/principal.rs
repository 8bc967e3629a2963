//! Authentication of API calls: every route but health checks needs
//! `Authorization: Bearer <API key or JWT>`; the caller it names (a
//! principal with scopes) travels to the handler in the request's
//! extensions, within its principal's share of the API (429 past it),
//! before anything reads the body. With `api_auth.mode: none`, every
//! response says so in an `Orch-Auth: none` header.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tracing::warn;

use super::ApiError;
use crate::access::{Authenticator, Denied, Principal};

/// The header every response carries when authentication is off.
pub const AUTH_HEADER: &str = "orch-auth";

/// Who may call, and how much of the API each may hold at once.
pub struct Gate {
    /// Checks credentials.
    pub(super) access: Arc<Authenticator>,
    /// Requests in progress per principal.
    pub(super) per_principal: Arc<super::limits::PerPrincipal>,
}

/// Lets the call through with its principal, or answers 401 (no or bad
/// credentials) or 429 (its principal's share of the API is in use).
pub async fn authenticate(
    State(gate): State<Arc<Gate>>,
    mut request: Request,
    next: Next,
) -> Response {
    // A header that is not visible ASCII is no credential.
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.to_str().unwrap_or("\u{0}"));
    match gate.access.authenticate(authorization) {
        Ok(principal) => {
            let Some(_entered) = gate.per_principal.enter(&principal.name) else {
                warn!(principal = %principal.name, path = %request.uri().path(), "API call refused: the principal's share of the API is in use");
                return gate.per_principal.refused(&principal.name);
            };
            request.extensions_mut().insert(principal);
            next.run(request).await
        }
        Err(denied) => {
            warn!(code = denied.code, reason = %denied.message, path = %request.uri().path(), "API call refused");
            unauthorized(denied)
        }
    }
}

fn unauthorized(denied: Denied) -> Response {
    let challenge = if denied.code == "unauthenticated" {
        r#"Bearer realm="orchestrator""#
    } else {
        r#"Bearer realm="orchestrator", error="invalid_token""#
    };
    let mut response =
        ApiError::new(StatusCode::UNAUTHORIZED, denied.code, denied.message).into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static(challenge),
    );
    response
}

/// Marks a response as served without authentication.
pub async fn mark_unauthenticated(response: Response) -> Response {
    let mut response = response;
    response
        .headers_mut()
        .insert(AUTH_HEADER, HeaderValue::from_static("none"));
    response
}

/// The principal the authentication layer found (for handlers).
pub fn principal(parts: &axum::http::request::Parts) -> Option<&Principal> {
    parts.extensions.get::<Principal>()
}
