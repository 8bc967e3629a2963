//! When the next attempt of a task runs: the orchestrator's retry policy, a
//! pure function of the attempt that failed and what the handler asked.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Retry delays: `base · 2^(attempt−1)`, at most `max`, unless the handler
/// asked for a delay of its own (`retry_after_seconds`), which is also
/// capped at `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetryPolicy {
    /// The first delay (default 1 s).
    #[serde(with = "humantime_serde")]
    pub base: Duration,
    /// The longest delay (default 60 s).
    #[serde(with = "humantime_serde")]
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

#[cfg(test)]
mod tests {
    use super::*;

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
