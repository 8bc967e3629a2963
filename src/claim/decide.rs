//! The claim decision: what a worker does with one delivery, given what it
//! found under the task's claim key. A pure function, tested over every case.

use super::ClaimValue;

/// The delivery a worker is deciding about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    /// The attempt the envelope carries (`control.attempt`).
    pub attempt: u32,
    /// The message's sequence in the task stream: tells a redelivery of one
    /// message from a second copy of it.
    pub stream_seq: u64,
}

/// What to do with a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Nobody holds the task: create the claim, then run.
    Create,
    /// The claim is left over from an earlier attempt, which is over (the
    /// orchestrator publishes attempt N+1 only after attempt N reported):
    /// replace it (compare-and-swap on its revision), then run.
    TakeOver,
    /// The task is canceled: settle the message, never start the handler.
    Canceled,
    /// A second copy of a message another holder is running: settle it
    /// (ack) so it never counts toward the poison limit.
    Duplicate,
    /// A message of an attempt older than the one claimed: that attempt is
    /// over; settle it (ack).
    Superseded,
    /// The very message a live holder is running, redelivered (its holder
    /// missed an ack-wait): leave it to the holder, look again after a
    /// lease.
    Busy,
}

/// Decides on `delivery` given the claim found under its task's key
/// (`None`: no claim, or one whose lease expired).
pub fn decide(found: Option<&ClaimValue>, delivery: Delivery) -> Decision {
    match found {
        None => Decision::Create,
        Some(ClaimValue::Canceled { .. }) => Decision::Canceled,
        Some(ClaimValue::Running {
            attempt,
            stream_seq,
            ..
        }) => {
            if *attempt > delivery.attempt {
                Decision::Superseded
            } else if *attempt < delivery.attempt {
                Decision::TakeOver
            } else if *stream_seq == delivery.stream_seq {
                Decision::Busy
            } else {
                Decision::Duplicate
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(attempt: u32, stream_seq: u64) -> ClaimValue {
        ClaimValue::Running {
            attempt,
            stream_seq,
            instance: "w-1".into(),
        }
    }

    /// Every shape of what can be found, against a delivery of attempt 2,
    /// stream sequence 10: the expected decision, written out by hand.
    #[test]
    fn every_case_matches_the_table() {
        let delivery = Delivery {
            attempt: 2,
            stream_seq: 10,
        };
        let cases: [(Option<ClaimValue>, Decision); 10] = [
            (None, Decision::Create),
            (
                Some(ClaimValue::Canceled { attempt: 1 }),
                Decision::Canceled,
            ),
            (
                Some(ClaimValue::Canceled { attempt: 2 }),
                Decision::Canceled,
            ),
            (
                Some(ClaimValue::Canceled { attempt: 3 }),
                Decision::Canceled,
            ),
            (Some(running(1, 10)), Decision::TakeOver),
            (Some(running(1, 7)), Decision::TakeOver),
            (Some(running(2, 10)), Decision::Busy),
            (Some(running(2, 11)), Decision::Duplicate),
            (Some(running(3, 10)), Decision::Superseded),
            (Some(running(3, 12)), Decision::Superseded),
        ];
        for (found, want) in cases {
            assert_eq!(decide(found.as_ref(), delivery), want, "found {found:?}");
        }
    }
}
