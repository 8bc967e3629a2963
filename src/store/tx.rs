//! Every tree inside one transaction, as the writer hands them to a
//! transaction's body, and how a body gives up.

use super::StoreError;

/// How a transaction body gives up: with a [`StoreError`] or on a conflict.
pub(super) type Abort = sled::transaction::ConflictableTransactionError<StoreError>;

/// Every tree, inside one transaction.
pub(super) struct Tx<'a> {
    /// task id → task status.
    pub(super) tasks: &'a sled::transaction::TransactionalTree,
    /// task id → envelope (written once).
    pub(super) envelopes: &'a sled::transaction::TransactionalTree,
    /// scope/key → idempotency claim.
    pub(super) idempotency: &'a sled::transaction::TransactionalTree,
    /// correlation id / task id → nothing.
    pub(super) by_correlation: &'a sled::transaction::TransactionalTree,
    /// state code / task id → nothing.
    pub(super) by_state: &'a sled::transaction::TransactionalTree,
    /// kind, value / task id → nothing: tasks by agent, owner, trigger.
    pub(super) by_label: &'a sled::transaction::TransactionalTree,
    /// sequence → chained audit record.
    pub(super) audit: &'a sled::transaction::TransactionalTree,
    /// task id / sequence → nothing: each task's audit records.
    pub(super) audit_by_task: &'a sled::transaction::TransactionalTree,
    /// format marker and audit head.
    pub(super) meta: &'a sled::transaction::TransactionalTree,
    /// Workflow runs, their step links, keys and the live set.
    pub(super) runs: &'a sled::transaction::TransactionalTree,
}
