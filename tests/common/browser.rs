//! A real browser for the console's tests: Debian's Chromium, driven over
//! WebDriver by its `chromedriver` (both from `chromium` and
//! `chromium-driver`, which `scripts/ensure-chromium` installs), through
//! the `fantoccini` client. The driver is killed on drop.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use axum::http;
use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

/// The driver binary: `CHROMEDRIVER`, else Debian's.
fn driver_bin() -> String {
    std::env::var("CHROMEDRIVER").unwrap_or_else(|_| "/usr/bin/chromedriver".into())
}

/// A running `chromedriver`.
pub struct Driver {
    child: Child,
    pub url: String,
    profiles: tempfile::TempDir,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Driver {
    pub async fn start() -> Driver {
        let port = super::process::free_port();
        let child = Command::new(driver_bin())
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "{}: {e} (scripts/ensure-chromium installs Debian's chromium and chromium-driver)",
                    driver_bin()
                )
            });
        let url = format!("http://127.0.0.1:{port}");
        super::process::wait_ready(&format!("{url}/status")).await;
        Driver {
            child,
            url,
            profiles: tempfile::tempdir().unwrap(),
        }
    }

    /// A new headless browser window, its own empty profile.
    pub async fn browser(&self) -> Client {
        let profile = tempfile::tempdir_in(self.profiles.path()).unwrap().keep();
        let caps = json!({
            "browserName": "chrome",
            "goog:loggingPrefs": {"browser": "ALL"},
            "goog:chromeOptions": {
                "binary": std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into()),
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                    "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync",
                    "--disable-dev-shm-usage", "--window-size=1280,900",
                    format!("--user-data-dir={}", profile.display()),
                ],
            },
        });
        let Value::Object(caps) = caps else {
            unreachable!()
        };
        // The driver is on loopback: plain HTTP.
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        ClientBuilder::new(connector)
            .capabilities(caps)
            .connect(&self.url)
            .await
            .unwrap()
    }
}

/// The browser's console messages since the last call (Chromium's log).
#[derive(Debug)]
struct BrowserLog;

impl WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(
        &self,
        base: &url::Url,
        session: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base.join(&format!("session/{}/se/log", session.unwrap_or_default()))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::POST, Some(r#"{"type":"browser"}"#.into()))
    }
}

/// The entries of the browser's console at level SEVERE since the last
/// call.
pub async fn console_errors(c: &Client) -> Vec<Value> {
    let log = c.issue_cmd(BrowserLog).await.unwrap();
    log.as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e["level"] == "SEVERE")
        .collect()
}

/// Waits (up to 15 s) for the element at `css`, then for its text to
/// satisfy `ok`; its text.
pub async fn text_when(c: &Client, css: &str, ok: impl Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let mut last = String::new();
    while std::time::Instant::now() < deadline {
        if let Ok(el) = c.find(Locator::Css(css)).await
            && let Ok(text) = el.text().await
        {
            if ok(&text) {
                return text;
            }
            last = text;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let page = match c.find(Locator::Css("main")).await {
        Ok(main) => main.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    };
    panic!("`{css}` never showed what was awaited; last: {last:?}; the page: {page}");
}

/// Clicks the element at `css`.
pub async fn click(c: &Client, css: &str) {
    interact(c, css, |e| async move { e.click().await.map(drop) }).await;
}

/// Types `text` into the element at `css`.
pub async fn type_in(c: &Client, css: &str, text: &str) {
    interact(c, css, |e| async move { e.send_keys(text).await }).await;
}

/// Does `act` on the element at `css` once it can take it, as a person
/// waits for a field or button to show: an element present but not yet
/// interactable (still being laid out or shown, on a busy machine), or
/// replaced by the page's next render between being found and used, is
/// found and tried again for up to ten seconds.
async fn interact<F, Fut>(c: &Client, css: &str, act: F)
where
    F: Fn(fantoccini::elements::Element) -> Fut,
    Fut: std::future::Future<Output = Result<(), fantoccini::error::CmdError>>,
{
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let element = c
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("`{css}`: {e}"));
        match act(element).await {
            Ok(()) => return,
            Err(fantoccini::error::CmdError::Standard(e))
                if matches!(
                    e.error,
                    fantoccini::error::ErrorStatus::ElementNotInteractable
                        | fantoccini::error::ErrorStatus::StaleElementReference
                ) && std::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("`{css}`: {e}"),
        }
    }
}
