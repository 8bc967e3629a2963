//! Every tree inside one transaction, as the writer hands them to a
//! transaction's body, and how a body gives up. Each tree's writes are
//! also kept, in order, when the store hands its commits to a log
//! (`log.rs`): what a commit changed is then a record any replica can
//! apply.

use std::cell::RefCell;

use sled::IVec;
use sled::transaction::{TransactionalTree, UnabortableTransactionError};

use super::StoreError;
use super::log::{TreeId, Write};

/// How a transaction body gives up: with a [`StoreError`] or on a conflict.
pub(super) type Abort = sled::transaction::ConflictableTransactionError<StoreError>;

/// What a tree operation inside a transaction gives back.
type Op<T> = Result<T, UnabortableTransactionError>;

/// One tree inside a transaction: reads and writes go to sled; writes are
/// kept too when the transaction's writes are recorded.
pub(super) struct TreeTx<'a> {
    tree: &'a TransactionalTree,
    id: TreeId,
    /// The transaction's writes, in order, when they are recorded.
    writes: Option<&'a RefCell<Vec<Write>>>,
}

impl<'a> TreeTx<'a> {
    /// `tree` as tree `id`, its writes kept in `writes` (when given).
    pub(super) fn new(
        tree: &'a TransactionalTree,
        id: TreeId,
        writes: Option<&'a RefCell<Vec<Write>>>,
    ) -> Self {
        TreeTx { tree, id, writes }
    }

    /// Keeps a write of this tree in the transaction's record.
    fn keep(&self, writes: &RefCell<Vec<Write>>, key: IVec, value: Option<IVec>) {
        writes.borrow_mut().push(Write {
            tree: self.id,
            key,
            value,
        });
    }

    /// The value at `key`, as this transaction sees it.
    pub(super) fn get(&self, key: impl AsRef<[u8]>) -> Op<Option<IVec>> {
        self.tree.get(key)
    }

    /// Sets `key` to `value`; the value it had.
    pub(super) fn insert<K>(&self, key: K, value: impl Into<IVec>) -> Op<Option<IVec>>
    where
        K: AsRef<[u8]> + Into<IVec>,
    {
        let value = value.into();
        match self.writes {
            Some(writes) => {
                let key = key.into();
                self.keep(writes, key.clone(), Some(value.clone()));
                self.tree.insert(key, value)
            }
            None => self.tree.insert(key, value),
        }
    }

    /// Removes `key`; the value it had.
    pub(super) fn remove<K>(&self, key: K) -> Op<Option<IVec>>
    where
        K: AsRef<[u8]> + Into<IVec>,
    {
        match self.writes {
            Some(writes) => {
                let key = key.into();
                self.keep(writes, key.clone(), None);
                self.tree.remove(key)
            }
            None => self.tree.remove(key),
        }
    }
}

/// Every tree, inside one transaction.
pub(super) struct Tx<'a> {
    /// task id → task status.
    pub(super) tasks: TreeTx<'a>,
    /// task id → envelope (written once).
    pub(super) envelopes: TreeTx<'a>,
    /// scope/key → idempotency claim.
    pub(super) idempotency: TreeTx<'a>,
    /// correlation id / task id → nothing.
    pub(super) by_correlation: TreeTx<'a>,
    /// state code / task id → nothing.
    pub(super) by_state: TreeTx<'a>,
    /// kind, value / task id → nothing: tasks by agent, owner, trigger.
    pub(super) by_label: TreeTx<'a>,
    /// sequence → chained audit record.
    pub(super) audit: TreeTx<'a>,
    /// task id / sequence → nothing: each task's audit records.
    pub(super) audit_by_task: TreeTx<'a>,
    /// format marker and audit head.
    pub(super) meta: TreeTx<'a>,
    /// Workflow runs, their step links, keys and the live set.
    pub(super) runs: TreeTx<'a>,
}

impl<'a> Tx<'a> {
    /// The tree `id` names.
    pub(super) fn tree(&self, id: TreeId) -> &TreeTx<'a> {
        match id {
            TreeId::Tasks => &self.tasks,
            TreeId::Envelopes => &self.envelopes,
            TreeId::Idempotency => &self.idempotency,
            TreeId::ByCorrelation => &self.by_correlation,
            TreeId::ByState => &self.by_state,
            TreeId::ByLabel => &self.by_label,
            TreeId::Audit => &self.audit,
            TreeId::AuditByTask => &self.audit_by_task,
            TreeId::Meta => &self.meta,
            TreeId::Runs => &self.runs,
        }
    }
}
