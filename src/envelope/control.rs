//! The envelope's control: idempotency key, priority, response mode,
//! required scopes, callback, deadline and attempts.

use std::num::NonZeroU32;

use serde::{Deserialize, Serialize};

use super::{IdempotencyKey, Scope, Timestamp};

/// The envelope's delivery part.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Control {
    /// Makes a retried request the same request, at both ends.
    pub idempotency_key: IdempotencyKey,
    /// Queue priority: workers take high before normal before low.
    #[serde(default)]
    pub priority: Priority,
    /// How the requester wants the answer.
    #[serde(default)]
    pub response_mode: ResponseMode,
    /// Scopes the task's token must carry.
    #[serde(default)]
    pub required_scopes: Vec<Scope>,
    /// Where to POST the result when `response_mode` is `callback`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callback_url: Option<String>,
    /// After this time the result is no longer wanted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Timestamp>,
    /// Which attempt this delivery is, from 1.
    #[serde(default = "one")]
    pub attempt: NonZeroU32,
    /// How many attempts the task may take in all.
    #[serde(default = "default_max_attempts")]
    pub max_attempts: NonZeroU32,
}

pub(super) fn one() -> NonZeroU32 {
    NonZeroU32::MIN
}

pub(super) fn default_max_attempts() -> NonZeroU32 {
    NonZeroU32::new(3).unwrap_or(NonZeroU32::MIN)
}

/// Queue priority.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    /// Taken first.
    High,
    /// The default.
    #[default]
    Normal,
    /// Taken when nothing else waits.
    Low,
}

impl Priority {
    /// Every priority, highest first (the order workers fetch in).
    pub const ALL: [Priority; 3] = [Priority::High, Priority::Normal, Priority::Low];

    /// The name used in subjects and JSON.
    pub fn as_str(&self) -> &'static str {
        match self {
            Priority::High => "high",
            Priority::Normal => "normal",
            Priority::Low => "low",
        }
    }
}

/// How the requester wants the answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResponseMode {
    /// The requester waits for the result.
    Sync,
    /// The requester polls or subscribes for the result.
    #[default]
    Async,
    /// The result is POSTed to `callback_url`.
    Callback,
}
