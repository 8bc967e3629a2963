//! The DLQ as callers see it: its letters listed, found by task, removed
//! once replayed, and the audit entries of a replay or a refusal. The loop
//! that moves poison tasks into it is `loops::dead_letters`.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::audit::AuditEntry;
use crate::bus::{
    Bus, BusError, DLQ_CODE_HEADER as CODE_HEADER, DLQ_REASON_HEADER as REASON_HEADER,
    TASK_ID_HEADER,
};
use crate::envelope::{Envelope, TaskId};

/// One dead letter as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeadLetter {
    /// Its sequence in the DLQ stream.
    pub seq: u64,
    /// The agent it was for.
    pub agent: String,
    /// Its task, when the envelope could be read.
    pub task_id: Option<TaskId>,
    /// Why, as a code.
    pub code: Option<String>,
    /// Why, in words.
    pub reason: Option<String>,
    /// When it was dead-lettered.
    pub at: String,
    /// The envelope (token removed), or the raw text when unreadable.
    pub message: Value,
}

/// Up to `limit` dead letters after sequence `after`.
pub(crate) async fn list(bus: &Bus, after: u64, limit: usize) -> Result<Vec<DeadLetter>, BusError> {
    let stream_error = |e: crate::bus::Cause| BusError::Provision {
        what: bus.names().dlq_stream(),
        source: e,
    };
    let mut stream = bus
        .jetstream()
        .get_stream(bus.names().dlq_stream())
        .await
        .map_err(|e| stream_error(e.into()))?;
    let state = stream
        .info()
        .await
        .map_err(|e| stream_error(e.into()))?
        .state
        .clone();
    let mut out = Vec::new();
    let mut seq = after.max(state.first_sequence.saturating_sub(1)) + 1;
    while seq <= state.last_sequence && out.len() < limit {
        if let Ok(m) = stream.get_raw_message(seq).await {
            let header = |name: &str| m.headers.get(name).map(|v| v.to_string());
            let message = match Envelope::from_wire(&m.payload, usize::MAX) {
                Ok(env) => serde_json::to_value(env.without_token()).unwrap_or(Value::Null),
                Err(_) => Value::String(
                    String::from_utf8_lossy(&m.payload)
                        .chars()
                        .take(4096)
                        .collect(),
                ),
            };
            out.push(DeadLetter {
                seq,
                agent: m.subject.split('.').nth(2).unwrap_or("").to_string(),
                task_id: header(TASK_ID_HEADER).and_then(|t| t.parse().ok()),
                code: header(CODE_HEADER),
                reason: header(REASON_HEADER),
                at: m.time.to_string(),
                message,
            });
        }
        seq += 1;
    }
    Ok(out)
}

/// Every dead letter that names `task_id` (in its `Orch-Task-Id`
/// header), oldest first. Anyone who may dead-letter may name any task
/// there: what a letter says is checked against the store before use.
pub(crate) async fn letters_of(bus: &Bus, task_id: TaskId) -> Result<Vec<DeadLetter>, BusError> {
    let mut after = 0;
    let mut found = Vec::new();
    loop {
        let page = list(bus, after, 256).await?;
        let Some(last) = page.last() else {
            return Ok(found);
        };
        after = last.seq;
        found.extend(page.into_iter().filter(|d| d.task_id == Some(task_id)));
    }
}

impl DeadLetter {
    /// The agent the letter's envelope is addressed to (`header.to`),
    /// when its envelope could be read.
    pub(crate) fn addressed_to(&self) -> Option<&str> {
        self.message.get("header")?.get("to")?.as_str()
    }

    /// Why this letter may not stand for the stored task `record`, if it
    /// may not: the agent of its subject (who dead-lettered it: an agent
    /// may write only its own), its envelope's `header.to` and the task's
    /// agent must agree.
    pub(crate) fn disagrees_with(&self, record: &crate::task::TaskRecord) -> Option<String> {
        let agent = record.agent().as_str();
        if self.agent != agent {
            return Some(format!(
                "the letter was dead-lettered on agent `{}`'s subject; task {} is for `{agent}`",
                self.agent,
                record.task_id()
            ));
        }
        match self.addressed_to() {
            Some(to) if to != agent => Some(format!(
                "the letter's envelope is addressed to `{to}`; task {} is for `{agent}`",
                record.task_id()
            )),
            _ => None,
        }
    }
}

/// Removes a replayed dead letter.
pub(crate) async fn remove(bus: &Bus, seq: u64) -> Result<(), BusError> {
    let stream = bus
        .jetstream()
        .get_stream(bus.names().dlq_stream())
        .await
        .map_err(|e| BusError::Provision {
            what: bus.names().dlq_stream(),
            source: e.into(),
        })?;
    stream
        .delete_message(seq)
        .await
        .map(|_| ())
        .map_err(|e| BusError::Provision {
            what: format!("dead letter {seq}"),
            source: e.into(),
        })
}

/// The audit record of a replay.
pub(crate) fn replay_entry(old: TaskId, new: TaskId, seq: u64, principal: &str) -> AuditEntry {
    AuditEntry {
        actor: principal.to_string(),
        kind: "dlq.replay".into(),
        task_id: Some(new),
        correlation_id: None,
        trace_id: None,
        detail: json!({"replayed_task": old, "dlq_seq": seq}),
    }
}

/// The audit record of a dead letter refused as the source of a replay.
pub(crate) fn refused_entry(
    task: TaskId,
    letter: &DeadLetter,
    why: &str,
    principal: &str,
) -> AuditEntry {
    AuditEntry {
        actor: principal.to_string(),
        kind: "dlq.replay_refused".into(),
        task_id: Some(task),
        correlation_id: None,
        trace_id: None,
        detail: json!({
            "dlq_seq": letter.seq,
            "letter_agent": letter.agent,
            "addressed_to": letter.addressed_to(),
            "reason": why,
        }),
    }
}
