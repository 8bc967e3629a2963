//! `/v1/triggers`: list triggers (with the files that did not load) and
//! start runs.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::Value;

use super::{ApiError, Requester};
use crate::codec::{self, DecodeError, Strictness, Validate};
use crate::envelope::IdempotencyKey;
use crate::run::RunStarted;
use crate::service::{Orchestrator, RunView};

pub(super) fn router() -> Router<crate::http::Api> {
    Router::new()
        .route("/v1/triggers", get(list))
        .route("/v1/triggers/{id}/runs", post(start_run))
}

async fn list(State(o): State<Orchestrator>) -> Json<Value> {
    let triggers = o.triggers();
    let loaded: Vec<&crate::trigger::Trigger> =
        triggers.loaded.values().map(|t| t.as_ref()).collect();
    Json(serde_json::json!({
        "triggers": loaded,
        "errors": triggers.errors,
        "loaded_at": triggers.loaded_at,
    }))
}

/// `POST /v1/triggers/{id}/runs` body.
#[derive(Debug, Deserialize)]
struct RunRequest {
    #[serde(default)]
    input: Value,
    #[serde(default)]
    idempotency_key: Option<IdempotencyKey>,
    /// Where the run's view is POSTed when it waits and when it ends.
    #[serde(default)]
    callback_url: Option<String>,
}

impl Validate for RunRequest {
    fn validate(&self) -> Result<(), DecodeError> {
        Ok(())
    }
}

async fn start_run(
    State(o): State<Orchestrator>,
    State(http): State<std::sync::Arc<crate::http::HttpSettings>>,
    Requester(caller): Requester,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<(StatusCode, Json<RunView>), ApiError> {
    // Whether the caller may start it at all, before its body is read.
    o.may_start(&id, &caller)?;
    let body = super::body(&o, &http, &headers, body).await?;
    let request: RunRequest =
        codec::decode(&body, Strictness::Strict, o.settings().max_envelope_bytes)?;
    let started = o
        .start_run(
            &id,
            request.input,
            request.idempotency_key.map(String::from),
            crate::service::RunOptions {
                context: None,
                callback_url: request.callback_url,
            },
            &caller,
        )
        .await?;
    let status = match started {
        RunStarted::Created(_) => StatusCode::CREATED,
        RunStarted::Existing(_) => StatusCode::OK,
    };
    let run_id = started.record().run_id;
    let view = o
        .run(run_id, &caller)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("run {run_id} not found")))?;
    Ok((status, Json(view)))
}

/// Machines try the run request's reading (`crate::fuzz`): edits of a
/// valid body, and any JSON, are a request or a refusal naming the field.
#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;
    use serde_json::json;

    use super::RunRequest;
    use crate::codec::{DEFAULT_MAX_BYTES, Strictness};

    proptest! {
        #![proptest_config(crate::fuzz::config())]

        #[test]
        fn run_requests(edits in crate::fuzz::edits(), any_json in crate::fuzz::json()) {
            let seed = json!({"input": {"query": "x", "n": [1, 2]}, "idempotency_key": "k-1",
                              "callback_url": "https://example.com/cb"});
            for doc in [crate::fuzz::edited(&seed, &edits), any_json] {
                let bytes = serde_json::to_vec(&doc).unwrap();
                let read: Result<RunRequest, _> =
                    crate::codec::decode(&bytes, Strictness::Strict, DEFAULT_MAX_BYTES);
                if let Err(e) = read
                    && doc.is_object()
                {
                    prop_assert!(e.field().is_some_and(|f| !f.is_empty()), "{:?} of {}", e, doc);
                }
            }
        }
    }
}
