//! Running the orchestrator: its background loops (events, dead letters,
//! orphans, republishing) and the HTTP API, and recovery at start.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{Orchestrator, ServiceError, dlq, events, lock, orphans};
use crate::envelope::TaskId;
use crate::task::TaskState;

impl Orchestrator {
    /// Runs the background work (event consumer, republisher) and the HTTP
    /// API until `shutdown` fires.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: CancellationToken,
    ) -> Result<(), ServiceError> {
        let events = events::consumer(&self.inner.bus).await?;
        let stop = CancellationToken::new();
        let applier = tokio::spawn(events::apply_events(
            self.inner.store.clone(),
            events,
            self.inner.updates.clone(),
            stop.clone(),
        ));
        let advisories = dlq::consumer(&self.inner.bus).await?;
        let dead_letters = tokio::spawn(dlq::handle_advisories(
            self.inner.bus.clone(),
            self.inner.store.clone(),
            advisories,
            stop.clone(),
        ));
        let sweeper = tokio::spawn(orphans::sweep(
            self.inner.bus.clone(),
            self.inner.store.clone(),
            self.inner.cards.clone(),
            self.inner.config.orphan_sweep,
            stop.clone(),
        ));
        self.recover().await?;
        let republisher = tokio::spawn(self.clone().republish_loop(stop.clone()));
        let app = crate::http::router(self.clone());
        let addr = listener.local_addr().ok();
        info!(addr = ?addr, "HTTP API listening");
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown.clone().cancelled_owned())
            .await;
        stop.cancel();
        let _ = applier.await;
        let _ = dead_letters.await;
        let _ = sweeper.await;
        let _ = republisher.await;
        self.inner.store.flush().await?;
        if let Err(e) = served {
            warn!(error = %e, "HTTP server ended with an error");
        }
        info!("orchestrator stopped");
        Ok(())
    }

    /// Republishes every task still `submitted` at its first attempt: it may
    /// have been stored but not published before a crash. JetStream drops
    /// the copies it already has (same `Nats-Msg-Id`), and worker claims
    /// catch any that get through.
    async fn recover(&self) -> Result<(), ServiceError> {
        let mut after = None;
        let mut count = 0;
        loop {
            let page = self
                .inner
                .store
                .list_by_state(TaskState::Submitted, after, 500)?;
            let Some(last) = page.last() else { break };
            after = Some(last.task_id());
            for record in page
                .iter()
                .filter(|r| r.attempt == r.envelope.control.attempt.get())
            {
                self.publish(record).await;
                count += 1;
            }
        }
        if count > 0 {
            info!(tasks = count, "republished submitted tasks after start");
        }
        Ok(())
    }

    async fn republish_loop(self, stop: CancellationToken) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = stop.cancelled() => return,
            }
            let pending: Vec<TaskId> = lock(&self.inner.unpublished).iter().copied().collect();
            for id in pending {
                match self.inner.store.get(id) {
                    Ok(Some(r)) if r.state == TaskState::Submitted => self.publish(&r).await,
                    _ => {
                        lock(&self.inner.unpublished).remove(&id);
                    }
                }
            }
        }
    }
}
