//! What a handler reports, and the one place where that becomes a
//! JetStream acknowledgement and a reported state.

use std::time::Duration;

use serde_json::Value;

use crate::event::{ErrorInfo, ReportedState};

/// How a handler's run of one task ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Finished with a result.
    Completed {
        /// The result value.
        result: Value,
        /// Artifacts produced, if any.
        artifacts: Vec<Value>,
    },
    /// Failed; `error.retryable` says whether another attempt may help.
    Failed {
        /// What went wrong.
        error: ErrorInfo,
        /// How long to wait before the next attempt, if the handler knows.
        retry_after: Option<Duration>,
    },
    /// The task was refused (bad input, unknown action, missing scope).
    Rejected(ErrorInfo),
    /// The task was stopped by a cancel request.
    Canceled,
}

impl Outcome {
    /// A completed outcome with no artifacts.
    pub fn completed(result: Value) -> Self {
        Outcome::Completed {
            result,
            artifacts: Vec::new(),
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

/// What the worker tells JetStream about a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Done: remove the message.
    Ack,
    /// Deliver it again after this delay (the next attempt).
    Nak(Duration),
    /// Done without success: never deliver it again.
    Term,
}

/// Retry delays: `base · 2^(attempt−1)`, at most `max`, unless the handler
/// asked for a delay of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The first delay.
    pub base: Duration,
    /// The longest delay.
    pub max: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            base: Duration::from_secs(1),
            max: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// The delay before the attempt after `attempt`.
    pub fn delay(&self, attempt: u32, asked: Option<Duration>) -> Duration {
        if let Some(d) = asked {
            return d.min(self.max);
        }
        let factor = 2u32.saturating_pow(attempt.saturating_sub(1).min(20));
        self.base.saturating_mul(factor).min(self.max)
    }
}

/// Settles an outcome of `attempt` (of `max_attempts`): the state reported
/// to the orchestrator and what JetStream is told. The only place failure
/// kinds become acknowledgements.
pub fn settle(
    outcome: &Outcome,
    attempt: u32,
    max_attempts: u32,
    policy: &RetryPolicy,
) -> (ReportedState, Disposition) {
    match outcome {
        Outcome::Completed { .. } => (ReportedState::Completed, Disposition::Ack),
        Outcome::Failed { error, retry_after } if error.retryable && attempt < max_attempts => (
            ReportedState::Failed,
            Disposition::Nak(policy.delay(attempt, *retry_after)),
        ),
        Outcome::Failed { .. } => (ReportedState::Failed, Disposition::Term),
        Outcome::Rejected(_) => (ReportedState::Rejected, Disposition::Term),
        Outcome::Canceled => (ReportedState::Canceled, Disposition::Term),
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
        error: None,
        retry_after_seconds: None,
        at: crate::envelope::Timestamp::now(),
    }
}

/// The event that reports `outcome` of `attempt` of the task in `envelope`.
pub fn event_for(
    envelope: &crate::envelope::Envelope,
    attempt: u32,
    state: ReportedState,
    outcome: &Outcome,
) -> crate::event::WorkerEvent {
    let mut event = report(envelope, attempt, state);
    match outcome {
        Outcome::Completed { result, artifacts } => {
            event.result = Some(result.clone());
            event.artifacts.clone_from(artifacts);
        }
        Outcome::Failed { error, retry_after } => {
            event.error = Some(error.clone());
            event.retry_after_seconds = retry_after.map(|d| d.as_secs());
        }
        Outcome::Rejected(error) => event.error = Some(error.clone()),
        Outcome::Canceled => {}
    }
    event
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_settles_in_one_place() {
        let p = RetryPolicy::default();
        let done = Outcome::completed(Value::Null);
        assert_eq!(
            settle(&done, 1, 3, &p),
            (ReportedState::Completed, Disposition::Ack)
        );
        let retry = Outcome::retryable("upstream_timeout", "slow");
        assert_eq!(
            settle(&retry, 1, 3, &p),
            (
                ReportedState::Failed,
                Disposition::Nak(Duration::from_secs(1))
            )
        );
        assert_eq!(
            settle(&retry, 2, 3, &p),
            (
                ReportedState::Failed,
                Disposition::Nak(Duration::from_secs(2))
            )
        );
        assert_eq!(
            settle(&retry, 3, 3, &p),
            (ReportedState::Failed, Disposition::Term)
        );
        let permanent = Outcome::permanent("bad_input", "no");
        assert_eq!(
            settle(&permanent, 1, 3, &p),
            (ReportedState::Failed, Disposition::Term)
        );
        let rejected = Outcome::Rejected(ErrorInfo::new("unknown_action", "x", false));
        assert_eq!(
            settle(&rejected, 1, 3, &p),
            (ReportedState::Rejected, Disposition::Term)
        );
        assert_eq!(
            settle(&Outcome::Canceled, 1, 3, &p),
            (ReportedState::Canceled, Disposition::Term)
        );
    }

    #[test]
    fn retry_delays_grow_and_are_capped_and_a_handler_may_choose() {
        let p = RetryPolicy {
            base: Duration::from_millis(100),
            max: Duration::from_secs(1),
        };
        assert_eq!(p.delay(1, None), Duration::from_millis(100));
        assert_eq!(p.delay(3, None), Duration::from_millis(400));
        assert_eq!(p.delay(30, None), Duration::from_secs(1));
        assert_eq!(
            p.delay(1, Some(Duration::from_millis(5))),
            Duration::from_millis(5)
        );
        assert_eq!(
            p.delay(1, Some(Duration::from_secs(99))),
            Duration::from_secs(1)
        );
    }
}
