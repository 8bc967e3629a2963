//! Scheduled triggers: each `run_mode: schedule` trigger starts a run at
//! each time of its schedule, follows its catch-up policy for times missed
//! while the orchestrator was down, and its overlap policy for a time that
//! comes while its last run is unfinished (docs/triggers.md states them).
//!
//! How far a schedule has been handled is one record, its cursor, written
//! in the same transaction as the run it starts: a crash at any point
//! starts a time's run once or not yet, never twice.

use std::sync::Arc;
use std::time::Duration;

use crate::telemetry::quiet::warn_quietly;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::access::Grants;
use crate::envelope::Timestamp;
use crate::run::{Origin, RunRecord};
use crate::service::runs::RunStart;
use crate::service::{Caller, Orchestrator, ServiceError};
use crate::store::ScheduleCursor;
use crate::trigger::{CatchUp, Overlap, RunMode, Schedule, Trigger};

/// The longest the loop sleeps: the clock is read again at least this
/// often.
const MAX_SLEEP: Duration = Duration::from_secs(30);

/// How often a queued time checks whether the run it waits for ended,
/// and how soon a failed turn is tried again.
const RECHECK: Duration = Duration::from_secs(1);

/// How late a time may be seen and still count as on time, at most: a
/// time seen later was missed (the orchestrator was down).
const GRACE: Duration = Duration::from_secs(5);

/// What a schedule does now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Turn {
    /// Nothing until this time.
    Wait(Timestamp),
    /// Start a run for this time (on time, or the one run that makes up
    /// for missed times).
    Fire(Timestamp),
    /// No run for the missed times up to this one (`catch_up: skip`).
    Miss(Timestamp),
}

/// Decides what `schedule` does at `now`, given how far it was handled.
/// A schedule seen for the first time does not make up for times before.
pub(crate) fn turn(schedule: &Schedule, handled: Option<Timestamp>, now: Timestamp) -> Turn {
    let next = schedule.next_after(now).unwrap_or(now.after(MAX_SLEEP));
    let Some(latest) = schedule.latest_at_or_before(now) else {
        return Turn::Wait(next);
    };
    if handled.is_some_and(|h| h >= latest) {
        return Turn::Wait(next);
    }
    let period: Duration = (next.as_offset_date_time() - latest.as_offset_date_time())
        .try_into()
        .unwrap_or(GRACE);
    let on_time =
        (now.as_offset_date_time() - latest.as_offset_date_time()) <= GRACE.min(period / 2);
    match (on_time, handled, schedule.catch_up) {
        (true, _, _) => Turn::Fire(latest),
        (false, None, _) => Turn::Wait(next),
        (false, Some(_), CatchUp::RunOnce) => Turn::Fire(latest),
        (false, Some(_), CatchUp::Skip) => Turn::Miss(latest),
    }
}

/// Runs every scheduled trigger's schedule until `stop` fires, following
/// the triggers as they are reloaded.
pub(crate) async fn drive(o: Orchestrator, stop: CancellationToken) {
    let mut triggers = o.watch_triggers();
    loop {
        let current = Arc::clone(&triggers.borrow_and_update());
        let now = Timestamp::now();
        let mut wake = now.after(MAX_SLEEP);
        for trigger in current.loaded.values() {
            let Some(schedule) = trigger
                .schedule
                .as_ref()
                .filter(|_| trigger.run_mode == RunMode::Schedule)
            else {
                continue;
            };
            let at = match advance(&o, trigger, schedule, now).await {
                Ok(at) => at,
                Err(e) => {
                    warn_quietly!("orchestrator.schedule_failed", trigger_id = %trigger.id, error = %e, "schedule: will try again");
                    now.after(RECHECK)
                }
            };
            wake = wake.min(at);
        }
        tokio::select! {
            () = stop.cancelled() => return,
            changed = triggers.changed() => if changed.is_err() { return },
            () = tokio::time::sleep(wake.remaining()) => {}
        }
    }
}

/// The schedule's principal: the starter of its runs, with the trigger's
/// scopes.
fn starter(trigger: &Trigger) -> Caller {
    Caller::new(
        format!("schedule:{}", trigger.id),
        Grants::new(trigger.required_scopes.iter().map(|s| s.as_str())),
    )
}

/// Does what the schedule needs now; returns when to look again.
async fn advance(
    o: &Orchestrator,
    trigger: &Trigger,
    schedule: &Schedule,
    now: Timestamp,
) -> Result<Timestamp, ServiceError> {
    let store = o.store();
    let cursor = store.schedule_cursor(&trigger.id)?;
    let (handled, last_run, queued) = match &cursor {
        Some(c) => (Some(c.slot), c.run, c.queued),
        None => (None, None, None),
    };
    let caller = starter(trigger);
    let last = match last_run {
        Some(run) => store.run(run)?,
        None => None,
    };
    let unfinished = last.as_ref().is_some_and(|r| !r.state.is_terminal());
    // A queued time starts once the run it waits for has ended.
    if let (Some(handled), Some(queued), false) = (handled, queued, unfinished) {
        start(o, trigger, schedule, queued, handled, &caller).await?;
        return Ok(now);
    }
    // What the cursor becomes when a time gets no run now, and why.
    let (slot, queued, kind) = match turn(schedule, handled, now) {
        Turn::Wait(at) if queued.is_some() => return Ok(at.min(now.after(RECHECK))),
        Turn::Wait(at) => return Ok(at),
        Turn::Miss(slot) => (slot, queued, "schedule.missed"),
        Turn::Fire(slot) if ran_past(last.as_ref(), slot) && schedule.overlap == Overlap::Queue => {
            (slot, Some(slot), "schedule.queued")
        }
        Turn::Fire(slot) if ran_past(last.as_ref(), slot) && schedule.overlap == Overlap::Skip => {
            (slot, None, "schedule.skipped")
        }
        Turn::Fire(slot) => {
            start(o, trigger, schedule, slot, slot, &caller).await?;
            return Ok(now);
        }
    };
    let moved = ScheduleCursor {
        slot,
        run: last_run,
        queued,
    };
    store
        .set_schedule_cursor(&trigger.id, moved, &caller.principal, kind)
        .await?;
    info!(trigger_id = %trigger.id, %slot, kind, "schedule: no run for this time now");
    Ok(now)
}

/// Whether time `at` came while `last` was unfinished: it runs still, or
/// ended after `at`. Judged by the time, not by when the loop got to it: a
/// loop that wakes late must not start a run `skip` would have refused.
fn ran_past(last: Option<&RunRecord>, at: Timestamp) -> bool {
    last.is_some_and(|r| !r.state.is_terminal() || r.updated_at > at)
}

/// Starts the run for time `at`; the cursor moves to `handled`.
async fn start(
    o: &Orchestrator,
    trigger: &Trigger,
    schedule: &Schedule,
    at: Timestamp,
    handled: Timestamp,
    caller: &Caller,
) -> Result<(), ServiceError> {
    let started = o
        .begin_run(
            &trigger.id,
            schedule.run_input(),
            None,
            RunStart {
                origin: Origin::Schedule { at },
                slot: Some(handled),
                context: None,
                callback_url: None,
            },
            caller,
        )
        .await?;
    info!(trigger_id = %trigger.id, run_id = %started.record().run_id, %at, "schedule: run started");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn every_ten_minutes(catch_up: CatchUp) -> Schedule {
        Schedule {
            cron: None,
            every: Some(Duration::from_secs(600)),
            catch_up,
            overlap: Overlap::Skip,
            input: None,
        }
    }

    /// A time is judged against the run's end, not against when the loop
    /// looked: a run that ended just after the time still overlapped it.
    #[test]
    fn a_time_overlaps_a_run_that_ended_after_it() {
        let trigger: Trigger =
            serde_norway::from_str("id: t\nsteps: [{id: a, agent: x, action: y}]").unwrap();
        let mut run = RunRecord::new(
            crate::run::RunId::new(),
            &trigger,
            serde_json::Value::Null,
            crate::run::Origin::Request,
            "alice".into(),
            Grants::all(),
        );
        let time = at("2026-11-22T10:10:00Z");
        assert!(!ran_past(None, time));
        assert!(ran_past(Some(&run), time), "a run still working");
        run.state = crate::run::RunState::Completed;
        run.updated_at = at("2026-11-22T10:10:00.048Z");
        assert!(ran_past(Some(&run), time), "ended 48 ms after the time");
        run.updated_at = at("2026-11-22T10:09:59Z");
        assert!(!ran_past(Some(&run), time), "ended before the time");
    }

    #[test]
    fn times_fire_on_time_and_missed_ones_follow_the_catch_up_policy() {
        let skip = every_ten_minutes(CatchUp::Skip);
        let once = every_ten_minutes(CatchUp::RunOnce);
        let ten = at("2026-11-22T10:10:00Z");
        let twenty = at("2026-11-22T10:20:00Z");
        let thirty = at("2026-11-22T10:30:00Z");
        let table = [
            // (schedule, handled, now, expected)
            (
                &skip,
                Some(ten),
                at("2026-11-22T10:15:00Z"),
                Turn::Wait(twenty),
            ),
            (
                &skip,
                Some(ten),
                at("2026-11-22T10:20:01Z"),
                Turn::Fire(twenty),
            ),
            (
                &skip,
                Some(twenty),
                at("2026-11-22T10:20:01Z"),
                Turn::Wait(thirty),
            ),
            // Seen late (down from 10:12 to 10:25): missed.
            (
                &skip,
                Some(ten),
                at("2026-11-22T10:25:00Z"),
                Turn::Miss(twenty),
            ),
            (
                &once,
                Some(ten),
                at("2026-11-22T10:25:00Z"),
                Turn::Fire(twenty),
            ),
            // Several missed: one run, for the latest.
            (
                &once,
                Some(ten),
                at("2026-11-22T11:05:00Z"),
                Turn::Fire(at("2026-11-22T11:00:00Z")),
            ),
            // Missed ones before an on-time one: the on-time run only.
            (
                &skip,
                Some(ten),
                at("2026-11-22T10:30:02Z"),
                Turn::Fire(thirty),
            ),
            // First seen: earlier times are not made up for.
            (&once, None, at("2026-11-22T10:25:00Z"), Turn::Wait(thirty)),
            (&once, None, at("2026-11-22T10:20:03Z"), Turn::Fire(twenty)),
        ];
        for (schedule, handled, now, expected) in table {
            assert_eq!(
                turn(schedule, handled, now),
                expected,
                "{:?} handled {handled:?} at {now}",
                schedule.catch_up
            );
        }
    }
}
