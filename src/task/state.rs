//! The task states, named as A2A names them.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Where a task stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    /// Accepted and queued for an agent (also after a scheduled retry).
    Submitted,
    /// An agent is running it.
    Working,
    /// Waiting for input from a person.
    InputRequired,
    /// Waiting for authorization.
    AuthRequired,
    /// Finished with a result. Terminal.
    Completed,
    /// Finished without a result. Terminal.
    Failed,
    /// Stopped on request. Terminal.
    Canceled,
    /// Refused by the agent or the orchestrator. Terminal.
    Rejected,
}

impl TaskState {
    /// Every state, in lifecycle order.
    pub const ALL: [TaskState; 8] = [
        TaskState::Submitted,
        TaskState::Working,
        TaskState::InputRequired,
        TaskState::AuthRequired,
        TaskState::Completed,
        TaskState::Failed,
        TaskState::Canceled,
        TaskState::Rejected,
    ];

    /// Whether nothing can leave this state.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskState::Completed | TaskState::Failed | TaskState::Canceled | TaskState::Rejected
        )
    }

    /// The snake_case name used in JSON, URLs and the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Submitted => "submitted",
            TaskState::Working => "working",
            TaskState::InputRequired => "input_required",
            TaskState::AuthRequired => "auth_required",
            TaskState::Completed => "completed",
            TaskState::Failed => "failed",
            TaskState::Canceled => "canceled",
            TaskState::Rejected => "rejected",
        }
    }

    /// A one-byte code, the prefix of the state index's keys. Codes are part
    /// of the on-disk format: never reuse or renumber one.
    pub(crate) fn code(self) -> u8 {
        match self {
            TaskState::Submitted => 1,
            TaskState::Working => 2,
            TaskState::InputRequired => 3,
            TaskState::AuthRequired => 4,
            TaskState::Completed => 5,
            TaskState::Failed => 6,
            TaskState::Canceled => 7,
            TaskState::Rejected => 8,
        }
    }
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TaskState {
    type Err = crate::envelope::ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TaskState::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = TaskState::ALL.iter().map(|s| s.as_str()).collect();
                crate::envelope::ParseError::NotOneOf {
                    value: s.into(),
                    what: "a task state",
                    names: format!("one of: {}", names.join(", ")),
                }
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_codes_are_unique_and_round_trip() {
        for st in TaskState::ALL {
            assert_eq!(st.as_str().parse::<TaskState>().unwrap(), st);
            assert_eq!(serde_json::to_value(st).unwrap(), st.as_str());
        }
        let mut codes: Vec<u8> = TaskState::ALL.iter().map(|s| s.code()).collect();
        codes.dedup();
        assert_eq!(codes.len(), TaskState::ALL.len());
        let err = "done".parse::<TaskState>().unwrap_err();
        assert!(
            matches!(&err, crate::envelope::ParseError::NotOneOf { value, what: "a task state", names }
                if value == "done" && names.contains("completed")),
            "{err:?}"
        );
    }
}
