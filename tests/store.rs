//! The store as its users see it: tasks, idempotency, state changes,
//! indexes, the audit chain, and what happens to bad or damaged files.

use crate::common;

use std::time::Duration;

use common::{envelope, new_task, temp_store};
use orchestrator::audit::{AuditEntry, AuditFilter};
use orchestrator::event::ErrorInfo;
use orchestrator::store::{Applied, Change, StepLink};
use orchestrator::task::Submitted;
use orchestrator::{Store, StoreError, StoreSettings, TaskState, Transition};
use serde_json::json;

/// A fresh store whose idempotency keys expire at once.
fn expiring_store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = StoreSettings::new(dir.path().join("s"));
    config.idempotency_retention = Duration::ZERO;
    let store = Store::open(&config).unwrap();
    (dir, store)
}

fn change(event: Transition) -> Change {
    Change::new(event, "worker-1", format!("reported {event}"))
}

/// A submitted task can be read back with its first history entry, and its
/// submission is the first audit record.
#[tokio::test]
async fn a_submitted_task_is_stored_indexed_and_audited() {
    let (_dir, store) = temp_store();
    let env = envelope("knowledge-agent", "search:kb", json!({"query": "x"}), "k1");
    let created = store.submit(new_task(env.clone())).await.unwrap();
    let Submitted::Created(record) = created else {
        panic!("expected a new task")
    };
    let got = store.get(env.header.task_id).unwrap().unwrap();
    assert_eq!(got, record);
    assert_eq!(got.status.state, TaskState::Submitted);
    assert_eq!(got.history.len(), 1);
    assert_eq!(got.history[0].actor, "test-principal");
    assert!(got.envelope.header.token.is_none());
    let by_corr = store
        .list_by_correlation(&env.header.correlation_id, None, 10)
        .unwrap();
    assert_eq!(by_corr, vec![got.clone()]);
    assert_eq!(
        store.list_by_state(TaskState::Submitted, None, 10).unwrap(),
        vec![got]
    );
    let audit = store.audit_list(&AuditFilter::default(), 0, 10).unwrap();
    assert_eq!(audit.len(), 1);
    assert_eq!(audit[0].kind, "task.submitted");
    assert_eq!(audit[0].task_id, Some(env.header.task_id));
    assert_eq!(audit[0].seq, 1);
}

/// A read-only handle (a standby's copy, as its readers get it) reads
/// what the store holds and refuses every write, which then is not there.
#[tokio::test]
async fn a_read_only_handle_reads_and_refuses_every_write() {
    let (_dir, store) = temp_store();
    let env = envelope("knowledge-agent", "search:kb", json!({"query": "x"}), "r1");
    store.submit(new_task(env.clone())).await.unwrap();
    let reader = store.read_only();
    assert!(reader.get(env.header.task_id).unwrap().is_some());
    let other = envelope("knowledge-agent", "search:kb", json!({"query": "y"}), "r2");
    let refused = reader.submit(new_task(other.clone())).await.unwrap_err();
    assert!(matches!(refused, StoreError::NotLeader(_)), "{refused}");
    assert!(store.get(other.header.task_id).unwrap().is_none());
    assert!(matches!(
        reader.collect_expired_keys(orchestrator::envelope::Timestamp::now()),
        Err(StoreError::NotLeader(_))
    ));
}

/// A retry of the same request returns the same task; the same key for a
/// different request is a conflict; another scope is another key space.
#[tokio::test]
async fn idempotency_returns_the_existing_task_or_a_conflict() {
    let (_dir, store) = temp_store();
    let first = envelope(
        "outlook-agent",
        "compose:draft",
        json!({"to": "a"}),
        "same-key",
    );
    let Submitted::Created(original) = store.submit(new_task(first)).await.unwrap() else {
        panic!("first submit must create")
    };
    // A retry: same key, same request, but (as a client retry would) a new task id.
    let retry = envelope(
        "outlook-agent",
        "compose:draft",
        json!({"to": "a"}),
        "same-key",
    );
    match store.submit(new_task(retry)).await.unwrap() {
        Submitted::Existing(r) => assert_eq!(r.task_id(), original.task_id()),
        other => panic!("expected the existing task, got {other:?}"),
    }
    let other = envelope(
        "outlook-agent",
        "compose:draft",
        json!({"to": "b"}),
        "same-key",
    );
    match store.submit(new_task(other)).await {
        Err(StoreError::IdempotencyConflict { existing, .. }) => {
            assert_eq!(existing, original.task_id())
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    let mut elsewhere = new_task(envelope(
        "outlook-agent",
        "compose:draft",
        json!({"to": "b"}),
        "same-key",
    ));
    elsewhere.scope = "another-principal".into();
    assert!(matches!(
        store.submit(elsewhere).await.unwrap(),
        Submitted::Created(_)
    ));
    assert_eq!(store.list(None, 100).unwrap().len(), 2);
}

/// Concurrent submits of one key create exactly one task.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_claims_of_one_key_create_one_task() {
    let (_dir, store) = temp_store();
    let mut handles = Vec::new();
    for _ in 0..32 {
        let store = store.clone();
        handles.push(tokio::spawn(async move {
            let env = envelope("echo", "echo", json!({"n": 1}), "raced");
            store.submit(new_task(env)).await.unwrap()
        }));
    }
    let mut ids = std::collections::BTreeSet::new();
    let mut created = 0;
    for h in handles {
        let s = h.await.unwrap();
        created += matches!(s, Submitted::Created(_)) as usize;
        ids.insert(s.record().task_id());
    }
    assert_eq!(created, 1);
    assert_eq!(ids.len(), 1);
}

/// Keys expire after the retention and are collected; an expired key can be
/// claimed again by a new request.
#[tokio::test]
async fn expired_keys_are_collected_and_can_be_claimed_again() {
    let (_dir, store) = expiring_store();
    let a = envelope("echo", "echo", json!({"n": 1}), "k");
    store.submit(new_task(a)).await.unwrap();
    let b = envelope("echo", "echo", json!({"n": 2}), "k");
    assert!(matches!(
        store.submit(new_task(b)).await.unwrap(),
        Submitted::Created(_)
    ));
    let later = orchestrator::envelope::Timestamp::now().after(Duration::from_secs(1));
    assert_eq!(store.collect_expired_keys(later).unwrap(), 1);
    assert_eq!(store.collect_expired_keys(later).unwrap(), 0);
    assert!(store.check_indexes().unwrap().ok());
}

/// Only a key the caller gave is claimed: a task submitted without one
/// (its key is its own id) leaves nothing to collect.
#[tokio::test]
async fn only_a_key_the_caller_gave_is_claimed() {
    let (_dir, store) = expiring_store();
    for n in 0..3 {
        let mut keyless = envelope("echo", "echo", json!({ "n": n }), "unused");
        keyless.control.idempotency_key = keyless.header.task_id.into();
        assert!(!keyless.has_given_key());
        let created = store.submit(new_task(keyless)).await.unwrap();
        assert!(matches!(created, Submitted::Created(_)));
    }
    let keyed = envelope("echo", "echo", json!({"n": 9}), "given");
    assert!(keyed.has_given_key());
    store.submit(new_task(keyed)).await.unwrap();
    let later = orchestrator::envelope::Timestamp::now().after(Duration::from_secs(1));
    assert_eq!(store.collect_expired_keys(later).unwrap(), 1);
    assert!(store.check_indexes().unwrap().ok());
}

/// A run's key, like a task's, returns its run within the retention and
/// conflicts with another request; once expired it starts a new run, and
/// it is collected.
#[tokio::test]
async fn run_keys_expire_like_task_keys() {
    use orchestrator::run::RunStarted;
    async fn start(store: &Store, n: u32) -> Result<RunStarted, StoreError> {
        store
            .start_run(common::new_run("t", Some("k"), json!({ "n": n })))
            .await
    }
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&StoreSettings::new(dir.path().join("kept"))).unwrap();
    let first = start(&store, 1).await.unwrap();
    let again = start(&store, 1).await.unwrap();
    assert!(matches!(again, RunStarted::Existing(ref r) if r.run_id == first.record().run_id));
    let other = start(&store, 2).await;
    assert!(
        matches!(other, Err(StoreError::RunKeyConflict { .. })),
        "{other:?}"
    );
    drop(store);

    let mut config = StoreSettings::new(dir.path().join("expiring"));
    config.idempotency_retention = Duration::ZERO;
    let store = Store::open(&config).unwrap();
    let first = start(&store, 1).await.unwrap();
    let second = start(&store, 2).await.unwrap();
    assert!(matches!(second, RunStarted::Created(_)), "{second:?}");
    assert_ne!(second.record().run_id, first.record().run_id);
    let later = orchestrator::envelope::Timestamp::now().after(Duration::from_secs(1));
    assert_eq!(store.collect_expired_keys(later).unwrap(), 1);
    assert_eq!(store.collect_expired_keys(later).unwrap(), 0);
}

/// The background collector removes expired keys by itself.
#[tokio::test]
async fn the_background_collector_runs_on_its_interval() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = StoreSettings::new(dir.path().join("s"));
    config.idempotency_retention = Duration::ZERO;
    config.gc_interval = Duration::from_millis(20);
    let store = Store::open(&config).unwrap();
    store
        .submit(new_task(envelope("echo", "echo", json!({}), "k")))
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    // The claim expires at the next second boundary; wait for the collector.
    while store.claimed_keys() > 0 {
        assert!(std::time::Instant::now() < deadline, "collector never ran");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A task moves working → completed; the history and the audit log record
/// every transition with its actor and reason, and the indexes follow.
#[tokio::test]
async fn transitions_are_recorded_in_history_audit_and_indexes() {
    let (_dir, store) = temp_store();
    let env = envelope("echo", "echo", json!({}), "k");
    let id = env.header.task_id;
    store.submit(new_task(env)).await.unwrap();
    let working = store.apply(id, change(Transition::Start)).await.unwrap();
    assert!(matches!(working, Applied::Moved(ref r) if r.state == TaskState::Working));
    let again = store.apply(id, change(Transition::Start)).await.unwrap();
    assert!(matches!(again, Applied::Unchanged(_)));
    let mut done = change(Transition::Complete);
    done.result = Some(json!({"echo": true}));
    done.attempt = Some(1);
    let Applied::Moved(record) = store.apply(id, done).await.unwrap() else {
        panic!()
    };
    assert_eq!(record.state, TaskState::Completed);
    assert_eq!(record.result, Some(json!({"echo": true})));
    // The history is the audit log's transitions, read with the task.
    let record = store.get(id).unwrap().unwrap();
    let states: Vec<_> = record.history.iter().map(|h| h.to).collect();
    assert_eq!(
        states,
        [
            TaskState::Submitted,
            TaskState::Working,
            TaskState::Completed
        ]
    );
    assert_eq!(record.history[2].actor, "worker-1");
    assert_eq!(record.history[2].reason, "reported complete");
    assert!(
        store
            .list_by_state(TaskState::Working, None, 10)
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store
            .list_by_state(TaskState::Completed, None, 10)
            .unwrap()
            .len(),
        1
    );
    let kinds: Vec<_> = store
        .audit_list(
            &AuditFilter {
                task_id: Some(id),
                correlation_id: None,
            },
            0,
            10,
        )
        .unwrap()
        .into_iter()
        .map(|r| (r.kind, r.detail["to"].clone()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("task.submitted".to_string(), json!(null)),
            ("task.transition".to_string(), json!("working")),
            ("task.transition".to_string(), json!("completed")),
        ]
    );
    assert!(store.check_indexes().unwrap().ok());
}

/// A result that arrives after the task ended, or one about an older
/// attempt, is audited and otherwise ignored; an impossible change is refused.
#[tokio::test]
async fn late_stale_and_invalid_events_do_not_move_the_task() {
    let (_dir, store) = temp_store();
    let env = envelope("echo", "echo", json!({}), "k");
    let id = env.header.task_id;
    store.submit(new_task(env)).await.unwrap();
    store.record_published(id, 1, 7).await.unwrap();
    store
        .apply(id, change(Transition::RequireInput))
        .await
        .unwrap();
    let refused = store
        .apply(id, change(Transition::Complete))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), "invalid_transition");
    store.apply(id, change(Transition::Start)).await.unwrap();
    let mut retry = change(Transition::Retry);
    retry.error = Some(ErrorInfo::new("upstream_timeout", "slow", true));
    let Applied::Moved(r) = store.apply(id, retry).await.unwrap() else {
        panic!()
    };
    // The store owns the attempt: the next one is scheduled, not published.
    assert_eq!((r.state, r.attempt), (TaskState::Submitted, 2));
    assert!(r.retry_at.is_some() && r.published_seq.is_none(), "{r:?}");
    let mut stale = change(Transition::Complete);
    stale.attempt = Some(1);
    let Applied::Ignored { record, reason } = store.apply(id, stale).await.unwrap() else {
        panic!("a report about attempt 1 must be ignored")
    };
    assert_eq!(record.state, TaskState::Submitted);
    assert!(reason.contains("attempt 1"), "{reason}");
    store.apply(id, change(Transition::Cancel)).await.unwrap();
    let late = store.apply(id, change(Transition::Complete)).await.unwrap();
    assert!(
        matches!(late, Applied::Ignored { ref record, .. } if record.state == TaskState::Canceled)
    );
    let ignored = store
        .audit_list(&AuditFilter::default(), 0, 100)
        .unwrap()
        .into_iter()
        .filter(|r| r.kind == "task.ignored_event")
        .count();
    assert_eq!(ignored, 2);
    assert!(matches!(
        store
            .apply(orchestrator::TaskId::new(), change(Transition::Start))
            .await,
        Err(StoreError::NotFound(_))
    ));
}

/// Changes to one task that arrive together are one store job: one
/// transaction, so the status is written once, while each transition keeps
/// its own outcome and audit record, and a refused change in the middle
/// neither stops the ones after it nor loses the ones before.
#[tokio::test]
async fn changes_that_arrive_together_are_one_transaction() {
    let (_dir, store) = temp_store();
    let env = envelope("echo", "echo", json!({}), "k");
    let id = env.header.task_id;
    store.submit(new_task(env)).await.unwrap();
    let mut working = change(Transition::Start);
    working.attempt = Some(1);
    let mut stale = change(Transition::Complete);
    stale.attempt = Some(2);
    let mut done = change(Transition::Complete);
    done.attempt = Some(1);
    done.result = Some(json!({"ok": true}));
    let before = store.transactions();
    let outcomes = store
        .apply_all_deferred(
            id,
            vec![
                working,
                stale,
                change(Transition::RequireAuth),
                change(Transition::Complete),
                change(Transition::Start),
                done,
            ],
        )
        .await
        .unwrap();
    assert_eq!(store.transactions(), before + 1);
    assert_eq!(outcomes.len(), 6);
    assert!(matches!(&outcomes[0], Ok(Applied::Moved(s)) if s.state == TaskState::Working));
    assert!(matches!(&outcomes[1], Ok(Applied::Ignored { .. })));
    assert!(matches!(&outcomes[2], Ok(Applied::Moved(s)) if s.state == TaskState::AuthRequired));
    let refused = outcomes[3].as_ref().unwrap_err();
    assert_eq!(refused.code(), "invalid_transition");
    assert!(matches!(&outcomes[4], Ok(Applied::Moved(s)) if s.state == TaskState::Working));
    assert!(matches!(&outcomes[5], Ok(Applied::Moved(s)) if s.state == TaskState::Completed));
    store.flush().await.unwrap();
    let task = store.get(id).unwrap().unwrap();
    assert_eq!(task.status.state, TaskState::Completed);
    assert_eq!(task.status.result, Some(json!({"ok": true})));
    let states: Vec<_> = task.history.iter().map(|h| h.to).collect();
    assert_eq!(
        states,
        [
            TaskState::Submitted,
            TaskState::Working,
            TaskState::AuthRequired,
            TaskState::Working,
            TaskState::Completed
        ]
    );
    assert_eq!(
        store.list_by_state(TaskState::Completed, None, 10).unwrap(),
        vec![task.clone()]
    );
    for left in [
        TaskState::Submitted,
        TaskState::Working,
        TaskState::AuthRequired,
    ] {
        let listed = store.list_by_state(left, None, 10).unwrap();
        assert!(listed.is_empty(), "still indexed as {left}");
    }
    assert!(
        task.history.windows(2).all(|w| w[1].from == Some(w[0].to)),
        "{:?}",
        task.history
    );
    assert!(store.verify_audit().unwrap().ok);
    // One alone is one transaction too, and a task nobody stored is an
    // outcome, not a failure of the job.
    let unknown = store
        .apply_all_deferred(orchestrator::TaskId::new(), vec![change(Transition::Start)])
        .await
        .unwrap();
    assert!(matches!(unknown[..], [Err(StoreError::NotFound(_))]));
}

/// Retries run until max_attempts, then the task fails.
#[tokio::test]
async fn retries_stop_at_max_attempts() {
    let (_dir, store) = temp_store();
    let mut env = envelope("echo", "echo", json!({}), "k");
    env.control.max_attempts = std::num::NonZeroU32::new(2).unwrap();
    let id = env.header.task_id;
    store.submit(new_task(env)).await.unwrap();
    for _ in 0..2 {
        store.apply(id, change(Transition::Start)).await.unwrap();
        store.apply(id, change(Transition::Retry)).await.unwrap();
    }
    let record = store.get(id).unwrap().unwrap();
    assert_eq!(
        (record.status.state, record.status.attempt),
        (TaskState::Failed, 2)
    );
}

/// Listing pages through a correlation id in creation order with a cursor.
#[tokio::test]
async fn listing_by_correlation_pages_in_creation_order() {
    let (_dir, store) = temp_store();
    let corr: orchestrator::envelope::CorrelationId = "run-7".parse().unwrap();
    let ids = common::submit_correlated(&store, &corr, 0..5).await;
    store
        .submit(new_task(envelope("echo", "echo", json!({}), "other")))
        .await
        .unwrap();
    let page1 = store.list_by_correlation(&corr, None, 2).unwrap();
    let page2 = store
        .list_by_correlation(&corr, Some(page1[1].task_id()), 2)
        .unwrap();
    let page3 = store
        .list_by_correlation(&corr, Some(page2[1].task_id()), 2)
        .unwrap();
    let got: Vec<_> = page1
        .iter()
        .chain(&page2)
        .chain(&page3)
        .map(|r| r.task_id())
        .collect();
    assert_eq!(got, ids);
    let all_submitted = store
        .list_by_state(TaskState::Submitted, None, 100)
        .unwrap();
    assert_eq!(all_submitted.len(), 6);
}

/// Standalone audit records chain onto task records, and the chain verifies.
#[tokio::test]
async fn the_audit_chain_verifies() {
    let (_dir, store) = temp_store();
    store
        .submit(new_task(envelope("echo", "echo", json!({}), "k")))
        .await
        .unwrap();
    let rec = store
        .audit(AuditEntry {
            actor: "admin".into(),
            kind: "dlq.replay".into(),
            task_id: None,
            correlation_id: None,
            trace_id: None,
            detail: json!({"note": "manual"}),
        })
        .await
        .unwrap();
    assert_eq!(rec.seq, 2);
    let first = &store.audit_list(&AuditFilter::default(), 0, 1).unwrap()[0];
    assert_eq!(rec.prev_hash, first.hash);
    // What `audit` returns is what was stored.
    assert_eq!(
        store.audit_list(&AuditFilter::default(), 1, 1).unwrap(),
        vec![rec.clone()]
    );
    let report = store.verify_audit().unwrap();
    assert!(report.ok, "{report:?}");
    assert_eq!(report.records, 2);
}

/// Everything acknowledged is there after the store is closed and reopened.
#[tokio::test]
async fn a_reopened_store_has_every_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let config = StoreSettings::new(dir.path().join("s"));
    let mut ids = Vec::new();
    {
        let store = Store::open(&config).unwrap();
        for i in 0..20 {
            let env = envelope("echo", "echo", json!({"i": i}), &format!("k{i}"));
            ids.push(env.header.task_id);
            store.submit(new_task(env)).await.unwrap();
        }
        store
            .apply(ids[0], change(Transition::Start))
            .await
            .unwrap();
    }
    let store = Store::open(&config).unwrap();
    assert_eq!(
        store.get(ids[0]).unwrap().unwrap().status.state,
        TaskState::Working
    );
    assert_eq!(store.list(None, 100).unwrap().len(), 20);
    assert!(store.verify_audit().unwrap().ok);
    // The chain continues where it stopped.
    store
        .apply(ids[1], change(Transition::Start))
        .await
        .unwrap();
    let report = store.verify_audit().unwrap();
    assert!(report.ok && report.records == 22, "{report:?}");
}

/// A workflow step is one task forever: a second submit for the same step
/// returns the first task, even under another idempotency key (as after
/// the key's retention), and the step's link names it (and only it: the
/// key is not claimed).
#[tokio::test]
async fn a_workflow_step_is_one_task_whatever_the_key() {
    let (_dir, store) = temp_store();
    let link = StepLink {
        run: orchestrator::run::RunId::new(),
        step: "draft".into(),
    };
    let mut first = new_task(envelope("mail", "draft", json!({}), "key-1"));
    first.step = Some(link.clone());
    let Submitted::Created(first) = store.submit(first).await.unwrap() else {
        panic!("the first submit creates the task");
    };
    let mut again = new_task(envelope("mail", "draft", json!({}), "key-2"));
    again.step = Some(link.clone());
    match store.submit(again).await.unwrap() {
        Submitted::Existing(r) => assert_eq!(r.task_id(), first.task_id()),
        other => panic!("a second task for one step: {other:?}"),
    }
    let tasks = store.run_tasks(link.run).unwrap();
    assert_eq!(tasks.len(), 1);
    assert_eq!(tasks["draft"].task_id, first.task_id());
    let steps = store.run_step_tasks(link.run).unwrap();
    assert_eq!(steps["draft"].task_id, first.task_id());
    assert_eq!(steps["draft"].state, TaskState::Submitted);
    // The link is the step's one owner of "submitted already": its key is
    // not claimed, so a request outside the step with that key (other
    // params) is a task of its own, not a conflict.
    let outside = new_task(envelope("mail", "draft", json!({"other": 1}), "key-1"));
    assert!(matches!(
        store.submit(outside).await.unwrap(),
        Submitted::Created(r) if r.task_id() != first.task_id()
    ));
}

/// A progress report is kept once per run and `seq`: a redelivered one is
/// not kept twice, a run that resumed the attempt elsewhere counts from 1
/// again, and a retry starts the count over.
#[tokio::test]
async fn progress_reports_are_kept_once_each_in_order() {
    let (_dir, store) = temp_store();
    let env = envelope("echo", "echo", json!({}), "k");
    let id = env.header.task_id;
    store.submit(new_task(env)).await.unwrap();
    let report = |seq: u32, instance: &str, message: &str| Change {
        attempt: Some(1),
        run: Some(json!({"instance": instance, "resumed": false})),
        progress: Some(orchestrator::event::Progress {
            seq: std::num::NonZeroU32::new(seq).unwrap(),
            message: Some(message.into()),
            artifact: None,
        }),
        ..change(Transition::Start)
    };
    // The first report starts the task, and is kept after its transition.
    let first = store.apply(id, report(1, "w-1", "one")).await.unwrap();
    assert!(matches!(first, Applied::Moved(ref r) if r.state == TaskState::Working));
    store.apply(id, report(1, "w-1", "one")).await.unwrap();
    store.apply(id, report(2, "w-1", "two")).await.unwrap();
    store.apply(id, report(2, "w-1", "two")).await.unwrap();
    store
        .apply(id, report(1, "w-2", "resumed one"))
        .await
        .unwrap();
    let record = store.get(id).unwrap().unwrap();
    let said: Vec<_> = record
        .history
        .iter()
        .filter_map(|h| h.progress.as_ref()?.message.clone())
        .collect();
    assert_eq!(said, ["one", "two", "resumed one"]);
    assert_eq!(record.history.len(), 5, "submitted, working, three reports");
    assert!(
        record.history[2..]
            .iter()
            .all(|h| h.to == TaskState::Working)
    );
    // A report for a task that is not running is not kept.
    let mut done = change(Transition::Complete);
    done.attempt = Some(1);
    store.apply(id, done).await.unwrap();
    store.apply(id, report(3, "w-2", "late")).await.unwrap();
    let record = store.get(id).unwrap().unwrap();
    assert!(
        record
            .history
            .iter()
            .all(|h| h.progress.as_ref().and_then(|p| p.message.as_deref()) != Some("late"))
    );
}

/// A task read while it changes is read as of one moment: its history
/// ends with the report its status shows, never behind it nor ahead of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_read_while_it_changes_is_read_as_of_one_moment() {
    let (_dir, store) = temp_store();
    let env = envelope("echo", "echo", json!({}), "k");
    let id = env.header.task_id;
    store.submit(new_task(env)).await.unwrap();
    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            for seq in 1..=300u32 {
                let report = Change {
                    attempt: Some(1),
                    run: Some(json!({"instance": "w-1", "resumed": false})),
                    progress: Some(orchestrator::event::Progress {
                        seq: std::num::NonZeroU32::new(seq).unwrap(),
                        message: Some(format!("report {seq}")),
                        artifact: None,
                    }),
                    ..change(Transition::Start)
                };
                store.apply(id, report).await.unwrap();
            }
            let mut done = change(Transition::Complete);
            done.attempt = Some(1);
            store.apply(id, done).await.unwrap();
        })
    };
    let mut reads = 0;
    loop {
        let record = store.get(id).unwrap().unwrap();
        let listed = store.list(None, 10).unwrap().remove(0);
        reads += 1;
        for r in [&record, &listed] {
            let last = r.history.last().unwrap();
            match r.status.state {
                TaskState::Working => assert_eq!(
                    last.progress.as_ref().map(|p| p.seq.get()),
                    r.status.progress.as_ref().map(|p| p.seq),
                    "the history ends at the report the status shows (read {reads})"
                ),
                state => assert_eq!(last.to, state, "read {reads}"),
            }
        }
        if record.status.state == TaskState::Completed {
            break;
        }
        tokio::task::yield_now().await;
    }
    writer.await.unwrap();
    assert!(reads > 10, "the reads overlapped the writes: {reads}");
}
