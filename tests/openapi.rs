//! `GET /openapi.json` cannot drift from the API: the OpenAPI project's own
//! checker (`openapi-spec-validator`, from PyPI) accepts the served
//! document; every route of `src/http` is in it with its methods and every
//! path in it is a route; and real answers of a running orchestrator, for
//! every documented operation, fit the schema the document gives for their
//! status (an undocumented status is a failure too).

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use common::system::{GATED, System, card};
use orchestrator::worker::EchoHandler;
use serde_json::{Value, json};

fn document() -> Value {
    serde_json::from_str(orchestrator::http::openapi::DOCUMENT).unwrap()
}

/// Every `.route("PATH", method(…)…)` of the REST API's sources, with its
/// methods (the A2A face's and the console's files are not the REST API).
fn routes() -> BTreeMap<String, BTreeSet<String>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/http");
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if !name.ends_with(".rs") || ["ui.rs", "limits.rs"].contains(&name.as_str()) {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let text = text.split("#[cfg(test)]").next().unwrap();
        for (at, _) in text.match_indices(".route(") {
            let rest = text[at + 7..].trim_start();
            let route = match rest.strip_prefix('"') {
                Some(literal) => literal[..literal.find('"').unwrap()].to_string(),
                // A constant (`super::push::JWKS_PATH`): its value.
                None => {
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                        .collect();
                    if name.starts_with("format") || name.is_empty() {
                        continue;
                    }
                    constant(name.rsplit("::").next().unwrap())
                }
            };
            // The call's text up to its closing parenthesis.
            let mut depth = 1;
            let mut end = 0;
            for (i, c) in text[at + 7..].char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' => depth -= 1,
                    _ => {}
                }
                if depth == 0 {
                    end = i;
                    break;
                }
            }
            let call = &text[at + 7..at + 7 + end];
            let methods = out.entry(route).or_default();
            for m in ["get", "post", "put", "patch", "delete"] {
                let direct = call.contains(&format!(" {m}(")) || call.contains(&format!("({m}("));
                if direct || call.contains(&format!(".{m}(")) || call.contains(&format!(",{m}(")) {
                    methods.insert(m.to_string());
                }
            }
        }
    }
    out
}

/// The value of `const NAME: &str = "…";` somewhere under `src/http`.
fn constant(name: &str) -> String {
    let mut dirs = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("src/http")];
    let needle = format!("const {name}: &str = \"");
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            if let Some(at) = text.find(&needle) {
                let value = &text[at + needle.len()..];
                return value[..value.find('"').unwrap()].to_string();
            }
        }
    }
    panic!("no constant {name} under src/http")
}

#[test]
fn every_route_is_documented_and_every_documented_path_is_a_route() {
    let doc = document();
    let documented: BTreeMap<String, BTreeSet<String>> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(p, ops)| {
            (
                p.clone(),
                ops.as_object().unwrap().keys().cloned().collect(),
            )
        })
        .collect();
    let routes = routes();
    assert!(
        routes.len() > 20,
        "only {} routes found: {routes:?}",
        routes.len()
    );
    assert_eq!(
        routes, documented,
        "the routes (left) and /openapi.json (right) differ"
    );
}

#[test]
fn the_openapi_projects_own_checker_accepts_the_document() {
    let Ok(python) = std::env::var("OPENAPI_VALIDATOR_PYTHON") else {
        panic!(
            "OPENAPI_VALIDATOR_PYTHON is not set: scripts/test sets it (scripts/ensure-openapi-validator)"
        );
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("openapi.json");
    std::fs::write(&file, orchestrator::http::openapi::DOCUMENT).unwrap();
    let check = "import sys\nfrom openapi_spec_validator import validate\nfrom openapi_spec_validator.readers import read_from_filename\nd, _ = read_from_filename(sys.argv[1])\nvalidate(d)\nprint('valid')";
    let out = std::process::Command::new(python)
        .args(["-c", check, file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // And a document the checker must refuse, so its verdict means something.
    let mut broken = document();
    broken["paths"]["/v1/tasks"]["get"]["responses"] = json!("none");
    std::fs::write(&file, broken.to_string()).unwrap();
    let out = std::process::Command::new(std::env::var("OPENAPI_VALIDATOR_PYTHON").unwrap())
        .args(["-c", check, file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success(), "a broken document was accepted");
}

/// Checks `body`, answered with `status` to `method path`, against the
/// document; the problems.
fn check(doc: &Value, method: &str, path: &str, status: u16, body: &Value) -> Vec<String> {
    let what = format!("{method} {path} → {status}");
    let Some(response) = doc["paths"][path][method]["responses"].get(status.to_string()) else {
        return vec![format!("{what}: the status is not documented")];
    };
    let Some(schema) = response["content"]["application/json"]["schema"].as_object() else {
        return vec![format!("{what}: no JSON schema documented")];
    };
    let mut root = Value::Object(schema.clone());
    root["components"] = doc["components"].clone();
    let validator = jsonschema::validator_for(&root).unwrap();
    validator
        .iter_errors(body)
        .map(|e| format!("{what}: {} at {}\n{body:#}", e, e.instance_path()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_answers_fit_the_documented_schemas() {
    let echo = card("echo", &["echo"]);
    let mut sys = System::start_with_triggers(vec![echo.clone()], &[("gated.yaml", GATED)]).await;
    sys.worker(echo, Arc::new(EchoHandler)).await;
    let key = sys.admin_key.clone();
    let doc = document();

    // Served as it is built in, without credentials.
    let (status, served, _) = sys
        .call_as(None, reqwest::Method::GET, "/openapi.json", None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(served, doc);

    let mut problems = Vec::new();
    let mut seen: BTreeSet<(String, String)> = BTreeSet::new();
    let mut call =
        async |method: &str, documented: &str, path: String, body: Option<Value>, auth: bool| {
            let m: reqwest::Method = method.to_uppercase().parse().unwrap();
            let credential = if auth { key.as_deref() } else { None };
            let (status, answer, _) = sys.call_as(credential, m, &path, body).await;
            seen.insert((documented.to_string(), method.to_string()));
            problems.extend(check(&doc, method, documented, status, &answer));
            answer
        };

    let task = call(
        "post",
        "/v1/tasks",
        "/v1/tasks".into(),
        Some(json!({"to": "echo", "action": "echo", "params": {"a": 1}})),
        true,
    )
    .await;
    let id = task["task_id"].as_str().unwrap().to_string();
    call(
        "get",
        "/v1/tasks/{id}",
        format!("/v1/tasks/{id}?wait=5s"),
        None,
        true,
    )
    .await;
    call("get", "/v1/tasks", "/v1/tasks".into(), None, true).await;
    call(
        "get",
        "/v1/tasks",
        "/v1/tasks?order=newest&agent=echo&since=1h".into(),
        None,
        true,
    )
    .await;
    call(
        "get",
        "/v1/tasks",
        "/v1/tasks?agent=echo".into(),
        None,
        true,
    )
    .await; // 400: needs order
    call(
        "post",
        "/v1/tasks",
        "/v1/tasks".into(),
        Some(json!({"to": "echo", "action": "nope"})),
        true,
    )
    .await;
    call(
        "get",
        "/v1/tasks/{id}",
        "/v1/tasks/not-an-id".into(),
        None,
        true,
    )
    .await;
    call(
        "get",
        "/v1/tasks/{id}",
        format!("/v1/tasks/{id}"),
        None,
        false,
    )
    .await; // 401
    call(
        "post",
        "/v1/tasks/{id}/cancel",
        format!("/v1/tasks/{id}/cancel"),
        None,
        true,
    )
    .await; // 409: ended
    call("get", "/v1/triggers", "/v1/triggers".into(), None, true).await;
    let run = call(
        "post",
        "/v1/triggers/{id}/runs",
        "/v1/triggers/gated/runs".into(),
        Some(json!({"input": {}})),
        true,
    )
    .await;
    let run_id = run["run_id"].as_str().unwrap().to_string();
    call(
        "post",
        "/v1/triggers/{id}/runs",
        "/v1/triggers/nope/runs".into(),
        Some(json!({"input": {}})),
        true,
    )
    .await;
    call(
        "get",
        "/v1/runs/{id}",
        format!("/v1/runs/{run_id}?wait=5s"),
        None,
        true,
    )
    .await;
    call("get", "/v1/runs", "/v1/runs".into(), None, true).await;
    call(
        "post",
        "/v1/runs/{id}/reject",
        format!("/v1/runs/{run_id}/reject"),
        Some(json!({"reason": "no"})),
        true,
    )
    .await;
    call(
        "post",
        "/v1/runs/{id}/approve",
        format!("/v1/runs/{run_id}/approve"),
        Some(json!({})),
        true,
    )
    .await; // 409: ended
    call(
        "post",
        "/v1/runs/{id}/input",
        format!("/v1/runs/{run_id}/input"),
        Some(json!({"input": 1})),
        true,
    )
    .await;
    let second = call(
        "post",
        "/v1/triggers/{id}/runs",
        "/v1/triggers/gated/runs".into(),
        Some(json!({"input": {}})),
        true,
    )
    .await;
    let second = second["run_id"].as_str().unwrap().to_string();
    call(
        "post",
        "/v1/runs/{id}/cancel",
        format!("/v1/runs/{second}/cancel"),
        Some(json!({"reason": "done"})),
        true,
    )
    .await;
    call(
        "get",
        "/v1/audit",
        format!("/v1/audit?task_id={id}"),
        None,
        true,
    )
    .await;
    call(
        "get",
        "/v1/audit/verify",
        "/v1/audit/verify".into(),
        None,
        true,
    )
    .await;
    call("get", "/v1/agents", "/v1/agents".into(), None, true).await;
    call(
        "get",
        "/v1/agents/{name}",
        "/v1/agents/echo".into(),
        None,
        true,
    )
    .await;
    call(
        "get",
        "/v1/agents/{name}",
        "/v1/agents/nobody".into(),
        None,
        true,
    )
    .await;
    call("get", "/v1/dlq", "/v1/dlq".into(), None, true).await;
    call(
        "post",
        "/v1/dlq/{task_id}/replay",
        format!("/v1/dlq/{id}/replay"),
        None,
        true,
    )
    .await; // 409
    call("get", "/v1/deliveries", "/v1/deliveries".into(), None, true).await;
    call("get", "/v1/me", "/v1/me".into(), None, true).await;
    call("get", "/v1/overview", "/v1/overview".into(), None, true).await;
    call("get", "/healthz", "/healthz".into(), None, false).await;
    call("get", "/readyz", "/readyz".into(), None, false).await;
    call(
        "get",
        "/.well-known/jwks.json",
        "/.well-known/jwks.json".into(),
        None,
        false,
    )
    .await;
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));

    // Every JSON operation was called (the streams and the text ones are
    // not JSON: /v1/changes, /metrics, this document).
    let mut missed = Vec::new();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for method in ops.as_object().unwrap().keys() {
            let json_answer = ["/v1/changes", "/metrics", "/openapi.json"].contains(&path.as_str());
            if !json_answer && !seen.contains(&(path.clone(), method.clone())) {
                missed.push(format!("{method} {path}"));
            }
        }
    }
    assert!(missed.is_empty(), "not called: {missed:?}");
}

/// The checks of every answer schemathesis makes: no server error, each
/// status documented, each body, content type and header as documented,
/// and the stateful ones (a deleted resource is gone, one just made is
/// there, authorization is enforced). The two that judge how exactly the
/// document describes what requests are taken (`positive_data_acceptance`,
/// `negative_data_rejection`) are left out: the document states the
/// bounds of ids and names, not every rule the service applies (a
/// trigger's own input schema, a duration's every spelling), so they flag
/// refusals that are right (docs/security.md says which).
const ANSWER_CHECKS: &str = "not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance,missing_required_header,unsupported_method,allow_header_conformance,use_after_free,ensure_resource_availability,ignored_auth";

/// schemathesis (from PyPI) walks every operation of the served document
/// against a running orchestrator with real credentials, a worker and a
/// trigger with a gate, its phases in turn (examples, coverage, fuzzing,
/// and stateful sequences along the document's links: a submitted task
/// got, canceled, audited; a started run got, approved, rejected,
/// canceled): no server error, and every answer fits its documented status
/// and schema. `SCHEMATHESIS_MAX_EXAMPLES` sets the budget per operation
/// (5 in CI; docs/security.md has the long run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_walks_every_operation_and_every_answer_fits() {
    let Ok(python) = std::env::var("SCHEMATHESIS_PYTHON") else {
        panic!(
            "SCHEMATHESIS_PYTHON is not set: scripts/test sets it (scripts/ensure-schemathesis)"
        );
    };
    let examples = std::env::var("SCHEMATHESIS_MAX_EXAMPLES").unwrap_or_else(|_| "5".into());
    let mut sys =
        System::start_with_triggers(vec![card("echo", &["echo"])], &[("gated.yaml", GATED)]).await;
    sys.worker(card("echo", &["echo"]), Arc::new(EchoHandler))
        .await;
    let key = sys.admin_key.clone().unwrap();
    let operations = document()["paths"]
        .as_object()
        .unwrap()
        .values()
        .map(|ops| ops.as_object().unwrap().len())
        .sum::<usize>();
    let url = format!("{}/openapi.json", sys.http);
    // Its cache (`.schemathesis/`) goes where the run is, not in the clone.
    let work = tempfile::tempdir().unwrap();
    let out = tokio::process::Command::new(python)
        .current_dir(work.path())
        .args(["-m", "schemathesis.cli", "run", &url])
        .args(["--header", &format!("Authorization: Bearer {key}")])
        .args(["--checks", ANSWER_CHECKS])
        .args([
            "--max-examples",
            &examples,
            "--workers",
            "1",
            "--request-timeout",
            "40",
        ])
        .args(["--seed", "42", "--no-color"])
        .output()
        .await
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "schemathesis found what it shows:\n{text}"
    );
    // Every operation it selected was tried, and it selected all it
    // counts (its count of this document's 27 operations has been 26 or
    // 27 from one run to the next).
    let number_after = |label: &str| -> Vec<usize> {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(label))
            .map(|rest| {
                rest.split('/')
                    .filter_map(|n| n.trim().parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    };
    let (selected, tested) = (number_after("Selected:"), number_after("Tested:"));
    assert!(
        selected.len() == 2
            && selected[0] == selected[1]
            && tested == [selected[0]]
            && selected[0] + 1 >= operations,
        "every one of the {operations} operations was tried:\n{text}"
    );
    let generated = text
        .lines()
        .find(|l| l.contains(" generated"))
        .unwrap_or_default()
        .trim();
    eprintln!(
        "schemathesis, {examples} examples per operation: {operations} operations, {generated}"
    );
}
