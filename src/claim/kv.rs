//! Claim operations on the `ORCH_DELIVERIES` bucket: acquire, renew (which
//! is also the fence before a result is published), release, cancel marks.
//!
//! Every write is a publish to `$KV.<bucket>.<agent>.<task id>` carrying
//! `Nats-Expected-Last-Subject-Sequence` (the revision it replaces, 0 for
//! "no entry"), which makes it a compare-and-swap, and `Nats-TTL` (the
//! lease), which makes the broker, not a host clock, end a lease nobody
//! renews. Every read is a direct get of that one subject: nothing here
//! asks for the bucket's stream info, which would list every agent's keys
//! (a least-privilege bus lets an agent do neither).

use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use async_nats::header::{
    NATS_EXPECTED_LAST_SUBJECT_SEQUENCE, NATS_MARKER_REASON, NATS_MESSAGE_TTL, NATS_ROLLUP,
};
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::{self, stream};

use super::{ClaimValue, Decision, Delivery, decide, key};
use crate::envelope::{AgentName, TaskId};

/// Why a claim operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimErrorKind {
    /// Someone else wrote the claim since this holder did: the lease ended
    /// and another replica took the task over.
    Lost,
    /// The claim was replaced by the orchestrator's cancel mark.
    Canceled,
    /// The bucket could not be reached, or answered with an error.
    Unavailable,
    /// The stored value is not a claim.
    Undecodable,
}

impl std::fmt::Display for ClaimErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ClaimErrorKind::Lost => "lost to another holder",
            ClaimErrorKind::Canceled => "the task was canceled",
            ClaimErrorKind::Unavailable => "the claim bucket is unavailable",
            ClaimErrorKind::Undecodable => "the stored claim is not readable",
        })
    }
}

/// A claim operation's failure, typed by [`ClaimErrorKind`].
#[derive(Debug, Clone, thiserror::Error)]
#[error("claim of task {task_id}: {kind}: {message}")]
pub struct ClaimError {
    /// What kind of failure.
    pub kind: ClaimErrorKind,
    /// The task.
    pub task_id: TaskId,
    /// Details, for logs.
    pub message: String,
}

/// A claim this process holds.
#[derive(Debug)]
pub struct Held {
    /// The task.
    task_id: TaskId,
    /// Its claim's key.
    key: String,
    /// The revision this holder last wrote.
    revision: u64,
    /// The value it wrote (renewals write it again).
    value: bytes::Bytes,
    /// When the last write was acknowledged: a holder that cannot renew
    /// for a whole lease must assume it lost the claim.
    renewed: Instant,
}

impl Held {
    /// Whether a whole lease has passed since the last acknowledged write,
    /// measured on this process's monotonic clock.
    pub fn expired(&self, lease: Duration) -> bool {
        self.renewed.elapsed() >= lease
    }

    /// Whether the last acknowledged write is younger than `within`: the
    /// broker started the lease before it acknowledged the write, so a
    /// claim renewed less than half a lease ago cannot have expired.
    pub fn fresh(&self, within: Duration) -> bool {
        self.renewed.elapsed() < within
    }
}

/// The outcome of [`Claims::acquire`].
#[derive(Debug)]
pub enum Acquired {
    /// This process holds the claim: run the attempt.
    Run(Held),
    /// Do not run: settle the message as the decision says.
    Skip(Decision),
}

/// The claim bucket, as one process uses it.
#[derive(Clone)]
pub struct Claims {
    /// Publishes the compare-and-swap writes.
    js: jetstream::Context,
    /// The bucket's stream, for direct gets of one key.
    stream: stream::Stream<()>,
    /// The bucket's name (`ORCH_DELIVERIES`).
    bucket: String,
    /// How long a lease lasts without renewal.
    lease: Duration,
}

/// The key of a handler's note on a task: beside its claim.
fn note_key(agent: &AgentName, task_id: TaskId) -> String {
    format!("{}.note", key(agent, task_id))
}

/// The header that marks a key-value entry as deleted or purged.
const KV_OPERATION: &str = "KV-Operation";

/// How many times [`Claims::acquire`] looks again when the claim changes
/// under it.
const ACQUIRE_TRIES: usize = 8;

impl Claims {
    /// Claims in `bucket` (`ORCH_DELIVERIES`), whose stream is `stream`,
    /// with `lease`.
    pub fn new(
        js: jetstream::Context,
        stream: stream::Stream<()>,
        bucket: String,
        lease: Duration,
    ) -> Self {
        Claims {
            js,
            stream,
            bucket,
            lease,
        }
    }

    fn subject(&self, key: &str) -> String {
        format!("$KV.{}.{key}", self.bucket)
    }

    /// The lease length.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    fn error(task_id: TaskId, kind: ClaimErrorKind, message: impl ToString) -> ClaimError {
        ClaimError {
            kind,
            task_id,
            message: message.to_string(),
        }
    }

    /// Writes `value` under the task's key if its last revision is
    /// `expected` (0: no entry), with `ttl` when given. `Ok(None)`: the
    /// revision did not match.
    async fn write(
        &self,
        task_id: TaskId,
        key: &str,
        value: bytes::Bytes,
        expected: Option<u64>,
        ttl: Option<Duration>,
    ) -> Result<Option<u64>, ClaimError> {
        let mut headers = HeaderMap::new();
        if let Some(revision) = expected {
            headers.insert(
                NATS_EXPECTED_LAST_SUBJECT_SEQUENCE,
                revision.to_string().as_str(),
            );
        }
        if let Some(ttl) = ttl {
            headers.insert(NATS_MESSAGE_TTL, ttl_seconds(ttl).to_string().as_str());
        }
        self.publish(task_id, key, headers, value).await
    }

    /// Publishes `value` with `headers` under the task's key; its
    /// revision, `None` when the expected revision did not match.
    async fn publish(
        &self,
        task_id: TaskId,
        key: &str,
        headers: HeaderMap,
        value: bytes::Bytes,
    ) -> Result<Option<u64>, ClaimError> {
        let subject = self.subject(key);
        let unavailable = |e: &dyn std::fmt::Display| {
            Self::error(task_id, ClaimErrorKind::Unavailable, e.to_string())
        };
        let ack = self
            .js
            .publish_with_headers(subject, headers, value)
            .await
            .map_err(|e| unavailable(&e))?;
        match ack.await {
            Ok(ack) => Ok(Some(ack.sequence)),
            Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => Ok(None),
            Err(e) => Err(unavailable(&e)),
        }
    }

    /// The live claim of a task and its revision; `None` for the claim when
    /// there is none (never made, released, or its lease expired), with the
    /// revision of the marker left behind, if any.
    pub async fn peek(
        &self,
        agent: &AgentName,
        task_id: TaskId,
    ) -> Result<(Option<ClaimValue>, Option<u64>), ClaimError> {
        self.peek_key(task_id, &key(agent, task_id)).await
    }

    async fn peek_key(
        &self,
        task_id: TaskId,
        key: &str,
    ) -> Result<(Option<ClaimValue>, Option<u64>), ClaimError> {
        let entry = match self
            .stream
            .direct_get_last_for_subject(self.subject(key))
            .await
        {
            Ok(entry) => entry,
            Err(e) if e.kind() == stream::DirectGetErrorKind::NotFound => return Ok((None, None)),
            Err(e) => return Err(Self::error(task_id, ClaimErrorKind::Unavailable, e)),
        };
        // A delete or purge, or the marker an expired lease leaves.
        let removed = entry
            .headers
            .get(KV_OPERATION)
            .is_some_and(|op| op.as_str() != "PUT")
            || entry.headers.get(NATS_MARKER_REASON).is_some();
        if removed {
            return Ok((None, Some(entry.sequence)));
        }
        let value = serde_json::from_slice(&entry.payload)
            .map_err(|err| Self::error(task_id, ClaimErrorKind::Undecodable, err))?;
        Ok((Some(value), Some(entry.sequence)))
    }

    /// The note a handler left on `task_id` (key `<agent>.<task id>.note`),
    /// if any: what it must find again when its worker died, such as the
    /// remote task an `a2a` handler follows. Kept beside the claim, without
    /// a lease, as long as the bucket keeps entries.
    pub async fn note(
        &self,
        agent: &AgentName,
        task_id: TaskId,
    ) -> Result<Option<bytes::Bytes>, ClaimError> {
        let subject = self.subject(&note_key(agent, task_id));
        match self.stream.direct_get_last_for_subject(subject).await {
            Ok(entry) => {
                let removed = entry
                    .headers
                    .get(KV_OPERATION)
                    .is_some_and(|op| op.as_str() != "PUT");
                Ok((!removed).then_some(entry.payload))
            }
            Err(e) if e.kind() == stream::DirectGetErrorKind::NotFound => Ok(None),
            Err(e) => Err(Self::error(task_id, ClaimErrorKind::Unavailable, e)),
        }
    }

    /// Leaves (or replaces) the note on `task_id`; returns once the broker
    /// has stored it.
    pub async fn set_note(
        &self,
        agent: &AgentName,
        task_id: TaskId,
        value: bytes::Bytes,
    ) -> Result<(), ClaimError> {
        let key = note_key(agent, task_id);
        self.write(task_id, &key, value, None, None).await.map(drop)
    }

    /// Decides on one delivery of `task_id` and, when it is to run, claims
    /// it for `instance` under a fresh lease.
    pub async fn acquire(
        &self,
        agent: &AgentName,
        task_id: TaskId,
        delivery: Delivery,
        instance: &str,
    ) -> Result<Acquired, ClaimError> {
        let key = key(agent, task_id);
        let value = ClaimValue::Running {
            attempt: delivery.attempt,
            stream_seq: delivery.stream_seq,
            instance: instance.to_string(),
        }
        .to_bytes();
        // Most deliveries find no claim: try to create it first.
        let mut expected = 0;
        for _ in 0..ACQUIRE_TRIES {
            if let Some(revision) = self
                .write(
                    task_id,
                    &key,
                    value.clone(),
                    Some(expected),
                    Some(self.lease),
                )
                .await?
            {
                return Ok(Acquired::Run(Held {
                    task_id,
                    key,
                    revision,
                    value,
                    renewed: Instant::now(),
                }));
            }
            let (found, revision) = self.peek_key(task_id, &key).await?;
            match decide(found.as_ref(), delivery) {
                Decision::Create | Decision::TakeOver => expected = revision.unwrap_or(0),
                skip => return Ok(Acquired::Skip(skip)),
            }
        }
        Err(Self::error(
            task_id,
            ClaimErrorKind::Unavailable,
            "the claim kept changing while this worker tried to take it",
        ))
    }

    /// Renews a held claim's lease: a compare-and-swap on the revision this
    /// holder wrote last. Also the fence before a result is published: a
    /// holder whose renewal fails must not report.
    pub async fn renew(&self, held: &mut Held) -> Result<(), ClaimError> {
        // A write not acknowledged before the lease ends cannot keep it: the
        // holder must stop then, not when the broker's answer finally comes
        // (a reconnecting client can wait far longer than a lease).
        let left = self.lease.saturating_sub(held.renewed.elapsed());
        let write = self.write(
            held.task_id,
            &held.key,
            held.value.clone(),
            Some(held.revision),
            Some(self.lease),
        );
        let Ok(written) = tokio::time::timeout(left, write).await else {
            return Err(Self::error(
                held.task_id,
                ClaimErrorKind::Lost,
                "no renewal was acknowledged within the lease",
            ));
        };
        let written = written?;
        match written {
            Some(revision) => {
                held.revision = revision;
                held.renewed = Instant::now();
                Ok(())
            }
            None => Err(self.why_lost(held.task_id, &held.key).await),
        }
    }

    /// What replaced a claim this holder lost.
    async fn why_lost(&self, task_id: TaskId, key: &str) -> ClaimError {
        match self.peek_key(task_id, key).await {
            Ok((Some(ClaimValue::Canceled { .. }), _)) => Self::error(
                task_id,
                ClaimErrorKind::Canceled,
                "a cancel mark replaced the claim",
            ),
            Ok((other, _)) => Self::error(
                task_id,
                ClaimErrorKind::Lost,
                format!("the claim is now {other:?}"),
            ),
            Err(e) => Self::error(task_id, ClaimErrorKind::Lost, e.message),
        }
    }

    /// Gives a held claim up at once (a worker shutting down), so another
    /// replica can take the task without waiting out the lease. Only
    /// removes the claim if this holder still has it.
    pub async fn release(&self, held: Held) -> Result<(), ClaimError> {
        let mut headers = HeaderMap::new();
        headers.insert(KV_OPERATION, "PURGE");
        headers.insert(NATS_ROLLUP, "sub");
        headers.insert(
            NATS_EXPECTED_LAST_SUBJECT_SEQUENCE,
            held.revision.to_string().as_str(),
        );
        self.publish(held.task_id, &held.key, headers, bytes::Bytes::new())
            .await
            .map(|_| ())
    }

    /// Marks the task canceled (the orchestrator, before its broadcast):
    /// replaces whatever is there, so a running holder's next renewal fails
    /// and no later delivery starts. The mark lives as long as the bucket
    /// keeps entries.
    pub async fn mark_canceled(
        &self,
        agent: &AgentName,
        task_id: TaskId,
        attempt: u32,
    ) -> Result<(), ClaimError> {
        let value = ClaimValue::Canceled { attempt }.to_bytes();
        let key = key(agent, task_id);
        self.write(task_id, &key, value, None, None)
            .await
            .map(|_| ())
    }
}

/// `Nats-TTL` takes whole seconds, at least one.
fn ttl_seconds(ttl: Duration) -> u64 {
    ttl.as_secs_f64().ceil().max(1.0) as u64
}
