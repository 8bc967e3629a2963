//! Readiness as a process reports it on `/readyz` and as the `orch_ready`
//! gauge: the last verdict of its readiness checks, with what they found.
//! The checks themselves are the process's (the orchestrator's or a
//! worker's); they run in the background every [`CHECK_EVERY`], so a probe
//! that is called often costs the broker nothing.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// How often the checks run.
pub const CHECK_EVERY: Duration = Duration::from_secs(2);

/// The last verdict, shared between the checks and the probe.
#[derive(Debug, Clone, Default)]
pub struct Readiness(Arc<Mutex<Option<(bool, Value)>>>);

impl Readiness {
    /// Records a verdict and what it rests on.
    pub fn set(&self, ok: bool, detail: Value) {
        super::metrics::set_ready(ok);
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some((ok, detail));
    }

    /// The last verdict; before the first check, not ready.
    pub fn get(&self) -> (bool, Value) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .unwrap_or_else(|| (false, json!({"checked": false})))
    }
}

/// Tells a queue that waits and does not move from one that moves or is
/// empty: fed a reading of the queue every check.
#[derive(Debug)]
pub struct StallWatch {
    /// Waiting with nothing moved for this long is a stall (zero: never).
    after: Duration,
    /// The last reading's mark.
    mark: Option<u64>,
    /// When the mark last changed, or nothing waited.
    moved_at: Instant,
}

impl StallWatch {
    /// A watch calling `after` without movement a stall (zero: never).
    pub fn new(after: Duration) -> StallWatch {
        StallWatch {
            after,
            mark: None,
            moved_at: Instant::now(),
        }
    }

    /// Takes a reading: `waiting` items wait, `mark` changes whenever
    /// anything moves. How long the queue has stalled, when it has.
    pub fn observe(&mut self, waiting: u64, mark: u64) -> Option<Duration> {
        let now = Instant::now();
        if waiting == 0 || self.mark != Some(mark) {
            self.moved_at = now;
        }
        self.mark = Some(mark);
        let still = now.duration_since(self.moved_at);
        (!self.after.is_zero() && still >= self.after).then_some(still)
    }

    /// [`StallWatch::observe`], as readiness reports it: `{"waiting",
    /// "seconds", "why"}` when stalled, `why` saying that `waiting` `what`
    /// and nothing moved.
    pub fn report(&mut self, waiting: u64, mark: u64, what: &str) -> Option<Value> {
        self.observe(waiting, mark).map(|still| {
            json!({
                "waiting": waiting,
                "seconds": still.as_secs(),
                "why": format!("{waiting} {what}, and nothing has moved for {}s", still.as_secs()),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_waiting_work_that_does_not_move_is_a_stall() {
        let mut w = StallWatch::new(Duration::from_millis(50));
        assert_eq!(w.observe(5, 1), None);
        std::thread::sleep(Duration::from_millis(60));
        assert!(w.observe(5, 1).is_some(), "waited and nothing moved");
        assert_eq!(w.observe(5, 2), None, "it moved");
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(w.observe(0, 2), None, "nothing waits");
        let mut never = StallWatch::new(Duration::ZERO);
        std::thread::sleep(Duration::from_millis(10));
        assert_eq!(never.observe(5, 1), None);
    }
}
