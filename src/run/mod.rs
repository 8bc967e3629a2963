//! Workflow runs: the records the store keeps, the pure decision of what a
//! run does next ([`plan`]), and the router's choice ([`route::choose`]).
//! The orchestrator's engine (`crate::service::engine`) carries the
//! decisions out; see docs/triggers.md for the format and the guarantees.

mod plan;
mod record;
pub mod route;

pub use plan::{Act, Plan, StepEnd, StepState, StepTask, plan, waiting_gate};
pub use record::{
    CancelRequest, Decision, Origin, RouteChoice, RunChange, RunId, RunRecord, RunRefused,
    RunStarted, RunState, Wait,
};
