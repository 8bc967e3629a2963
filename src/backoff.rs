//! Trying again after a failure: delays that double from a first one up to
//! a ceiling, each with jitter, so processes that failed together (a
//! broker node died under all of them) do not come back in step, and
//! nothing spins while a dependency is away.

use std::time::Duration;

/// The delays before each next try of one thing that keeps failing.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    /// The first delay (before jitter).
    first: Duration,
    /// The ceiling (before jitter).
    max: Duration,
    /// Failures so far.
    failures: u32,
}

impl Backoff {
    /// Delays from `first`, doubling, up to `max` (at least `first`).
    pub fn new(first: Duration, max: Duration) -> Backoff {
        Backoff {
            first,
            max: max.max(first),
            failures: 0,
        }
    }

    /// The delay before the next try, after one more failure: `first`
    /// doubled per earlier failure, at most `max`, times a random factor
    /// between ½ and 1½.
    pub fn next_delay(&mut self) -> Duration {
        let delay = self.delay_after(self.failures);
        self.failures = self.failures.saturating_add(1);
        delay
    }

    /// The delay after `failures` earlier failures, for a caller that
    /// keeps the count itself (one count per queued item).
    pub fn delay_after(&self, failures: u32) -> Duration {
        let doubled = self
            .first
            .saturating_mul(1u32 << failures.min(20))
            .min(self.max);
        jittered(doubled)
    }

    /// Failures since the last success.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// The thing succeeded: the next failure starts from `first` again.
    pub fn reset(&mut self) {
        self.failures = 0;
    }
}

/// `d` times a random factor between ½ and 1½.
pub fn jittered(d: Duration) -> Duration {
    d.mul_f64(0.5 + fastrand::f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_ceiling_with_jitter_and_start_over_after_a_success() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let bases = [100, 200, 400, 800, 1000, 1000];
        for base in bases {
            let d = b.next_delay().as_secs_f64() * 1000.0;
            let base = f64::from(base);
            assert!(d >= base * 0.5 && d < base * 1.5, "{d} for {base}");
        }
        assert_eq!(b.failures(), 6);
        b.reset();
        let d = b.next_delay();
        assert!(d < Duration::from_millis(150), "{d:?}");
        // Jitter spreads: many draws are not all equal.
        let draws: std::collections::BTreeSet<_> =
            (0..20).map(|_| jittered(Duration::from_secs(1))).collect();
        assert!(draws.len() > 10);
    }
}
