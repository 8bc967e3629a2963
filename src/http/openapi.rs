//! `GET /openapi.json`: the REST API described as OpenAPI 3.1 (the file
//! `openapi.json` beside this one, built into the binary). No credentials
//! are needed to read it. `tests/openapi.rs` keeps it and the routes
//! together: every route is in it and every path in it is a route, and
//! real answers fit its schemas.

use axum::Router;
use axum::http::header;
use axum::routing::get;

/// The document.
pub const DOCUMENT: &str = include_str!("openapi.json");

pub(super) fn router() -> Router<crate::http::Api> {
    Router::new().route(
        "/openapi.json",
        get(|| async { ([(header::CONTENT_TYPE, "application/json")], DOCUMENT) }),
    )
}
