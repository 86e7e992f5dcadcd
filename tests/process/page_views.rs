//! The live page's views (SPEC §4.13), against a real redis-server and `fleet serve`:
//! the summary first, the slot table filtered and paged on the server with links that keep the
//! filter, a view that cannot be read refused with what it takes, and a stream that sends a
//! page only the rows of its view that changed.

use crate::support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use support::remote::{metrics_addr, sample, serve_config_of, until};
use support::{Serve, fleet_ok, http_get, sse_events};

/// A change for one slot must reach a page in at most this many bytes, at any fleet size.
const DELTA_MAX: usize = 16 * 1024;

/// A stream of `path`, read until `seen` holds for its events so far (within 20 s); the events.
fn events_until(
    addr: &str,
    path: &str,
    seen: impl Fn(&[(String, String)]) -> bool,
) -> Vec<(String, String)> {
    let start = Instant::now();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match s.read(&mut buf) {
            Ok(0) => panic!("the stream ended: {}", String::from_utf8_lossy(&raw)),
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => panic!("reading the stream: {e}"),
        }
        let text = String::from_utf8_lossy(&raw);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            assert!(head.starts_with("HTTP/1.0 200"), "{head}");
            let events = sse_events(body).0;
            if seen(&events) {
                return events;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the stream never showed it: {text}"
        );
    }
}

fn rows(html: &str) -> Vec<String> {
    html.split("<tr data-slot=\"")
        .skip(1)
        .map(|r| r.split('"').next().unwrap().to_owned())
        .collect()
}

fn has_row(html: &str, slot: &str, phase: &str) -> bool {
    html.split(&format!("<tr data-slot=\"{slot}\">"))
        .nth(1)
        .is_some_and(|r| {
            r.split("</tr>")
                .next()
                .unwrap()
                .contains(&format!("phase-{phase}\""))
        })
}

// Long: one fleet, looked at through each kind of view in turn.
#[tokio::test]
async fn views_filter_and_page_on_the_server_and_a_stream_sends_only_its_rows_that_changed() {
    let server = support::tcp_server();
    let dir = tempfile::tempdir().unwrap();
    let a: Vec<String> = (0..80).map(|i| format!("a-{i:03}")).collect();
    let b: Vec<String> = (0..40).map(|i| format!("b-{i:03}")).collect();
    let (a, b): (Vec<&str>, Vec<&str>) = (
        a.iter().map(String::as_str).collect(),
        b.iter().map(String::as_str).collect(),
    );
    let config = serve_config_of(dir.path(), &server.url(), &[("pool-a", &a), ("pool-b", &b)]);
    let mut serve = Serve::start("serve", &server, &config, &support::QUICK_SERVE);
    let addr = metrics_addr(&serve.log(&["fleet serve started"]).await);
    serve.log(&["became the leader"]).await;
    until("every slot read", Duration::from_secs(10), async || {
        // Read after the controller's first pass: every slot off.
        http_get(&addr, "/")
            .1
            .contains("<span class=\"badge phase-off\">off</span> 120</a>")
    })
    .await;

    // The first screen: the summary, then one page of 50 slots with the links to the others.
    let (status, page) = http_get(&addr, "/");
    assert_eq!(status, 200);
    let summary = page.find("id=\"s-summary\"").unwrap();
    assert!(
        summary < page.find("id=\"s-slots\"").unwrap(),
        "the summary first"
    );
    assert!(
        page.contains("<strong>120</strong> slots in 2 groups"),
        "{page}"
    );
    assert!(
        page.contains("href=\"?phase=off#s-slots\""),
        "a count links to its slots"
    );
    assert_eq!(
        rows(&page),
        a[..50],
        "the first page, in the catalog's order"
    );
    assert!(page.contains("Slots 1–50 of 120:"), "{page}");
    assert!(page.contains("Page 1 of 3"));
    assert!(page.contains("<a href=\"?page=2#s-slots\" rel=\"next\">Next</a>"));

    // Filters and pages, each link keeping the filter.
    let (_, pool_a) = http_get(&addr, "/?group=pool-a&page=2");
    assert_eq!(rows(&pool_a), a[50..]);
    assert!(pool_a.contains("Slots 51–80 of 80 matching"), "{pool_a}");
    assert!(pool_a.contains("<a href=\"?group=pool-a#s-slots\">First</a>"));
    assert!(
        pool_a.contains("<option selected>pool-a</option>"),
        "the form keeps it"
    );
    let (_, prefix) = http_get(&addr, "/?prefix=b-01&phase=off&bench=DOWN&power=unknown");
    assert_eq!(
        rows(&prefix),
        Vec::<String>::new(),
        "no slot is of unknown power"
    );
    assert!(prefix.contains("No slot matches"));
    let (_, prefix) = http_get(&addr, "/?prefix=b-01&phase=off&bench=down&power=off");
    assert_eq!(rows(&prefix), b[10..20]);
    assert!(
        prefix.contains(
            "href=\"?phase=booting&amp;power=off&amp;bench=DOWN&amp;prefix=b-01#s-slots\""
        ),
        "a count's link keeps the other filters: {prefix}"
    );
    let (_, past) = http_get(&addr, "/?group=pool-b&page=9");
    assert_eq!(rows(&past), b, "a page past the end shows the last");

    // A view that cannot be read: 400, saying what it takes, for the page and its stream.
    for path in ["/?phase=asleep", "/events?phase=asleep"] {
        let (status, said) = http_get(&addr, path);
        assert_eq!(status, 400, "{path}");
        assert!(
            said.contains("phase &quot;asleep&quot; is not one of idle, off, pending"),
            "{said}"
        );
    }
    let (status, said) = http_get(&addr, "/?sort=name");
    assert_eq!(status, 400);
    assert!(said.contains("a view takes group, phase, power, bench, prefix and page"));

    // A stream of one view: its rows whole first; a claim on a slot of it sends that row alone.
    let view = "/events?prefix=a-01";
    let first = events_until(&addr, view, |e| !e.is_empty());
    assert_eq!(first[0].0, "frame");
    assert_eq!(rows(&first[0].1), a[10..20]);
    fleet_ok(&server, &["claim", "a-015"]);
    let events = events_until(&addr, view, |e| {
        e.iter().any(|(_, d)| has_row(d, "a-015", "ready"))
    });
    let mut sizes = Vec::new();
    let mut with_row = 0;
    for (name, data) in events.iter().skip(1).filter(|(n, _)| n != "tick") {
        assert_eq!(name, "delta");
        // A read between the pass's claim write and its status write changes the summary and
        // the flight list, not the row: a delta of no row. Never another row.
        let changed = rows(data);
        assert!(
            changed.iter().all(|r| r == "a-015"),
            "only the changed row: {data}"
        );
        with_row += usize::from(!changed.is_empty());
        sizes.push(data.len());
    }
    assert!(with_row > 0, "the claimed slot's row came as a delta");
    assert!(
        sizes.iter().all(|s| *s <= DELTA_MAX),
        "a delta over {DELTA_MAX} bytes: {sizes:?}"
    );
    eprintln!("the deltas of one claimed slot: {sizes:?} bytes");
    // A claim on a slot outside the view changes its summary (its group's row), never its rows.
    fleet_ok(&server, &["claim", "b-005"]);
    let events = events_until(&addr, view, |e| {
        e.iter()
            .any(|(n, d)| n == "delta" && d.contains("<tr data-group=\"pool-b\">"))
    });
    for (_, data) in events.iter().skip(1) {
        assert!(rows(data).is_empty(), "a row outside the view: {data}");
    }
    serve.stop().await;
}

// SPEC §4.13 item 2: with no page open the page's reader reads nothing, however many passes the
// controller makes; a page loaded then is served a read made for it, and a stream opened keeps
// the reads coming.
#[tokio::test]
async fn the_page_reads_the_store_only_while_a_page_is_open() {
    let server = support::tcp_server();
    let dir = tempfile::tempdir().unwrap();
    let slots: Vec<String> = (0..12).map(|i| format!("a-{i:03}")).collect();
    let slots: Vec<&str> = slots.iter().map(String::as_str).collect();
    let config = serve_config_of(dir.path(), &server.url(), &[("pool-a", &slots)]);
    let log = [("FLEET_LOG", "info,fleet::page=debug")];
    let url = server.url();
    let mut serve = Serve::start_with_env("serve", &url, &config, &support::QUICK_SERVE, &log);
    let addr = metrics_addr(&serve.log(&["fleet serve started"]).await);
    serve.log(&["became the leader"]).await;
    let read = "the live page read the store";
    let passes = sample(&addr, "fleet_pass_seconds_count");
    until("ten more passes", Duration::from_secs(10), async || {
        sample(&addr, "fleet_pass_seconds_count") >= passes + 10
    })
    .await;
    let before: Vec<String> = serve
        .drain()
        .iter()
        .filter(|l| l.contains(read))
        .cloned()
        .collect();
    assert!(before.is_empty(), "no page, no read: {before:?}");

    // The first page waits for the read it woke: every slot is there, none "not read yet".
    let (status, page) = http_get(&addr, "/");
    assert_eq!(status, 200);
    assert!(
        page.contains("<span class=\"badge phase-off\">off</span> 12</a>"),
        "{page}"
    );
    serve.log(&[read]).await;

    // A stream keeps the reads coming: its first frame, then more, each a read.
    let events = events_until(&addr, "/events", |events| {
        events.iter().filter(|(kind, _)| kind == "tick").count() >= 3
    });
    assert_eq!(events[0].0, "frame", "{events:?}");
    // A read logged for each tick (the log is read on once the stream is).
    for _ in 0..3 {
        serve.log(&[read]).await;
    }
}
