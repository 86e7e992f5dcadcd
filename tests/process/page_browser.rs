//! The live page in a real browser (SPEC §4.13): Debian's Chromium, headless, driven
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

/// A fleet of 10 000 slots; the one startup that matters waits for its gate file.
fn large_config(dir: &Path, url: &str) -> PathBuf {
    let gates = dir.display();
    let startup =
        format!("while [ ! -e {gates}/$FLEET_SLOT.gate ]; do sleep 0.05; done; exec {BOOTS}");
    Fixture::new()
        .group(
            Group::new("pool-a")
                .min(0)
                .max(LARGE as u32)
                .ungated()
                .env("BIN", env!("CARGO_BIN_EXE_fleet"))
                .env("REDIS", url)
                .startup(Op::sh(&startup))
                .shutdown(Op::sh(&format!("exec {POWERS_OFF}")))
                .timing("job_monitor_poll_interval", "100ms"),
        )
        .slots("pool-a", (0..LARGE).map(|i| format!("bench-{i:05}")))
        .write(dir)
}

/// The fleet size of the large page test.
const LARGE: usize = 10_000;
/// How soon a filter must show on the page at `LARGE` slots: it is one page load, which a
/// loaded host delays little (0.10-0.25 s measured).
const LARGE_WITHIN: Duration = Duration::from_secs(1);
/// How soon a slot turning ready must show at `LARGE` slots in this unoptimised build on a busy
/// host: the page's read of 10 000 slots takes 0.3-0.6 s here (about a tenth of that in a
/// release build) and was 2.2 s on a host running a release build beside the tests. The 1 s
/// target is timed on the release build by `cargo bench --bench page -- --browser 10000`.
const LARGE_CHANGE_WITHIN: Duration = Duration::from_secs(5);

// Long: one scenario at fleet scale, then the same page on a phone.
#[tokio::test]
async fn at_ten_thousand_slots_a_filter_and_a_slot_becoming_ready_show_without_a_reload() {
    let server = support::tcp_server();
    let dir = tempfile::tempdir().unwrap();
    let config = large_config(dir.path(), &server.url());
    let args = [
        "--metrics-addr",
        "127.0.0.1:0",
        "--interval",
        "250ms",
        "--blind-grace",
        "0s",
    ];
    let mut serve = Serve::start("serve", &server, &config, &args);
    let addr = metrics_addr(&serve.log(&["fleet serve started"]).await);
    serve.log(&["became the leader"]).await;
    let browser = Browser::start().await;
    browser.goto(&format!("http://{addr}/")).await;
    browser
        .wait_for(
            "#s-summary .total",
            |t| t.starts_with("10000 slots"),
            Duration::from_secs(30),
        )
        .await
        .expect("the summary counts every slot");
    // Once the controller's first pass has written every slot's status, every one is off.
    browser
        .wait_for(
            "#s-summary .counts a[href=\"?phase=off#s-slots\"]",
            |t| t.ends_with(" 10000"),
            Duration::from_secs(30),
        )
        .await
        .expect("every slot off");
    browser
        .wait_for("#live", |t| t.starts_with("Live"), Duration::from_secs(10))
        .await
        .expect("the page goes live");
    let rows = browser
        .execute(
            "return document.querySelectorAll('#slots tbody tr').length",
            vec![],
        )
        .await;
    assert_eq!(rows, json!(50), "one page of the table, not 10 000 rows");

    // A filter, typed into the form and sent: the page shows the slots that match.
    let asked = Instant::now();
    browser
        .execute(
            "document.getElementById('f-prefix').value = 'bench-0999'; \
             document.getElementById('f-group').value = 'pool-a'; \
             document.getElementById('filter').requestSubmit();",
            vec![],
        )
        .await;
    browser
        .wait_for(
            "#slots caption",
            |t| t.starts_with("Slots 1–10 of 10 matching"),
            Duration::from_secs(10),
        )
        .await
        .expect("the filtered table");
    let took = asked.elapsed();
    eprintln!("the filter showed {took:?} after it was sent, at {LARGE} slots");
    assert!(took < LARGE_WITHIN, "the filter took {took:?}");
    browser
        .wait_for("#live", |t| t.starts_with("Live"), Duration::from_secs(10))
        .await
        .expect("the filtered page goes live");

    // A claimed slot of the view: booting, then ready once its machine beats.
    fleet_ok(&server, &["claim", "bench-09995"]);
    shows(&browser, "bench-09995", "booting", Instant::now()).await;
    let gate = Instant::now();
    std::fs::write(dir.path().join("bench-09995.gate"), "").unwrap();
    let took = shows(&browser, "bench-09995", "ready", gate).await;
    let shown = chrono::Utc::now();
    // The page's share: from the pass that found the slot ready (its transition, on the server's
    // clock, which is this machine's) to the page showing it. The rest is the controller's:
    // seeing the beat and a pass over 10 000 slots, in this unoptimised test build.
    let slot: serde_json::Value = serde_json::from_str(&fleet_ok(
        &server,
        &["describe", "bench-09995", "-o", "json"],
    ))
    .unwrap();
    let became = slot["slot"]["last_transition_time"].as_str().unwrap();
    let became = chrono::DateTime::parse_from_rfc3339(became).unwrap();
    let page = (shown - became.with_timezone(&chrono::Utc))
        .to_std()
        .unwrap();
    eprintln!(
        "ready shown {page:?} after the pass that found it ready, {took:?} after the machine came \
         up, at {LARGE} slots"
    );
    assert!(
        page < LARGE_CHANGE_WITHIN,
        "ready took {page:?} on the page"
    );
    assert!(
        took < LARGE_CHANGE_WITHIN,
        "ready took {took:?} from the machine"
    );
    phone(&browser, &addr).await;
    serve.stop().await;
    browser.close().await;
}

/// The page on a phone's screen: nothing wider than the screen but the tables, which scroll in
/// their own box; the summary on the first screen.
async fn phone(browser: &Browser, addr: &str) {
    browser.set_phone(true).await;
    browser.goto(&format!("http://{addr}/")).await;
    browser
        .wait_for("#live", |t| t.starts_with("Live"), Duration::from_secs(10))
        .await
        .expect("the page goes live on a phone");
    let fits = browser
        .execute(
            "return [window.innerWidth, document.documentElement.scrollWidth, \
             document.querySelector('#s-summary').getBoundingClientRect().top, \
             window.innerHeight, \
             document.getElementById('f-prefix').getBoundingClientRect().right];",
            vec![],
        )
        .await;
    let [width, scroll, summary, height, field] =
        [0, 1, 2, 3, 4].map(|i| fits[i].as_f64().unwrap());
    assert_eq!(width, 390.0, "the phone's width: {fits}");
    assert!(
        scroll <= width,
        "the page scrolls sideways on a phone: {fits}"
    );
    assert!(
        summary < height,
        "the summary is on the first screen: {fits}"
    );
    assert!(field <= width, "the filter's field is cut off: {fits}");
    save(browser, "page-phone.png", false).await;
    browser.set_phone(false).await;
}
