//! The example pack (`examples/llm-pack`) against the tests' model server:
//! its entry agent's model calls the member `researcher`, which is a
//! conversation of its own (a tool call to an LLM agent), and answers
//! from what the researcher found.

use crate::common;

use std::path::PathBuf;
use std::time::Duration;

use common::llm::{Model, Reply, last_role, tool_results};
use common::system::{System, fast_bus};
use orchestrator::agent::Catalog;
use orchestrator::llm::LlmSettings;
use orchestrator::worker::handler_for;
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_packs_entry_delegates_to_its_member_through_a_tool_call() {
    let model = Model::serve(|r| {
        let offers_researcher = r["tools"][0]["function"]["name"] == "researcher";
        match (offers_researcher, last_role(r).as_str()) {
            (true, "user") => Reply::Calls(vec![(
                "researcher".into(),
                json!({"text": r["messages"].as_array().unwrap().last().unwrap()["content"]}),
            )]),
            (true, _) => Reply::Text(format!("Answer, from: {}", tool_results(r)[0].1)),
            (false, _) => Reply::Text("Rayleigh scattering (physics textbook)".into()),
        }
    })
    .await;
    let pack = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/llm-pack");
    let mut sys = System::start_reading(vec![pack.clone()], fast_bus()).await;
    let settings = LlmSettings {
        base_url: model.url.clone(),
        model: Some("stub-model".into()),
        ..LlmSettings::default()
    };
    for name in ["coordinator", "researcher"] {
        let card = Catalog::one(&pack.join("research.pack.yaml"), Some(name)).unwrap();
        sys.worker(
            card.clone(),
            handler_for(&card, &settings, &Default::default()).unwrap(),
        )
        .await;
    }
    let id = sys
        .submit(
            "coordinator",
            "coordinator",
            json!({"text": "Why is the sky blue?"}),
        )
        .await;
    let done = sys.wait_terminal(&id, Duration::from_secs(30)).await;
    assert_eq!(done["state"], "completed", "{done:#}");
    assert_eq!(
        done["result"],
        "Answer, from: Rayleigh scattering (physics textbook)"
    );
    let requests = model.requests();
    // The member is offered with the one parameter a prompt takes.
    assert_eq!(
        requests[0]["tools"][0]["function"]["parameters"]["required"],
        json!(["text"]),
        "{:#}",
        requests[0]["tools"]
    );
    assert_eq!(requests.len(), 3, "{requests:#?}");
    // The coordinator's instruction and params; the researcher's question.
    assert!(
        requests[0]["messages"][0]["content"]
            .as_str()
            .unwrap()
            .starts_with("You are a research coordinator."),
        "{:#}",
        requests[0]
    );
    assert_eq!(requests[0]["temperature"], 0.3);
    assert_eq!(requests[0]["max_tokens"], 600);
    assert_eq!(
        requests[1]["messages"][1]["content"],
        "Why is the sky blue?"
    );
    // The call is the researcher's conversation: a child of the
    // coordinator's, held by the orchestrator like it.
    let (_, page) = sys
        .get(&format!(
            "/v1/tasks?correlation_id={}&limit=50",
            done["correlation_id"].as_str().unwrap()
        ))
        .await;
    let tasks = page["tasks"].as_array().unwrap();
    let research: Vec<&Value> = tasks
        .iter()
        .filter(|t| t["agent"] == "researcher" && t["turn"].is_null())
        .collect();
    assert_eq!(research.len(), 1, "{tasks:#?}");
    assert_eq!(research[0]["conversation"], true);
    assert_eq!(research[0]["causation_id"], id.as_str());
    assert_eq!(
        tasks.len(),
        5,
        "two conversations, three model calls: {tasks:#?}"
    );
    // Its cost counts the researcher's model call too.
    assert_eq!(done["model_use"]["model_calls"], 3);
    assert_eq!(research[0]["model_use"]["model_calls"], 1);
}
