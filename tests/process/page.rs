//! The live page over HTTP (SPEC §4.13), against a real redis-server and real `fleet serve`
//! processes: the first render and its accessibility basics, the assets' caching, the stream
//! following a claim, the actions' refusals (no token, no CSRF token, another site, a follower)
//! and an action that goes through. The browser test (`tests/process/page_browser.rs`) drives the same
//! page in Chromium. Every wait is bounded; nothing sleeps to synchronise.

use crate::support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fleet_testing::RedisServer;
use support::remote::metrics_addr;
use support::{Serve, fleet_ok, http_get};

const TOKEN: &str = "page-test-token-0123456789";

/// A configuration of two slots whose scripts beat through `server`, and the token file.
fn setup(dir: &Path, server: &RedisServer) -> (PathBuf, PathBuf) {
    let config = support::remote::serve_config(dir, &server.url());
    let token = dir.join("token");
    std::fs::write(&token, format!("{TOKEN}\n")).unwrap();
    (config, token)
}

async fn serve(server: &RedisServer, config: &Path, extra: &[&str]) -> (Serve, String) {
    let mut args = vec![
        "--metrics-addr",
        "127.0.0.1:0",
        "--interval",
        "100ms",
        "--blind-grace",
        "0s",
    ];
    args.extend_from_slice(extra);
    let mut serve = Serve::start("serve", server, config, &args);
    let started = serve.log(&["fleet serve started"]).await;
    (serve, metrics_addr(&started))
}

/// A POST of an action with the given headers; the status and the body.
fn post(addr: &str, action: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut request = format!(
        "POST /actions/{action} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    s.write_all(request.as_bytes()).unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let status = text.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (status, body.to_owned())
}

/// The page's CSRF token, from its first render.
fn csrf_of(page: &str) -> String {
    let at = page
        .find("name=\"fleet-csrf\" content=\"")
        .expect("a CSRF token")
        + 27;
    page[at..].split('"').next().unwrap().to_owned()
}

/// Reads the page's stream (HTTP/1.0: a plain body, no chunks) until `seen` holds for the text
/// so far, within `bound`; returns how long it took.
fn stream_until(addr: &str, bound: Duration, seen: impl Fn(&str) -> bool) -> Duration {
    let start = Instant::now();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    s.write_all(b"GET /events HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    let mut buf = [0u8; 65536];
    loop {
        assert!(
            start.elapsed() < bound,
            "the stream never showed it: {text}"
        );
        match s.read(&mut buf) {
            Ok(0) => panic!("the stream ended: {text}"),
            Ok(n) => text.push_str(&String::from_utf8_lossy(&buf[..n])),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(e) => panic!("reading the stream: {e}"),
        }
        // Only the newest change counts (a frame or a delta is one event; ticks say no change).
        let newest = text
            .rsplit("event: ")
            .find(|e| !e.starts_with("tick"))
            .unwrap_or("");
        if seen(newest) {
            return start.elapsed();
        }
    }
}

/// A slot's row shows `phase` in its phase cell.
fn row_shows(frame: &str, slot: &str, phase: &str) -> bool {
    let row = format!("<tr data-slot=\"{slot}\">");
    frame.split(&row).nth(1).is_some_and(|rest| {
        let cells = rest.split("</tr>").next().unwrap_or("");
        cells.contains(&format!("class=\"badge phase-{phase}\""))
    })
}

/// The accessibility basics of a render: the language, a caption and column headers on every
/// table, a name on every button, a label for every input, a word in every badge.
fn check_accessibility(page: &str) {
    assert!(page.contains("<html lang=\"en\">"), "a language");
    let tables = page.matches("<table").count();
    assert!(tables >= 2, "{page}");
    assert_eq!(
        page.matches("<caption>").count(),
        tables,
        "a caption per table"
    );
    for table in page.split("<table").skip(1) {
        let head = table.split("</thead>").next().unwrap();
        assert!(
            head.contains("<th scope=\"col\">"),
            "column headers: {head}"
        );
    }
    for button in page.split("<button").skip(1) {
        let tag = button.split('>').next().unwrap();
        let label = tag
            .split("aria-label=\"")
            .nth(1)
            .map(|r| r.split('"').next().unwrap());
        assert!(
            label.is_some_and(|l| !l.is_empty()),
            "a named button: {tag}"
        );
        let text = button.split('>').nth(1).unwrap().split('<').next().unwrap();
        assert!(!text.trim().is_empty(), "a visible label: {button}");
    }
    for input in page.split("<input").skip(1) {
        let id = input
            .split("id=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        assert!(
            page.contains(&format!("<label for=\"{id}\">")),
            "a label for {id}"
        );
    }
    for badge in page.split("class=\"badge ").skip(1) {
        let text = badge.split('>').nth(1).unwrap().split('<').next().unwrap();
        assert!(!text.trim().is_empty(), "a word beside the colour: {badge}");
    }
}

#[tokio::test]
async fn a_read_only_page_renders_on_the_server_and_streams_a_claim_to_ready() {
    let server = support::tcp_server();
    let dir = tempfile::tempdir().unwrap();
    let (config, _) = setup(dir.path(), &server);
    let (mut serve, addr) = serve(&server, &config, &[]).await;
    serve.log(&["became the leader"]).await;
    support::remote::until(
        "the first read on the page",
        Duration::from_secs(10),
        async || http_get(&addr, "/").1.contains("data-slot=\"bench-02\""),
    )
    .await;
    let (status, page) = http_get(&addr, "/");
    assert_eq!(status, 200);
    check_accessibility(&page);
    // The filter's own button shows slots; no button acts on the fleet.
    assert!(
        !page.contains("data-action"),
        "read-only: no action: {page}"
    );
    assert!(
        page.contains("--ui-token-file"),
        "says how to turn actions on"
    );
    // The assets are embedded, named by their hash, and cached for good.
    let css = page
        .split("href=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap();
    assert!(
        css.starts_with("/assets/page-") && css.ends_with(".css"),
        "{css}"
    );
    let raw = {
        let mut s = TcpStream::connect(&addr).unwrap();
        write!(
            s,
            "GET {css} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut t = String::new();
        s.read_to_string(&mut t).unwrap();
        t
    };
    assert!(
        raw.contains("immutable") && raw.contains("text/css"),
        "{raw}"
    );
    // An action without a token is refused even where actions are off: there is no route.
    assert_eq!(
        post(&addr, "claim", &[], "{\"target\":\"bench-01\"}").0,
        404
    );
    // The stream follows a claim made with the command line to ready.
    fleet_ok(&server, &["claim", "bench-01"]);
    let took = stream_until(&addr, Duration::from_secs(10), |f| {
        row_shows(f, "bench-01", "ready")
    });
    eprintln!("the stream showed bench-01 ready {took:?} after the claim");
    serve.stop().await;
}

#[tokio::test]
async fn actions_need_the_token_the_csrf_token_this_site_and_the_leader() {
    let server = support::tcp_server();
    let dir = tempfile::tempdir().unwrap();
    let (config, token) = setup(dir.path(), &server);
    let token_arg = token.display().to_string();
    let (mut leader, addr) = serve(&server, &config, &["--ui-token-file", &token_arg]).await;
    leader.log(&["became the leader"]).await;
    support::remote::until(
        "the first read on the page",
        Duration::from_secs(10),
        async || http_get(&addr, "/").1.contains("data-slot=\"bench-02\""),
    )
    .await;
    let (_, page) = http_get(&addr, "/");
    check_accessibility(&page);
    let csrf = csrf_of(&page);
    let bearer = format!("Bearer {TOKEN}");
    let body = "{\"target\":\"bench-02\"}";
    let refused = [
        (vec![], 401),
        (
            vec![("Authorization", "Bearer wrong-token-0123456789")],
            401,
        ),
        (vec![("Authorization", bearer.as_str())], 403),
        (
            vec![("Authorization", bearer.as_str()), ("X-Fleet-CSRF", "0000")],
            403,
        ),
        (
            vec![
                ("Authorization", bearer.as_str()),
                ("X-Fleet-CSRF", csrf.as_str()),
                ("Origin", "http://evil.example"),
            ],
            403,
        ),
        (
            vec![
                ("Authorization", bearer.as_str()),
                ("X-Fleet-CSRF", csrf.as_str()),
                ("Sec-Fetch-Site", "cross-site"),
            ],
            403,
        ),
    ];
    for (headers, status) in refused {
        let (got, said) = post(&addr, "claim", &headers, body);
        assert_eq!(got, status, "{headers:?}: {said}");
    }
    assert!(
        fleet_ok(&server, &["claims"]).trim().lines().count() <= 1,
        "nothing was claimed"
    );
    let good = [
        ("Authorization", bearer.as_str()),
        ("X-Fleet-CSRF", csrf.as_str()),
    ];
    let (status, said) = post(&addr, "claim", &good, body);
    assert_eq!(status, 200, "{said}");
    assert!(
        said.contains("bench-02: claim bench-02-"),
        "the verb's words: {said}"
    );
    let (status, said) = post(&addr, "hold", &good, "{\"target\":\"bench-0!\"}");
    assert_eq!(status, 400, "a bad name: {said}");
    let (status, said) = post(&addr, "reboot", &good, body);
    assert_eq!(status, 400, "no such action: {said}");
    // A second process follows: it serves the page, and refuses every action.
    let (mut follower, follower_addr) =
        serve(&server, &config, &["--ui-token-file", &token_arg]).await;
    support::remote::until("the follower's page", Duration::from_secs(10), async || {
        http_get(&follower_addr, "/")
            .1
            .contains("data-slot=\"bench-02\"")
    })
    .await;
    let (_, page) = http_get(&follower_addr, "/");
    let follower_csrf = csrf_of(&page);
    let good = [
        ("Authorization", bearer.as_str()),
        ("X-Fleet-CSRF", follower_csrf.as_str()),
    ];
    let (status, said) = post(&follower_addr, "release", &good, body);
    assert_eq!(status, 503, "{said}");
    assert!(said.contains("does not lead"), "{said}");
    follower.stop().await;
    leader.stop().await;
}
