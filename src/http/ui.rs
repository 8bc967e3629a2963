//! The console (`docs/console.md`): its files, built into the binary from
//! `console/` (written for this project: no framework, no build step, no
//! network). Served without credentials: its pages call the API with the
//! credential signed in with, which never leaves the tab (no cookie).
//! Every file is sent with a policy that runs only the console's own
//! script and style, and lets no other site frame it.

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

/// A file of `console/`, with its media type.
macro_rules! file {
    ($name:literal, $kind:literal) => {
        ($name, $kind, include_str!(concat!("../../console/", $name)))
    };
}

/// The console's files: name, media type, content.
const FILES: &[(&str, &str, &str)] = &[
    file!("index.html", "text/html; charset=utf-8"),
    file!("app.css", "text/css; charset=utf-8"),
    file!("app.js", "text/javascript; charset=utf-8"),
    file!("core.js", "text/javascript; charset=utf-8"),
    file!("forms.js", "text/javascript; charset=utf-8"),
    file!("tasks.js", "text/javascript; charset=utf-8"),
    file!("runs.js", "text/javascript; charset=utf-8"),
    file!("triggers.js", "text/javascript; charset=utf-8"),
    file!("more.js", "text/javascript; charset=utf-8"),
    file!("favicon.svg", "image/svg+xml"),
];

/// Only the console's own files run; it talks to this server only.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

pub(super) fn router() -> Router<crate::http::Api> {
    Router::new()
        .route("/ui", get(|| async { Redirect::permanent("/ui/") }))
        .route("/ui/", get(|| async { file("index.html") }))
        .route(
            "/ui/{name}",
            get(|Path(name): Path<String>| async move { file(&name) }),
        )
}

fn file(name: &str) -> Response {
    let Some((_, kind, body)) = FILES.iter().find(|(n, _, _)| *n == name) else {
        return (StatusCode::NOT_FOUND, "no such file in the console").into_response();
    };
    let mut response = (*body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}
