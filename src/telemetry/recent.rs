//! The last minutes of finished tasks, for the console's overview: per
//! second, how many ended and how long they took from creation (in
//! buckets 1.5 times apart, from 0.5 ms), so that the overview shows
//! throughput and latency percentiles over a window without keeping each
//! task. One lock per finished task; the overview reads it at most a few
//! times a second.

use std::sync::{LazyLock, Mutex, PoisonError};

/// Seconds kept.
pub const WINDOW_SECONDS: u64 = 300;
/// Latency buckets: bucket `i` holds latencies up to `FIRST_MS * RATIO^i`.
const BUCKETS: usize = 40;
const FIRST_MS: f64 = 0.5;
const RATIO: f64 = 1.5;

#[derive(Clone, Copy)]
struct Second {
    /// Unix second this slot holds (a slot from an older second is stale).
    at: u64,
    ended: u64,
    failed: u64,
    latency: [u32; BUCKETS],
}

const EMPTY: Second = Second {
    at: 0,
    ended: 0,
    failed: 0,
    latency: [0; BUCKETS],
};

static RING: LazyLock<Mutex<Vec<Second>>> =
    LazyLock::new(|| Mutex::new(vec![EMPTY; WINDOW_SECONDS as usize]));

fn now_second() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

/// A task ended (`failed`: not completed) `seconds` after it was created.
pub fn ended(seconds: f64, failed: bool) {
    let ms = (seconds * 1000.0).max(0.0);
    let bucket = if ms <= FIRST_MS {
        0
    } else {
        ((ms / FIRST_MS).ln() / RATIO.ln()).ceil() as usize
    }
    .min(BUCKETS - 1);
    let at = now_second();
    let mut ring = RING.lock().unwrap_or_else(PoisonError::into_inner);
    let slot = &mut ring[(at % WINDOW_SECONDS) as usize];
    if slot.at != at {
        *slot = Second { at, ..EMPTY };
    }
    slot.ended += 1;
    slot.failed += u64::from(failed);
    slot.latency[bucket] += 1;
}

/// What the window holds.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Recent {
    /// Tasks that ended in the window.
    pub ended: u64,
    /// Of them, those that did not complete.
    pub failed: u64,
    /// Ended per second over the window.
    pub per_second: f64,
    /// Time from creation to end: the upper bound of the bucket the
    /// median falls in, in ms (none when nothing ended).
    pub p50_ms: Option<f64>,
    /// The same for the 99th percentile.
    pub p99_ms: Option<f64>,
}

/// The last `seconds` (at most [`WINDOW_SECONDS`]), up to the second
/// before this one.
pub fn recent(seconds: u64) -> Recent {
    let seconds = seconds.clamp(1, WINDOW_SECONDS - 1);
    let now = now_second();
    let ring = RING.lock().unwrap_or_else(PoisonError::into_inner);
    let mut ended = 0;
    let mut failed = 0;
    let mut latency = [0u64; BUCKETS];
    for slot in ring.iter().filter(|s| s.at < now && s.at + seconds >= now) {
        ended += slot.ended;
        failed += slot.failed;
        for (sum, n) in latency.iter_mut().zip(slot.latency) {
            *sum += u64::from(n);
        }
    }
    drop(ring);
    let quantile = |q: f64| {
        let rank = (q * ended as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        latency.iter().enumerate().find_map(|(i, n)| {
            seen += n;
            (seen >= rank).then(|| FIRST_MS * RATIO.powi(i as i32))
        })
    };
    Recent {
        ended,
        failed,
        per_second: ended as f64 / seconds as f64,
        p50_ms: (ended > 0).then(|| quantile(0.5)).flatten(),
        p99_ms: (ended > 0).then(|| quantile(0.99)).flatten(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_bound_the_latencies_they_hold() {
        // 10 ms lands in the first bucket whose bound is at least 10 ms.
        let ms: f64 = 10.0;
        let i = ((ms / FIRST_MS).ln() / RATIO.ln()).ceil() as i32;
        let bound = FIRST_MS * RATIO.powi(i);
        assert!(bound >= ms && bound / RATIO < ms, "{bound}");
    }
}
