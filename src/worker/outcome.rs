//! What a handler reports, and the event that reports it.

use std::time::Duration;

use serde_json::Value;

use crate::artifact::Artifact;
use crate::event::{ErrorInfo, ReportedState};

/// How a handler's run of one task ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Finished with a result.
    Completed {
        /// The result value.
        result: Value,
        /// Artifacts produced, if any (beside those sent as progress).
        artifacts: Vec<Artifact>,
        /// A closing message for people, if any.
        message: Option<String>,
    },
    /// Finished by answering with a message alone: an A2A client gets a
    /// Message, not the task (the task is kept all the same, completed).
    Replied(String),
    /// The handler needs input from a person before it can go on: the
    /// task waits in `input_required`; the message says what is needed.
    InputRequired(String),
    /// Failed; `error.retryable` says whether another attempt may help.
    Failed {
        /// What went wrong.
        error: ErrorInfo,
        /// How long to wait before the next attempt, if the handler knows.
        retry_after: Option<Duration>,
    },
    /// The task was refused (bad input, unknown action, missing scope).
    Rejected(ErrorInfo),
    /// The task needs authorization first (its token is missing or expired).
    AuthRequired(ErrorInfo),
    /// The task was stopped by a cancel request.
    Canceled,
}

impl Outcome {
    /// A short name of the outcome, for metrics and spans: `completed`,
    /// `failed_retryable`, `failed`, `rejected`, `auth_required`,
    /// `canceled`.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Completed { .. } => "completed",
            Outcome::InputRequired(_) => "input_required",
            Outcome::Replied(_) => "completed",
            Outcome::Failed { error, .. } if error.retryable => "failed_retryable",
            Outcome::Failed { .. } => "failed",
            Outcome::Rejected(_) => "rejected",
            Outcome::AuthRequired(_) => "auth_required",
            Outcome::Canceled => "canceled",
        }
    }

    /// This outcome with the values of `params`' sensitive fields, `held`
    /// (the credentials the worker holds) and `token` (the task's) scrubbed
    /// from its words (an error's message, a question for a person: they
    /// are reported, logged and audited; the result is the task's output
    /// and is kept as it is). Params are only looked through when there
    /// is a message.
    pub fn redacted(
        self,
        fields: &crate::redact::SensitiveFields,
        params: &serde_json::Map<String, Value>,
        held: &crate::redact::Secrets,
        token: Option<&crate::envelope::BearerToken>,
    ) -> Outcome {
        if matches!(
            self,
            Outcome::Completed { .. } | Outcome::Replied(_) | Outcome::Canceled
        ) {
            return self;
        }
        let token = crate::redact::Secrets::credentials(token.map(|t| t.expose().to_string()));
        self.scrubbed(&fields.secrets(params).and(held).and(&token))
    }

    /// This outcome with every one of `secrets` scrubbed from its error's
    /// message or its question.
    fn scrubbed(self, secrets: &crate::redact::Secrets) -> Outcome {
        if secrets.is_empty() {
            return self;
        }
        let scrub = |mut e: ErrorInfo| {
            e.message = secrets.scrub(&e.message);
            e
        };
        match self {
            Outcome::Failed { error, retry_after } => Outcome::Failed {
                error: scrub(error),
                retry_after,
            },
            Outcome::Rejected(e) => Outcome::Rejected(scrub(e)),
            Outcome::AuthRequired(e) => Outcome::AuthRequired(scrub(e)),
            Outcome::InputRequired(question) => Outcome::InputRequired(secrets.scrub(&question)),
            other => other,
        }
    }

    /// A completed outcome with no artifacts.
    pub fn completed(result: Value) -> Self {
        Outcome::Completed {
            result,
            artifacts: Vec::new(),
            message: None,
        }
    }

    /// A failure another attempt may fix.
    pub fn retryable(code: &'static str, message: impl Into<String>) -> Self {
        Outcome::Failed {
            error: ErrorInfo::new(code, message, true),
            retry_after: None,
        }
    }

    /// A failure no attempt will fix.
    pub fn permanent(code: &'static str, message: impl Into<String>) -> Self {
        Outcome::Failed {
            error: ErrorInfo::new(code, message, false),
            retry_after: None,
        }
    }
}

impl Outcome {
    /// The state this outcome is reported as. Every outcome is final for
    /// its attempt: a retryable failure is reported as `failed` with
    /// `error.retryable`, and the orchestrator decides whether and when the
    /// next attempt runs.
    pub fn state(&self) -> ReportedState {
        match self {
            Outcome::Completed { .. } => ReportedState::Completed,
            Outcome::InputRequired(_) => ReportedState::InputRequired,
            Outcome::Replied(_) => ReportedState::Completed,
            Outcome::Failed { .. } => ReportedState::Failed,
            Outcome::Rejected(_) => ReportedState::Rejected,
            Outcome::AuthRequired(_) => ReportedState::AuthRequired,
            Outcome::Canceled => ReportedState::Canceled,
        }
    }
}

/// A report of `state` for `attempt` of the task in `envelope`, with no
/// result or error.
pub fn report(
    envelope: &crate::envelope::Envelope,
    attempt: u32,
    state: ReportedState,
) -> crate::event::WorkerEvent {
    crate::event::WorkerEvent {
        v: crate::envelope::Version,
        task_id: envelope.header.task_id,
        correlation_id: envelope.header.correlation_id.clone(),
        agent: envelope.header.to.clone(),
        attempt: std::num::NonZeroU32::new(attempt).unwrap_or(std::num::NonZeroU32::MIN),
        state,
        result: None,
        artifacts: Vec::new(),
        message: None,
        progress: None,
        reply: false,
        error: None,
        retry_after_seconds: None,
        instance: None,
        resumed: false,
        at: crate::envelope::Timestamp::now(),
    }
}

/// The event that reports `outcome` of `attempt` of the task in `envelope`.
pub fn event_for(
    envelope: &crate::envelope::Envelope,
    attempt: u32,
    outcome: &Outcome,
) -> crate::event::WorkerEvent {
    let mut event = report(envelope, attempt, outcome.state());
    match outcome {
        Outcome::Completed {
            result,
            artifacts,
            message,
        } => {
            event.result = Some(result.clone());
            event.artifacts.clone_from(artifacts);
            event.message.clone_from(message);
        }
        Outcome::InputRequired(message) => event.message = Some(message.clone()),
        Outcome::Replied(message) => {
            event.message = Some(message.clone());
            event.reply = true;
        }
        Outcome::Failed { error, retry_after } => {
            event.error = Some(error.clone());
            event.retry_after_seconds = retry_after.map(|d| d.as_secs());
        }
        Outcome::Rejected(error) | Outcome::AuthRequired(error) => {
            event.error = Some(error.clone());
        }
        Outcome::Canceled => {}
    }
    event
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_is_reported_as_its_final_state() {
        let cases = [
            (Outcome::completed(Value::Null), ReportedState::Completed),
            (
                Outcome::retryable("upstream_timeout", "slow"),
                ReportedState::Failed,
            ),
            (Outcome::permanent("bad_input", "no"), ReportedState::Failed),
            (
                Outcome::Rejected(ErrorInfo::new("unknown_action", "x", false)),
                ReportedState::Rejected,
            ),
            (Outcome::Canceled, ReportedState::Canceled),
            (
                Outcome::InputRequired("which account?".into()),
                ReportedState::InputRequired,
            ),
        ];
        for (outcome, state) in cases {
            assert_eq!(outcome.state(), state, "{outcome:?}");
        }
    }

    #[test]
    fn a_retryable_failure_carries_its_flag_and_delay_in_the_event() {
        let envelope = crate::envelope::Envelope::new(
            crate::envelope::Sender::orchestrator(),
            "a".parse().unwrap(),
            "b".parse().unwrap(),
            serde_json::Map::new(),
        );
        let outcome = Outcome::Failed {
            error: ErrorInfo::new("upstream_timeout", "slow", true),
            retry_after: Some(Duration::from_secs(7)),
        };
        let event = event_for(&envelope, 2, &outcome);
        assert_eq!(event.attempt.get(), 2);
        assert_eq!(event.state, ReportedState::Failed);
        assert!(event.error.unwrap().retryable);
        assert_eq!(event.retry_after_seconds, Some(7));
    }
}
