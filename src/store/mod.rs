//! The durable store: tasks with their history, idempotency claims, indexes
//! and the audit log, in one sled database behind the small [`Store`] handle.
//!
//! Rules (DESIGN section 5):
//! - every method that reports a change returns only once the change is
//!   flushed to disk (group commit: one flush serves many writers);
//! - changes that touch several trees are one sled transaction, so indexes
//!   always agree with tasks and every transition has its audit record;
//! - records that fail to decode are reported with their tree and key.
//!
//! Trees: `tasks` (task id → [`crate::task::TaskStatus`], rewritten on
//! each change), `envelopes` (task id → envelope, written once),
//! `idempotency` (scope/key → claim), `by_correlation` and `by_state`
//! (index keys → nothing; a task whose correlation id is its own id is not
//! in `by_correlation`), `by_label` (a task's agent, owner and trigger →
//! nothing: see `labels.rs`), `audit` (sequence → chained record),
//! `audit_by_task` (task id → its records' sequences: a task's history) and
//! `meta` (format marker, audit head, quarantined records: see
//! `quarantine.rs`; the outbox's push deliveries: see `outbox.rs`), and `runs` (workflow runs, their
//! step links, keys and indexes: see `runs.rs` and `run_index.rs`). A [`crate::task::TaskRecord`] is
//! assembled from the first two and the task's audit records.
//!
//! The rooms: the handle (`handle`) and every tree in one transaction
//! (`tx`); the one writer (`writer`), its group commit (`commit`) and what
//! it feeds (`changes`, `waiters`); opening a store (`open`, `settings`,
//! `format`, `migrate`); then one file per thing stored: tasks (`submit`,
//! `apply`, `tasks`, `listing`, `labels`, `row_keys`), idempotency keys,
//! the audit chain, runs (`runs`, `run_index`), messages, the outbox,
//! quarantine, marks; the commits as records for the log (`log`) and the
//! whole store as a snapshot (`snapshot`); and checking it all (`verify`).

mod apply;
mod audit;
mod changes;
mod commit;
mod error;
mod format;
mod handle;
mod idempotency;
mod labels;
mod listing;
mod log;
mod mark;
mod messages;
mod migrate;
mod open;
mod outbox;
mod quarantine;
mod row_keys;
mod run_index;
mod runs;
mod settings;
mod snapshot;
mod submit;
mod tasks;
mod tx;
mod verify;
mod waiters;
mod writer;

use crate::audit::{AuditEntry, AuditFilter, AuditRecord};
pub use apply::{Applied, Change};
pub use changes::Changed;
pub use error::StoreError;
pub use format::format_name;
pub use handle::Store;
use handle::{Inner, lock};
pub use idempotency::Fingerprint;
pub use listing::TaskQuery;
pub use log::{Acked, Commit, CommitSink, RecordError};
pub use messages::MessageClaim;
pub use outbox::{CALLBACK, GaveUp, PushAuth, PushDelivery, PushTarget, Target};
pub use quarantine::Quarantined;
pub use runs::{NewRun, ScheduleCursor, StepLink};
pub use settings::StoreSettings;
pub use snapshot::SnapshotSize;
pub use submit::NewTask;
use tx::{Abort, Tx};
pub use verify::IndexReport;
pub use waiters::Watch;

use format::{FORMAT, FORMAT_V2, FORMAT_V3, FORMAT_V4, FORMAT_V5, check_format};
