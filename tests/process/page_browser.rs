//! The live page in a real browser (issue 16, SPEC §4.13): Debian's Chromium, headless, driven
//! over WebDriver (`support::browser`), against a real redis-server and `fleet serve`.
//!
//! A claim made with the command line shows on the open page as booting, then ready, each within
//! 2 s of the change and without a reload; a cancel shows the slot going back to off; an action
//! without the token is refused from inside the page, and one with it (typed into the page's
//! token field, the button clicked) goes through. The test saves screenshots of the page, light
//! and dark, where `FLEET_SCREENSHOTS` names a directory (the README's are made so), else in the
//! target directory.
//!
//! The slot's startup script waits for a gate file before it beats, so the test holds the slot
//! in booting for as long as it looks, and opens the gate to make the machine come up: the boot
//! is modelled, not waited out.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fleet_testing::Fixture;
use fleet_testing::fixture::{BOOTS, Group, Op, POWERS_OFF};
use serde_json::json;
use support::browser::Browser;
use support::remote::metrics_addr;
use support::{Serve, fleet_ok};

const TOKEN: &str = "browser-test-token-0123456789";
/// How soon a change must show on the open page.
const SHOWN_WITHIN: Duration = Duration::from_secs(2);

/// Two slots; a startup waits for the slot's gate file, then beats; a shutdown beats TTL 0.
fn config(dir: &Path, url: &str) -> PathBuf {
    let gates = dir.display();
    let startup =
        format!("while [ ! -e {gates}/$FLEET_SLOT.gate ]; do sleep 0.05; done; exec {BOOTS}");
    Fixture::new()
        .group(
            Group::new("pool-a")
                .min(0)
                .max(2)
                .ungated()
                .env("BIN", env!("CARGO_BIN_EXE_fleet"))
                .env("REDIS", url)
                .startup(Op::sh(&startup))
                .shutdown(Op::sh(&format!("exec {POWERS_OFF}")))
                .timing("job_monitor_poll_interval", "100ms"),
        )
        .slots("pool-a", ["bench-01", "bench-02"])
        .write(dir)
}

/// The phase cell of a slot's row.
fn phase_cell(slot: &str) -> String {
    format!("#slots tr[data-slot=\"{slot}\"] td.phase")
}

/// Waits until the page shows `slot` in `phase`; how long that took from `since`.
async fn shows(browser: &Browser, slot: &str, phase: &str, since: Instant) -> Duration {
    browser
        .wait_for(
            &phase_cell(slot),
            |t| t.trim() == phase,
            Duration::from_secs(15),
        )
        .await
        .unwrap_or_else(|last| panic!("{slot} never showed {phase}: {last}"));
    since.elapsed()
}

fn screenshots() -> PathBuf {
    std::env::var_os("FLEET_SCREENSHOTS")
        .map_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")), PathBuf::from)
}

// Long: one scenario, step by step, each step's timing said as it is measured.
#[tokio::test]
async fn the_open_page_follows_a_claim_to_ready_and_back_and_takes_actions_only_with_the_token() {
    let server = support::tcp_server();
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &server.url());
    let token = dir.path().join("token");
    std::fs::write(&token, TOKEN).unwrap();
    let token_arg = token.display().to_string();
    let args = [
        "--metrics-addr",
        "127.0.0.1:0",
        "--interval",
        "500ms",
        "--blind-grace",
        "0s",
        "--ui-token-file",
        &token_arg,
    ];
    let mut serve = Serve::start("serve", &server, &config, &args);
    let addr = metrics_addr(&serve.log(&["fleet serve started"]).await);
    serve.log(&["became the leader"]).await;
    let browser = Browser::start().await;
    browser.goto(&format!("http://{addr}/")).await;
    shows(&browser, "bench-01", "off", Instant::now()).await;
    browser
        .wait_for("#live", |t| t.starts_with("Live"), Duration::from_secs(10))
        .await
        .expect("the page goes live");

    // A claim from the command line: booting, then ready once the machine beats.
    let claimed = Instant::now();
    fleet_ok(&server, &["claim", "bench-01"]);
    let took = shows(&browser, "bench-01", "booting", claimed).await;
    eprintln!("booting shown {took:?} after the claim");
    assert!(took < SHOWN_WITHIN, "booting took {took:?}");
    let gate = Instant::now();
    std::fs::write(dir.path().join("bench-01.gate"), "").unwrap();
    let took = shows(&browser, "bench-01", "ready", gate).await;
    eprintln!("ready shown {took:?} after the machine came up");
    assert!(took < SHOWN_WITHIN, "ready took {took:?}");
    let bench = browser
        .text_of("#slots tr[data-slot=\"bench-01\"] td.bench")
        .await;
    assert!(bench.starts_with("UP"), "{bench}");
    save(&browser, "page.png", false).await;
    save(&browser, "page-dark.png", true).await;

    // Cancel it from the command line: the slot goes back to off.
    let claims: serde_json::Value =
        serde_json::from_str(&fleet_ok(&server, &["claims", "-o", "json"])).unwrap();
    let name = claims[0]["name"].as_str().unwrap().to_owned();
    let cancelled = Instant::now();
    fleet_ok(&server, &["cancel", &name]);
    let took = shows(&browser, "bench-01", "off", cancelled).await;
    eprintln!("off shown {took:?} after the cancel");
    assert!(
        took < SHOWN_WITHIN + Duration::from_secs(1),
        "off took {took:?}"
    );

    actions(&browser).await;
    // The claimed machine comes up, so its startup ends before the process stops (an operation
    // outlives a stop, and holds the log open while it runs).
    std::fs::write(dir.path().join("bench-02.gate"), "").unwrap();
    shows(&browser, "bench-02", "ready", Instant::now()).await;
    // A page still open does not keep `fleet serve` from stopping.
    serve.stop().await;
    browser.close().await;
}

/// From inside the page: an action without the token is refused; typed into the page, the token
/// lets the Claim button through, and the page shows the slot booting.
async fn actions(browser: &Browser) {
    let refused = browser
        .execute(
            "return fetch('actions/claim', {method: 'POST', headers: {'Content-Type': \
             'application/json'}, body: JSON.stringify({target: 'bench-02'})}).then(r => r.status)",
            vec![],
        )
        .await;
    assert_eq!(refused, json!(401));
    browser
        .execute(
            "const t = document.getElementById('token'); t.value = arguments[0]; \
             t.dispatchEvent(new Event('change')); \
             document.querySelector('button[data-action=\"claim\"][data-target=\"bench-02\"]').click();",
            vec![json!(TOKEN)],
        )
        .await;
    let said = browser
        .wait_for(
            "#action-result",
            |t| t.contains("created") || t.starts_with("Refused"),
            Duration::from_secs(10),
        )
        .await
        .expect("the action's answer");
    assert!(said.contains("bench-02: claim bench-02-"), "{said}");
    shows(browser, "bench-02", "booting", Instant::now()).await;
}

async fn save(browser: &Browser, name: &str, dark: bool) {
    browser.set_dark(dark).await;
    let dir = screenshots();
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let size = browser.screenshot(&path).await;
    assert!(size > 10_000, "{} is {size} bytes", path.display());
    eprintln!("screenshot: {}", path.display());
    browser.set_dark(false).await;
}
