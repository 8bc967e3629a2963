//! A task submission as clients send it (`POST /v1/tasks`).

use std::num::NonZeroU32;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::codec::{DecodeError, Validate};
use crate::envelope::{
    Action, AgentName, CorrelationId, Envelope, IdempotencyKey, Priority, ResponseMode, Scope,
    Sender, Timestamp,
};
use crate::store::Fingerprint;

/// One task to submit. Decoded strictly: unknown fields are refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRequest {
    /// The target agent.
    pub to: AgentName,
    /// The skill to run.
    pub action: Action,
    /// Its parameters.
    #[serde(default)]
    pub params: Map<String, Value>,
    /// Makes a retried submission the same submission; default: none (every
    /// submission is new, and the task id becomes the key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<IdempotencyKey>,
    /// Queue priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<Priority>,
    /// How the answer is wanted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_mode: Option<ResponseMode>,
    /// Scopes the task needs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required_scopes: Vec<Scope>,
    /// Where to POST the result (`response_mode: callback`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callback_url: Option<String>,
    /// When the result stops being wanted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Timestamp>,
    /// Attempt budget (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<NonZeroU32>,
    /// The request this task belongs to; default: a new one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<CorrelationId>,
}

impl Validate for TaskRequest {
    fn validate(&self) -> Result<(), DecodeError> {
        self.envelope(Sender::orchestrator()).validate()
    }
}

impl TaskRequest {
    /// The envelope for this request, sent by `from`.
    pub fn envelope(&self, from: Sender) -> Envelope {
        let mut env = Envelope::new(
            from,
            self.to.clone(),
            self.action.clone(),
            self.params.clone(),
        );
        if let Some(key) = &self.idempotency_key {
            env.control.idempotency_key = key.clone();
        }
        if let Some(c) = &self.correlation_id {
            env.header.correlation_id = c.clone();
        }
        let control = &mut env.control;
        control.priority = self.priority.unwrap_or_default();
        control.response_mode = self.response_mode.unwrap_or_default();
        control.required_scopes.clone_from(&self.required_scopes);
        control.callback_url.clone_from(&self.callback_url);
        control.deadline = self.deadline;
        if let Some(m) = self.max_attempts {
            control.max_attempts = m;
        }
        env
    }

    /// What makes two submissions with one idempotency key the same: every
    /// field but the key itself.
    pub fn fingerprint(&self) -> Fingerprint {
        let mut same = self.clone();
        same.idempotency_key = None;
        Fingerprint::of(&same)
    }
}
