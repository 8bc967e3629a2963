//! `/v1/audit`: list records and verify the chain.

use axum::extract::{Query, State};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use super::{ApiError, Requester};
use crate::audit::{AuditFilter, AuditRecord, AuditReport};
use crate::service::Orchestrator;

pub(super) fn router() -> Router<crate::http::Api> {
    Router::new()
        .route("/v1/audit", get(list))
        .route("/v1/audit/verify", get(verify))
}

#[derive(Debug, Deserialize)]
struct AuditQuery {
    correlation_id: Option<String>,
    task_id: Option<String>,
    limit: Option<usize>,
    cursor: Option<u64>,
}

/// An audit record with the link to its trace.
#[derive(Debug, Serialize, Deserialize)]
pub struct AuditView {
    /// The record, as hashed in the chain.
    #[serde(flatten)]
    pub record: AuditRecord,
    /// The trace's page in the Jaeger UI (`telemetry.jaeger_url`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_url: Option<String>,
}

/// A page of audit records.
#[derive(Debug, Serialize, Deserialize)]
pub struct AuditPage {
    /// The records, oldest first.
    pub records: Vec<AuditView>,
    /// Pass as `cursor` for the next page; absent on the last.
    pub next_cursor: Option<u64>,
}

async fn list(
    State(o): State<Orchestrator>,
    Requester(caller): Requester,
    Query(q): Query<AuditQuery>,
) -> Result<Json<AuditPage>, ApiError> {
    let filter = AuditFilter {
        task_id: q
            .task_id
            .as_deref()
            .map(|t| {
                t.parse()
                    .map_err(|e: crate::envelope::ParseError| ApiError::bad_param("task_id", e))
            })
            .transpose()?,
        correlation_id: q
            .correlation_id
            .as_deref()
            .map(|c| {
                c.parse().map_err(|e: crate::envelope::ParseError| {
                    ApiError::bad_param("correlation_id", e)
                })
            })
            .transpose()?,
    };
    let limit = super::page_size(q.limit, 100);
    let fetched = o
        .audit(&filter, q.cursor.unwrap_or(0), limit + 1, &caller)
        .await?;
    let (records, next_cursor) = super::page(fetched, limit, |r| r.seq);
    let records = records
        .into_iter()
        .map(|record| AuditView {
            trace_url: record.trace_id.as_deref().map(|t| o.trace_url(t)),
            record,
        })
        .collect();
    Ok(Json(AuditPage {
        records,
        next_cursor,
    }))
}

async fn verify(
    State(o): State<Orchestrator>,
    Requester(caller): Requester,
) -> Result<Json<AuditReport>, ApiError> {
    Ok(Json(o.verify_audit(&caller)?))
}
