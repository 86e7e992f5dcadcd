//! The browser harness (`support::browser`) against a small page of its own, so that a failure
//! here is the harness or the machine (chromium, chromedriver), never fleet's page.
//!
//! The page is served by axum on 127.0.0.1:0 inside the test: a table, a button whose click
//! changes the table a little later (as the live page changes after a poll), an endpoint that
//! echoes a POST's header and body, and a style that follows `prefers-color-scheme`.

use crate::support;

use std::time::Duration;

use axum::Router;
use axum::http::HeaderMap;
use axum::response::Html;
use axum::routing::{get, post};
use serde_json::json;
use support::browser::Browser;

const PAGE: &str = r#"<!doctype html>
<html>
<head>
<title>smoke</title>
<style>
  body { background: rgb(255, 255, 255); color: rgb(0, 0, 0); }
  @media (prefers-color-scheme: dark) { body { background: rgb(17, 17, 17); color: rgb(238, 238, 238); } }
</style>
</head>
<body>
<table id="slots">
  <thead><tr><th>slot</th><th>phase</th></tr></thead>
  <tbody>
    <tr data-slot="sim-01"><td>sim-01</td><td class="phase">off</td></tr>
    <tr data-slot="sim-02"><td>sim-02</td><td class="phase">ready</td></tr>
  </tbody>
</table>
<button id="power" data-slot="sim-01" type="button">Power on</button>
<script>
  // Later, not at once: the test must wait for the change, not find it already there.
  document.getElementById('power').addEventListener('click', () => {
    setTimeout(() => {
      document.querySelector('tr[data-slot="sim-01"] .phase').textContent = 'booting';
    }, 300);
  });
</script>
</body>
</html>
"#;

/// Serves the page on a free loopback port for the rest of the test; its base URL.
async fn serve_page() -> String {
    let app = Router::new()
        .route("/", get(|| async { Html(PAGE) }))
        .route(
            "/echo",
            post(|headers: HeaderMap, body: String| async move {
                let token = headers
                    .get("x-fleet-token")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("none")
                    .to_owned();
                format!("{token} {body}")
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binding the page's port");
    let addr = listener.local_addr().expect("the page's address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

#[tokio::test]
async fn a_page_is_read_clicked_waited_for_and_screenshotted() {
    let url = serve_page().await;
    let browser = Browser::start().await;
    browser.goto(&url).await;

    // Visible text, as a user reads it: a row per line, cells apart.
    assert_eq!(
        browser.text_of("#slots").await,
        "slot phase\nsim-01 off\nsim-02 ready"
    );
    assert_eq!(
        browser.attr_of("#power", "data-slot").await.as_deref(),
        Some("sim-01")
    );
    assert_eq!(browser.attr_of("#power", "data-missing").await, None);

    browser
        .execute("document.getElementById('power').click();", vec![])
        .await;
    let phase = browser
        .wait_for(
            r#"tr[data-slot="sim-01"] .phase"#,
            |t| t == "booting",
            Duration::from_secs(5),
        )
        .await;
    assert_eq!(phase.as_deref(), Ok("booting"));

    // A wait that cannot be met ends at its bound and says what it last read.
    let never = browser
        .wait_for(
            r#"tr[data-slot="sim-02"] .phase"#,
            |t| t == "failed",
            Duration::from_millis(300),
        )
        .await;
    let error = never.expect_err("sim-02 never fails");
    assert!(error.contains("\"ready\""), "{error}");
    let missing = browser
        .wait_for("#absent", |_| true, Duration::from_millis(200))
        .await;
    assert!(missing.is_err_and(|e| e.contains("no element matches #absent")));

    let dir = tempfile::tempdir().expect("a directory for the screenshot");
    let path = dir.path().join("smoke.png");
    let size = browser.screenshot(&path).await;
    let png = std::fs::read(&path).expect("reading the screenshot");
    assert!(size > 0 && png.len() == size, "{size} bytes");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "a PNG signature");
    // The IHDR chunk's width, big-endian at bytes 16..20: the window's 1280 pixels.
    let width = u32::from_be_bytes(png[16..20].try_into().expect("four bytes"));
    assert_eq!(width, 1280, "the screenshot's width");

    browser.close().await;
}

#[tokio::test]
async fn a_script_in_the_page_posts_with_its_own_headers() {
    let url = serve_page().await;
    let browser = Browser::start().await;
    browser.goto(&url).await;
    // The promise that the script returns is awaited: the reply comes back as the value.
    let reply = browser
        .execute(
            "return fetch('/echo', { method: 'POST', headers: { 'X-Fleet-Token': arguments[0] }, \
             body: arguments[1] }).then(r => r.text());",
            vec![json!("secret"), json!("power sim-01")],
        )
        .await;
    assert_eq!(reply, json!("secret power sim-01"));
    browser.close().await;
}

#[tokio::test]
async fn dark_mode_is_emulated_and_the_page_follows_it() {
    let url = serve_page().await;
    let browser = Browser::start().await;
    browser.goto(&url).await;
    let background = "return getComputedStyle(document.body).backgroundColor;";
    let dark = "return matchMedia('(prefers-color-scheme: dark)').matches;";

    browser.set_dark(true).await;
    assert_eq!(browser.execute(dark, vec![]).await, json!(true));
    assert_eq!(
        browser.execute(background, vec![]).await,
        json!("rgb(17, 17, 17)")
    );

    browser.set_dark(false).await;
    assert_eq!(browser.execute(dark, vec![]).await, json!(false));
    assert_eq!(
        browser.execute(background, vec![]).await,
        json!("rgb(255, 255, 255)")
    );
    browser.close().await;
}
