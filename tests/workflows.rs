//! Workflow runs against a real broker and an in-process orchestrator and
//! workers: cascades, fan-out, approval gates, cancel, a restart between
//! steps. Each handler run is recorded, so the tests count real runs.

use crate::common;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::system::{System, card, fast_bus};
use futures::future::BoxFuture;
use orchestrator::agent::AgentCard;
use orchestrator::trigger::Triggers;
use orchestrator::worker::{Handler, Outcome, Task};
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// One handler run: the step, its params, when it started and ended.
#[derive(Debug, Clone)]
struct Ran {
    step: String,
    params: Value,
    /// The envelope's `payload.meta`.
    meta: Value,
    started: Instant,
    ended: Instant,
}

/// Echoes its params after sleeping `sleep_ms` (a param), or until
/// canceled; fails when `fail` is true. Records every run.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Ran>>>);

impl Recorder {
    fn runs(&self) -> Vec<Ran> {
        self.0.lock().unwrap().clone()
    }

    fn count(&self, step: &str) -> usize {
        self.runs().iter().filter(|r| r.step == step).count()
    }
}

impl Handler for Recorder {
    fn handle(&self, task: Task) -> BoxFuture<'static, Outcome> {
        let log = Arc::clone(&self.0);
        Box::pin(async move {
            let started = Instant::now();
            let params = Value::Object(task.envelope.payload.params.clone());
            let sleep = params["sleep_ms"].as_u64().unwrap_or(0);
            let canceled = tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(sleep)) => false,
                () = task.cancel.cancelled() => true,
            };
            log.lock().unwrap().push(Ran {
                step: task
                    .envelope
                    .payload
                    .meta
                    .step_id
                    .clone()
                    .unwrap_or_default(),
                params: params.clone(),
                meta: serde_json::to_value(&task.envelope.payload.meta).unwrap(),
                started,
                ended: Instant::now(),
            });
            if canceled {
                Outcome::Canceled
            } else if params["fail"] == true {
                Outcome::permanent("told_to", "this step was told to fail")
            } else {
                Outcome::completed(json!({ "echo": params }))
            }
        })
    }
}

fn agents() -> Vec<AgentCard> {
    vec![card("work", &["do"])]
}

/// A system with `yaml`'s trigger (`t.yaml` in [`triggers_dir`], watched)
/// and one worker running a [`Recorder`].
async fn system(yaml: &str) -> (System, Recorder) {
    system_of(&[("t.yaml", yaml)]).await
}

/// A system with these trigger files, and one worker running a
/// [`Recorder`].
async fn system_of(files: &[(&str, &str)]) -> (System, Recorder) {
    let (sys, mut recorders) = system_with(agents(), files).await;
    (sys, recorders.remove(0))
}

/// A system with these agents and trigger files, and a worker running a
/// [`Recorder`] for each agent (in the agents' order).
async fn system_with(cards: Vec<AgentCard>, files: &[(&str, &str)]) -> (System, Vec<Recorder>) {
    let mut sys = System::start(cards.clone(), fast_bus()).await;
    sys.stop_orchestrator().await;
    let dir = triggers_dir(&sys);
    std::fs::create_dir(&dir).unwrap();
    for (name, yaml) in files {
        std::fs::write(dir.join(name), yaml).unwrap();
    }
    let triggers = Triggers::load(&dir, &Default::default());
    assert!(triggers.errors.is_empty(), "{:#?}", triggers.errors);
    sys.triggers = triggers;
    sys.start_orchestrator(cards.clone()).await;
    let mut recorders = Vec::new();
    for card in cards {
        let recorder = Recorder::default();
        sys.worker(card, Arc::new(recorder.clone())).await;
        recorders.push(recorder);
    }
    (sys, recorders)
}

/// The system's triggers directory (in its data directory, so it lives
/// as long as the system).
fn triggers_dir(sys: &System) -> PathBuf {
    sys.data.path().join("triggers")
}

async fn start(sys: &System, input: Value) -> String {
    let (status, run) = sys
        .post("/v1/triggers/t/runs", json!({ "input": input }))
        .await;
    assert_eq!(status, 201, "{run:#}");
    run["run_id"].as_str().unwrap().to_string()
}

/// Waits until run `id` is in one of `states`.
async fn wait_for(sys: &System, id: &str, states: &[&str]) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, run) = sys.get(&format!("/v1/runs/{id}?wait=1s")).await;
        assert_eq!(status, 200, "{run:#}");
        if states.contains(&run["state"].as_str().unwrap_or_default()) {
            return run;
        }
        assert!(
            Instant::now() < deadline,
            "run {id} never reached {states:?}: {run:#}"
        );
    }
}

fn step<'a>(run: &'a Value, id: &str) -> &'a Value {
    run["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id)
        .unwrap_or_else(|| panic!("no step {id} in {run:#}"))
}

/// A cascade passes each step's result to the next with its JSON type
/// kept, skips a step whose `when` is false, and ends with the last
/// result; every step's task carries the trigger, run and step in meta.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cascade_passes_results_forward_with_json_types() {
    let (sys, rec) = system(
        r#"
id: t
default_system_prompt: Be brief.
input_schema: { type: object, required: [n], properties: { n: { type: integer } } }
steps:
  - { id: first, agent: work, action: do, params: { n: "{{ input.n }}", tags: [a, b] } }
  - id: second
    agent: work
    action: do
    params: { n: "{{ steps.first.result.echo.n }}", tags: "{{ steps.first.result.echo.tags }}", text: "n is {{ steps.first.result.echo.n }}" }
  - { id: never, agent: work, action: do, when: "steps.second.result.echo.n > 100" }
"#,
    )
    .await;
    let (status, refused) = sys
        .post("/v1/triggers/t/runs", json!({"input": {"n": "7"}}))
        .await;
    assert_eq!(
        (status, refused["error"]["field"].as_str()),
        (422, Some("input.n")),
        "{refused:#}"
    );
    let id = start(&sys, json!({"n": 7})).await;
    let run = wait_for(&sys, &id, &["completed", "failed"]).await;
    assert_eq!(run["state"], "completed", "{run:#}");
    let second_run = rec.runs().into_iter().find(|r| r.step == "second").unwrap();
    assert_eq!(
        second_run.meta,
        json!({"trigger_id": "t", "system_prompt": "Be brief.", "run_id": id, "step_id": "second"})
    );
    let second = &second_run.params;
    assert_eq!(second["n"], 7, "a lone placeholder keeps the number");
    assert_eq!(second["tags"], json!(["a", "b"]));
    assert_eq!(second["text"], "n is 7");
    assert_eq!(step(&run, "never")["state"], "skipped");
    assert_eq!(rec.count("never"), 0);
    assert_eq!(run["result"]["echo"]["n"], 7);
    let task_id = step(&run, "second")["task_id"]
        .as_str()
        .unwrap()
        .to_string();
    let (_, task) = sys.get(&format!("/v1/tasks/{task_id}")).await;
    assert_eq!(task["correlation_id"], run["correlation_id"]);
    assert_eq!(
        task["correlation_id"],
        id.as_str(),
        "a run's tasks share its id"
    );
}

/// Two slow branches run at the same time, and their results merge as an
/// object keyed by branch id; a failing branch fails the fan-out fast.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fan_out_runs_branches_together_and_merges_them() {
    let (sys, rec) = system(
        r#"
id: t
steps:
  - id: fan
    parallel:
      - { id: left, agent: work, action: do, params: { sleep_ms: 800, side: "l" } }
      - { id: right, agent: work, action: do, params: { sleep_ms: 800, side: "r", fail: "{{ input.fail }}" } }
  - { id: after, agent: work, action: do, params: { merged: "{{ steps.fan.result }}" } }
"#,
    )
    .await;
    let id = start(&sys, json!({"fail": false})).await;
    let run = wait_for(&sys, &id, &["completed", "failed"]).await;
    assert_eq!(run["state"], "completed", "{run:#}");
    let runs = rec.runs();
    let (l, r) = (
        runs.iter().find(|x| x.step == "left").unwrap(),
        runs.iter().find(|x| x.step == "right").unwrap(),
    );
    assert!(
        l.started < r.ended && r.started < l.ended,
        "the branches did not overlap: {l:?} {r:?}"
    );
    let merged = &runs.iter().find(|x| x.step == "after").unwrap().params["merged"];
    assert_eq!(merged["left"]["echo"]["side"], "l");
    assert_eq!(merged["right"]["echo"]["side"], "r");
    // The run view shows the fan-out's merge and its time, from its first
    // branch's start to its last branch's end; the branches name it.
    let fan = step(&run, "fan");
    assert_eq!(fan["result"], *merged, "{run:#}");
    assert!(
        fan["started_at"].is_string() && fan["ended_at"].is_string(),
        "{fan:#}"
    );
    assert_eq!(step(&run, "left")["branch_of"], "fan");

    let id = start(&sys, json!({"fail": true})).await;
    let run = wait_for(&sys, &id, &["completed", "failed"]).await;
    assert_eq!(run["state"], "failed", "{run:#}");
    assert!(
        run["error"]["message"].as_str().unwrap().contains("right"),
        "{run:#}"
    );
    assert_eq!(step(&run, "after")["state"], "pending");
    assert_eq!(
        rec.count("after"),
        1,
        "the failed run never reached `after`"
    );
    assert_eq!(step(&run, "fan")["error"], run["error"], "{run:#}");
}

/// A step whose params do not render fails the run, and its step in the
/// run view says why (not just `failed`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_that_does_not_render_shows_on_its_step() {
    let (sys, _rec) = system(
        "id: t\nsteps:\n  - {id: s, agent: work, action: do, params: {x: \"{{ input.a.b }}\"}}\n",
    )
    .await;
    let id = start(&sys, json!({})).await;
    let run = wait_for(&sys, &id, &["completed", "failed"]).await;
    assert_eq!(run["state"], "failed", "{run:#}");
    let s = step(&run, "s");
    assert_eq!(s["state"], "failed", "{run:#}");
    assert_eq!(s["error"]["code"], "template_error", "{run:#}");
}

const GATED: &str = r#"
id: t
steps:
  - { id: draft, agent: work, action: do, params: { text: "{{ input.text }}" } }
  - id: confirm
    approval:
      prompt: Send it?
      input_schema: { type: object, required: [note] }
  - { id: send, agent: work, action: do, params: { text: "{{ steps.draft.result.echo.text }}", note: "{{ steps.confirm.result.input.note if steps.confirm.result.input else '' }}" } }
"#;

/// A `route:` step runs the agent whose signals match the text, records
/// why, and fails the step when nothing matches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_router_picks_the_agent_whose_signals_match() {
    let signalled = |name: &str, signals: &[&str]| {
        let mut c = card(name, &["do"]);
        c.signals = signals.iter().map(|s| s.to_string()).collect();
        c
    };
    let cards = vec![
        signalled("mail", &["inbox", "email"]),
        signalled("search", &["find", "notes"]),
    ];
    let yaml = "\
id: t
name: routed
description: routes a request
run_mode: on_demand
input_schema: { type: object, required: [text], properties: { text: { type: string } } }
steps:
  - id: handle
    route: { text: \"{{ input.text }}\", agents: [mail, search] }
    params: { text: \"{{ input.text }}\" }
";
    let (sys, recorders) = system_with(cards, &[("t.yaml", yaml)]).await;
    let (mail, search) = (&recorders[0], &recorders[1]);
    for (text, agent, matched) in [
        (
            "find my notes on NATS",
            "search",
            json!(["signal `find`", "signal `notes`"]),
        ),
        ("what is in my inbox?", "mail", json!(["signal `inbox`"])),
    ] {
        let id = start(&sys, json!({ "text": text })).await;
        let run = wait_for(&sys, &id, &["completed", "failed"]).await;
        assert_eq!(run["state"], "completed", "{run:#}");
        let handle = step(&run, "handle");
        assert_eq!(handle["agent"], agent, "{text}: {run:#}");
        assert_eq!(handle["route"]["agent"], agent, "{text}");
        assert_eq!(handle["route"]["matched"], matched, "{text}: {handle:#}");
        assert_eq!(handle["result"]["echo"]["text"], text);
    }
    assert_eq!((search.count("handle"), mail.count("handle")), (1, 1));
    let id = start(&sys, json!({ "text": "hello there" })).await;
    let run = wait_for(&sys, &id, &["completed", "failed"]).await;
    assert_eq!(run["state"], "failed", "{run:#}");
    assert_eq!(run["error"]["code"], "no_route", "{run:#}");
    assert_eq!((search.count("handle"), mail.count("handle")), (1, 1));
}

/// A run waits at its gate in `input_required`; approve resumes it, reject
/// ends it `rejected` without running the rest; who answered and why is
/// in the run and the audit trail; answering a run not waiting is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_gate_waits_resumes_on_approve_and_ends_on_reject() {
    let (sys, rec) = system(GATED).await;
    let approved = start(&sys, json!({"text": "hello"})).await;
    let run = wait_for(&sys, &approved, &["input_required"]).await;
    // The gate names what it asks for, so a form can be made from it.
    assert_eq!(
        run["waiting"],
        json!({"step": "confirm", "prompt": "Send it?",
               "input_schema": {"type": "object", "required": ["note"]}})
    );
    assert_eq!(rec.count("send"), 0);
    let (status, body) = sys
        .post(
            &format!("/v1/runs/{approved}/input"),
            json!({"input": {"wrong": 1}}),
        )
        .await;
    assert_eq!(status, 422, "the gate's input_schema is checked: {body:#}");
    let (status, body) = sys
        .post(
            &format!("/v1/runs/{approved}/input"),
            json!({"input": {"note": "ship it"}, "reason": "read it twice"}),
        )
        .await;
    assert_eq!(status, 200, "{body:#}");
    let run = wait_for(&sys, &approved, &["completed", "failed"]).await;
    assert_eq!(run["state"], "completed", "{run:#}");
    let send = rec.runs().into_iter().find(|r| r.step == "send").unwrap();
    assert_eq!(send.params, json!({"text": "hello", "note": "ship it"}));
    let confirm = step(&run, "confirm");
    assert_eq!(confirm["decision"]["reason"], "read it twice");
    assert!(confirm["decision"]["by"].is_string());
    let (status, _) = sys
        .post(&format!("/v1/runs/{approved}/approve"), json!({}))
        .await;
    assert_eq!(status, 409, "a run that is not waiting cannot be approved");

    let rejected = start(&sys, json!({"text": "no"})).await;
    wait_for(&sys, &rejected, &["input_required"]).await;
    let (status, _) = sys
        .post(
            &format!("/v1/runs/{rejected}/reject"),
            json!({"reason": "wrong audience"}),
        )
        .await;
    assert_eq!(status, 200);
    let run = wait_for(&sys, &rejected, &["rejected", "completed", "failed"]).await;
    assert_eq!(run["state"], "rejected", "{run:#}");
    assert_eq!(rec.count("send"), 1, "the rejected run never sent");
    let correlation = run["correlation_id"].as_str().unwrap();
    let (_, audit) = sys
        .get(&format!("/v1/audit?correlation_id={correlation}"))
        .await;
    let kinds: Vec<&str> = audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["kind"].as_str())
        .collect();
    assert!(
        kinds.contains(&"run.started") && kinds.contains(&"run.rejected"),
        "{kinds:?}"
    );
}

/// Canceling a run cancels its running step (the handler stops) and ends
/// the run `canceled`; the steps after it never start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canceled_run_cancels_its_running_step() {
    let (sys, rec) = system(
        r#"
id: t
steps:
  - { id: long, agent: work, action: do, params: { sleep_ms: 60000 } }
  - { id: next, agent: work, action: do }
"#,
    )
    .await;
    let id = start(&sys, json!({})).await;
    common::eventually("the long step runs", Duration::from_secs(20), || async {
        let (_, run) = sys.get(&format!("/v1/runs/{id}")).await;
        step(&run, "long")["task_state"] == "working"
    })
    .await;
    let (status, body) = sys
        .post(
            &format!("/v1/runs/{id}/cancel"),
            json!({"reason": "changed my mind"}),
        )
        .await;
    assert_eq!(status, 200, "{body:#}");
    let run = wait_for(&sys, &id, &["canceled"]).await;
    common::eventually("the handler stops", Duration::from_secs(20), || async {
        rec.count("long") == 1
    })
    .await;
    let run_after = sys.get(&format!("/v1/runs/{id}")).await.1;
    assert_eq!(
        step(&run_after, "long")["state"],
        "canceled",
        "{run_after:#}"
    );
    assert_eq!(run["cancel"]["reason"], "changed my mind");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(rec.count("next"), 0);
}

/// The orchestrator stopped while a run waits at its gate, and started
/// again: the run is still waiting, resumes on approve, and no step ran
/// twice or was skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_survives_a_restart_between_steps() {
    let (mut sys, rec) = system(GATED).await;
    let id = start(&sys, json!({"text": "kept"})).await;
    wait_for(&sys, &id, &["input_required"]).await;
    sys.stop_orchestrator().await;
    sys.start_orchestrator(agents()).await;
    let run = wait_for(&sys, &id, &["input_required"]).await;
    assert_eq!(run["waiting"]["step"], "confirm");
    let (status, body) = sys
        .post(
            &format!("/v1/runs/{id}/input"),
            json!({"input": {"note": "after restart"}}),
        )
        .await;
    assert_eq!(status, 200, "{body:#}");
    let run = wait_for(&sys, &id, &["completed", "failed"]).await;
    assert_eq!(run["state"], "completed", "{run:#}");
    assert_eq!((rec.count("draft"), rec.count("send")), (1, 1));
    let (_, list) = sys.get("/v1/runs?trigger_id=t&state=completed").await;
    assert_eq!(list["runs"][0]["run_id"], id.as_str());
}

/// Reads `GET /v1/triggers` until `ready` holds for it.
async fn triggers_when(sys: &System, ready: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, list) = sys.get("/v1/triggers").await;
        assert_eq!(status, 200);
        if ready(&list) {
            return list;
        }
        assert!(
            Instant::now() < deadline,
            "triggers never changed: {list:#}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn version_of(list: &Value, id: &str) -> Option<Value> {
    list["triggers"]
        .as_array()?
        .iter()
        .find(|t| t["id"] == id)
        .map(|t| t["steps"][1]["params"]["version"].clone())
}

const VERSIONED: &str = r#"
id: t
steps:
  - { id: confirm, approval: { prompt: go? } }
  - { id: send, agent: work, action: do, params: { version: 1 } }
"#;

/// A changed file takes effect for new runs while a running run keeps the
/// definition it started with; a broken file is reported with its line
/// and skipped while the others keep working; a removed file's trigger
/// is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_triggers_directory_is_watched() {
    let (sys, rec) = system(VERSIONED).await;
    let dir = triggers_dir(&sys);
    let old = start(&sys, json!({})).await;
    wait_for(&sys, &old, &["input_required"]).await;

    std::fs::write(
        dir.join("t.yaml"),
        VERSIONED.replace("version: 1", "version: 2"),
    )
    .unwrap();
    std::fs::write(
        dir.join("u.yaml"),
        "id: u\nsteps:\n  - id: one\n    agent: work\n    action: do\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("broken.yaml"),
        "id: broken\nsteps:\n  - id: a\n    agent: work\n    action: do\n    retries: 3\n",
    )
    .unwrap();
    let list = triggers_when(&sys, |l| {
        version_of(l, "t") == Some(json!(2)) && version_of(l, "u").is_some()
    })
    .await;
    let errors = list["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{list:#}");
    assert!(errors[0]["file"].as_str().unwrap().ends_with("broken.yaml"));
    assert_eq!(errors[0]["line"], 6);
    assert_eq!(errors[0]["field"], "steps[0].retries");

    // The running run keeps version 1; a new one runs version 2.
    let new = start(&sys, json!({})).await;
    for id in [&old, &new] {
        wait_for(&sys, id, &["input_required"]).await;
        let (status, _) = sys.post(&format!("/v1/runs/{id}/approve"), json!({})).await;
        assert_eq!(status, 200);
        let run = wait_for(&sys, id, &["completed", "failed"]).await;
        assert_eq!(run["state"], "completed", "{run:#}");
    }
    let versions: Vec<Value> = rec
        .runs()
        .iter()
        .filter(|r| r.step == "send")
        .map(|r| r.params["version"].clone())
        .collect();
    assert_eq!(versions, [json!(1), json!(2)]);
    let (_, old_run) = sys.get(&format!("/v1/runs/{old}")).await;
    let (_, new_run) = sys.get(&format!("/v1/runs/{new}")).await;
    assert_ne!(old_run["definition_hash"], new_run["definition_hash"]);

    // Breaking t skips it (with its line) while u keeps working; removing
    // u removes it.
    std::fs::write(
        dir.join("t.yaml"),
        VERSIONED.replace(
            "params: { version: 1 }",
            "params: { version: 1 }, colour: red",
        ),
    )
    .unwrap();
    let list = triggers_when(&sys, |l| version_of(l, "t").is_none()).await;
    assert!(
        list["errors"].as_array().unwrap().iter().any(|e| e["file"]
            .as_str()
            .unwrap()
            .ends_with("t.yaml")
            && e["line"] == 5),
        "{list:#}"
    );
    let (status, _) = sys.post("/v1/triggers/t/runs", json!({"input": {}})).await;
    assert_eq!(status, 404);
    let (status, run) = sys.post("/v1/triggers/u/runs", json!({"input": {}})).await;
    assert_eq!(status, 201, "{run:#}");
    let run = wait_for(
        &sys,
        run["run_id"].as_str().unwrap(),
        &["completed", "failed"],
    )
    .await;
    assert_eq!(run["state"], "completed", "{run:#}");
    std::fs::remove_file(dir.join("u.yaml")).unwrap();
    triggers_when(&sys, |l| version_of(l, "u").is_none()).await;
}

/// The scheduled times of trigger `id`'s runs, oldest first.
async fn scheduled_times(sys: &System, id: &str) -> Vec<OffsetDateTime> {
    let (status, page) = sys
        .get(&format!("/v1/runs?trigger_id={id}&limit=100"))
        .await;
    assert_eq!(status, 200, "{page:#}");
    let mut times: Vec<OffsetDateTime> = page["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            assert_eq!(r["origin"]["kind"], "schedule", "{r:#}");
            assert_eq!(r["started_by"], format!("schedule:{id}"));
            OffsetDateTime::parse(r["origin"]["at"].as_str().unwrap(), &Rfc3339).unwrap()
        })
        .collect();
    times.sort();
    times
}

/// Waits until trigger `id` has at least `n` scheduled runs.
async fn wait_for_runs(sys: &System, id: &str, n: usize) -> Vec<OffsetDateTime> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let times = scheduled_times(sys, id).await;
        if times.len() >= n {
            return times;
        }
        assert!(Instant::now() < deadline, "{id}: only {times:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sleeps until wall-clock time `t`.
async fn sleep_until(t: OffsetDateTime) {
    let left = t - OffsetDateTime::now_utc();
    if left.is_positive() {
        tokio::time::sleep(left.try_into().unwrap()).await;
    }
}

/// A schedule fires on its times; after downtime, `catch_up: run_once`
/// starts one run for the times missed and `catch_up: skip` none; both
/// go on with the next time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_fires_and_catches_up_as_stated_after_downtime() {
    let every = |id: &str, catch_up: &str| {
        format!(
            "id: {id}\nrun_mode: schedule\nschedule: {{ every: 4s, catch_up: {catch_up}, overlap: allow }}\nsteps:\n  - {{ id: s, agent: work, action: do }}\n"
        )
    };
    let (once, skip) = (every("once", "run_once"), every("skip", "skip"));
    let (mut sys, _rec) = system_of(&[("once.yaml", &once), ("skip.yaml", &skip)]).await;
    let first = wait_for_runs(&sys, "once", 1).await[0];
    let skip_first = wait_for_runs(&sys, "skip", 1).await[0];
    assert_eq!(
        first.unix_timestamp() % 4,
        0,
        "every: 4s falls on multiples of 4 s"
    );
    let four = time::Duration::seconds(4);

    // Down over two times (first + 4 and + 8); back 3 s after the second
    // (late: more than half a period).
    sys.stop_orchestrator().await;
    assert!(
        OffsetDateTime::now_utc() < first + four,
        "stopped before the next time"
    );
    sleep_until(first + four * 2 + time::Duration::seconds(3)).await;
    sys.start_orchestrator(agents()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        scheduled_times(&sys, "once").await,
        [first, first + four * 2],
        "one run for the missed times"
    );
    assert_eq!(
        scheduled_times(&sys, "skip").await,
        [skip_first],
        "no run for the missed times"
    );

    // Then both go on with the next time.
    sleep_until(first + four * 3 + time::Duration::seconds(1)).await;
    let once_times = wait_for_runs(&sys, "once", 3).await;
    assert_eq!(once_times[2], first + four * 3);
    let skip_times = wait_for_runs(&sys, "skip", 2).await;
    assert_eq!(skip_times[1], first + four * 3);
}

/// A time that comes while the schedule's last run is unfinished: `skip`
/// starts no run for it, `queue` starts one when the last ends (runs never
/// overlap either way, and the audit says why), `allow` starts it anyway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_times_follow_the_overlap_policy() {
    let slow = |id: &str, overlap: &str| {
        format!(
            "id: {id}\nrun_mode: schedule\nschedule: {{ every: 1s, overlap: {overlap}, input: {{ id: {id} }} }}\nsteps:\n  - {{ id: {id}, agent: work, action: do, params: {{ sleep_ms: 2500 }} }}\n"
        )
    };
    let (sys, rec) = system_of(&[
        ("skip.yaml", &slow("skip", "skip")),
        ("queue.yaml", &slow("queue", "queue")),
        ("allow.yaml", &slow("allow", "allow")),
    ])
    .await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let runs = rec.runs();
    let of = |id: &str| -> Vec<&Ran> {
        let mut ran: Vec<&Ran> = runs.iter().filter(|r| r.step == id).collect();
        ran.sort_by_key(|r| r.started);
        ran
    };
    let overlaps = |ran: &[&Ran]| ran.windows(2).any(|w| w[1].started < w[0].ended);
    assert!(
        of("skip").len() >= 2 && !overlaps(&of("skip")),
        "{:?}",
        of("skip")
    );
    assert!(
        of("queue").len() >= 2 && !overlaps(&of("queue")),
        "{:?}",
        of("queue")
    );
    // Allow: each run starts while the one before still runs.
    assert!(overlaps(&of("allow")), "{:?}", of("allow"));
    let (_, audit) = sys.get("/v1/audit?limit=1000").await;
    let kinds: Vec<(&str, &str)> = audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| Some((r["actor"].as_str()?, r["kind"].as_str()?)))
        .collect();
    assert!(
        kinds.contains(&("schedule:skip", "schedule.skipped")),
        "{kinds:?}"
    );
    assert!(
        kinds.contains(&("schedule:queue", "schedule.queued")),
        "{kinds:?}"
    );
    assert!(
        !kinds
            .iter()
            .any(|(a, k)| *a == "schedule:allow" && k.starts_with("schedule."))
    );
    // A queued time runs although it came before the last run ended; a
    // skipped one never does.
    let came_during_the_last =
        |runs: &[(OffsetDateTime, OffsetDateTime)]| runs.windows(2).any(|w| w[1].0 < w[0].1);
    let queued = ended_runs(&sys, "queue").await;
    assert!(came_during_the_last(&queued), "{queued:?}");
    let skipped = ended_runs(&sys, "skip").await;
    assert!(
        skipped.len() >= 2 && !came_during_the_last(&skipped),
        "{skipped:?}"
    );
}

/// The completed runs of trigger `id` as (scheduled time, end), by time.
async fn ended_runs(sys: &System, id: &str) -> Vec<(OffsetDateTime, OffsetDateTime)> {
    let (_, page) = sys
        .get(&format!("/v1/runs?trigger_id={id}&limit=100"))
        .await;
    let time = |v: &Value| OffsetDateTime::parse(v.as_str().unwrap(), &Rfc3339).unwrap();
    let mut runs: Vec<_> = page["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["state"] == "completed")
        .map(|r| (time(&r["origin"]["at"]), time(&r["updated_at"])))
        .collect();
    runs.sort();
    runs
}

/// The runs of trigger `id`, as (message id, run) pairs.
async fn event_runs(sys: &System, id: &str) -> Vec<(String, Value)> {
    let (status, page) = sys
        .get(&format!("/v1/runs?trigger_id={id}&limit=100"))
        .await;
    assert_eq!(status, 200, "{page:#}");
    page["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            assert_eq!(r["origin"]["kind"], "event", "{r:#}");
            assert_eq!(r["started_by"], format!("event:{id}"));
            (
                r["origin"]["message_id"].as_str().unwrap().to_string(),
                r.clone(),
            )
        })
        .collect()
}

/// Waits until trigger `id` has `n` runs, all completed.
async fn wait_for_event_runs(sys: &System, id: &str, n: usize) -> Vec<(String, Value)> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let runs = event_runs(sys, id).await;
        if runs.len() >= n && runs.iter().all(|(_, r)| r["state"] == "completed") {
            return runs;
        }
        assert!(Instant::now() < deadline, "{id}: {runs:#?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An event trigger starts one run per message on its subject, with the
/// message as input, named by its `Nats-Msg-Id` or its stream sequence; a
/// message published while the orchestrator is down starts its run on
/// restart; when every message is delivered again (the trigger's consumer
/// reset), no run starts twice; a body that is not JSON starts none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_trigger_fires_once_per_message_even_when_redelivered() {
    let (mut sys, rec) = system(
        r#"
id: t
run_mode: event
event: { subject: "shop.orders.*" }
input_schema: { type: object, required: [order] }
steps:
  - { id: take, agent: work, action: do, params: { order: "{{ input.order }}" } }
"#,
    )
    .await;
    let client = async_nats::connect(sys.nats.url()).await.unwrap();
    let js = async_nats::jetstream::new(client.clone());
    let publish = |subject: &'static str, id: Option<&'static str>, body: &'static str| {
        let js = js.clone();
        async move {
            let mut headers = async_nats::HeaderMap::new();
            if let Some(id) = id {
                headers.insert("Nats-Msg-Id", id);
            }
            js.publish_with_headers(subject, headers, body.into())
                .await
                .unwrap()
                .await
                .unwrap();
        }
    };
    // The stream exists once the trigger's listener is set up.
    let deadline = Instant::now() + Duration::from_secs(20);
    while js.get_stream("ORCH_TRIGGER_EVENTS").await.is_err() {
        assert!(Instant::now() < deadline, "no trigger events stream");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    publish("shop.orders.new", Some("order-1"), r#"{"order": 1}"#).await;
    publish("shop.orders.new", None, r#"{"order": 2}"#).await;
    publish("shop.orders.new", None, "not json").await;
    publish("shop.orders.new", None, r#"{"no_order": 3}"#).await;
    // Another subject: not kept, no run.
    client
        .publish("shop.other", r#"{"order": 99}"#.into())
        .await
        .unwrap();
    let runs = wait_for_event_runs(&sys, "t", 2).await;
    let mut ids: Vec<&str> = runs.iter().map(|(id, _)| id.as_str()).collect();
    ids.sort();
    assert_eq!(ids, ["order-1", "seq:2"], "{runs:#?}");
    let (_, run) = &runs.iter().find(|(id, _)| id == "order-1").unwrap();
    assert_eq!(run["input"], json!({"order": 1}));
    assert_eq!(run["origin"]["subject"], "shop.orders.new");

    // Down: a message waits in the stream; the consumer is reset so every
    // message is delivered again.
    sys.stop_orchestrator().await;
    publish("shop.orders.paid", Some("order-5"), r#"{"order": 5}"#).await;
    js.get_stream("ORCH_TRIGGER_EVENTS")
        .await
        .unwrap()
        .delete_consumer("trigger_t")
        .await
        .unwrap();
    sys.start_orchestrator(agents()).await;
    let runs = wait_for_event_runs(&sys, "t", 3).await;
    // Every message has been delivered again once the consumer has passed
    // the last one.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let info = js
            .get_stream("ORCH_TRIGGER_EVENTS")
            .await
            .unwrap()
            .consumer_info("trigger_t")
            .await
            .unwrap()
            .clone();
        if info.ack_floor.stream_sequence >= 5 {
            break;
        }
        assert!(Instant::now() < deadline, "{info:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let runs_after = event_runs(&sys, "t").await;
    assert_eq!(runs_after.len(), 3, "{runs_after:#?}");
    assert_eq!(runs.len(), 3);
    let mut orders: Vec<Value> = rec
        .runs()
        .iter()
        .map(|r| r.params["order"].clone())
        .collect();
    orders.sort_by_key(|o| o.as_i64());
    assert_eq!(
        orders,
        [json!(1), json!(2), json!(5)],
        "each handler ran once"
    );
}

/// One edit (or a `touch`) of a trigger file reloads the directory once,
/// and then it settles: the reload's own reads of the files are not
/// changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_settles_after_one_edit() {
    let (sys, _rec) = system(VERSIONED).await;
    let dir = triggers_dir(&sys);
    let loaded_at = |list: &Value| list["loaded_at"].as_str().unwrap_or_default().to_string();
    let (_, before) = sys.get("/v1/triggers").await;
    std::fs::write(
        dir.join("t.yaml"),
        VERSIONED.replace("version: 1", "version: 2"),
    )
    .unwrap();
    let reloaded = triggers_when(&sys, |l| version_of(l, "t") == Some(json!(2))).await;
    assert_ne!(loaded_at(&reloaded), loaded_at(&before));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (_, later) = sys.get("/v1/triggers").await;
    assert_eq!(loaded_at(&later), loaded_at(&reloaded), "it kept reloading");
}
