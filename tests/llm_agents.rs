//! Agents that are prompts for a model (`docs/llm.md`), against a small
//! OpenAI-compatible server the tests serve and whose calls they count:
//! the orchestrator holds each conversation, every model call is a turn
//! task to the agent's worker, every tool call a child task of the agent
//! the tool stands for; a call the card does not offer is refused and the
//! model told; provider faults are retried or fail with the provider's
//! words; the bounds stop a runaway loop.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::llm::{Model, Reply, last_role, offered, tool_results};
use common::system::{System, card, fast_bus};
use orchestrator::agent::{AgentCard, Dependencies, Prompt};
use orchestrator::llm::LlmSettings;
use orchestrator::worker::{EchoHandler, Handler, Outcome, Task, handler_for};
use serde_json::{Value, json};

/// A prompt agent `name` with one skill, calling `calls`.
fn prompt_card(name: &str, skill: &str, instruction: &str, calls: &[&str]) -> AgentCard {
    let mut c = card(name, &[skill]);
    c.invocation = None;
    c.prompt = Some(Prompt {
        instruction: instruction.into(),
        model: Some("stub-model".into()),
        ..Prompt::default()
    });
    c.dependencies = Some(Dependencies {
        agents: calls.iter().map(|a| a.parse().unwrap()).collect(),
        ..Dependencies::default()
    });
    c
}

/// Settings pointing a worker at `model`, answers not streamed when
/// `stream` is false.
fn settings(model: &Model, stream: bool) -> LlmSettings {
    LlmSettings {
        base_url: model.url.clone(),
        api_key_env: "ORCH_TEST_NO_SUCH_KEY".into(),
        stream,
        ..LlmSettings::default()
    }
}

/// A system whose one agent is the prompt `writer` (skill `write`, its
/// instruction `instruction`), its worker pointed at `model`.
async fn writer_system(model: &Model, instruction: &str, stream: bool) -> System {
    let writer = prompt_card("writer", "write", instruction, &[]);
    let mut sys = System::start(vec![writer.clone()], fast_bus()).await;
    let handler = handler_for(&writer, &settings(model, stream), &Default::default()).unwrap();
    sys.worker(writer, handler).await;
    sys
}

/// The model's answer once told its calls' results: each result, joined.
fn told(request: &Value) -> Reply {
    Reply::Text(
        tool_results(request)
            .iter()
            .map(|(_, c)| c.clone())
            .collect::<Vec<_>>()
            .join(" | "),
    )
}

/// The tasks of `correlation`, oldest first.
async fn correlated(sys: &System, correlation: &str) -> Vec<Value> {
    let (_, page) = sys
        .get(&format!("/v1/tasks?correlation_id={correlation}&limit=100"))
        .await;
    page["tasks"].as_array().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_answers_through_a_turn_task_with_its_instruction_and_streamed_progress() {
    let model = Model::serve(|_| Reply::Text("Rust is a language about ownership.".into())).await;
    let sys = writer_system(&model, "You write about {{topic}}.", true).await;
    let id = sys
        .submit("writer", "write", json!({"topic": "rust"}))
        .await;
    let done = sys.wait_terminal(&id, Duration::from_secs(30)).await;
    assert_eq!(done["state"], "completed", "{done:#}");
    assert_eq!(done["result"], "Rust is a language about ownership.");
    assert_eq!(done["conversation"], true);
    assert_eq!(model.calls(), 1);
    let request = &model.requests()[0];
    assert_eq!(request["model"], "stub-model");
    assert_eq!(request["stream"], true);
    assert_eq!(request["messages"][0]["role"], "system");
    assert_eq!(request["messages"][0]["content"], "You write about rust.");
    // A lone string param is the user message as it is.
    assert_eq!(request["messages"][1]["content"], "rust");
    assert!(request.get("tools").is_none(), "{request:#}");
    // The model call is a task of its own: the agent's, caused by the
    // conversation, with what it cost and the streamed text as progress.
    let tasks = correlated(&sys, done["correlation_id"].as_str().unwrap()).await;
    assert_eq!(tasks.len(), 2, "{tasks:#?}");
    let turn = &tasks[1];
    assert_eq!(turn["turn"], json!({"task": id, "n": 1}));
    assert_eq!(turn["causation_id"], id.as_str());
    assert_eq!(turn["result"]["usage"]["prompt_tokens"], 11);
    assert_eq!(turn["result"]["model"], "stub-model");
    let streamed: String = turn["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|h| h["progress"]["artifact"]["parts"][0]["text"].as_str())
        .collect();
    assert_eq!(streamed, "Rust is a language about ownership.");
    // The conversation's own task shows it too, as its followers read it.
    let (_, conversation) = sys.get(&format!("/v1/tasks/{id}")).await;
    let shown: String = conversation["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|h| h["progress"]["artifact"]["parts"][0]["text"].as_str())
        .collect();
    assert_eq!(shown, "Rust is a language about ownership.");
    // What it cost is counted by agent and model.
    let metrics = orchestrator::telemetry::metrics::render();
    assert!(
        metrics.contains(
            r#"orch_llm_tokens_total{agent="writer",kind="input",model="stub-model",trigger=""} 11"#
        ),
        "{metrics}"
    );
}

/// A tool agent whose tasks each wait until `n` of them run at once; it
/// keeps the claims of each task's token.
struct Together {
    started: Arc<AtomicUsize>,
    n: usize,
    claims: Arc<std::sync::Mutex<Vec<Value>>>,
}

impl Handler for Together {
    fn handle(&self, task: Task) -> futures::future::BoxFuture<'static, Outcome> {
        let started = Arc::clone(&self.started);
        let n = self.n;
        if let Some(token) = &task.token {
            use base64::Engine;
            let payload = token.expose().split('.').nth(1).unwrap().to_string();
            let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(payload)
                .unwrap();
            self.claims
                .lock()
                .unwrap()
                .push(serde_json::from_slice(&bytes).unwrap());
        }
        Box::pin(async move {
            started.fetch_add(1, Ordering::SeqCst);
            while started.load(Ordering::SeqCst) < n {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let params = Value::Object(task.envelope.payload.params);
            Outcome::completed(json!({"by": task.envelope.header.to.to_string(), "got": params}))
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_are_child_tasks_run_at_once_and_their_results_go_back_to_the_model() {
    let model = Model::serve(|r| match last_role(r).as_str() {
        "user" => Reply::Calls(vec![
            ("researcher".into(), json!({"query": "ownership"})),
            ("analyst".into(), json!({"data": "borrowing"})),
        ]),
        _ => Reply::Text(format!("summary of {} results", tool_results(r).len())),
    })
    .await;
    let planner = prompt_card("planner", "plan", "Plan.", &["researcher", "analyst"]);
    let mut researcher = card("researcher", &["research"]);
    researcher.skills[0].input_schema = Some(json!({
        "type": "object", "required": ["query"],
        "properties": {"query": {"type": "string"}}
    }));
    let analyst = card("analyst", &["analyze"]);
    let mut sys = System::start(
        vec![planner.clone(), researcher.clone(), analyst.clone()],
        fast_bus(),
    )
    .await;
    sys.worker(
        planner.clone(),
        handler_for(&planner, &settings(&model, false), &Default::default()).unwrap(),
    )
    .await;
    // Each tool's task waits for the other: calls run one after the
    // other would never end.
    let started = Arc::new(AtomicUsize::new(0));
    let claims = Arc::default();
    for c in [researcher, analyst] {
        let h = Together {
            started: Arc::clone(&started),
            n: 2,
            claims: Arc::clone(&claims),
        };
        let verifier = orchestrator::task_token::TokenSettings::default()
            .verifier(sys.data.path(), c.name.as_str())
            .unwrap()
            .map(Arc::new);
        sys.worker_checking_with(c, Arc::new(h), verifier).await;
    }
    let id = sys
        .submit("planner", "plan", json!({"text": "explain rust"}))
        .await;
    let done = sys.wait_terminal(&id, Duration::from_secs(30)).await;
    assert_eq!(done["state"], "completed", "{done:#}");
    assert_eq!(done["result"], "summary of 2 results");
    assert_eq!(model.calls(), 2);
    let first = &model.requests()[0];
    assert_eq!(offered(first), ["researcher", "analyst"]);
    assert_eq!(
        first["tools"][0]["function"]["parameters"]["required"],
        json!(["query"])
    );
    // The second request: the model's message, then each result in order.
    let results = tool_results(&model.requests()[1]);
    assert_eq!(results[0].0, "call_0_researcher");
    let r0: Value = serde_json::from_str(&results[0].1).unwrap();
    assert_eq!(
        r0,
        json!({"by": "researcher", "got": {"query": "ownership"}})
    );
    let r1: Value = serde_json::from_str(&results[1].1).unwrap();
    assert_eq!(r1["by"], "analyst");
    // Each call is a task: same correlation, caused by the conversation.
    let tasks = correlated(&sys, done["correlation_id"].as_str().unwrap()).await;
    let children: Vec<&Value> = tasks
        .iter()
        .filter(|t| t["agent"] == "researcher" || t["agent"] == "analyst")
        .collect();
    assert_eq!(children.len(), 2);
    for c in children {
        assert_eq!(c["causation_id"], id.as_str());
        assert_eq!(c["state"], "completed");
    }
    assert_eq!(tasks.iter().filter(|t| t["turn"].is_object()).count(), 2);
    // Each call's token is for its agent, acting for the same principal,
    // and its delegation chain names the calling agent.
    let claims = claims.lock().unwrap().clone();
    assert_eq!(claims.len(), 2);
    for c in &claims {
        assert_eq!(c["sub"], "test-admin");
        assert_eq!(
            c["act"],
            json!({"sub": "planner", "act": {"sub": "orchestrator"}})
        );
    }
    let mut audiences: Vec<&str> = claims.iter().map(|c| c["aud"].as_str().unwrap()).collect();
    audiences.sort_unstable();
    assert_eq!(audiences, ["analyst", "researcher"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_to_a_tool_the_card_does_not_offer_runs_nothing_and_the_model_is_told() {
    let model = Model::serve(|r| match last_role(r).as_str() {
        "user" => Reply::Calls(vec![
            ("vault".into(), json!({})),
            ("researcher".into(), json!({"query": 7})),
        ]),
        _ => told(r),
    })
    .await;
    let planner = prompt_card("planner", "plan", "Plan.", &["researcher"]);
    let mut researcher = card("researcher", &["research"]);
    researcher.skills[0].input_schema = Some(json!({
        "type": "object", "properties": {"query": {"type": "string"}}
    }));
    let vault = card("vault", &["open"]);
    let mut sys = System::start(
        vec![planner.clone(), researcher.clone(), vault.clone()],
        fast_bus(),
    )
    .await;
    sys.worker(
        planner.clone(),
        handler_for(&planner, &settings(&model, true), &Default::default()).unwrap(),
    )
    .await;
    sys.worker(vault, Arc::new(EchoHandler)).await;
    sys.worker(researcher, Arc::new(EchoHandler)).await;
    let id = sys
        .submit("planner", "plan", json!({"text": "open the vault"}))
        .await;
    let done = sys.wait_terminal(&id, Duration::from_secs(30)).await;
    assert_eq!(done["state"], "completed", "{done:#}");
    let told = done["result"].as_str().unwrap();
    assert!(
        told.contains("`vault` is not a tool of agent `planner`"),
        "{told}"
    );
    assert!(told.contains("do not fit `researcher`"), "{told}");
    let tasks = correlated(&sys, done["correlation_id"].as_str().unwrap()).await;
    assert!(
        tasks
            .iter()
            .all(|t| t["agent"] != "vault" && t["agent"] != "researcher"),
        "{tasks:#?}"
    );
    let (_, audit) = sys.get(&format!("/v1/audit?task_id={id}")).await;
    let refused: Vec<&Value> = audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "llm.tool_refused")
        .collect();
    assert_eq!(refused.len(), 2, "{audit:#}");
    assert_eq!(refused[0]["detail"]["tool"], "vault");
}

/// Every call of one model answer is checked as a submit checks params
/// (depth, canonical form, schema, scopes) before the first is submitted:
/// arguments nested deeper than the params limit, or holding an integer
/// beyond 2^53, are refused (audited `llm.tool_refused`, the model told
/// why) while the answer's good call runs, and the conversation goes on
/// (it used to fail whole as `step_refused`, after the good call ran).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_that_a_submit_would_refuse_is_refused_before_any_call_runs() {
    let mut deep = json!("bottom");
    for _ in 0..70 {
        deep = json!({ "d": deep });
    }
    let model = Model::serve(move |r| match last_role(r).as_str() {
        "user" => Reply::Calls(vec![
            ("researcher".into(), json!({"query": "fine"})),
            (
                "researcher".into(),
                json!({"query": "big", "n": 9_007_199_254_740_993u64}),
            ),
            (
                "researcher".into(),
                json!({"query": "deep", "nested": deep.clone()}),
            ),
        ]),
        _ => told(r),
    })
    .await;
    let planner = prompt_card("planner", "plan", "Plan.", &["researcher"]);
    let researcher = card("researcher", &["research"]);
    let mut sys = System::start(vec![planner.clone(), researcher.clone()], fast_bus()).await;
    sys.worker(
        planner.clone(),
        handler_for(&planner, &settings(&model, false), &Default::default()).unwrap(),
    )
    .await;
    sys.worker(researcher, Arc::new(EchoHandler)).await;
    let id = sys.submit("planner", "plan", json!({"text": "go"})).await;
    let done = sys.wait_terminal(&id, Duration::from_secs(30)).await;
    assert_eq!(done["state"], "completed", "{done:#}");
    let told = done["result"].as_str().unwrap();
    assert!(
        told.contains("fine"),
        "the good call ran and was answered: {told}"
    );
    assert!(told.contains("params.n"), "{told}");
    assert!(told.contains("deep"), "{told}");
    assert_eq!(told.matches("do not fit `researcher`").count(), 2, "{told}");
    let tasks = correlated(&sys, done["correlation_id"].as_str().unwrap()).await;
    let calls = tasks.iter().filter(|t| t["agent"] == "researcher").count();
    assert_eq!(calls, 1, "only the good call became a task: {tasks:#?}");
    let (_, audit) = sys.get(&format!("/v1/audit?task_id={id}")).await;
    let refused = audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "llm.tool_refused")
        .count();
    assert_eq!(refused, 2, "{audit:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_faults_are_retried_after_their_wait_or_fail_with_the_providers_words() {
    let n = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&n);
    let model = Model::serve(move |r| {
        let text = r["messages"].as_array().unwrap().last().unwrap()["content"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let i = count.fetch_add(1, Ordering::SeqCst);
        match text.as_str() {
            // 1 s: ten times the retry policy's first delay here (and
            // its longest, which caps it).
            "busy" if i == 0 => {
                Reply::Status(429, json!({"error": {"message": "slow down"}}), Some(1))
            }
            "busy" => Reply::Text("after the wait".into()),
            "bad" => Reply::Status(
                400,
                json!({"error": {"message": "context length exceeded", "type": "invalid_request_error"}}),
                None,
            ),
            _ => Reply::Raw("{\"id\": \"x\", \"object\": \"chat.completion\"".into()),
        }
    })
    .await;
    let sys = writer_system(&model, "Write.", false).await;
    let busy = sys.submit("writer", "write", json!({"text": "busy"})).await;
    let done = sys.wait_terminal(&busy, Duration::from_secs(30)).await;
    assert_eq!(done["state"], "completed", "{done:#}");
    assert_eq!(done["result"], "after the wait");
    let turn = correlated(&sys, done["correlation_id"].as_str().unwrap()).await[1].clone();
    assert_eq!(turn["attempt"], 2, "{turn:#}");
    let retry = turn["history"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["event"] == "retry")
        .cloned()
        .unwrap();
    assert!(
        retry["reason"].as_str().unwrap().contains("slow down"),
        "{retry:#}"
    );
    // The second call came after the provider's wait, not the policy's.
    let at = model.times();
    let waited = at[1] - at[0];
    assert!(waited >= Duration::from_millis(950), "{waited:?}");

    for (text, code, words) in [
        ("bad", "model_refused", "context length exceeded"),
        ("?", "bad_response", "not JSON"),
    ] {
        let id = sys.submit("writer", "write", json!({"text": text})).await;
        let failed = sys.wait_terminal(&id, Duration::from_secs(30)).await;
        assert_eq!(failed["state"], "failed");
        assert_eq!(failed["error"]["code"], code);
        let message = failed["error"]["message"].as_str().unwrap();
        assert!(message.contains(words), "{failed:#}");
    }
    // One call each, but the busy one: twice.
    assert_eq!(model.calls(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_that_never_stops_calling_tools_is_stopped_at_the_turn_bound() {
    let model = Model::serve(|_| Reply::Calls(vec![("helper".into(), json!({}))])).await;
    let looper = prompt_card("looper", "loop", "Loop.", &["helper"]);
    let helper = card("helper", &["help"]);
    let mut sys = System::start_with(
        common::nats::NatsServer::start(),
        vec![looper.clone(), helper.clone()],
        fast_bus(),
        |c| c.llm.max_turns = 3,
    )
    .await;
    sys.worker(
        looper.clone(),
        handler_for(&looper, &settings(&model, false), &Default::default()).unwrap(),
    )
    .await;
    sys.worker(helper, Arc::new(EchoHandler)).await;
    let id = sys.submit("looper", "loop", json!({"text": "go"})).await;
    let failed = sys.wait_terminal(&id, Duration::from_secs(30)).await;
    assert_eq!(failed["state"], "failed", "{failed:#}");
    assert_eq!(failed["error"]["code"], "turn_limit");
    assert_eq!(model.calls(), 3);
}

/// A tool whose tasks run until they are canceled.
struct UntilCanceled(Arc<AtomicUsize>);

impl Handler for UntilCanceled {
    fn handle(&self, task: Task) -> futures::future::BoxFuture<'static, Outcome> {
        let canceled = Arc::clone(&self.0);
        Box::pin(async move {
            task.cancel.cancelled().await;
            canceled.fetch_add(1, Ordering::SeqCst);
            Outcome::Canceled
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canceling_a_conversation_cancels_the_tool_call_it_waits_for() {
    let model = Model::serve(|_| Reply::Calls(vec![("helper".into(), json!({}))])).await;
    let asker = prompt_card("asker", "ask", "Ask.", &["helper"]);
    let helper = card("helper", &["help"]);
    let mut sys = System::start(vec![asker.clone(), helper.clone()], fast_bus()).await;
    sys.worker(
        asker.clone(),
        handler_for(&asker, &settings(&model, false), &Default::default()).unwrap(),
    )
    .await;
    let canceled = Arc::new(AtomicUsize::new(0));
    sys.worker(helper, Arc::new(UntilCanceled(Arc::clone(&canceled))))
        .await;
    let id = sys.submit("asker", "ask", json!({"text": "go"})).await;
    let correlation = sys.get(&format!("/v1/tasks/{id}")).await.1["correlation_id"]
        .as_str()
        .unwrap()
        .to_string();
    common::eventually("the tool call runs", Duration::from_secs(30), || async {
        correlated(&sys, &correlation)
            .await
            .iter()
            .any(|t| t["agent"] == "helper" && t["state"] == "working")
    })
    .await;
    let (status, _) = sys.post(&format!("/v1/tasks/{id}/cancel"), json!({})).await;
    assert_eq!(status, 200);
    common::eventually(
        "the tool call is canceled",
        Duration::from_secs(30),
        || async { canceled.load(Ordering::SeqCst) == 1 },
    )
    .await;
    let tasks = correlated(&sys, &correlation).await;
    let call = tasks.iter().find(|t| t["agent"] == "helper").unwrap();
    assert_eq!(call["state"], "canceled", "{call:#}");
    assert_eq!(model.calls(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_conversation_leads_with_the_triggers_prompt_and_its_cost_is_totalled() {
    let model = Model::serve(|r| match last_role(r).as_str() {
        "user" => Reply::Calls(vec![("helper".into(), json!({}))]),
        _ => Reply::Text("Bonjour.".into()),
    })
    .await;
    let writer = prompt_card("writer", "write", "You write about {{topic}}.", &["helper"]);
    let helper = card("helper", &["help"]);
    let cards = vec![writer.clone(), helper.clone()];
    let mut sys = System::start(cards.clone(), fast_bus()).await;
    sys.stop_orchestrator().await;
    let dir = sys.data.path().join("triggers");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(
        dir.join("explain.yaml"),
        "id: explain\ndefault_system_prompt: Answer in French.\nsteps:\n  - { id: write, agent: writer, action: write, params: { topic: \"{{ input.topic }}\" } }\n",
    )
    .unwrap();
    let triggers = orchestrator::trigger::Triggers::load(&dir, &Default::default());
    assert!(triggers.errors.is_empty(), "{:#?}", triggers.errors);
    sys.triggers = triggers;
    sys.start_orchestrator(cards).await;
    sys.worker(
        writer.clone(),
        handler_for(&writer, &settings(&model, false), &Default::default()).unwrap(),
    )
    .await;
    sys.worker(helper, Arc::new(EchoHandler)).await;
    let (status, run) = sys
        .post(
            "/v1/triggers/explain/runs",
            json!({"input": {"topic": "rust"}}),
        )
        .await;
    assert_eq!(status, 201, "{run:#}");
    let (_, run) = sys
        .get(&format!(
            "/v1/runs/{}?wait=30s",
            run["run_id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(run["state"], "completed", "{run:#}");
    assert_eq!(run["steps"][0]["result"], "Bonjour.");
    // The seed's rule: the trigger's prompt first, then the instruction.
    assert_eq!(
        model.requests()[0]["messages"][0]["content"],
        "Answer in French.\n\nYou write about rust."
    );
    // Two model calls of 11 tokens in and 7 out each (the stub's).
    assert_eq!(
        run["model_use"],
        json!({"model_calls": 2, "input_tokens": 22, "output_tokens": 14})
    );
    let (_, step) = sys
        .get(&format!(
            "/v1/tasks/{}",
            run["steps"][0]["task_id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(step["model_use"], run["model_use"]);
    // `runs get` prints them.
    let server = (sys.http.clone(), sys.admin_key.clone());
    let out = common::cli(&server, &["runs", "get", run["run_id"].as_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("models   2 calls, 22 tokens in, 14 out"),
        "{text}"
    );
    // And `tasks get`, for the step's task, without --json.
    let out = common::cli(
        &server,
        &["tasks", "get", run["steps"][0]["task_id"].as_str().unwrap()],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("models   2 calls, 22 tokens in, 14 out"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_a2a_stream_to_an_llm_agent_carries_the_models_text_as_it_comes() {
    let model = Model::serve(|_| Reply::Text("Streams carry the text.".into())).await;
    let sys = writer_system(&model, "Write.", true).await;
    let send = json!({"message": common::a2a::message(
        "m-llm", json!([{"text": "what do streams carry?"}]), json!({"skillId": "writer/write"}))});
    let mut stream = common::a2a::open_stream(&sys, "SendStreamingMessage", send, None).await;
    let mut events = Vec::new();
    while events
        .last()
        .is_none_or(|e: &Value| common::a2a::kind(e) != "completed")
    {
        let got = common::a2a::read_events(&mut stream, 1).await;
        events.extend(got.into_iter().map(|(_, e)| e));
    }
    let streamed: String = events
        .iter()
        .filter(|e| common::a2a::kind(e) == "artifact")
        .filter(|e| e["result"]["artifactUpdate"]["artifact"]["artifactId"] == "answer")
        .filter_map(|e| e["result"]["artifactUpdate"]["artifact"]["parts"][0]["text"].as_str())
        .collect();
    assert_eq!(streamed, "Streams carry the text.", "{events:#?}");
    // The A2A text part is the user message.
    assert_eq!(
        model.requests()[0]["messages"][1]["content"],
        "what do streams carry?"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_a2a_client_streams_an_llm_agents_text_and_gets_its_answer() {
    let model = Model::serve(|_| Reply::Text("Streams carry the text.".into())).await;
    let sys = writer_system(&model, "Write.", true).await;
    let key = sys.admin_key.clone().unwrap();
    let names = common::a2a::sdk_checks("sdk_llm.py", &sys, &key).await;
    assert_eq!(names.len(), 3, "{names:?}");
    assert_eq!(model.calls(), 2);
}
