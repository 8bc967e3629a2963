//! The task envelope, wire format v1: `header`, `payload` and `control`.
//!
//! The schema is `docs/schema/envelope.schema.json`; `docs/protocol.md`
//! explains each field. Decode user input with [`Envelope::from_user`]
//! (unknown fields refused) and bus traffic with [`Envelope::from_wire`]
//! (unknown fields from newer peers ignored).
//!
//! The rooms: the envelope whole (`task_envelope`), its three parts
//! (`header`, `payload`, `control`), its `version`, the ids and other
//! values its fields hold (`ids`), and why one does not parse
//! (`parse_error`).

mod control;
mod header;
mod ids;
mod parse_error;
mod payload;
mod task_envelope;
mod version;

pub use control::{Control, Priority, ResponseMode};
pub use header::{BearerToken, Header};
pub(crate) use ids::check_label;
pub use ids::{Action, AgentName, CorrelationId, IdempotencyKey, Scope, Sender, TaskId, Timestamp};
pub use parse_error::ParseError;
pub use payload::{McpCall, Meta, Payload, TurnOf};
pub use task_envelope::Envelope;
pub use version::{UnsupportedVersion, VERSION, Version};
