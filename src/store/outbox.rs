//! The outbox: what the orchestrator owes each push-notification config
//! and callback. The notifications themselves are not stored twice: they
//! are a task's (or run's) events, derived from its stored history, which
//! only grows. What is stored is where to send them and how far sending
//! has come: a cursor (the last event delivered or given up on), the
//! failed attempts at the next one and when to try again, the give-ups.
//!
//! In the `meta` tree (sled's transactions span at most nine trees, and
//! the writer's already span nine), by key prefix: `delivery/` + subject
//! (16 bytes) + id → [`Delivery`]; `outbox/` + subject + id → nothing,
//! while the delivery may still owe something. A task's callback is
//! written in the transaction that stores the task.

use serde::{Deserialize, Serialize};

use super::{Store, StoreError, Tx, audit, row_keys};
use crate::audit::AuditEntry;
use crate::envelope::{TaskId, Timestamp};

const RECORD: &[u8] = b"delivery/";
const PENDING: &[u8] = b"outbox/";

/// The id of a task's or run's callback delivery (a push config's id is
/// its own).
pub const CALLBACK: &str = "callback";

/// What is owed to one target for one task or run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PushDelivery {
    /// The task or run (a run's id is from the tasks' space).
    pub subject: TaskId,
    /// Its id among the subject's deliveries: a push config's id, or
    /// [`CALLBACK`].
    pub id: String,
    /// Where, and in which words.
    pub target: Target,
    /// Who set it up.
    pub owner: String,
    /// When it was set up.
    pub created_at: Timestamp,
    /// The last event done with (delivered, or given up on): the next one
    /// sent is the one after.
    pub cursor: u64,
    /// Failed attempts at the next event.
    #[serde(default)]
    pub attempts: u32,
    /// Not before then is the next event tried again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<Timestamp>,
    /// Why the last attempt failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Events delivered (acknowledged with a 2xx).
    #[serde(default)]
    pub delivered: u64,
    /// Events given up on, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gave_up: Vec<GaveUp>,
    /// Nothing more will be owed: the subject ended and every event was
    /// done with.
    #[serde(default)]
    pub done: bool,
}

/// Where a delivery goes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Target {
    /// An A2A push-notification config: each event as a `StreamResponse`.
    A2a(PushTarget),
    /// The `callback_url` of the task's envelope or of the run: its view
    /// when it waits for its caller, and when it ends.
    Callback,
}

/// An A2A push-notification config, as its client gave it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PushTarget {
    /// The webhook.
    pub url: String,
    /// Sent as `X-A2A-Notification-Token`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// Sent as `Authorization: <scheme> <credentials>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authentication: Option<PushAuth>,
    /// Whether it was set over A2A 0.3 (its events go in 0.3's words).
    #[serde(default)]
    pub v03: bool,
}

/// A push config's `authentication`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PushAuth {
    /// `Bearer`, `Basic`, ...
    pub scheme: String,
    /// What follows the scheme.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<String>,
}

/// An event the outbox gave up on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GaveUp {
    /// The event's number.
    pub event: u64,
    /// When.
    pub at: Timestamp,
    /// After how many attempts.
    pub attempts: u32,
    /// The last attempt's failure.
    pub error: String,
}

impl PushDelivery {
    /// A new delivery of `subject`'s events after `cursor` to `target`.
    pub fn new(subject: TaskId, id: String, target: Target, owner: String, cursor: u64) -> Self {
        PushDelivery {
            subject,
            id,
            target,
            owner,
            created_at: Timestamp::now(),
            cursor,
            attempts: 0,
            retry_at: None,
            last_error: None,
            delivered: 0,
            gave_up: Vec::new(),
            done: false,
        }
    }
}

fn key(prefix: &[u8], subject: TaskId, id: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(prefix.len() + 16 + id.len());
    k.extend_from_slice(prefix);
    k.extend_from_slice(&row_keys::task(subject));
    k.extend_from_slice(id.as_bytes());
    k
}

fn subject_prefix(prefix: &[u8], subject: TaskId) -> Vec<u8> {
    key(prefix, subject, "")
}

/// Writes `d` (and its place in the outbox) inside a transaction.
pub(super) fn write(tx: &Tx<'_>, d: &PushDelivery) -> Result<(), super::Abort> {
    tx.meta
        .insert(key(RECORD, d.subject, &d.id), row_keys::encode(d))?;
    let pending = key(PENDING, d.subject, &d.id);
    if d.done {
        tx.meta.remove(pending)?;
    } else {
        tx.meta.insert(pending, &[][..])?;
    }
    Ok(())
}

/// Writes `d` and appends `entry` (when given) to the audit chain after
/// `head`, inside a transaction; the chain's new head.
fn write_audited(
    tx: &Tx<'_>,
    head: audit::Head,
    d: &PushDelivery,
    entry: Option<&AuditEntry>,
    now: Timestamp,
) -> Result<audit::Head, super::Abort> {
    write(tx, d)?;
    match entry {
        Some(e) => audit::append(tx, head, e, now),
        None => Ok(head),
    }
}

impl Store {
    /// Writes `d`, with `entry` in the audit trail when given; returns once
    /// durable.
    pub async fn put_delivery(
        &self,
        d: PushDelivery,
        entry: Option<AuditEntry>,
    ) -> Result<(), StoreError> {
        let now = Timestamp::now();
        self.transact(Box::new(move |tx, head| {
            Ok((write_audited(tx, head, &d, entry.as_ref(), now)?, ()))
        }))
        .await?;
        self.inner.commit.durable().await
    }

    /// For the outbox: writes `d` (with `entry` in the audit trail when
    /// given) only if its config is still stored with the same target, in
    /// one transaction, so that a config removed or replaced while an
    /// attempt was under way is not written back; returns whether it was
    /// written, once durable.
    pub async fn advance_delivery(
        &self,
        d: PushDelivery,
        entry: Option<AuditEntry>,
    ) -> Result<bool, StoreError> {
        let now = Timestamp::now();
        let record = key(RECORD, d.subject, &d.id);
        let written = self
            .transact(Box::new(move |tx, head| {
                let same = match tx.meta.get(&record)? {
                    Some(bytes) => {
                        let held: PushDelivery = row_keys::decode_value("meta", &record, &bytes)
                            .map_err(super::tasks::abort)?;
                        held.target == d.target
                    }
                    None => false,
                };
                if !same {
                    return Ok((head, false));
                }
                Ok((write_audited(tx, head, &d, entry.as_ref(), now)?, true))
            }))
            .await?;
        self.inner.commit.durable().await?;
        Ok(written)
    }

    /// Removes delivery `id` of `subject`, with `entry` in the audit trail;
    /// whether it was there.
    pub async fn remove_delivery(
        &self,
        subject: TaskId,
        id: &str,
        entry: AuditEntry,
    ) -> Result<bool, StoreError> {
        let now = Timestamp::now();
        let (record, pending) = (key(RECORD, subject, id), key(PENDING, subject, id));
        let removed = self
            .transact(Box::new(move |tx, head| {
                let was = tx.meta.remove(record.as_slice())?.is_some();
                tx.meta.remove(pending.as_slice())?;
                let head = if was {
                    audit::append(tx, head, &entry, now)?
                } else {
                    head
                };
                Ok((head, was))
            }))
            .await?;
        self.inner.commit.durable().await?;
        Ok(removed)
    }

    /// Delivery `id` of `subject`, if any.
    pub fn delivery(&self, subject: TaskId, id: &str) -> Result<Option<PushDelivery>, StoreError> {
        let k = key(RECORD, subject, id);
        match self.inner.trees.meta.get(&k)? {
            Some(v) => row_keys::decode_value("meta", &k, &v).map(Some),
            None => Ok(None),
        }
    }

    /// Every delivery of `subject`, by id.
    pub fn deliveries_of(&self, subject: TaskId) -> Result<Vec<PushDelivery>, StoreError> {
        self.inner
            .trees
            .meta
            .scan_prefix(subject_prefix(RECORD, subject))
            .map(|item| {
                let (k, v) = item?;
                row_keys::decode_value("meta", &k, &v)
            })
            .collect()
    }

    /// Every delivery, in subject order: for the listing of give-ups.
    pub fn all_deliveries(&self) -> Result<Vec<PushDelivery>, StoreError> {
        self.inner
            .trees
            .meta
            .scan_prefix(RECORD)
            .map(|item| {
                let (k, v) = item?;
                row_keys::decode_value("meta", &k, &v)
            })
            .collect()
    }

    /// The deliveries that may still owe something: (subject, id).
    pub fn pending_deliveries(&self) -> Result<Vec<(TaskId, String)>, StoreError> {
        self.inner
            .trees
            .meta
            .scan_prefix(PENDING)
            .map(|item| {
                let (k, _) = item?;
                let rest = &k[PENDING.len()..];
                let subject = row_keys::trailing_task_id("meta", &rest[..16.min(rest.len())])?;
                let id = String::from_utf8_lossy(rest.get(16..).unwrap_or_default()).into_owned();
                Ok((subject, id))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreSettings;

    fn entry(kind: &str, subject: TaskId) -> AuditEntry {
        AuditEntry {
            actor: "test".into(),
            kind: kind.into(),
            task_id: Some(subject),
            correlation_id: None,
            trace_id: None,
            detail: serde_json::Value::Null,
        }
    }

    fn pushed_to(subject: TaskId, url: &str) -> PushDelivery {
        let target = Target::A2a(PushTarget {
            url: url.into(),
            token: None,
            authentication: None,
            v03: false,
        });
        PushDelivery::new(subject, "p1".into(), target, "alice".into(), 0)
    }

    /// The outbox's record of an attempt made while its config was removed
    /// or replaced does not bring the old config back.
    #[tokio::test]
    async fn an_attempt_recorded_after_a_removal_or_replacement_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&StoreSettings::new(dir.path())).unwrap();
        let subject = TaskId::new();
        let d = pushed_to(subject, "http://a.example/hook");
        store.put_delivery(d.clone(), None).await.unwrap();

        let mut moved = d.clone();
        moved.delivered = 1;
        assert!(store.advance_delivery(moved.clone(), None).await.unwrap());
        assert_eq!(store.delivery(subject, "p1").unwrap(), Some(moved));

        let replaced = pushed_to(subject, "http://b.example/hook");
        store.put_delivery(replaced.clone(), None).await.unwrap();
        assert!(!store.advance_delivery(d.clone(), None).await.unwrap());
        assert_eq!(store.delivery(subject, "p1").unwrap(), Some(replaced));

        let removed = store
            .remove_delivery(subject, "p1", entry("push.removed", subject))
            .await
            .unwrap();
        assert!(removed);
        let gave_up = Some(entry("delivery.gave_up", subject));
        assert!(!store.advance_delivery(d, gave_up).await.unwrap());
        assert_eq!(store.delivery(subject, "p1").unwrap(), None);
        assert!(store.pending_deliveries().unwrap().is_empty());
    }
}
