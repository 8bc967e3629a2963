//! The command line's commands, one module per group.

pub mod agents;
pub mod client;
pub mod dev;
pub mod keys;
pub mod nats;
pub mod offline;
pub mod output;
pub mod profile;
pub mod runs;
pub mod scaffold;
pub mod serve;
pub mod trace;
pub mod triggers;
pub mod validate;
pub mod watch;
