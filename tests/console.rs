//! The console (`/ui`) in a real browser: Debian's Chromium, driven over
//! WebDriver. Signing in with an API key, a task submitted from the page
//! and followed to its end without a reload (the page hears the change
//! over `/v1/changes`), a second principal who sees none of the first
//! one's tasks, an API error shown as the API words it, signing out; and
//! the browser's console holds no error.

mod common;

use std::sync::Arc;

use common::browser::{Driver, console_errors, text_when};
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
    c.find(Locator::Css("form.signin button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
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
    c.find(Locator::Css("form.signin button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
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

    // Alice signs in; the key is in no URL and in no cookie.
    sign_in(&c, &sys.http, &alice).await;
    assert!(!c.current_url().await.unwrap().as_str().contains(&alice));
    let cookies = c.get_all_cookies().await.unwrap();
    assert!(cookies.is_empty(), "{cookies:?}");

    // No task yet: the page says what to do.
    c.goto(&format!("{}/ui/#/tasks", sys.http)).await.unwrap();
    text_when(&c, "main .empty", |t| t.contains("No tasks yet")).await;

    // She submits one with no worker running: it waits, queued.
    c.find(Locator::Css("#s-agent"))
        .await
        .unwrap()
        .send_keys("echo")
        .await
        .unwrap();
    c.find(Locator::Css("#s-action"))
        .await
        .unwrap()
        .send_keys("echo")
        .await
        .unwrap();
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
    c.find(Locator::Css("#sign-out"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    c.wait()
        .for_element(Locator::Css("#credential"))
        .await
        .unwrap();
    let kept = c
        .execute("return sessionStorage.length;", vec![])
        .await
        .unwrap();
    assert_eq!(kept, json!(0));

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
