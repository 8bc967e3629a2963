//! The AgentCard types that need a model (`docs/llm.md`, "Workflow types
//! that need a model"), read from Markdown cards and run against the
//! tests' model server: `evaluator_optimizer` refines until the
//! evaluator's rating is reached, `MAKER` samples its worker until one
//! answer leads by `k`, `orchestrator` delegates within
//! `plan_iterations`, a `router` with a model runs the agent its model
//! picks. Each is a task the orchestrator holds, its steps tasks listed
//! on it.

use crate::common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::llm::{Model, Reply, last_role, offered, tool_results};
use common::system::{System, fast_bus};
use futures::future::BoxFuture;
use orchestrator::agent::Catalog;
use orchestrator::llm::LlmSettings;
use orchestrator::worker::{Handler, Outcome, Task, handler_for};
use serde_json::{Value, json};

const CARDS: &[(&str, &str)] = &[
    (
        "writer.md",
        "---\nname: writer\nmodel: stub-model\n---\nYou write answers.\n",
    ),
    (
        "critic.md",
        "---\nname: critic\nmodel: stub-model\n---\nYou are the critic.\n",
    ),
    (
        "polished.md",
        "---\ntype: evaluator_optimizer\nname: polished\ngenerator: writer\nevaluator: critic\nmin_rating: GOOD\nmax_refinements: 2\n---\n",
    ),
    (
        "voter.md",
        "---\ntype: MAKER\nname: voter\nworker: counter\nk: 2\nmatch_strategy: normalized\n---\n",
    ),
    (
        "planner.md",
        "---\ntype: orchestrator\nname: planner\nagents: [writer]\nplan_iterations: 1\nmodel: stub-model\n---\nPlan the answer.\n",
    ),
    (
        "dispatcher.md",
        "---\ntype: router\nname: dispatcher\nagents: [writer, critic]\nmodel: stub-model\n---\nRoute well.\n",
    ),
];

/// The text of the last user message of a request.
fn user(r: &Value) -> String {
    r["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// Answers each agent's model calls by its system prompt.
fn script(r: &Value) -> Reply {
    let system = r["messages"][0]["content"].as_str().unwrap_or_default();
    if system.contains("You are the critic.") {
        return Reply::Text(if user(r).contains("draft 2") {
            r#"{"rating": "GOOD", "feedback": "fine"}"#.into()
        } else {
            "```json\n{\"rating\": \"FAIR\", \"feedback\": \"add an example\"}\n```".into()
        });
    }
    if system.contains("You write answers.") {
        return Reply::Text(if user(r).contains("add an example") {
            "draft 2".into()
        } else {
            "draft 1".into()
        });
    }
    if system.contains("Route well.") {
        return Reply::Calls(vec![("critic".into(), json!({"text": "rate: draft 2"}))]);
    }
    // The planner: it delegates, then answers; asked to loop, it never
    // stops delegating.
    if last_role(r) == "user" || user(r).contains("loop") {
        Reply::Calls(vec![("writer".into(), json!({"text": "write it"}))])
    } else {
        Reply::Text(format!("final: {}", tool_results(r)[0].1))
    }
}

/// The counter: its `n`th task answers `ANSWERS[n]`.
struct Counter(AtomicUsize);

const ANSWERS: [&str; 4] = ["four", "five", "Four ", "FOUR"];

impl Handler for Counter {
    fn handle(&self, _task: Task) -> BoxFuture<'static, Outcome> {
        let n = self.0.fetch_add(1, Ordering::SeqCst);
        let answer = ANSWERS.get(n).copied().unwrap_or("six");
        Box::pin(async move { Outcome::completed(json!(answer)) })
    }
}

/// The cards in `dir`, a system reading them, and workers for the
/// prompts (against `model`) and the counter.
async fn system(dir: &Path, model: &Model) -> System {
    system_counting(dir, model, Arc::new(Counter(AtomicUsize::new(0)))).await
}

/// [`system`], its counter `counter`.
async fn system_counting(dir: &Path, model: &Model, counter: Arc<Counter>) -> System {
    for (file, text) in CARDS {
        std::fs::write(dir.join(file), text).unwrap();
    }
    let home = dir.join("counter");
    std::fs::create_dir(&home).unwrap();
    std::fs::write(
        home.join("agent.json"),
        json!({
            "name": "counter", "version": "1.0.0", "description": "answers",
            "skills": [{"id": "count", "description": "answers"}],
            "invocation": {"type": "builtin", "handler": "echo"}
        })
        .to_string(),
    )
    .unwrap();
    let mut sys = System::start_reading(vec![dir.to_path_buf()], fast_bus()).await;
    let settings = LlmSettings {
        base_url: model.url.clone(),
        api_key_env: "ORCH_TEST_NO_SUCH_KEY".into(),
        stream: false,
        ..LlmSettings::default()
    };
    for file in ["writer.md", "critic.md", "planner.md", "dispatcher.md"] {
        let card = Catalog::one(&dir.join(file), None).unwrap();
        let handler = handler_for(&card, &settings, &Default::default()).unwrap();
        sys.worker(card, handler).await;
    }
    let card = Catalog::one(&dir.join("counter"), None).unwrap();
    sys.worker(card, counter).await;
    sys
}

/// Submits `params` to `agent` (whose one skill has its name) and waits
/// for the task's end: its id and its view.
async fn ask(sys: &System, agent: &str, params: Value) -> (String, Value) {
    let id = sys.submit(agent, agent, params).await;
    let done = sys.wait_terminal(&id, Duration::from_secs(60)).await;
    (id, done)
}

/// The names of a held task's steps, oldest first.
async fn steps(sys: &System, id: &str) -> Vec<String> {
    let (_, task) = sys.get(&format!("/v1/tasks/{id}")).await;
    // None yet: no `steps`.
    task["steps"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|s| s["step"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evaluator_optimizer_refines_until_the_evaluator_rates_it_good() {
    let dir = tempfile::tempdir().unwrap();
    let model = Model::serve(script).await;
    let sys = system(dir.path(), &model).await;
    let (id, done) = ask(&sys, "polished", json!({"text": "explain ownership"})).await;
    assert_eq!(done["state"], "completed", "{done:#}");
    assert_eq!(done["result"], "draft 2");
    assert_eq!(
        steps(&sys, &id).await,
        ["generate-1", "evaluate-1", "generate-2", "evaluate-2"]
    );
    assert_eq!(model.calls(), 4);
    // Its cost: its steps' model calls, each a conversation of its own.
    let (_, task) = sys.get(&format!("/v1/tasks/{id}")).await;
    assert_eq!(task["model_use"]["model_calls"], 4, "{task:#}");
    // The refinement is told the request, its answer and the feedback.
    let refine = model
        .requests()
        .into_iter()
        .map(|r| user(&r))
        .find(|u| u.contains("Feedback"))
        .unwrap();
    assert!(refine.contains("explain ownership"), "{refine}");
    assert!(refine.contains("draft 1"), "{refine}");
    assert!(refine.contains("rated FAIR: add an example"), "{refine}");
    // It runs in the orchestrator: no worker of its own.
    let card = Catalog::one(&dir.path().join("polished.md"), None).unwrap();
    let refused = card.runnable().unwrap_err().to_string();
    assert!(refused.contains("no worker of its own"), "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maker_samples_its_worker_until_one_answer_leads_by_k() {
    let dir = tempfile::tempdir().unwrap();
    let model = Model::serve(script).await;
    let sys = system(dir.path(), &model).await;
    let (id, done) = ask(&sys, "voter", json!({"text": "2 + 2?"})).await;
    assert_eq!(done["state"], "completed", "{done:#}");
    // four, Four and FOUR are one answer (normalized), three votes to
    // five's one: two ahead after four samples, none more.
    assert_eq!(
        done["result"].as_str().unwrap().trim().to_lowercase(),
        "four"
    );
    assert_eq!(
        steps(&sys, &id).await.len(),
        4,
        "{:?}",
        steps(&sys, &id).await
    );
    assert_eq!(model.calls(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_orchestrator_goes_on_with_a_held_task_from_its_stored_steps() {
    let dir = tempfile::tempdir().unwrap();
    let model = Model::serve(script).await;
    let counter = Arc::new(Counter(AtomicUsize::new(0)));
    let mut sys = system_counting(dir.path(), &model, Arc::clone(&counter)).await;
    let id = sys
        .submit("voter", "voter", json!({"text": "2 + 2?"}))
        .await;
    // Stopped once its first samples are out.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while steps(&sys, &id).await.len() < 2 {
        assert!(std::time::Instant::now() < deadline, "no samples started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    sys.stop_orchestrator().await;
    sys.start_orchestrator(Vec::new()).await;
    let done = sys.wait_terminal(&id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "completed", "{done:#}");
    // The samples made before the stop were not made again.
    assert_eq!(steps(&sys, &id).await.len(), 4);
    assert_eq!(counter.0.load(Ordering::SeqCst), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orchestrator_card_delegates_and_answers_within_its_plan_iterations() {
    let dir = tempfile::tempdir().unwrap();
    let model = Model::serve(script).await;
    let sys = system(dir.path(), &model).await;
    let (id, done) = ask(&sys, "planner", json!({"text": "a short answer"})).await;
    assert_eq!(done["state"], "completed", "{done:#}");
    assert_eq!(done["result"], "final: draft 1");
    let first = &model.requests()[0];
    let system_prompt = first["messages"][0]["content"].as_str().unwrap();
    assert!(
        system_prompt.starts_with("You coordinate the agents"),
        "{system_prompt}"
    );
    assert!(
        system_prompt.ends_with("Plan the answer."),
        "{system_prompt}"
    );
    assert_eq!(
        steps(&sys, &id).await,
        ["turn-1", "turn-1.call-0", "turn-2"]
    );

    // Still delegating when its one plan iteration is spent: it fails.
    let (id, done) = ask(&sys, "planner", json!({"text": "loop"})).await;
    assert_eq!(done["state"], "failed", "{done:#}");
    assert_eq!(done["error"]["code"], "turn_limit");
    // One model call that delegates, one that must answer: no third.
    assert_eq!(
        steps(&sys, &id).await,
        ["turn-1", "turn-1.call-0", "turn-2"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_with_a_model_runs_the_agent_its_model_picks() {
    let dir = tempfile::tempdir().unwrap();
    let model = Model::serve(script).await;
    let sys = system(dir.path(), &model).await;
    let (id, done) = ask(&sys, "dispatcher", json!({"text": "is draft 2 good?"})).await;
    assert_eq!(done["state"], "completed", "{done:#}");
    // The critic's own answer, not a second model call of the router's.
    assert_eq!(done["result"], r#"{"rating": "GOOD", "feedback": "fine"}"#);
    let first = &model.requests()[0];
    assert_eq!(first["tool_choice"], "required");
    assert_eq!(first["parallel_tool_calls"], false);
    assert_eq!(offered(first), ["writer", "critic"]);
    assert_eq!(steps(&sys, &id).await, ["turn-1", "turn-1.call-0"]);
    assert_eq!(model.calls(), 2);
}
