//! `--preload N`: N finished tasks stored before a run, so the figures
//! show what a store that has been in use for a while costs.

use std::path::Path;
use std::sync::Arc;

use orchestrator::envelope::{Envelope, Sender};
use orchestrator::store::{Change, NewTask};
use orchestrator::task::Transition;
use orchestrator::{Store, StoreSettings};
use serde_json::json;
use tokio::sync::Semaphore;

/// Stores `count` tasks, each submitted, run and completed, through the
/// store's own API (idempotency claim, indexes, history, audit), in the
/// store at `data_dir`.
pub(super) async fn preload(data_dir: &Path, count: usize) -> Result<(), String> {
    if count == 0 {
        return Ok(());
    }
    let store = Store::open(&StoreSettings::in_data_dir(data_dir)).map_err(|e| e.to_string())?;
    let slots = Arc::new(Semaphore::new(512));
    let mut handles = Vec::with_capacity(count.min(100_000));
    let started = std::time::Instant::now();
    for i in 0..count {
        let permit = Arc::clone(&slots)
            .acquire_owned()
            .await
            .map_err(|e| e.to_string())?;
        let store = store.clone();
        handles.push(tokio::spawn(async move {
            let done = one(&store, i).await;
            drop(permit);
            done
        }));
        if handles.len() == 100_000 {
            for h in handles.drain(..) {
                h.await.map_err(|e| e.to_string())??;
            }
        }
        super::progress("preloading", i + 1, count);
    }
    for h in handles {
        h.await.map_err(|e| e.to_string())??;
    }
    store.flush().await.map_err(|e| e.to_string())?;
    if super::on_terminal() {
        eprint!("\r\x1b[2K");
    }
    eprintln!(
        "preloaded {count} finished tasks in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

async fn one(store: &Store, i: usize) -> Result<(), String> {
    let params = json!({"i": i, "preloaded": true});
    let Some(params) = params.as_object().cloned() else {
        return Err("params are an object".into());
    };
    let envelope = Envelope::new(
        Sender::orchestrator(),
        "echo"
            .parse()
            .map_err(|e: orchestrator::envelope::ParseError| e.to_string())?,
        "echo"
            .parse()
            .map_err(|e: orchestrator::envelope::ParseError| e.to_string())?,
        params.clone(),
    );
    let submitted = store
        .submit(NewTask {
            envelope,
            scope: "bench".into(),
            // No key given: none is claimed.
            fingerprint: None,
            actor: "bench".into(),
            trace: None,
            step: None,
            conversation: false,
        })
        .await
        .map_err(|e| e.to_string())?;
    let id = submitted.record().task_id();
    for event in [Transition::Start, Transition::Complete] {
        let change = Change {
            attempt: Some(1),
            result: (event == Transition::Complete).then(|| json!({"echo": i})),
            ..Change::new(event, "bench", "preloaded")
        };
        store
            .apply_deferred(id, change)
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}
