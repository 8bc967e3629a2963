//! The workflow engine: carries out what [`crate::run::plan`] decides.
//!
//! A run is advanced whenever something it depends on changes: it started,
//! a step's task ended (a store watch), a person answered its gate, it was
//! canceled, its deadline came, the orchestrator started (every unfinished
//! run). Advancing reads the run and its steps' tasks, plans, and acts:
//! submits step tasks, records router choices, cancels tasks, settles the
//! run's state. Advances of one run never overlap; a change that arrives
//! during one makes it run again.
//!
//! Why a crash loses or repeats nothing: a step's task is created in the
//! same store transaction that links it to the step, and a second submit
//! for the step returns the linked task; everything else the plan reads is
//! flushed before it is acted on. So a restart plans from the same facts
//! and gets the same answer.

//!
//! Its rooms: `handle` (what the rest of the orchestrator nudges runs
//! through), `drive` (the loop that advances them), `workflows` (one
//! advance of a workflow's run), `conversations` (one of a task held for a
//! conversation with a model), `patterns` (one of the AgentCard types that
//! are not one conversation), `held` (what a held task's planners act
//! with, shared by the last two). The engine submits and cancels through
//! the service's own acts; it knows nothing of the background loops,
//! which start `drive` with the others.

mod conversations;
mod drive;
mod handle;
mod held;
mod patterns;
mod workflows;

pub(crate) use drive::drive;
pub(crate) use handle::{Engine, EngineQueue, channel};
