//! Push notifications and callbacks, as the service keeps them: the push
//! configs a caller sets on a task or run it may see, and, for the outbox
//! that sends them (`loops::push`), what each delivery still owes,
//! its progress, its give-ups (audited), and the key deliveries are signed
//! with. The store owns the records (`store::deliveries`); the events
//! themselves are the subject's own, derived from its history.

use std::sync::Mutex;

use serde_json::json;
use tokio::sync::mpsc;

use super::{Caller, Orchestrator, ServiceError, lock};
use crate::access::grants;
use crate::audit::AuditEntry;
use crate::envelope::{TaskId, Timestamp};
use crate::run::RunId;
pub use crate::store::{CALLBACK, GaveUp, PushAuth, PushDelivery, PushTarget, Target};
use crate::task_token::PushKey;

/// The push configs one task or run takes: each has a sender of its own.
pub const MAX_PUSH_CONFIGS: usize = 10;

/// A delivery's name: its subject and its id.
pub type DeliveryName = (TaskId, String);

/// The outbox's share of the service: the signing key, and the queue that
/// tells the sender of a delivery it has not seen yet.
pub(super) struct Outbox {
    key: PushKey,
    wake: mpsc::UnboundedSender<DeliveryName>,
    queue: Mutex<Option<mpsc::UnboundedReceiver<DeliveryName>>>,
}

impl Outbox {
    /// The outbox of the key at `path` (made when missing).
    pub(super) fn open(path: &std::path::Path) -> Result<Outbox, ServiceError> {
        let (key, made) = PushKey::open_or_create(path)?;
        if made {
            tracing::info!(key = %path.display(), kid = key.kid(), "made the key push notifications and callbacks are signed with");
        }
        let (wake, queue) = mpsc::unbounded_channel();
        Ok(Outbox {
            key,
            wake,
            queue: Mutex::new(Some(queue)),
        })
    }

    /// Tells the sender of delivery `name`.
    pub(super) fn wake(&self, name: DeliveryName) {
        let _ = self.wake.send(name);
    }
}

/// Whether `caller` may see subject `id`: `Some(true)` yes, `Some(false)`
/// it is there but not for them (so, to them, not there), `None` no such
/// task or run.
fn visible(o: &Orchestrator, id: TaskId, caller: &Caller) -> Result<bool, ServiceError> {
    let store = o.store();
    if let Some(status) = store.status(id)? {
        return Ok(caller.may_see(&status));
    }
    match store.run(RunId::from_bytes(*id.as_bytes()))? {
        Some(run) => Ok(caller.may_see_run(&run)),
        None => Ok(false),
    }
}

fn audit(caller: &str, kind: &str, subject: TaskId, detail: serde_json::Value) -> AuditEntry {
    AuditEntry {
        actor: caller.to_string(),
        kind: kind.into(),
        task_id: Some(subject),
        correlation_id: None,
        trace_id: None,
        detail,
    }
}

impl Orchestrator {
    /// Sets push config `id` on task or run `subject` (which the caller
    /// must see), owing the events after `cursor`. A config with the same
    /// id is replaced (keeping how far it came, unless the URL changed).
    /// `Ok(None)`: no such task or run, for this caller.
    pub async fn set_push(
        &self,
        subject: TaskId,
        id: String,
        target: PushTarget,
        cursor: u64,
        caller: &Caller,
    ) -> Result<Option<PushDelivery>, ServiceError> {
        if !visible(self, subject, caller)? {
            return Ok(None);
        }
        self.check_target("url", &target.url).await?;
        let others = self
            .store()
            .deliveries_of(subject)?
            .iter()
            .filter(|d| d.id != id && matches!(d.target, Target::A2a(_)))
            .count();
        if others >= MAX_PUSH_CONFIGS {
            return Err(ServiceError::BadInput(crate::codec::DecodeError::invalid(
                "id",
                format!(
                    "task {subject} has {others} push notification configs, the most it takes: delete one first"
                ),
            )));
        }
        let kept = self
            .store()
            .delivery(subject, &id)?
            .filter(|d| matches!(&d.target, Target::A2a(t) if t.url == target.url));
        let url = target.url.clone();
        let d = match kept {
            Some(old) => PushDelivery {
                target: Target::A2a(target),
                ..old
            },
            None => PushDelivery::new(
                subject,
                id,
                Target::A2a(target),
                caller.principal.clone(),
                cursor,
            ),
        };
        let entry = audit(
            &caller.principal,
            "push.set",
            d.subject,
            json!({"config": d.id, "url": url}),
        );
        self.store().put_delivery(d.clone(), Some(entry)).await?;
        self.inner.outbox.wake((d.subject, d.id.clone()));
        Ok(Some(d))
    }

    /// Every delivery of `subject` (its push configs and its callback);
    /// `None` if the caller may not see it.
    pub async fn deliveries_of(
        &self,
        subject: TaskId,
        caller: &Caller,
    ) -> Result<Option<Vec<PushDelivery>>, ServiceError> {
        if !visible(self, subject, caller)? {
            return Ok(None);
        }
        let all = self.store().deliveries_of(subject)?;
        self.store().settled().await?;
        Ok(Some(all))
    }

    /// Removes push config `id` of `subject`: `Some(was there)`, `None` if
    /// the caller may not see the subject.
    pub async fn remove_push(
        &self,
        subject: TaskId,
        id: &str,
        caller: &Caller,
    ) -> Result<Option<bool>, ServiceError> {
        if !visible(self, subject, caller)? {
            return Ok(None);
        }
        if id == CALLBACK {
            return Ok(Some(false));
        }
        let entry = audit(
            &caller.principal,
            "push.removed",
            subject,
            json!({"config": id}),
        );
        Ok(Some(
            self.store().remove_delivery(subject, id, entry).await?,
        ))
    }

    /// Refuses `url` (the request's `field`) as a delivery target unless
    /// it may be one (`crate::target`), resolving its name.
    pub(super) async fn check_target(&self, field: &str, url: &str) -> Result<(), ServiceError> {
        let allowed = &self.settings().deliveries.allow_addresses;
        crate::target::check_resolving(url, allowed, crate::target::RESOLVE_WITHIN)
            .await
            .map(drop)
            .map_err(|e| ServiceError::BadInput(crate::codec::DecodeError::invalid(field, e.0)))
    }

    /// The deliveries that gave up on something, that the caller may see
    /// (its own; every one with `orch:tasks:read_all`), newest give-up
    /// first.
    pub async fn failed_deliveries(
        &self,
        caller: &Caller,
    ) -> Result<Vec<PushDelivery>, ServiceError> {
        let all = caller.grants.covers(grants::READ_ALL);
        let mut out: Vec<PushDelivery> = self
            .store()
            .all_deliveries()?
            .into_iter()
            .filter(|d| !d.gave_up.is_empty() && (all || d.owner == caller.principal))
            .collect();
        out.sort_by_key(|d| std::cmp::Reverse(d.gave_up.last().map(|g| g.at.unix_nanos())));
        self.store().settled().await?;
        Ok(out)
    }

    /// For the outbox: the queue of deliveries set up from now on (once).
    pub fn outbox_queue(&self) -> Option<mpsc::UnboundedReceiver<DeliveryName>> {
        lock(&self.inner.outbox.queue).take()
    }

    /// For the outbox: the deliveries that may still owe something.
    pub fn pending_deliveries(&self) -> Result<Vec<DeliveryName>, ServiceError> {
        Ok(self.store().pending_deliveries()?)
    }

    /// For the outbox: delivery `id` of `subject` as stored.
    pub fn delivery(
        &self,
        subject: TaskId,
        id: &str,
    ) -> Result<Option<PushDelivery>, ServiceError> {
        Ok(self.store().delivery(subject, id)?)
    }

    /// For the outbox: records how far `d` came (an event delivered, an
    /// attempt failed, nothing more owed), unless its config was removed
    /// or its target replaced meanwhile; whether it was recorded.
    pub async fn delivery_moved(&self, d: PushDelivery) -> Result<bool, ServiceError> {
        Ok(self.store().advance_delivery(d, None).await?)
    }

    /// For the outbox: records that `d` gave up on event `event` after
    /// `attempts` (and moves past it), in the audit trail too, unless its
    /// config was removed or its target replaced meanwhile.
    pub async fn delivery_gave_up(
        &self,
        mut d: PushDelivery,
        event: u64,
        error: String,
    ) -> Result<PushDelivery, ServiceError> {
        let entry = audit(
            "orchestrator",
            "delivery.gave_up",
            d.subject,
            json!({"delivery": d.id, "event": event, "attempts": d.attempts, "error": error}),
        );
        d.gave_up.push(GaveUp {
            event,
            at: Timestamp::now(),
            attempts: d.attempts,
            error,
        });
        d.cursor = event;
        d.attempts = 0;
        d.retry_at = None;
        self.store()
            .advance_delivery(d.clone(), Some(entry))
            .await?;
        Ok(d)
    }

    /// The key deliveries are signed with.
    pub fn push_key(&self) -> &PushKey {
        &self.inner.outbox.key
    }

    /// Tells the outbox of a new task's (or run's) callback.
    pub(super) fn callback_owed(&self, subject: TaskId) {
        self.inner.outbox.wake((subject, CALLBACK.into()));
    }
}
