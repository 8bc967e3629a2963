//! The sender's loops: one per delivery that owes something, each
//! following its task or run and recording every attempt.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{Map, Value};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::PushBodies;
use super::outbound::{self, AttemptError};
use super::owed::{self, Owed, OwedError};
use crate::access::Grants;
use crate::backoff::Backoff;
use crate::envelope::Timestamp;
use crate::service::{Caller, DeliveryName, DeliveryTarget, Orchestrator, PushDelivery};

/// What the loops share.
struct Shared {
    o: Orchestrator,
    client: outbound::Client,
    /// Bounds the requests in flight, over every delivery.
    slots: Semaphore,
    stop: CancellationToken,
    /// The deliveries with a loop now.
    running: Mutex<HashSet<DeliveryName>>,
    loops: TaskTracker,
    /// Who the loops read tasks and runs as: every delivery was allowed
    /// when its config was set.
    reader: Caller,
    /// What the bodies hold, and where a receiver finds the key the
    /// signatures check with.
    bodies: Arc<dyn PushBodies>,
}

/// The sender, run with the orchestrator's background work: a loop for
/// every delivery that may still owe something, and for each one set up
/// from now on, until `stop`; it ends once every loop has.
pub(in crate::service) fn sender(
    o: Orchestrator,
    bodies: Arc<dyn PushBodies>,
    stop: CancellationToken,
) -> impl Future<Output = ()> + Send + 'static {
    let settings = o.settings().deliveries.clone();
    let shared = Arc::new(Shared {
        client: outbound::Client::new(&settings.allow_addresses, settings.timeout),
        slots: Semaphore::new(settings.max_in_flight),
        stop,
        running: Mutex::default(),
        loops: TaskTracker::new(),
        reader: Caller::new("outbox", Grants::all()),
        bodies,
        o,
    });
    async move {
        let Some(mut queue) = shared.o.outbox_queue() else {
            return;
        };
        match shared.o.pending_deliveries() {
            Ok(pending) => {
                if !pending.is_empty() {
                    tracing::info!(deliveries = pending.len(), "outbox: resuming deliveries");
                }
                for name in pending {
                    spawn(&shared, name);
                }
            }
            Err(e) => tracing::error!(error = %e, "outbox: the pending deliveries were not read"),
        }
        loop {
            tokio::select! {
                next = queue.recv() => match next {
                    Some(name) => spawn(&shared, name),
                    None => break,
                },
                () = shared.stop.cancelled() => break,
            }
        }
        shared.loops.close();
        shared.loops.wait().await;
    }
}

fn running(shared: &Shared) -> std::sync::MutexGuard<'_, HashSet<DeliveryName>> {
    shared
        .running
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

/// Starts delivery `name`'s loop unless it has one.
fn spawn(shared: &Arc<Shared>, name: DeliveryName) {
    if shared.stop.is_cancelled() || !running(shared).insert(name.clone()) {
        return;
    }
    let sh = Arc::clone(shared);
    shared.loops.spawn(async move {
        let ended = deliver(&sh, &name).await;
        running(&sh).remove(&name);
        match ended {
            // Set up again while this loop was ending: it needs one.
            Ok(()) => {
                if let Ok(Some(d)) = sh.o.delivery(name.0, &name.1)
                    && !d.done
                    && !sh.stop.is_cancelled()
                {
                    spawn(&sh, name);
                }
            }
            Err(e) => {
                tracing::warn!(subject = %name.0, delivery = %name.1, error = %e, "outbox: a delivery's loop stopped; it resumes at the next start, or when its config is set again");
            }
        }
    });
}

/// Delivery `name`'s loop: until nothing more is owed, it is removed, or
/// the sender stops.
async fn deliver(sh: &Shared, name: &DeliveryName) -> Result<(), OwedError> {
    let o = &sh.o;
    let followed = o.following(name.0, &sh.reader).await;
    let Some((mut subject, mut following)) = followed? else {
        // Its task or run is gone (set aside as unreadable): nothing is
        // owed any more.
        if let Some(mut d) = o.delivery(name.0, &name.1)? {
            d.done = true;
            d.last_error = Some("its task or run can no longer be read".into());
            o.delivery_moved(d).await?;
        }
        return Ok(());
    };
    loop {
        let Some(mut d) = o.delivery(name.0, &name.1)? else {
            return Ok(());
        };
        if d.done {
            return Ok(());
        }
        match owed::next(o, sh.bodies.as_ref(), &d, &subject, &sh.reader).await? {
            Owed::Nothing { ended: true } => {
                d.done = true;
                o.delivery_moved(d).await?;
                return Ok(());
            }
            Owed::Nothing { ended: false } => {
                tokio::select! {
                    changed = following.changed() => match changed? {
                        Some(s) => subject = s,
                        None => return Ok(()),
                    },
                    () = sh.stop.cancelled() => return Ok(()),
                }
            }
            Owed::Skip(event) => {
                d.cursor = event;
                o.delivery_moved(d).await?;
            }
            Owed::Send { event, url, body } => {
                if let Some(at) = d.retry_at {
                    let wait = at.unix_nanos() - Timestamp::now().unix_nanos();
                    if wait > 0 {
                        let wait = Duration::from_nanos(wait.try_into().unwrap_or(u64::MAX));
                        tokio::select! {
                            () = tokio::time::sleep(wait) => {}
                            () = sh.stop.cancelled() => return Ok(()),
                        }
                        // Read it again: it may have been removed meanwhile.
                        continue;
                    }
                }
                // A stop abandons the attempt: it is made again at the
                // next start, with the same delivery id.
                let outcome = tokio::select! {
                    outcome = send(sh, &d, event, &url, body) => outcome,
                    () = sh.stop.cancelled() => return Ok(()),
                };
                // As it is now: removed, or its target replaced, meanwhile.
                let Some(now) = o.delivery(name.0, &name.1)? else {
                    return Ok(());
                };
                if now.target != d.target {
                    continue;
                }
                record(sh, now, event, outcome).await?;
            }
        }
    }
}

/// Records an attempt's outcome.
async fn record(
    sh: &Shared,
    mut d: PushDelivery,
    event: u64,
    outcome: Result<(), AttemptError>,
) -> Result<(), crate::service::ServiceError> {
    let settings = &sh.o.settings().deliveries;
    match outcome {
        Ok(()) => {
            crate::telemetry::metrics::delivery_sent(true);
            d.cursor = event;
            d.delivered += 1;
            d.attempts = 0;
            d.retry_at = None;
            d.last_error = None;
            sh.o.delivery_moved(d).await.map(drop)
        }
        Err(why) => {
            crate::telemetry::metrics::delivery_sent(false);
            d.attempts += 1;
            if d.attempts >= settings.max_attempts {
                tracing::warn!(subject = %d.subject, delivery = %d.id, event, attempts = d.attempts, error = %why, "outbox: gave up on an event");
                sh.o.delivery_gave_up(d, event, why.to_string())
                    .await
                    .map(drop)
            } else {
                let backoff = Backoff::new(settings.backoff_first, settings.backoff_max);
                let delay = backoff.delay_after(d.attempts - 1);
                tracing::debug!(subject = %d.subject, delivery = %d.id, event, attempts = d.attempts, error = %why, ?delay, "outbox: an attempt failed");
                d.retry_at = Some(Timestamp::now().after(delay));
                d.last_error = Some(why.to_string());
                sh.o.delivery_moved(d).await.map(drop)
            }
        }
    }
}

/// One attempt at event `event` of `d`: signed, with the target's
/// credentials.
async fn send(
    sh: &Shared,
    d: &PushDelivery,
    event: u64,
    url: &str,
    body: Vec<u8>,
) -> Result<(), AttemptError> {
    let id = format!("{}:{}:{event}", d.subject, d.id);
    let mut claims = Map::new();
    claims.insert("jti".into(), Value::from(id.clone()));
    claims.insert("iat".into(), Timestamp::now().unix_seconds().into());
    claims.insert("aud".into(), url.into());
    claims.insert("sub".into(), d.subject.to_string().into());
    if let Some(jku) = sh.bodies.jwks_url() {
        claims.insert("jku".into(), jku.into());
    }
    let signature = sh.o.push_key().sign(claims, &body);
    let mut headers = HeaderMap::new();
    let value = |s: &str| HeaderValue::from_str(s).map_err(|_| AttemptError::Header(s.to_string()));
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    headers.insert("orchestrator-delivery", value(&id)?);
    headers.insert("orchestrator-signature", value(&signature)?);
    if let DeliveryTarget::A2a(t) = &d.target {
        if let Some(auth) = &t.authentication {
            let credentials = auth.credentials.as_deref().unwrap_or_default();
            let mut v = value(format!("{} {credentials}", auth.scheme).trim())?;
            v.set_sensitive(true);
            headers.insert("authorization", v);
        }
        if let Some(token) = &t.token {
            let mut v = value(token)?;
            v.set_sensitive(true);
            headers.insert("x-a2a-notification-token", v);
        }
    }
    let _slot = sh
        .slots
        .acquire()
        .await
        .map_err(|_| AttemptError::Stopping)?;
    let allowed = &sh.o.settings().deliveries.allow_addresses;
    sh.client.post(url, allowed, headers, body).await
}
