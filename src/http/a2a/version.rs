//! Which A2A version a request speaks: 1.0 with `A2A-Version: 1.0`, 0.3
//! without one.

use axum::http::HeaderMap;

use super::error::A2aError;

/// The protocol version a request speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Version {
    /// 0.3: no `A2A-Version` (or `0.3`).
    V03,
    /// 1.0 (any 1.0.x).
    V10,
}

/// The version a request asks for: its `A2A-Version` header (or query
/// parameter); none or empty is 0.3; a patch number is ignored; anything
/// else is -32009.
pub(super) fn version(headers: &HeaderMap, query: Option<&str>) -> Result<Version, A2aError> {
    let asked = match headers.get("a2a-version") {
        Some(v) => v.to_str().unwrap_or("?").trim().to_string(),
        None => query
            .and_then(|q| {
                q.split('&')
                    .find_map(|kv| kv.strip_prefix("A2A-Version="))
                    .map(str::to_string)
            })
            .unwrap_or_default(),
    };
    let major_minor: String = asked.splitn(3, '.').take(2).collect::<Vec<_>>().join(".");
    match major_minor.as_str() {
        "" | "0.3" => Ok(Version::V03),
        "1.0" => Ok(Version::V10),
        _ => Err(A2aError::version(&asked)),
    }
}
