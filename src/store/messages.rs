//! What a principal's message id names: one key (an A2A `messageId`, or
//! an `Idempotency-Key` given with a message) names one message for the
//! retention, whatever it asked for (a task, a run, an answer, a gate
//! decision). The task, run and answer keep their own keys as well; this
//! claim is what refuses the same id with other content across them.
//!
//! Kept in the runs tree under its own prefix, written by the one writer
//! like every other change; expired claims are collected with the rest.

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::idempotency::{Fingerprint, expired};
use super::tasks::abort;
use super::{AuditEntry, Store, StoreError, audit, row_keys};
use crate::envelope::Timestamp;

const MESSAGE: u8 = b'm';
/// The prefix of the message claims, for the key collector.
pub(super) const MESSAGES: &[u8] = &[MESSAGE];

/// What a claimed message id holds.
#[derive(Serialize, Deserialize)]
struct Held {
    /// The message it was first used for.
    fingerprint: Fingerprint,
    /// Unix seconds after which the id is free again.
    expires_at: i64,
}

/// How a message id was claimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageClaim {
    /// First used now: give it back if the message is refused.
    New,
    /// Used before for this very message: a resend.
    Again,
}

fn claim_key(principal: &str, key: &str) -> Vec<u8> {
    let mut out = vec![MESSAGE];
    out.extend(row_keys::idempotency(principal, key));
    out
}

impl Store {
    /// Claims `key` of `principal` for the message `fingerprint`: new, or
    /// held by this message already; held by another message (other
    /// content, target or decision) it is [`StoreError::MessageConflict`],
    /// audited (`message.conflict`). The claim is made durable by the
    /// change that follows it (one flush covers both); a refusal waits for
    /// what it read to be durable.
    pub async fn claim_message(
        &self,
        principal: &str,
        key: &str,
        fingerprint: Fingerprint,
    ) -> Result<MessageClaim, StoreError> {
        let now = Timestamp::now();
        let at = claim_key(principal, key);
        let value = row_keys::encode(&Held {
            fingerprint: fingerprint.clone(),
            expires_at: now.after(self.inner.retention).unix_seconds(),
        });
        let refused = AuditEntry {
            actor: principal.to_string(),
            kind: "message.conflict".into(),
            task_id: None,
            correlation_id: None,
            trace_id: None,
            detail: json!({"message_key": key}),
        };
        let claimed = self
            .transact(Box::new(move |tx, head| {
                let held = tx.runs.get(&at)?;
                let held = held
                    .map(|b| row_keys::decode_value::<Held>("runs", &at, &b))
                    .transpose()
                    .map_err(abort)?;
                match held.filter(|h| !expired(h.expires_at, now.unix_seconds())) {
                    Some(h) if h.fingerprint == fingerprint => {
                        Ok((head, Some(MessageClaim::Again)))
                    }
                    Some(_) => Ok((audit::append(tx, head, &refused, now)?, None)),
                    None => {
                        tx.runs.insert(at.as_slice(), value.as_slice())?;
                        Ok((head, Some(MessageClaim::New)))
                    }
                }
            }))
            .await?;
        match claimed {
            Some(claim) => Ok(claim),
            None => {
                self.inner.commit.durable().await?;
                Err(StoreError::MessageConflict {
                    key: key.to_string(),
                })
            }
        }
    }

    /// Gives back the claim of `key` made for the message `fingerprint`
    /// (the message was refused, so the id may name a corrected one).
    pub async fn release_message(
        &self,
        principal: &str,
        key: &str,
        fingerprint: Fingerprint,
    ) -> Result<(), StoreError> {
        let at = claim_key(principal, key);
        self.transact(Box::new(move |tx, head| {
            if let Some(bytes) = tx.runs.get(&at)?
                && row_keys::decode_value::<Held>("runs", &at, &bytes)
                    .is_ok_and(|h| h.fingerprint == fingerprint)
            {
                tx.runs.remove(at.as_slice())?;
            }
            Ok((head, ()))
        }))
        .await
    }
}
