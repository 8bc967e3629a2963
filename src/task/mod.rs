//! Tasks: their states, the one function that moves them between states,
//! and the record the store keeps of each.

mod machine;
mod record;
mod retry;
mod state;

pub use machine::{Next, Transition, TransitionError, decide};
pub use record::{HistoryEntry, ProgressMark, Said, Submitted, TaskRecord, TaskStatus};
pub use retry::RetryPolicy;
pub use state::TaskState;
