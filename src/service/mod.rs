//! The orchestrator service: owns the store, publishes envelopes, applies
//! worker events, schedules retries, enforces deadlines, and resolves what
//! would otherwise be stuck. The HTTP API sits above it (`crate::server`
//! wires the two together).
//!
//! A submission is stored (flushed) before it is answered; its envelope is
//! published off the request path, and the broker's sequence is recorded
//! when the broker acknowledges it, so a restart republishes only what the
//! broker never took. Worker events come through a durable consumer, so
//! results published while the orchestrator is down are applied when it is
//! back. The store alone owns the attempt number and decides retries.
//!
//! Its three rooms, each using only the ones after it (`tests/layers.rs`
//! holds this):
//! - `loops`: everything that runs in the background, started and stopped
//!   together within a bound (the publisher, the applier of workers'
//!   events, dead letters, the reaper, the orphan sweep, schedules, event
//!   triggers, readiness, the push outbox, reload) and the engine's loop;
//! - `engine`: carries out what runs and held tasks plan (workflows,
//!   conversations with a model, the AgentCard patterns), submitting and
//!   canceling through the acts;
//! - the acts the faces call, a file per act (`submit`, `cancel`,
//!   `replay`, `runs`, `answer`, `push`, `messages`) or per kind of
//!   read (`reads`, `follow`, `run_follow`, `live`, `overview`,
//!   `dead_letters`), beside what they share (`caller`, `request`,
//!   `error`, `settings`, `stop`, `quarantine`, `subject`). They reach a
//!   loop or the engine only through the handles the orchestrator holds
//!   (`orchestrator`: what it holds, opening it).

mod agents;
mod answer;
mod backlog;
mod caller;
mod cancel;
mod dead_letters;
mod declared;
mod engine;
mod error;
mod follow;
mod held_view;
mod leadership;
mod live;
mod loops;
mod messages;
mod orchestrator;
mod overview;
mod push;
mod quarantine;
mod reads;
mod replay;
mod request;
mod run_follow;
mod run_view;
mod runs;
mod settings;
mod stop;
mod subject;
mod submit;

pub use agents::{AgentFilter, AgentInstances, Agents};
pub use caller::Caller;
pub use dead_letters::DeadLetter;
pub use declared::{Declared, SchemaError};
pub use error::{ErrorKind, ServiceError};
pub use follow::Follow;
pub use held_view::HeldStep;
pub use leadership::{Kept, Leader, Leading, Reads, Replica, lead, name_node};
pub use live::{Live, LiveBatch};
pub use loops::{Background, PushBodies};
use orchestrator::lock;
pub use orchestrator::{HEADER_ROOM, Orchestrator};
pub use overview::{AgentLine, Overview};
pub use push::{
    CALLBACK, DeliveryName, GaveUp, PushAuth, PushDelivery, PushTarget, Target as DeliveryTarget,
};
pub use reads::TaskFilter;
pub use request::TaskRequest;
pub use run_follow::RunFollow;
pub use run_view::{RunView, StepView, Waiting};
pub use runs::{Answer, RunAct, RunOptions};
pub use settings::{AgentSettings, DEFAULT_NATS_URL, PushSettings, ServiceSettings};
pub use subject::{Following, Subject};
