//! The task state machine: one pure function, [`decide`], rules on every
//! transition. The store calls it inside the transaction that records the
//! change, so no other code path can move a task.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::TaskState;

/// Something that happened to a task: the state machine's input. (An
/// *event* is what a worker reports on the bus, `crate::event`; a
/// transition is what the store makes of it, or of a cancel, an answer, a
/// deadline.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transition {
    /// A worker started (or resumed) the task.
    Start,
    /// The task needs input from a person.
    RequireInput,
    /// The task needs authorization.
    RequireAuth,
    /// The task produced its result.
    Complete,
    /// The task failed for good (or was dead-lettered, or missed its deadline).
    Fail,
    /// The task was refused (unknown action, bad token, missing scope).
    Reject,
    /// Someone asked for the task to stop.
    Cancel,
    /// The attempt failed in a way another attempt may fix.
    Retry,
    /// The input the task waited for was given: the next attempt runs
    /// with it.
    Answer,
}

impl Transition {
    /// Every transition.
    pub const ALL: [Transition; 9] = [
        Transition::Start,
        Transition::RequireInput,
        Transition::RequireAuth,
        Transition::Complete,
        Transition::Fail,
        Transition::Reject,
        Transition::Cancel,
        Transition::Retry,
        Transition::Answer,
    ];
}

impl fmt::Display for Transition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Transition::Start => "start",
            Transition::RequireInput => "require_input",
            Transition::RequireAuth => "require_auth",
            Transition::Complete => "complete",
            Transition::Fail => "fail",
            Transition::Reject => "reject",
            Transition::Cancel => "cancel",
            Transition::Retry => "retry",
            Transition::Answer => "answer",
        };
        f.write_str(name)
    }
}

/// What [`decide`] rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Move to `state`, at `attempt`.
    Move {
        /// The new state.
        state: TaskState,
        /// The attempt number after the move (one more after a retry).
        attempt: u32,
    },
    /// Nothing changes: the transition repeats what is already so (a redelivered
    /// `working`, a second `input_required`).
    Stay,
}

/// Why a transition cannot apply to a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TransitionError {
    /// The task is in a terminal state; nothing leaves it. A late result for
    /// such a task is audited and otherwise ignored.
    #[error("task is {state}, a terminal state; `{event}` is ignored")]
    Terminal {
        /// The terminal state.
        state: TaskState,
        /// The transition that came too late.
        event: Transition,
    },
    /// The transition makes no sense in the current state.
    #[error("`{event}` is not allowed while the task is {state}")]
    NotAllowed {
        /// The current state.
        state: TaskState,
        /// The transition refused.
        event: Transition,
    },
}

/// Rules on one transition for a task in `state` at `attempt` of `max_attempts`.
///
/// - `submitted → working | input_required | auth_required | completed |
///   failed | rejected | canceled` (a result may arrive without a `working`
///   report before it: workers report `working` only for slow handlers, and
///   a task that never started may be dead-lettered or time out);
/// - `working → input_required | auth_required | completed | failed |
///   rejected | canceled`;
/// - `submitted | working → submitted` with `attempt + 1` on a retry (the
///   attempt's retryable failure), or `failed` once `max_attempts`
///   attempts are spent;
/// - `input_required | auth_required → working | canceled | failed`
///   (failed: the deadline passed while waiting);
/// - `input_required → submitted` with `attempt + 1` on an answer (the
///   next attempt runs with it; attempts spent do not stop it);
/// - a repeated report (`working` while working, ...) changes nothing;
/// - terminal states (completed, failed, canceled, rejected) are final.
pub fn decide(
    state: TaskState,
    attempt: u32,
    max_attempts: u32,
    event: Transition,
) -> Result<Next, TransitionError> {
    use TaskState as S;
    use Transition as E;
    let to = |state| Ok(Next::Move { state, attempt });
    match (state, event) {
        (S::Completed | S::Failed | S::Canceled | S::Rejected, event) => {
            Err(TransitionError::Terminal { state, event })
        }

        (S::Submitted, E::Start) => to(S::Working),
        (S::Working, E::Start) => Ok(Next::Stay),

        (S::Submitted | S::Working, E::Retry) if attempt < max_attempts => Ok(Next::Move {
            state: S::Submitted,
            attempt: attempt + 1,
        }),
        (S::Submitted | S::Working, E::Retry) => to(S::Failed),

        (S::Submitted | S::Working, E::RequireInput) => to(S::InputRequired),
        (S::Submitted | S::Working, E::RequireAuth) => to(S::AuthRequired),
        (S::Submitted | S::Working, E::Complete) => to(S::Completed),
        (S::Submitted | S::Working, E::Reject) => to(S::Rejected),

        (S::InputRequired, E::RequireInput) | (S::AuthRequired, E::RequireAuth) => Ok(Next::Stay),
        (S::InputRequired | S::AuthRequired, E::Start) => to(S::Working),
        // The answer starts the next attempt, whatever the attempts spent.
        (S::InputRequired, E::Answer) => Ok(Next::Move {
            state: S::Submitted,
            attempt: attempt + 1,
        }),
        (
            S::InputRequired | S::AuthRequired,
            E::RequireInput | E::RequireAuth | E::Complete | E::Reject | E::Retry,
        )
        | (S::Submitted | S::Working | S::AuthRequired, E::Answer) => {
            Err(TransitionError::NotAllowed { state, event })
        }

        (_, E::Fail) => to(S::Failed),
        (_, E::Cancel) => to(S::Canceled),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use TaskState as S;
    use Transition as E;

    /// The expected outcome of every (state, event) pair, written out by hand
    /// (attempt 1 of 3): `Some(state)` = move there, `None` = refused, and
    /// the same state as the current one = stay.
    #[rustfmt::skip]
    fn expected(state: S, event: E) -> Option<S> {
        let row: [Option<S>; 9] = match state {
            //                  Start               RequireInput           RequireAuth           Complete            Fail             Reject             Cancel             Retry               Answer
            S::Submitted => [Some(S::Working), Some(S::InputRequired), Some(S::AuthRequired), Some(S::Completed), Some(S::Failed), Some(S::Rejected), Some(S::Canceled), Some(S::Submitted), None],
            S::Working => [Some(S::Working), Some(S::InputRequired), Some(S::AuthRequired), Some(S::Completed), Some(S::Failed), Some(S::Rejected), Some(S::Canceled), Some(S::Submitted), None],
            S::InputRequired => [Some(S::Working), Some(S::InputRequired), None, None, Some(S::Failed), None, Some(S::Canceled), None, Some(S::Submitted)],
            S::AuthRequired => [Some(S::Working), None, Some(S::AuthRequired), None, Some(S::Failed), None, Some(S::Canceled), None, None],
            S::Completed | S::Failed | S::Canceled | S::Rejected => [None; 9],
        };
        let column = E::ALL.iter().position(|e| *e == event).unwrap();
        row[column]
    }

    #[test]
    fn every_state_event_pair_matches_the_table() {
        for state in S::ALL {
            for event in E::ALL {
                let got = decide(state, 1, 3, event);
                match (expected(state, event), got) {
                    (Some(want), Ok(Next::Stay)) => {
                        assert_eq!(want, state, "{state} + {event}");
                        assert!(
                            !matches!(event, E::Retry | E::Answer),
                            "a retry or an answer always moves"
                        );
                    }
                    (Some(want), Ok(Next::Move { state: s, attempt })) => {
                        assert_eq!(s, want, "{state} + {event}");
                        let want_attempt = if matches!(event, E::Retry | E::Answer) {
                            2
                        } else {
                            1
                        };
                        assert_eq!(attempt, want_attempt, "{state} + {event}");
                        assert!(
                            s != state || attempt != 1,
                            "a move changes the state or the attempt"
                        );
                    }
                    (None, Err(TransitionError::Terminal { .. })) => assert!(state.is_terminal()),
                    (None, Err(TransitionError::NotAllowed { .. })) => {
                        assert!(!state.is_terminal())
                    }
                    (want, got) => panic!("{state} + {event}: expected {want:?}, got {got:?}"),
                }
            }
        }
    }

    #[test]
    fn retry_counts_attempts_and_fails_when_they_are_spent() {
        assert_eq!(
            decide(S::Working, 2, 3, E::Retry),
            Ok(Next::Move {
                state: S::Submitted,
                attempt: 3
            })
        );
        assert_eq!(
            decide(S::Working, 3, 3, E::Retry),
            Ok(Next::Move {
                state: S::Failed,
                attempt: 3
            })
        );
        assert_eq!(
            decide(S::Working, 1, 1, E::Retry),
            Ok(Next::Move {
                state: S::Failed,
                attempt: 1
            })
        );
        assert_eq!(
            decide(S::Submitted, 1, 2, E::Retry),
            Ok(Next::Move {
                state: S::Submitted,
                attempt: 2
            })
        );
        assert_eq!(
            decide(S::Submitted, 2, 2, E::Retry),
            Ok(Next::Move {
                state: S::Failed,
                attempt: 2
            })
        );
    }

    #[test]
    fn terminal_states_are_final_and_say_so() {
        let err = decide(S::Completed, 1, 3, E::Complete).unwrap_err();
        assert_eq!(
            err,
            TransitionError::Terminal {
                state: S::Completed,
                event: E::Complete
            }
        );
        assert!(err.to_string().contains("terminal"));
    }
}
