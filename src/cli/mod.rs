//! The command line's commands, one module per group.

pub mod agents;
pub mod bench;
pub mod client;
pub mod keys;
pub mod nats;
pub mod offline;
pub mod output;
pub mod runs;
pub mod serve;
pub mod trace;
pub mod validate;
