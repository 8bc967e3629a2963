//! The leader's snapshots (`replication.enabled`): every
//! `replication.snapshot_every` a snapshot of the store to the bucket,
//! the oldest beyond `replication.snapshots_kept` deleted and the log
//! trimmed below the oldest kept.

use tokio_util::sync::CancellationToken;

use crate::service::Orchestrator;

/// Takes snapshots until `stop` fires.
pub(super) async fn take(orchestrator: Orchestrator, stop: CancellationToken) {
    let inner = &orchestrator.inner;
    let r = &inner.config.replication;
    loop {
        tokio::select! {
            () = tokio::time::sleep(r.snapshot_every) => {}
            () = stop.cancelled() => return,
        }
        let taken = crate::replication::take(
            &inner.bus,
            r.partition,
            &inner.store,
            &inner.config.data_dir,
            r.snapshots_kept,
        );
        let taken = tokio::select! {
            taken = taken => taken,
            () = stop.cancelled() => return,
        };
        match taken {
            Ok(Some(s)) => tracing::info!(
                partition = r.partition,
                snapshot = %s.name,
                position = s.position,
                bytes = s.bytes,
                "wrote a snapshot of the store; the log is trimmed below the oldest kept"
            ),
            Ok(None) => tracing::debug!("no commit since the last snapshot"),
            Err(e) => {
                tracing::warn!(error = %e, "could not write a snapshot of the store; trying again at the next interval")
            }
        }
    }
}
