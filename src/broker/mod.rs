//! A managed local broker: when `orchestrator run` finds no NATS at the
//! default URL, it starts `nats-server -js` itself, with its data under the
//! orchestrator's data directory, and stops it on exit. It starts with
//! authentication: the users `orchestrator nats config` would write, in
//! `<data_dir>/nats-auth/` (the orchestrator's seed, and one per agent for
//! the workers on this machine).

mod cluster;
mod error;
mod managed;

pub use cluster::LocalCluster;
pub use error::BrokerError;
use managed::spawn_server;
pub use managed::{DiskSync, ManagedBroker, server_bin, users_dir};
