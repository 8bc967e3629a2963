//! Delivery claims shared by every replica of an agent, in the
//! `ORCH_DELIVERIES` KV bucket (DESIGN section 6).
//!
//! Key: a hash of agent + idempotency key. Value: who runs it, which attempt,
//! until when (the lease, renewed with each in-progress ack), and once done,
//! the result event to republish. A redelivery, on any replica, reads the
//! claim: done → republish and ack; started under a live lease → leave it;
//! started under an expired lease → take over, telling the handler that the
//! last attempt may have partly run; released for retry → run the next
//! attempt. Every change is a compare-and-swap on the entry's revision.

use std::time::Duration;

use async_nats::jetstream::kv;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::envelope::{AgentName, IdempotencyKey, Timestamp};
use crate::event::WorkerEvent;

/// A claim's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum State {
    Started,
    Retry,
    Done,
}

/// What the bucket holds for one delivery.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Claim {
    state: State,
    /// The worker instance that holds (or last held) it.
    instance: String,
    /// The attempt being run, or to run next after a retry.
    attempt: u32,
    /// Unix milliseconds when the lease ends.
    lease_until_ms: i64,
    /// The final event, once done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    event: Option<WorkerEvent>,
}

impl Claim {
    /// The claim as stored (its fields always serialize).
    fn to_bytes(&self) -> bytes::Bytes {
        serde_json::to_vec(self).unwrap_or_default().into()
    }
}

/// What to do with a delivery.
#[derive(Debug)]
pub(crate) enum Decision {
    /// Run the task at `attempt`; `resumed`: an earlier run's lease expired,
    /// so that run may have partly happened.
    Run {
        attempt: u32,
        resumed: bool,
        held: Held,
    },
    /// It was done already: republish this event and ack.
    Republish(WorkerEvent),
    /// Another replica holds a live lease: try again after this long.
    Busy(Duration),
}

/// A claim this worker holds: its key and the revision it last wrote.
#[derive(Debug)]
pub(crate) struct Held {
    key: String,
    revision: u64,
    attempt: u32,
}

/// A claim operation's failure (the bucket unreachable, or the claim taken
/// over by another replica).
#[derive(Debug, thiserror::Error)]
#[error("delivery claim {key}: {message}")]
pub(crate) struct ClaimError {
    key: String,
    message: String,
}

/// The claims of one agent, as one worker instance sees them.
#[derive(Clone)]
pub(crate) struct Claims {
    kv: kv::Store,
    agent: AgentName,
    instance: String,
    lease: Duration,
}

/// The bucket key of a delivery: KV keys allow few characters, so a hex
/// digest of agent and idempotency key.
pub fn delivery_key(agent: &AgentName, idempotency_key: &IdempotencyKey) -> String {
    let mut h = Sha256::new();
    h.update(agent.as_str().as_bytes());
    h.update([0]);
    h.update(idempotency_key.as_str().as_bytes());
    hex::encode(&h.finalize()[..20])
}

/// Marks a delivery that no worker has started as done with `event` (a
/// `canceled` report), so that whichever replica receives it republishes
/// the event instead of running the task. Returns `false` when a worker
/// holds the claim already (the caller then broadcasts the cancel).
pub async fn settle_unstarted(
    kv: &kv::Store,
    event: &WorkerEvent,
    idempotency_key: &IdempotencyKey,
) -> Result<bool, String> {
    let key = delivery_key(&event.agent, idempotency_key);
    let claim = Claim {
        state: State::Done,
        instance: "orchestrator".into(),
        attempt: event.attempt.get(),
        lease_until_ms: 0,
        event: Some(event.clone()),
    };
    let value = claim.to_bytes();
    match kv.create(&key, value.clone()).await {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {
            // Released for a retry counts as not started.
            let entry = kv.entry(&key).await.map_err(|e| e.to_string())?;
            let Some(entry) = entry else { return Ok(false) };
            let held: Claim = serde_json::from_slice(&entry.value).map_err(|e| e.to_string())?;
            if held.state != State::Retry {
                return Ok(false);
            }
            Ok(kv.update(&key, value, entry.revision).await.is_ok())
        }
        Err(e) => Err(e.to_string()),
    }
}

fn now_ms() -> i64 {
    (Timestamp::now()
        .as_offset_date_time()
        .unix_timestamp_nanos()
        / 1_000_000) as i64
}

impl Claims {
    pub(crate) fn new(kv: kv::Store, agent: AgentName, instance: String, lease: Duration) -> Self {
        Claims {
            kv,
            agent,
            instance,
            lease,
        }
    }

    fn key(&self, idempotency_key: &IdempotencyKey) -> String {
        delivery_key(&self.agent, idempotency_key)
    }

    fn started(&self, attempt: u32) -> bytes::Bytes {
        let claim = Claim {
            state: State::Started,
            instance: self.instance.clone(),
            attempt,
            lease_until_ms: now_ms() + self.lease.as_millis() as i64,
            event: None,
        };
        claim.to_bytes()
    }

    fn error(&self, key: &str, message: impl ToString) -> ClaimError {
        ClaimError {
            key: key.to_string(),
            message: message.to_string(),
        }
    }

    /// Decides what to do with a delivery of the task keyed `idempotency_key`
    /// whose envelope says `first_attempt`.
    pub(crate) async fn acquire(
        &self,
        idempotency_key: &IdempotencyKey,
        first_attempt: u32,
    ) -> Result<Decision, ClaimError> {
        let key = self.key(idempotency_key);
        for _ in 0..16 {
            // Most deliveries are first deliveries: try to create the claim,
            // and read it only when it exists.
            match self.kv.create(&key, self.started(first_attempt)).await {
                Ok(revision) => {
                    let held = Held {
                        key,
                        revision,
                        attempt: first_attempt,
                    };
                    return Ok(Decision::Run {
                        attempt: first_attempt,
                        resumed: false,
                        held,
                    });
                }
                Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {}
                Err(e) => return Err(self.error(&key, e)),
            }
            let entry = self.kv.entry(&key).await.map_err(|e| self.error(&key, e))?;
            // Deleted or purged since: try to create it again.
            let Some(entry) = entry.filter(|e| e.operation == kv::Operation::Put) else {
                continue;
            };
            let claim: Claim = serde_json::from_slice(&entry.value)
                .map_err(|e| self.error(&key, format!("undecodable claim: {e}")))?;
            let resumed = match claim.state {
                State::Done => match claim.event {
                    Some(event) => return Ok(Decision::Republish(event)),
                    None => return Err(self.error(&key, "done without an event")),
                },
                State::Started if claim.lease_until_ms > now_ms() => {
                    let left = (claim.lease_until_ms - now_ms()).max(1) as u64;
                    return Ok(Decision::Busy(Duration::from_millis(left)));
                }
                State::Started => true,
                State::Retry => false,
            };
            match self
                .kv
                .update(&key, self.started(claim.attempt), entry.revision)
                .await
            {
                Ok(revision) => {
                    let held = Held {
                        key,
                        revision,
                        attempt: claim.attempt,
                    };
                    return Ok(Decision::Run {
                        attempt: claim.attempt,
                        resumed,
                        held,
                    });
                }
                // Someone else moved it first: look again.
                Err(_) => continue,
            }
        }
        Err(self.error(&key, "the claim kept changing under this worker"))
    }

    /// Extends the lease of a held claim.
    pub(crate) async fn renew(&self, held: &mut Held) -> Result<(), ClaimError> {
        let revision = self
            .kv
            .update(&held.key, self.started(held.attempt), held.revision)
            .await
            .map_err(|e| self.error(&held.key, format!("lease lost: {e}")))?;
        held.revision = revision;
        Ok(())
    }

    /// Records the final event: later deliveries republish it.
    pub(crate) async fn finish(&self, held: Held, event: &WorkerEvent) -> Result<(), ClaimError> {
        let attempt = held.attempt;
        self.replace(held, State::Done, attempt, Some(event.clone()))
            .await
    }

    /// Releases the claim so that the next delivery runs `next_attempt`.
    pub(crate) async fn release_for_retry(
        &self,
        held: Held,
        next_attempt: u32,
    ) -> Result<(), ClaimError> {
        self.replace(held, State::Retry, next_attempt, None).await
    }

    /// Gives the claim up at once (shutdown): the next delivery, on any
    /// replica, takes it over as a resumed attempt.
    pub(crate) async fn abandon(&self, held: Held) -> Result<(), ClaimError> {
        let attempt = held.attempt;
        self.replace(held, State::Started, attempt, None).await
    }

    /// Replaces a held claim with an unleased one in `state`.
    async fn replace(
        &self,
        held: Held,
        state: State,
        attempt: u32,
        event: Option<WorkerEvent>,
    ) -> Result<(), ClaimError> {
        let claim = Claim {
            state,
            instance: self.instance.clone(),
            attempt,
            lease_until_ms: 0,
            event,
        };
        self.kv
            .update(&held.key, claim.to_bytes(), held.revision)
            .await
            .map_err(|e| self.error(&held.key, e))?;
        Ok(())
    }
}
