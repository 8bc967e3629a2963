//! Quiet under failure: a failure that repeats (every publish while a
//! stream elects its leader, every claim while the bucket is away) is
//! written once per condition per interval, and the next line about it
//! says how many were left out (`suppressed`). A burst that ends is summed
//! up by [`spawn_reporter`] one interval later, so no count is lost.
//!
//! Use [`warn_quietly!`] with a condition name (`"worker.claim_unavailable"`)
//! in place of `tracing::warn!` where a failure can repeat.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How often one condition is written at most.
pub const INTERVAL: Duration = Duration::from_secs(10);

/// Conditions and when each was last written.
pub struct Quiet {
    /// At most one line per condition per this long.
    interval: Duration,
    /// Per condition: when it was last written, and how many lines were
    /// left out since.
    seen: Mutex<HashMap<&'static str, (Instant, u64)>>,
}

impl Quiet {
    /// Conditions written at most once per `interval` each.
    pub fn new(interval: Duration) -> Quiet {
        Quiet {
            interval,
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// Whether a line about `condition` is to be written now: `Some(n)`,
    /// with `n` lines about it left out since the last one; `None` (and
    /// counted) when one was written less than an interval ago.
    pub fn admit(&self, condition: &'static str) -> Option<u64> {
        let now = Instant::now();
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        match seen.get_mut(condition) {
            Some((at, left_out)) if now.duration_since(*at) < self.interval => {
                *left_out += 1;
                None
            }
            Some((at, left_out)) => {
                *at = now;
                Some(std::mem::take(left_out))
            }
            None => {
                seen.insert(condition, (now, 0));
                Some(0)
            }
        }
    }

    /// The conditions whose last line is an interval old with lines left
    /// out since, and how many: their counts are taken (and a condition
    /// quiet for two intervals is forgotten).
    pub fn take_left_out(&self) -> Vec<(&'static str, u64)> {
        let now = Instant::now();
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = Vec::new();
        seen.retain(|condition, (at, left_out)| {
            let age = now.duration_since(*at);
            if age >= self.interval && *left_out > 0 {
                out.push((*condition, std::mem::take(left_out)));
                *at = now;
            }
            age < self.interval * 2 || *left_out > 0
        });
        out.sort();
        out
    }
}

/// The process's conditions.
static QUIET: LazyLock<Quiet> = LazyLock::new(|| Quiet::new(INTERVAL));

/// [`Quiet::admit`] on the process's conditions.
pub fn admit(condition: &'static str) -> Option<u64> {
    QUIET.admit(condition)
}

/// Whether a reporter runs in this process.
static REPORTING: AtomicBool = AtomicBool::new(false);

/// Starts (once per process, in the current runtime) the task that writes
/// the counts of lines left out of bursts that ended.
pub fn spawn_reporter() {
    if REPORTING.swap(true, Ordering::SeqCst) {
        return;
    }
    /// Lets another runtime start a reporter when this one's ends.
    struct Running;
    impl Drop for Running {
        fn drop(&mut self) {
            REPORTING.store(false, Ordering::SeqCst);
        }
    }
    tokio::spawn(async {
        let _running = Running;
        let mut tick = tokio::time::interval(INTERVAL);
        loop {
            tick.tick().await;
            for (condition, suppressed) in QUIET.take_left_out() {
                tracing::warn!(
                    condition,
                    suppressed,
                    "{suppressed} more of the same ({condition}) in the last {}s",
                    INTERVAL.as_secs()
                );
            }
        }
    });
}

/// `tracing::warn!` for a failure that can repeat: written at most once per
/// interval per condition (the first argument, a `&'static str`), with the
/// field `suppressed` counting the lines left out since the last one.
macro_rules! warn_quietly {
    ($condition:expr, $($rest:tt)+) => {
        if let Some(suppressed) = $crate::telemetry::quiet::admit($condition) {
            ::tracing::warn!(condition = $condition, suppressed, $($rest)+);
        }
    };
}
pub(crate) use warn_quietly;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_condition_per_interval_and_the_rest_counted() {
        let q = Quiet::new(Duration::from_millis(200));
        assert_eq!(q.admit("a"), Some(0));
        assert_eq!(q.admit("b"), Some(0), "conditions are apart");
        for _ in 0..5 {
            assert_eq!(q.admit("a"), None);
        }
        assert!(q.take_left_out().is_empty(), "the interval has not passed");
        std::thread::sleep(Duration::from_millis(220));
        assert_eq!(q.admit("a"), Some(5), "the next line counts the five");
        assert_eq!(q.admit("a"), None);
        assert_eq!(q.admit("a"), None);
        std::thread::sleep(Duration::from_millis(220));
        // The burst ended: the reporter's look finds its two.
        assert_eq!(q.take_left_out(), vec![("a", 2)]);
        assert!(q.take_left_out().is_empty());
    }
}
