//! The HTTP API (DESIGN section 13), one router merged from one per
//! resource. JSON in and out; errors as `{"error":{"code","message","field"}}`.

mod a2a;
mod agents;
mod api;
mod audit;
mod console;
mod deliveries;
mod dlq;
mod error;
mod forward;
mod health;
mod limits;
pub mod listen;
mod local_reads;
pub mod openapi;
mod principal;
mod push;
mod router;
mod runs;
mod settings;
mod span;
mod streams;
mod tasks;
mod triggers;
mod ui;

pub use api::{Api, Requester};
use api::{WaitQuery, body, page, page_size};
pub use deliveries::DeliveryView;
pub use error::ApiError;
pub use forward::standby_router;
pub use local_reads::LocalReads;
pub use principal::AUTH_HEADER;
pub use push::push_bodies;
pub use router::{probes_router, router};
pub use runs::RunPage;
pub use settings::{A2aSettings, HttpSettings, MessageIds};
pub use tasks::{TaskPage, TaskView};
