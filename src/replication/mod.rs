//! The store replicated through a JetStream log (issue 44, being built):
//! each commit of the store's one writer is appended to the stream
//! `<PREFIX>_STORE` (subject `<prefix>.store.<partition>`) before any
//! caller is answered, and a store is the local, rebuildable view of that
//! log.
//!
//! Built so far: the log's stream (`stream`), the wire form of one log
//! message (`frame`: the commits it carries), the leader's appender
//! (`appender`: fenced, so a deposed leader can never append after its
//! successor, and stops writing once refused, and seals the log when it
//! starts), reading the log back and following it (`follow`), the lease
//! that says who should lead (`lease`), and snapshots in the object
//! store with the log trimmed below them (`snapshot`). Leading and
//! standing by are `service::leadership`'s; forwarding is not built yet.

mod appender;
mod error;
mod follow;
mod frame;
mod lease;
mod partition;
mod settings;
mod snapshot;
mod stream;

pub use appender::Appender;
pub use error::ReplicationError;
pub use follow::{Caught, Entry, Reading, catch_up, entries_after, log_position};
pub use frame::{Frame, FrameError, Part, decode_frame, encode_frame, encode_part};
pub use lease::{Holder, Lease, Leases, Taken};
pub use partition::{MAX_PARTITIONS, Partitions};
pub use settings::ReplicationSettings;
pub use snapshot::{
    LogCheck, Snapshot, carry_over, move_in, restore, restore_or_newer, snapshots, take, verify,
};
pub use stream::provision;
