//! What the handlers that call a service over HTTP (`http`, `llm`)
//! share: a bounded body, `Retry-After`, an error body's words, and what a
//! failed exchange means for the task.
//!
//! - 429 and 503 are retryable failures that wait the `Retry-After` they
//!   give; other 5xx, a refused connection and a timeout are retryable;
//!   other 4xx fail, with the service's message.
//! - A body over [`MAX_BODY_BYTES`] fails the task.

use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::HeaderValue;
use serde_json::Value;

use crate::event::ErrorInfo;
use crate::worker::Outcome;

/// The most a service's answer may hold.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// How a handler names its service's failures.
pub(super) struct Codes {
    /// 429 and 503.
    pub busy: &'static str,
    /// Other 5xx, unreachable, timed out.
    pub unavailable: &'static str,
    /// Other 4xx.
    pub refused: &'static str,
}

/// A request to `url` that got no answer.
pub(super) fn unreachable(e: &reqwest::Error, url: &reqwest::Url, codes: &Codes) -> Outcome {
    let why = if e.is_timeout() {
        "timed out".to_string()
    } else {
        e.to_string()
    };
    Outcome::retryable(codes.unavailable, format!("{url}: {why}"))
}

/// The whole body of `response`, at most [`MAX_BODY_BYTES`].
pub(super) async fn body(
    mut response: reqwest::Response,
    url: &reqwest::Url,
    codes: &Codes,
) -> Result<Vec<u8>, Outcome> {
    let mut bytes = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if bytes.len() + chunk.len() > MAX_BODY_BYTES {
                    return Err(Outcome::permanent(
                        "output_too_large",
                        format!("{url} answered with more than {MAX_BODY_BYTES} bytes"),
                    ));
                }
                bytes.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(bytes),
            Err(e) => {
                return Err(Outcome::retryable(codes.unavailable, format!("{url}: {e}")));
            }
        }
    }
}

/// What an answer with the failing `status` means.
pub(super) fn failure(
    status: StatusCode,
    retry_after: Option<Duration>,
    bytes: &[u8],
    url: &reqwest::Url,
    codes: &Codes,
) -> Outcome {
    let message = format!("{url} answered {status}: {}", said(bytes));
    match status {
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => Outcome::Failed {
            error: ErrorInfo::new(codes.busy, message, true),
            retry_after,
        },
        s if s.is_server_error() => Outcome::retryable(codes.unavailable, message),
        _ => Outcome::permanent(codes.refused, message),
    }
}

/// A `Retry-After`: seconds, or an HTTP date.
pub(super) fn retry_after(v: &HeaderValue) -> Option<Duration> {
    let text = v.to_str().ok()?.trim();
    if let Ok(seconds) = text.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(text).ok()?;
    Some(
        at.duration_since(std::time::SystemTime::now())
            .unwrap_or_default(),
    )
}

/// What an error body says: its `error.message` or `message` when JSON,
/// else its text (at most 500 characters).
pub(super) fn said(bytes: &[u8]) -> String {
    let text = match serde_json::from_slice::<Value>(bytes) {
        Ok(v) => v
            .pointer("/error/message")
            .or_else(|| v.get("message"))
            .or_else(|| v.get("error"))
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| v.to_string()),
        Err(_) => String::from_utf8_lossy(bytes).into_owned(),
    };
    let text = text.trim();
    if text.is_empty() {
        return "(no body)".into();
    }
    text.chars().take(500).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        assert_eq!(
            retry_after(&HeaderValue::from_static("7")),
            Some(Duration::from_secs(7))
        );
        let later = httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(30));
        let d = retry_after(&HeaderValue::from_str(&later).unwrap()).unwrap();
        assert!(
            d > Duration::from_secs(25) && d <= Duration::from_secs(30),
            "{d:?}"
        );
        assert_eq!(retry_after(&HeaderValue::from_static("soon")), None);
    }

    #[test]
    fn an_error_body_says_its_message() {
        assert_eq!(
            said(br#"{"error": {"message": "no such order"}}"#),
            "no such order"
        );
        assert_eq!(said(br#"{"message": "quota"}"#), "quota");
        assert_eq!(said(b"plain words\n"), "plain words");
        assert_eq!(said(b""), "(no body)");
    }
}
