//! The times of a schedule: a cron expression (UTC) or a fixed interval,
//! whose times are whole multiples of it since the Unix epoch (so they do
//! not move when the orchestrator restarts).

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::Schedule;
use crate::envelope::Timestamp;

impl Schedule {
    /// The input of each run: `input`, or `{}`.
    pub fn run_input(&self) -> serde_json::Value {
        self.input
            .clone()
            .unwrap_or_else(|| serde_json::Value::Object(Default::default()))
    }

    /// The first time strictly after `t`.
    pub fn next_after(&self, t: Timestamp) -> Option<Timestamp> {
        if let Some(cron) = self.cron() {
            return cron
                .find_next_occurrence(&to_chrono(t)?, false)
                .ok()
                .and_then(from_chrono);
        }
        let every = interval_nanos(self.every?)?;
        let now = t.as_offset_date_time().unix_timestamp_nanos();
        let next = (now.div_euclid(every) + 1) * every;
        from_nanos(next)
    }

    /// The last time at or before `t`.
    pub fn latest_at_or_before(&self, t: Timestamp) -> Option<Timestamp> {
        if let Some(cron) = self.cron() {
            return cron
                .find_previous_occurrence(&to_chrono(t)?, true)
                .ok()
                .and_then(from_chrono);
        }
        let every = interval_nanos(self.every?)?;
        let now = t.as_offset_date_time().unix_timestamp_nanos();
        from_nanos(now.div_euclid(every) * every)
    }

    fn cron(&self) -> Option<croner::Cron> {
        self.cron.as_deref().and_then(|c| c.parse().ok())
    }
}

fn interval_nanos(every: Duration) -> Option<i128> {
    let nanos = i128::try_from(every.as_nanos()).ok()?;
    (nanos > 0).then_some(nanos)
}

fn from_nanos(nanos: i128) -> Option<Timestamp> {
    time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .ok()
        .map(Timestamp::from)
}

fn to_chrono(t: Timestamp) -> Option<DateTime<Utc>> {
    let t = t.as_offset_date_time();
    DateTime::from_timestamp(t.unix_timestamp(), t.nanosecond())
}

fn from_chrono(t: DateTime<Utc>) -> Option<Timestamp> {
    from_nanos(i128::from(t.timestamp_nanos_opt()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trigger::{CatchUp, Overlap};

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn schedule(cron: Option<&str>, every: Option<Duration>) -> Schedule {
        Schedule {
            cron: cron.map(str::to_string),
            every,
            catch_up: CatchUp::Skip,
            overlap: Overlap::Skip,
            input: None,
        }
    }

    #[test]
    fn cron_times_are_utc_and_intervals_are_multiples_since_the_epoch() {
        let weekdays = schedule(Some("0 9 * * 1-5"), None);
        // 2026-11-20 is a Friday.
        let friday = at("2026-11-20T09:00:00Z");
        assert_eq!(
            weekdays.next_after(friday),
            Some(at("2026-11-23T09:00:00Z"))
        );
        assert_eq!(
            weekdays.latest_at_or_before(friday),
            Some(friday),
            "at a time is at it"
        );
        assert_eq!(
            weekdays.latest_at_or_before(at("2026-11-22T12:00:00Z")),
            Some(friday)
        );
        let seconds = schedule(Some("*/5 * * * * *"), None);
        assert_eq!(
            seconds.next_after(at("2026-11-22T10:00:03Z")),
            Some(at("2026-11-22T10:00:05Z"))
        );

        let ten = schedule(None, Some(Duration::from_secs(600)));
        assert_eq!(
            ten.next_after(at("2026-11-22T10:04:59.5Z")),
            Some(at("2026-11-22T10:10:00Z"))
        );
        assert_eq!(
            ten.next_after(at("2026-11-22T10:10:00Z")),
            Some(at("2026-11-22T10:20:00Z")),
            "strictly after"
        );
        assert_eq!(
            ten.latest_at_or_before(at("2026-11-22T10:19:59Z")),
            Some(at("2026-11-22T10:10:00Z"))
        );
    }
}
