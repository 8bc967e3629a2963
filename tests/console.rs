//! The console (`/ui`) in a real browser: Debian's Chromium, driven over
//! WebDriver. Signing in with an API key, a task submitted from the page
//! and followed to its end without a reload (the page hears the change
//! over `/v1/changes`), a second principal who sees none of the first
//! one's tasks, an API error shown as the API words it, signing out; and
//! the browser's console holds no error.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::browser::{Driver, click, console_errors, text_when, type_in};
use common::system::{System, card, fast_bus};
use fantoccini::{Client, Locator};
use orchestrator::worker::EchoHandler;
use reqwest::Method;
use serde_json::json;

async fn sign_in(c: &Client, http: &str, key: &str) {
    c.goto(&format!("{http}/ui/")).await.unwrap();
    let field = c
        .wait()
        .for_element(Locator::Css("#credential"))
        .await
        .unwrap();
    field.send_keys(key).await.unwrap();
    click(c, "form.signin button[type=submit]").await;
    text_when(c, "main h1", |t| t == "Overview").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_signs_in_submits_a_task_and_watches_it_end_without_a_reload() {
    let (alice, alice_entry) = common::system::key_for("alice", &["orch:audit:read"]);
    let (bob, bob_entry) = common::system::key_for("bob", &[]);
    let mut sys = System::start_with(
        common::nats::NatsServer::start(),
        vec![card("echo", &["echo"])],
        fast_bus(),
        |c| c.api_auth.api_keys = vec![alice_entry, bob_entry],
    )
    .await;
    let driver = Driver::start().await;
    let c = driver.browser().await;

    // The files carry a policy that runs only the console's own script.
    let page = reqwest::get(format!("{}/ui/", sys.http)).await.unwrap();
    assert_eq!(page.status(), 200);
    let policy = page.headers()["content-security-policy"].to_str().unwrap();
    assert!(policy.contains("script-src 'self'"), "{policy}");
    assert!(policy.contains("frame-ancestors 'none'"), "{policy}");

    // A wrong key: the API's words, and still signed out.
    c.goto(&format!("{}/ui/", sys.http)).await.unwrap();
    let field = c
        .wait()
        .for_element(Locator::Css("#credential"))
        .await
        .unwrap();
    field
        .send_keys(&orchestrator::access::api_keys::generate())
        .await
        .unwrap();
    click(&c, "form.signin button[type=submit]").await;
    let (_, api_says, _) = sys
        .call_as(
            Some(&orchestrator::access::api_keys::generate()),
            Method::GET,
            "/v1/tasks",
            None,
        )
        .await;
    let words = api_says["error"]["message"].as_str().unwrap().to_string();
    text_when(&c, "form.signin .error", |t| t.contains(&words)).await;

    // Alice signs in with the keyboard alone (the field has the focus;
    // Enter sends the form); the key is in no URL and in no cookie.
    c.goto(&format!("{}/ui/", sys.http)).await.unwrap();
    c.wait()
        .for_element(Locator::Css("#credential"))
        .await
        .unwrap();
    let focused = c
        .execute("return document.activeElement.id;", vec![])
        .await
        .unwrap();
    assert_eq!(focused, json!("credential"));
    c.active_element()
        .await
        .unwrap()
        .send_keys(&format!("{alice}\u{E007}"))
        .await
        .unwrap();
    text_when(&c, "main h1", |t| t == "Overview").await;
    // Tab from the brand goes through the navigation, in order.
    c.execute("document.querySelector('.brand').focus();", vec![])
        .await
        .unwrap();
    c.active_element()
        .await
        .unwrap()
        .send_keys("\u{E004}")
        .await
        .unwrap();
    let reached = c
        .execute("return document.activeElement.textContent;", vec![])
        .await
        .unwrap();
    assert_eq!(reached, json!("Overview"), "Tab reaches the navigation");
    assert!(!c.current_url().await.unwrap().as_str().contains(&alice));
    let cookies = c.get_all_cookies().await.unwrap();
    assert!(cookies.is_empty(), "{cookies:?}");

    // No task yet: the page says what to do.
    c.goto(&format!("{}/ui/#/tasks", sys.http)).await.unwrap();
    text_when(&c, "main .empty", |t| t.contains("No tasks yet")).await;

    // She submits one with no worker running: it waits, queued.
    type_in(&c, "#s-agent", "echo").await;
    type_in(&c, "#s-action", "echo").await;
    let params = c.find(Locator::Css("#s-params")).await.unwrap();
    params.clear().await.unwrap();
    params.send_keys(r#"{"hello": "console"}"#).await.unwrap();
    c.execute(
        "window.__notReloaded = true; document.querySelector('section form button').click();",
        vec![],
    )
    .await
    .unwrap();
    text_when(&c, "#task-state", |t| t == "submitted").await;
    let url = c.current_url().await.unwrap();
    let id = url
        .fragment()
        .unwrap()
        .trim_start_matches("/tasks/")
        .to_string();

    // A worker starts: the page shows the end without being reloaded.
    sys.worker(card("echo", &["echo"]), Arc::new(EchoHandler))
        .await;
    text_when(&c, "#task-state", |t| t == "completed").await;
    let same_page = c
        .execute("return window.__notReloaded === true;", vec![])
        .await
        .unwrap();
    assert_eq!(same_page, json!(true), "the page was reloaded");
    text_when(&c, "main pre", |t| t.contains("console")).await;

    // Its audit is on its page.
    text_when(&c, "table[aria-label=Audit]", |t| {
        t.contains("task.submitted") && t.contains("alice")
    })
    .await;

    // Signing out forgets the key.
    click(&c, "#sign-out").await;
    c.wait()
        .for_element(Locator::Css("#credential"))
        .await
        .unwrap();
    let kept = c
        .execute("return sessionStorage.length;", vec![])
        .await
        .unwrap();
    assert_eq!(kept, json!(0));
    // Nothing of the session stays on screen.
    for gone in ["nav", "#who"] {
        let shown = c
            .find(Locator::Css(gone))
            .await
            .unwrap()
            .is_displayed()
            .await
            .unwrap();
        assert!(!shown, "{gone} is still shown after signing out");
    }

    // Bob sees none of Alice's tasks, nor her task's page.
    sign_in(&c, &sys.http, &bob).await;
    c.goto(&format!("{}/ui/#/tasks", sys.http)).await.unwrap();
    text_when(&c, "main .empty", |t| t.contains("No tasks yet")).await;
    c.goto(&format!("{}/ui/#/tasks/{id}", sys.http))
        .await
        .unwrap();
    text_when(&c, "main .error", |t| !t.is_empty()).await;

    // Nothing went wrong in the browser but the refusals it was shown.
    let errors: Vec<_> = console_errors(&c)
        .await
        .into_iter()
        .filter(|e| {
            // The browser logs each refused request (401 for the wrong key,
            // 404 for Bob's look at Alice's task): those were the point.
            let m = e["message"].as_str().unwrap_or_default();
            !(m.contains("401") || m.contains("404"))
        })
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    c.close().await.unwrap();
}

/// The quick start's workflow, from the console: started from the
/// trigger's form (generated from its input schema), stopped at its gate,
/// approved with a reason, followed to its end without a reload; the
/// decision names who and why, and the draft was sent once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quick_start_workflow_runs_from_the_trigger_form_and_its_gate() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let (carol, carol_entry) = common::system::key_for("carol", &["Files.Read", "Mail.Send"]);
    let mut sys = System::start_with(
        common::nats::NatsServer::start(),
        Vec::new(),
        fast_bus(),
        |c| c.api_auth.api_keys = vec![carol_entry],
    )
    .await;
    sys.stop_orchestrator().await;
    sys.agent_paths = vec![root.join("agents")];
    let catalog = orchestrator::agent::Catalog::load(
        &sys.agent_paths,
        &orchestrator::agent::GitOptions::default(),
    );
    sys.triggers = orchestrator::trigger::Triggers::load(&root.join("triggers"), &catalog.agents);
    sys.start_orchestrator(Vec::new()).await;
    let work = tempfile::tempdir().unwrap();
    let outbox = work.path().join("outbox");
    let _workers: Vec<_> = ["knowledge-agent", "outlook-agent"]
        .iter()
        .map(|a| {
            common::process::orchestrator_with_env(
                &[
                    "worker",
                    "--agent",
                    root.join("agents").join(a).to_str().unwrap(),
                    "--data-dir",
                    sys.data.path().to_str().unwrap(),
                ],
                &sys.nats.url(),
                &work.path().join(format!("{a}.log")),
                &[("ORCH_OUTBOX", outbox.to_str().unwrap())],
            )
        })
        .collect();
    let driver = Driver::start().await;
    let c = driver.browser().await;
    sign_in(&c, &sys.http, &carol).await;

    c.goto(&format!("{}/ui/#/triggers", sys.http))
        .await
        .unwrap();
    let form = "section#email-stakeholders form.start";
    c.wait()
        .for_element(Locator::Css(&format!("{form} input[name=query]")))
        .await
        .unwrap()
        .send_keys("release")
        .await
        .unwrap();
    type_in(&c, &format!("{form} textarea[name=to]"), "ops@example.com").await;
    c.execute("window.__notReloaded = true;", vec![])
        .await
        .unwrap();
    click(&c, &format!("{form} button[type=submit]")).await;
    text_when(&c, "#run-state", |t| t == "input_required").await;
    text_when(&c, "#gate-prompt", |t| t.contains("Send this draft")).await;
    let run_id = c
        .current_url()
        .await
        .unwrap()
        .fragment()
        .unwrap()
        .trim_start_matches("/runs/")
        .to_string();
    assert!(
        c.find(Locator::Css("svg[aria-label^='Steps:']"))
            .await
            .is_ok(),
        "the run's step graph is drawn"
    );
    type_in(&c, "#g-reason", "the draft reads well").await;
    click(&c, "#approve").await;
    text_when(&c, "#run-state", |t| t == "completed").await;
    let same_page = c
        .execute("return window.__notReloaded === true;", vec![])
        .await
        .unwrap();
    assert_eq!(same_page, json!(true), "the page was reloaded");

    let (_, run) = sys.get(&format!("/v1/runs/{run_id}")).await;
    let gate = run["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "confirm")
        .unwrap();
    assert_eq!(gate["decision"]["by"], "carol", "{run:#}");
    assert_eq!(gate["decision"]["reason"], "the draft reads well");
    assert_eq!(std::fs::read_dir(outbox.join("sent")).unwrap().count(), 1);
    let errors = console_errors(&c).await;
    assert!(errors.is_empty(), "{errors:#?}");

    // Every page, for an administrator, wide and narrow.
    click(&c, "#sign-out").await;
    snap(&c, "sign-in").await;
    sign_in(&c, &sys.http, sys.admin_key.as_deref().unwrap()).await;
    let task_id = run["steps"][0]["task_id"].as_str().unwrap().to_string();
    tour(&c, &sys.http, &run_id, &task_id).await;
    c.close().await.unwrap();
}

/// Each page at 1280, 640 (a 1280-pixel window at 200 % zoom) and 360
/// CSS pixels wide: it shows its heading and no error, nothing but a
/// table or a graph scrolls sideways, and every control has a name.
/// With `CONSOLE_SCREENSHOTS=DIR`, each page is saved there as a PNG at
/// 1280 (the pictures in docs/console.md).
async fn tour(c: &Client, http: &str, run_id: &str, task_id: &str) {
    let pages = [
        ("overview", "#/", "Overview"),
        ("tasks", "#/tasks", "Tasks"),
        ("task", &format!("#/tasks/{task_id}") as &str, "Task"),
        ("runs", "#/runs", "Runs"),
        ("run", &format!("#/runs/{run_id}") as &str, "Run"),
        ("triggers", "#/triggers", "Triggers"),
        ("agents", "#/agents", "Agents"),
        ("dead-letters", "#/dlq", "Dead letters"),
        ("audit", "#/audit", "Audit"),
    ];
    for width in [1280, 640, 360] {
        c.set_window_size(width, 900).await.unwrap();
        for (name, hash, heading) in &pages {
            c.goto(&format!("{http}/ui/{hash}")).await.unwrap();
            text_when(c, "main h1", |t| t.starts_with(heading)).await;
            assert!(c.find(Locator::Css("main .error")).await.is_err(), "{name}");
            let fits = c
                .execute(
                    "const wide = [...document.querySelectorAll('main *')].filter((e) => !e.closest('.table-wrap, .graph, pre') && e.getBoundingClientRect().right > document.documentElement.clientWidth + 1); return wide.map((e) => e.outerHTML.slice(0, 80));",
                    vec![],
                )
                .await
                .unwrap();
            assert_eq!(fits, json!([]), "{name} at {width}px: these overflow");
            let unnamed = c
                .execute(
                    "return [...document.querySelectorAll('input, select, textarea, button')].filter((e) => !(e.labels && e.labels.length) && !e.getAttribute('aria-label') && !e.textContent.trim()).map((e) => e.outerHTML.slice(0, 80));",
                    vec![],
                )
                .await
                .unwrap();
            assert_eq!(unnamed, json!([]), "{name}: controls without a name");
            if width == 1280 {
                snap(c, name).await;
            }
        }
    }
    let errors = console_errors(c).await;
    assert!(errors.is_empty(), "{errors:#?}");
}

/// With `CONSOLE_SCREENSHOTS=DIR`, the page as it is now, saved as
/// `DIR/<name>.png`.
async fn snap(c: &Client, name: &str) {
    if let Some(dir) = std::env::var_os("CONSOLE_SCREENSHOTS").map(std::path::PathBuf::from) {
        std::fs::create_dir_all(&dir).unwrap();
        let png = c.screenshot().await.unwrap();
        std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
    }
}

/// Crashes (the delivery is never settled) while `failing` is set.
struct CrashWhile(Arc<std::sync::atomic::AtomicBool>);

impl orchestrator::worker::Handler for CrashWhile {
    fn handle(
        &self,
        _: orchestrator::worker::Task,
    ) -> futures::future::BoxFuture<'static, orchestrator::worker::Outcome> {
        let failing = self.0.load(std::sync::atomic::Ordering::SeqCst);
        Box::pin(async move {
            assert!(!failing, "the handler crashed");
            orchestrator::worker::Outcome::completed(json!({"ok": true}))
        })
    }
}

/// A dead letter, listed with its reason and replayed from the console.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_is_listed_and_replayed() {
    let (ops, ops_entry) = common::system::key_for("ops", &["orch:dlq:manage"]);
    let mut poison = card("poison", &["work"]);
    poison.delivery = Some(orchestrator::agent::Delivery {
        max_deliver: Some(2),
        ..Default::default()
    });
    let mut sys = System::start_with(
        common::nats::NatsServer::start(),
        vec![poison.clone()],
        fast_bus(),
        |c| c.api_auth.api_keys = vec![ops_entry],
    )
    .await;
    let failing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    sys.worker(poison, Arc::new(CrashWhile(Arc::clone(&failing))))
        .await;
    let (status, task, _) = sys
        .call_as(
            Some(&ops),
            Method::POST,
            "/v1/tasks",
            Some(json!({"to": "poison", "action": "work", "max_attempts": 10})),
        )
        .await;
    assert_eq!(status, 201, "{task:#}");
    let id = task["task_id"].as_str().unwrap().to_string();
    let done = sys
        .wait_terminal(&id, std::time::Duration::from_secs(30))
        .await;
    assert_eq!(done["error"]["code"], "dead_lettered", "{done:#}");
    failing.store(false, std::sync::atomic::Ordering::SeqCst);

    let driver = Driver::start().await;
    let c = driver.browser().await;
    sign_in(&c, &sys.http, &ops).await;
    c.goto(&format!("{}/ui/#/dlq", sys.http)).await.unwrap();
    text_when(&c, "table[aria-label='Dead letters']", |t| {
        t.contains(&id) && t.contains("max_deliveries")
    })
    .await;
    click(&c, &format!("button[aria-label='Replay {id}']")).await;
    let said = text_when(&c, "#dlq-out", |t| t.starts_with("Replayed as")).await;
    let new_id = said
        .trim_start_matches("Replayed as ")
        .trim_end_matches('.')
        .to_string();
    assert_ne!(new_id, id);
    let again = sys
        .wait_terminal(&new_id, std::time::Duration::from_secs(30))
        .await;
    assert_eq!(again["state"], "completed", "{again:#}");
    let errors = console_errors(&c).await;
    assert!(errors.is_empty(), "{errors:#?}");
    c.close().await.unwrap();
}

/// A gate that asks for input is answered from the form its schema
/// makes; another run is rejected from its page; a running task is
/// canceled from its page; the audit chain is checked from the audit
/// page. Each shows its outcome without a reload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gates_are_answered_and_rejected_tasks_canceled_and_the_chain_checked() {
    let mut sys = System::start(
        vec![card("work", &["do"]), card("idle", &["do"])],
        fast_bus(),
    )
    .await;
    sys.stop_orchestrator().await;
    let dir = sys.data.path().join("triggers");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(
        dir.join("gated.yaml"),
        "id: gated\nsteps:\n  - { id: first, agent: work, action: do, params: { n: 1 } }\n  - id: confirm\n    approval:\n      prompt: Ship it?\n      input_schema: { type: object, required: [note], properties: { note: { type: string }, copies: { type: integer } } }\n  - { id: last, agent: work, action: do, params: { n: 2 } }\n",
    )
    .unwrap();
    // A broken file beside it: listed with where and why, the rest loads.
    std::fs::write(dir.join("broken.yaml"), "id: broken\nsteps: [\n").unwrap();
    let triggers = orchestrator::trigger::Triggers::load(&dir, &Default::default());
    assert_eq!(triggers.errors.len(), 1, "{:#?}", triggers.errors);
    sys.triggers = triggers;
    sys.start_orchestrator(vec![card("work", &["do"]), card("idle", &["do"])])
        .await;
    sys.worker(card("work", &["do"]), Arc::new(EchoHandler))
        .await;
    let driver = Driver::start().await;
    let c = driver.browser().await;
    let admin = sys.admin_key.clone().unwrap();
    sign_in(&c, &sys.http, &admin).await;

    c.goto(&format!("{}/ui/#/triggers", sys.http))
        .await
        .unwrap();
    text_when(&c, "#trigger-errors", |t| t.contains("broken.yaml:")).await;

    // Answered with input, from the form the gate's schema makes.
    let start = |c: &Client| {
        let c = c.clone();
        let http = sys.http.clone();
        async move {
            c.goto(&format!("{http}/ui/#/triggers")).await.unwrap();
            c.wait()
                .for_element(Locator::Css("section#gated form.start button"))
                .await
                .unwrap()
                .click()
                .await
                .unwrap();
            text_when(&c, "#run-state", |t| t == "input_required").await;
            c.current_url()
                .await
                .unwrap()
                .fragment()
                .unwrap()
                .trim_start_matches("/runs/")
                .to_string()
        }
    };
    let answered = start(&c).await;
    type_in(&c, ".gate input[name=note]", "two boxes").await;
    type_in(&c, ".gate input[name=copies]", "2").await;
    type_in(&c, "#g-reason", "counted").await;
    // Someone else's change repaints the page while the answer is being
    // written: what was typed stays.
    c.execute(
        "document.getElementById('gate-h').dataset.old = '1';",
        vec![],
    )
    .await
    .unwrap();
    let other = sys.submit("idle", "do", json!({})).await;
    let repainted = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let old = c
            .execute(
                "return document.querySelector('#gate-h[data-old]') !== null;",
                vec![],
            )
            .await
            .unwrap();
        if old == json!(false) {
            break;
        }
        assert!(
            std::time::Instant::now() < repainted,
            "the page never repainted"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let kept = c
        .execute(
            "return ['.gate input[name=note]', '.gate input[name=copies]', '#g-reason'].map((css) => document.querySelector(css).value);",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(kept, json!(["two boxes", "2", "counted"]), "task {other}");
    click(&c, ".gate button[type=submit]").await;
    text_when(&c, "#run-state", |t| t == "completed").await;
    let (_, run) = sys.get(&format!("/v1/runs/{answered}")).await;
    let gate = &run["steps"][1]["decision"];
    assert_eq!(
        gate["input"],
        json!({"note": "two boxes", "copies": 2}),
        "{run:#}"
    );
    assert_eq!(gate["reason"], "counted");

    // Rejected from its page.
    let rejected = start(&c).await;
    click(&c, "#reject").await;
    text_when(&c, "#run-state", |t| t == "rejected").await;
    let (_, run) = sys.get(&format!("/v1/runs/{rejected}")).await;
    assert_eq!(run["state"], "rejected", "{run:#}");

    // A task no worker takes, canceled from its page.
    let waiting = sys.submit("idle", "do", json!({})).await;
    c.goto(&format!("{}/ui/#/tasks/{waiting}", sys.http))
        .await
        .unwrap();
    text_when(&c, "#task-state", |t| t == "submitted").await;
    click(&c, "main form button[type=submit]").await;
    text_when(&c, "#task-state", |t| t == "canceled").await;

    // The audit chain, checked from the audit page.
    c.goto(&format!("{}/ui/#/audit?task_id={waiting}", sys.http))
        .await
        .unwrap();
    text_when(&c, "table[aria-label=Audit]", |t| {
        t.contains("task.canceled") || t.contains("canceled")
    })
    .await;
    click(&c, "main form:not([role]) button").await;
    text_when(&c, "#verify-out", |t| t.starts_with("The chain holds")).await;
    let errors = console_errors(&c).await;
    assert!(errors.is_empty(), "{errors:#?}");
    c.close().await.unwrap();
}
