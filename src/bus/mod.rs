//! The NATS JetStream bus: connection, idempotent provisioning of streams,
//! consumers and buckets, and publishing envelopes and events.
//!
//! Layout (DESIGN section 3), for the default prefix `orch`:
//! `ORCH_TASKS` (work queue, `orch.tasks.<agent>.<priority>`), `ORCH_EVENTS`
//! (limits, `orch.events.<agent>.<task_id>`), `ORCH_DLQ` (`orch.dlq.<agent>`),
//! KV buckets `ORCH_AGENTS` (live registry) and `ORCH_DELIVERIES` (shared
//! delivery claims), and per agent and priority the durable pull consumers
//! `agent_<agent>_<priority>`.
//!
//! The rooms: the handle ([`Bus`]) and its [`settings`](BusSettings) and
//! [`credentials`](NatsAuth); connecting (`connect`, with the server list
//! in `servers`); the [`Names`]; provisioning (`provision`) and the pull
//! consumers (`consumers`); publishing (`publish`), reading one message
//! back (`read`), pulling (`pull`) and settling (`settle`); dead letters
//! (`dlq`), queue depth (`depth`), the broker's health (`health`), trigger
//! events (`trigger_events`), and the least-privilege permissions a
//! deployment grants ([`permissions`]).

mod connect;
mod consumers;
mod credentials;
mod depth;
mod dlq;
mod error;
mod handle;
mod health;
mod names;
pub mod permissions;
mod provision;
mod publish;
mod pull;
mod read;
mod servers;
mod settings;
mod settle;
mod trigger_events;

pub use credentials::{CredentialsError, NatsAuth};
pub use depth::QueueDepth;
pub use dlq::{
    DLQ_CODE_HEADER, DLQ_REASON_HEADER, DLQ_SEQ_HEADER, DLQ_SUBJECT_HEADER, DeadLetterCopy,
    Original,
};
pub use error::{BusError, Cause};
pub use handle::Bus;
pub use health::{Flow, PROBE_TIMEOUT, Unserved};
pub use names::Names;
pub use provision::refused_placement;
pub use publish::{CORRELATION_ID_HEADER, PendingPublish, REPUBLISHED_HEADER, TASK_ID_HEADER};
pub use pull::{PullSettings, Puller};
pub use servers::Servers;
pub use settings::{BusSettings, DeliverySettings, agent_inbox_prefix};
pub use settle::{Settlement, settle, settle_confirmed};
