//! The append-only, hash-chained audit log.
//!
//! Records are keyed by a big-endian sequence number from 1. Each stored
//! value is the record's SHA-256 hash (32 bytes) followed by the record's
//! JSON, which carries the previous record's hash; so changing, removing or
//! reordering any record breaks the chain at that point. The head (last
//! sequence and hash) is kept in the `meta` tree in the same transaction as
//! each append, so a record missing at the end is found too.

use sha2::{Digest, Sha256};
use sled::transaction::ConflictableTransactionError;

use super::{Store, StoreError, Tx, row_keys};
use crate::audit::{AuditEntry, AuditFilter, AuditRecord, AuditReport};
use crate::envelope::Timestamp;

impl Store {
    /// Appends one record to the audit log and returns it once durable.
    pub async fn audit(&self, entry: AuditEntry) -> Result<AuditRecord, StoreError> {
        let at = Timestamp::now();
        let record = self
            .transact(Box::new(move |tx, head| {
                append_record(tx, head, &entry, at)
            }))
            .await?;
        self.inner.commit.durable().await?;
        Ok(record)
    }

    /// Up to `limit` audit records after sequence `after` (0 = from the
    /// start) that match `filter`, oldest first.
    pub fn audit_list(
        &self,
        filter: &AuditFilter,
        after: u64,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        list(
            &self.inner.trees.audit,
            &self.inner.trees.audit_by_task,
            filter,
            after,
            limit,
        )
    }

    /// Checks the whole audit chain; reports the first missing, altered or
    /// undecodable record.
    pub fn verify_audit(&self) -> Result<AuditReport, StoreError> {
        let head = self.inner.writer.head();
        verify(&self.inner.trees.audit, head)
    }
}

/// The `meta` key of the chain's head.
pub(crate) const HEAD_KEY: &[u8] = b"audit_head";

/// The end of the chain: the last sequence number and its hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Head {
    pub(crate) seq: u64,
    pub(crate) hash: [u8; 32],
}

impl Head {
    pub(super) fn encode(&self) -> [u8; 40] {
        let mut out = [0u8; 40];
        out[..8].copy_from_slice(&self.seq.to_be_bytes());
        out[8..].copy_from_slice(&self.hash);
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, StoreError> {
        if bytes.len() != 40 {
            return Err(StoreError::Decode {
                tree: "meta",
                key: "audit_head".into(),
                message: format!("expected 40 bytes, found {}", bytes.len()),
            });
        }
        let mut seq = [0u8; 8];
        seq.copy_from_slice(&bytes[..8]);
        let mut hash = [0u8; 32];
        hash.copy_from_slice(&bytes[8..]);
        Ok(Head {
            seq: u64::from_be_bytes(seq),
            hash,
        })
    }
}

/// Reads the head as recorded in `meta` (the default for an empty log).
pub(crate) fn read_head(meta: &sled::Tree) -> Result<Head, StoreError> {
    match meta.get(HEAD_KEY)? {
        Some(bytes) => Head::decode(&bytes),
        None => Ok(Head::default()),
    }
}

/// Appends `entry` after `head` inside a transaction (its sequence added to
/// its task's entry in the by-task index); returns the new head.
pub(crate) fn append(
    tx: &Tx<'_>,
    head: Head,
    entry: &AuditEntry,
    at: Timestamp,
) -> Result<Head, ConflictableTransactionError<StoreError>> {
    append_record(tx, head, entry, at).map(|(next, _)| next)
}

/// [`append`], also returning the record as stored (with its hash).
pub(crate) fn append_record(
    tx: &Tx<'_>,
    head: Head,
    entry: &AuditEntry,
    at: Timestamp,
) -> Result<(Head, AuditRecord), ConflictableTransactionError<StoreError>> {
    let mut record = AuditRecord {
        seq: head.seq + 1,
        at,
        actor: entry.actor.clone(),
        kind: entry.kind.clone(),
        task_id: entry.task_id,
        correlation_id: entry.correlation_id.clone(),
        trace_id: entry.trace_id.clone(),
        detail: entry.detail.clone(),
        prev_hash: hex::encode(head.hash),
        hash: String::new(),
    };
    let body = row_keys::encode(&record);
    let hash = chain_hash(&head.hash, &body);
    let mut value = Vec::with_capacity(32 + body.len());
    value.extend_from_slice(&hash);
    value.extend_from_slice(&body);
    tx.audit.insert(&row_keys::audit(record.seq), value)?;
    if let Some(task) = record.task_id {
        let key = row_keys::task(task);
        let entry = tx.audit_by_task.get(key)?;
        let seqs = row_keys::push_audit_seq(entry.as_deref(), record.seq);
        tx.audit_by_task.insert(&key, seqs)?;
    }
    let next = Head {
        seq: record.seq,
        hash,
    };
    tx.meta.insert(HEAD_KEY, &next.encode()[..])?;
    record.hash = hex::encode(hash);
    Ok((next, record))
}

fn chain_hash(prev: &[u8; 32], body: &[u8]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(prev);
    hasher.update(body);
    hasher.finalize().into()
}

/// Splits a stored value into its hash and record, checking the hash.
pub(super) fn decode_stored(
    key: &[u8],
    value: &[u8],
) -> Result<([u8; 32], AuditRecord), StoreError> {
    if value.len() < 32 {
        return Err(StoreError::Decode {
            tree: "audit",
            key: row_keys::describe("audit", key),
            message: format!("value is {} bytes, shorter than its hash", value.len()),
        });
    }
    let mut hash = [0u8; 32];
    hash.copy_from_slice(&value[..32]);
    let mut record: AuditRecord = row_keys::decode_value("audit", key, &value[32..])?;
    record.hash = hex::encode(hash);
    Ok((hash, record))
}

/// Checks every record from the first to the head.
pub(crate) fn verify(audit: &sled::Tree, head: Head) -> Result<AuditReport, StoreError> {
    let mut prev = [0u8; 32];
    let mut expected = 1u64;
    for item in audit.iter() {
        let (key, value) = item?;
        let seq = match <[u8; 8]>::try_from(key.as_ref()) {
            Ok(bytes) => u64::from_be_bytes(bytes),
            Err(_) => {
                let shown = row_keys::describe("audit", &key);
                return Ok(AuditReport::broken(
                    expected - 1,
                    expected,
                    format!("malformed key {shown}"),
                ));
            }
        };
        if seq != expected {
            return Ok(AuditReport::broken(
                expected - 1,
                expected,
                "record missing",
            ));
        }
        let (hash, record) = match decode_stored(&key, &value) {
            Ok(decoded) => decoded,
            Err(e) => return Ok(AuditReport::broken(expected - 1, seq, e.to_string())),
        };
        if record.seq != seq {
            return Ok(AuditReport::broken(
                seq - 1,
                seq,
                format!("record says seq {}", record.seq),
            ));
        }
        if record.prev_hash != hex::encode(prev) {
            return Ok(AuditReport::broken(
                seq - 1,
                seq,
                "previous hash does not match",
            ));
        }
        let body = &value[32..];
        if chain_hash(&prev, body) != hash {
            return Ok(AuditReport::broken(
                seq - 1,
                seq,
                "record altered: hash does not match",
            ));
        }
        prev = hash;
        expected += 1;
    }
    let records = expected - 1;
    if head.seq > records {
        return Ok(AuditReport::broken(
            records,
            records + 1,
            "record missing (the head is further on)",
        ));
    }
    if head.seq < records || head.hash != prev {
        return Ok(AuditReport::broken(
            records,
            head.seq.max(1),
            "the chain does not end at the recorded head",
        ));
    }
    Ok(AuditReport {
        ok: true,
        records,
        first_bad_seq: None,
        problem: None,
    })
}

/// Up to `limit` records after sequence `after`, oldest first. With a task,
/// its entry in the by-task index, not a scan of the log.
pub(crate) fn list(
    audit: &sled::Tree,
    by_task: &sled::Tree,
    filter: &AuditFilter,
    after: u64,
    limit: usize,
) -> Result<Vec<AuditRecord>, StoreError> {
    if let Some(task) = filter.task_id {
        let key = row_keys::task(task);
        let Some(entry) = by_task.get(key)? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for seq in row_keys::audit_seqs(&key, &entry)? {
            if out.len() >= limit {
                break;
            }
            if seq <= after {
                continue;
            }
            let audit_key = row_keys::audit(seq);
            let Some(value) = audit.get(audit_key)? else {
                return Err(StoreError::Decode {
                    tree: "audit_by_task",
                    key: row_keys::describe("audit_by_task", &key),
                    message: format!("indexes audit record {seq}, which does not exist"),
                });
            };
            let (_, record) = decode_stored(&audit_key, &value)?;
            let corr_ok = filter
                .correlation_id
                .as_ref()
                .is_none_or(|c| record.correlation_id.as_ref() == Some(c));
            if corr_ok {
                out.push(record);
            }
        }
        return Ok(out);
    }
    let mut out = Vec::new();
    let start = row_keys::audit(after.saturating_add(1));
    for item in audit.range(start..) {
        if out.len() >= limit {
            break;
        }
        let (key, value) = item?;
        let (_, record) = decode_stored(&key, &value)?;
        let task_ok = filter.task_id.is_none_or(|id| record.task_id == Some(id));
        let corr_ok = filter
            .correlation_id
            .as_ref()
            .is_none_or(|c| record.correlation_id.as_ref() == Some(c));
        if task_ok && corr_ok {
            out.push(record);
        }
    }
    Ok(out)
}
