//! The page's palette and its stream: without a server, and the stream's place and its
//! disconnection on a real listener (`telemetry::listener`) over loopback sockets.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::frame::{Counts, Frame, GroupView, Line};
use super::view::Query;
use super::{CSS, Ended, Published, QUEUE, event, forward};
use crate::domain::name::BenchName;
use crate::domain::state::State;
use crate::telemetry::Health;
use crate::telemetry::listener::{Gate, Hosts, Limits, Server};
use crate::views::GroupRow;

/// The colour variables of one block of the stylesheet (`--name: #rrggbb;`).
fn palette(block: &str) -> HashMap<String, (f64, f64, f64)> {
    let mut colours = HashMap::new();
    for decl in block.split(';') {
        // A block's first declaration follows its selector's brace.
        let decl = decl.rsplit('{').next().unwrap_or(decl);
        let Some((name, value)) = decl.trim().split_once(':') else {
            continue;
        };
        let (name, value) = (name.trim(), value.trim());
        let Some(hex) = value.strip_prefix('#') else {
            continue;
        };
        if !name.starts_with("--") || hex.len() != 6 {
            continue;
        }
        let channel = |i: usize| f64::from(u8::from_str_radix(&hex[i..i + 2], 16).unwrap());
        colours.insert(name.to_owned(), (channel(0), channel(2), channel(4)));
    }
    colours
}

/// WCAG 2's relative luminance and contrast ratio.
fn contrast(a: (f64, f64, f64), b: (f64, f64, f64)) -> f64 {
    let lum = |(r, g, b): (f64, f64, f64)| {
        let lin = |c: f64| {
            let c = c / 255.0;
            if c <= 0.040_45 {
                c / 12.92
            } else {
                ((c + 0.055) / 1.055).powf(2.4)
            }
        };
        0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b)
    };
    let (x, y) = (lum(a), lum(b));
    (x.max(y) + 0.05) / (x.min(y) + 0.05)
}

#[test]
fn every_text_colour_of_both_schemes_meets_wcag_aa_on_its_background() {
    let light_start = CSS.find(":root {").unwrap();
    let dark_start = CSS.find("@media (prefers-color-scheme: dark)").unwrap();
    let light = palette(&CSS[light_start..dark_start]);
    let dark = palette(&CSS[dark_start..]);
    let pairs = [
        ("--fg", "--bg"),
        ("--muted", "--bg"),
        ("--fg", "--panel"),
        ("--muted", "--panel"),
        ("--link", "--bg"),
        ("--ok-fg", "--ok-bg"),
        ("--warn-fg", "--warn-bg"),
        ("--bad-fg", "--bad-bg"),
        ("--info-fg", "--info-bg"),
        ("--idle-fg", "--idle-bg"),
    ];
    for (scheme, colours) in [("light", &light), ("dark", &dark)] {
        assert!(colours.len() >= 14, "{scheme}: {colours:?}");
        for (fg, bg) in pairs {
            let ratio = contrast(colours[fg], colours[bg]);
            assert!(
                ratio >= 4.5,
                "{scheme}: {fg} on {bg} is {ratio:.2}:1, under 4.5:1"
            );
        }
    }
}

#[test]
fn the_contrast_formula_reads_the_known_pairs() {
    let black = (0.0, 0.0, 0.0);
    let white = (255.0, 255.0, 255.0);
    assert!((contrast(black, white) - 21.0).abs() < 1e-9);
    assert!((contrast(white, white) - 1.0).abs() < 1e-9);
    // #767676 on white is the classic 4.54:1.
    assert!((contrast((118.0, 118.0, 118.0), white) - 4.54).abs() < 0.01);
}

/// A read of one group of `slots` slots, the first holding `hold`.
fn frame(slots: usize, hold: &str) -> Arc<Frame> {
    let slots: Vec<Line> = (0..slots)
        .map(|i| Line {
            name: BenchName::parse(&format!("bench-{i:02}")).unwrap(),
            group: 0,
            phase: None,
            power: "off",
            bmc: None,
            bench: State::Down,
            hold: (i == 0).then(|| hold.into()),
            claim: None,
            failed: false,
        })
        .collect();
    Arc::new(Frame {
        now: chrono::DateTime::UNIX_EPOCH,
        controller: None,
        groups: vec![GroupView {
            row: GroupRow {
                name: "pool-a".to_owned(),
                min_size: 0,
                max_size: 2,
                target: 0,
                status: crate::domain::history::group_status(&[], None),
            },
            in_flight: 0,
            failed: 0,
        }],
        energy: HashMap::new(),
        counts: Counts::default(),
        slots,
        in_flight: Vec::new(),
        in_flight_total: 0,
        failures: Vec::new(),
        problems: Vec::new(),
    })
}

/// A read whose first slot holds `hold`, at `at`.
fn published(hold: &str, at: &str) -> Arc<Published> {
    Arc::new(Published::new(
        Some(frame(2, hold)),
        None,
        at.to_owned(),
        false,
    ))
}

fn text(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).unwrap()
}

#[tokio::test]
async fn a_page_gets_its_view_whole_then_what_changed_then_the_time_alone() {
    let (tx, mut frames) = watch::channel(published("first", "at 0"));
    let (queue, mut page) = mpsc::channel(QUEUE);
    let forwarding =
        tokio::spawn(async move { forward(&mut frames, &queue, &Query::default()).await });
    let first = page.recv().await.unwrap();
    let first = text(&first);
    assert!(
        first.starts_with("event: frame\ndata: <section id=\"s-controller\">"),
        "{first}"
    );
    assert!(first.contains("<tr data-slot=\"bench-00\">") && first.contains("first"));
    // The first slot's hold changes: its row alone, the table's order, then the read's time.
    tx.send_replace(published("second", "at 1"));
    let delta = page.recv().await.unwrap();
    let delta = text(&delta);
    assert!(delta.starts_with("event: delta\ndata: <template data-rows=\"s-slots\" data-by=\"slot\" data-keys=\"bench-00 bench-01\"><tr data-slot=\"bench-00\">"), "{delta}");
    assert!(
        delta.contains("second") && !delta.contains("<tr data-slot=\"bench-01\">"),
        "{delta}"
    );
    assert!(
        delta.ends_with("</template>\n\nevent: tick\ndata: at 1\n\n"),
        "{delta}"
    );
    // The same fleet read again: the page gets the read's time only.
    tx.send_replace(published("second", "at 2"));
    assert_eq!(
        text(&page.recv().await.unwrap()),
        "event: tick\ndata: at 2\n\n"
    );
    // The store cannot be read: the view whole, under its banner.
    tx.send_replace(Arc::new(Published::new(
        Some(frame(2, "second")),
        Some("no answer".to_owned()),
        "at 2".to_owned(),
        false,
    )));
    let stale = page.recv().await.unwrap();
    assert!(text(&stale).starts_with("event: stale\ndata: <section id=\"s-banner\">"));
    drop(tx);
    assert_eq!(forwarding.await.unwrap(), Ended::Feed);
    assert!(page.recv().await.is_none(), "the stream ends with the feed");
}

#[tokio::test]
async fn a_view_is_rendered_once_for_every_page_that_looks_at_it() {
    let p = published("x", "t");
    let all = p.view(&Query::default());
    assert!(Arc::ptr_eq(&all, &p.view(&Query::default())));
    let held = Query::parse("bench=HELD").unwrap();
    let other = p.view(&held);
    assert!(!Arc::ptr_eq(&all, &other));
    assert!(other.html().contains("No slot matches"), "{}", other.html());
    // Past the views kept, a view is rendered for its page, the same as it would be kept.
    for i in 0..super::VIEWS {
        p.view(&Query::parse(&format!("prefix=b{i}")).unwrap());
    }
    let late = Query::parse("prefix=bench-01").unwrap();
    assert_eq!(p.view(&late), p.view(&late));
    assert!(!Arc::ptr_eq(&p.view(&late), &p.view(&late)));
}

#[tokio::test]
async fn a_page_that_takes_nothing_is_dropped_after_its_queue_fills() {
    let (tx, mut frames) = watch::channel(published("0", "t"));
    let (queue, mut page) = mpsc::channel(QUEUE);
    let forwarding =
        tokio::spawn(async move { forward(&mut frames, &queue, &Query::default()).await });
    // The page takes nothing: each read is sent once the forwarder has taken the one before,
    // so every one reaches the queue until it is full.
    let mut sent = 1;
    while !forwarding.is_finished() {
        tx.send_replace(published(&sent.to_string(), "t"));
        sent += 1;
        tokio::task::yield_now().await;
        assert!(sent < 1_000, "the forwarder never gave up");
    }
    assert_eq!(forwarding.await.unwrap(), Ended::Behind);
    let mut held = 0;
    while page.recv().await.is_some() {
        held += 1;
    }
    assert_eq!(
        held, QUEUE,
        "no more than the queue was ever held for the page"
    );
}

#[test]
fn a_frame_is_one_event_whatever_its_lines() {
    assert_eq!(
        &event("frame", "<p>a</p>\n<p>b</p>")[..],
        b"event: frame\ndata: <p>a</p>\ndata: <p>b</p>\n\n"
    );
    assert_eq!(&published("x", "t").tick()[..], b"event: tick\ndata: t\n\n");
}

#[test]
fn every_line_break_in_a_frames_data_is_a_data_line_of_fleets_own() {
    let output = "a\rb\nc\r\nd\rretry: 86400000\re\revent: frame\rf\r\r\n\n";
    assert_eq!(
        std::str::from_utf8(&event("frame", output)).unwrap(),
        "event: frame\ndata: a\ndata: b\ndata: c\ndata: d\ndata: retry: 86400000\ndata: e\n\
         data: event: frame\ndata: f\ndata: \ndata: \ndata: \n\n"
    );
    for (data, lines) in [
        ("", vec![""]),
        ("x", vec!["x"]),
        ("\r", vec!["", ""]),
        ("\n", vec!["", ""]),
        ("\r\n", vec!["", ""]),
        ("\n\r", vec!["", "", ""]),
        ("x\r\r\ny", vec!["x", "", "y"]),
    ] {
        assert_eq!(
            super::sse_lines(data).collect::<Vec<_>>(),
            lines,
            "{data:?}"
        );
    }
}

/// A listener on loopback serving the page's routes alone, with `limits`; the gate's stream
/// gauge, and its address.
async fn listening(
    frames: watch::Receiver<Arc<Published>>,
    limits: Limits,
    stop: &CancellationToken,
) -> (Gauge, std::net::SocketAddr) {
    let streams = Gauge::default();
    let gate = Gate::new(limits, Gauge::default(), streams.clone());
    // The frames these tests send stand for a feed's reads: a page was loaded, so the routes
    // find the feed reading and serve what it sent.
    let demand = super::Demand::default();
    demand.load();
    let app = super::router(
        (frames, demand),
        None,
        Arc::new(Health::default()),
        gate.clone(),
        stop.clone(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = Server {
        listener,
        app,
        gate,
        hosts: Hosts::default(),
    };
    tokio::spawn(server.run(stop.clone()));
    (streams, addr)
}

/// A stream asked for on a socket that takes at most 4 kB at a time (so it stalls soon);
/// returns it once its head and first event came, or the status it was refused with.
async fn open_stream(addr: std::net::SocketAddr) -> Result<tokio::net::TcpStream, String> {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut s = socket.connect(addr).await.unwrap();
    s.write_all(b"GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
            .await
            .expect("the stream's head in time")
            .unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&seen);
        if !text.starts_with("HTTP/1.1 200") && text.contains("\r\n\r\n") {
            return Err(text.lines().next().unwrap_or("").to_owned());
        }
        if text.contains("event: frame") {
            return Ok(s);
        }
    }
}

#[tokio::test]
async fn a_stalled_stream_keeps_its_place_until_it_falls_behind_and_is_disconnected() {
    let stop = CancellationToken::new();
    let (tx, frames) = watch::channel(published("0", "t"));
    // 16 descriptors: 4 connections, 2 streams.
    let limits = Limits::of(16);
    assert_eq!(limits.streams, 2);
    let (streams, addr) = listening(frames, limits, &stop).await;
    let mut stalled = open_stream(addr).await.expect("the first stream");
    let mut reading = open_stream(addr).await.expect("the second stream");
    assert_eq!(streams.get(), 2);
    assert_eq!(
        open_stream(addr).await.unwrap_err(),
        "HTTP/1.1 503 Service Unavailable",
        "a third is refused"
    );
    // A tick each: the stalled page takes nothing, and keeps its place.
    for n in 1..=3 {
        tx.send_replace(published("0", &format!("at {n}")));
    }
    tokio::task::yield_now().await;
    assert_eq!(streams.get(), 2, "a stalled stream holds its place");
    // Large frames, which the stalled page cannot take: its socket fills, then its queue, and
    // it is disconnected; the page that reads them keeps up and stays. The next frame is
    // published once the reading page has read the one before, so a busy host's scheduler can
    // never make the reading page look slow (a CI run beside a build disconnected it).
    let (read_tx, mut read_rx) = watch::channel(0usize);
    let reader = tokio::spawn(async move {
        let mut buf = vec![0u8; 1 << 16];
        let mut got = 0usize;
        while let Ok(Ok(n)) =
            tokio::time::timeout(Duration::from_secs(5), reading.read(&mut buf)).await
        {
            if n == 0 {
                break;
            }
            got += n;
            read_tx.send_replace(got);
        }
        got
    });
    let big = "x".repeat(256 * 1024);
    let mut seq = 1;
    tokio::time::timeout(Duration::from_secs(20), async {
        while streams.get() == 2 {
            let before = *read_rx.borrow_and_update();
            tx.send_replace(published(&format!("{seq}{big}"), "t"));
            seq += 1;
            // The reading page takes the frame (its row alone is 256 kB), then the next comes.
            let _ = tokio::time::timeout(
                Duration::from_secs(5),
                read_rx.wait_for(|got| *got >= before + big.len()),
            )
            .await;
        }
    })
    .await
    .expect("the stalled page was never disconnected");
    assert_eq!(streams.get(), 1, "only the stalled page lost its place");
    // Its connection was closed with its place: what was sent before can still be read, then
    // the end comes at once, not after the listener's head timeout (10 s) as it would if the
    // place had been given back while the connection stayed open.
    let mut buf = vec![0u8; 1 << 16];
    let ended = tokio::time::timeout(Duration::from_secs(3), async {
        loop {
            match stalled.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(
        ended.is_ok(),
        "the stalled page's place was free while its connection stayed open"
    );
    // Its place is free again.
    let _third = open_stream(addr)
        .await
        .expect("a new stream in the freed place");
    assert_eq!(streams.get(), 2);
    stop.cancel();
    assert!(
        reader.await.unwrap() > 256 * 1024,
        "the reading page got the large frames"
    );
}

// Who wants the feed's reads: nobody at first; a page load, for `LINGER`; an open stream, while
// it is open. A load or a stream that finds nobody says the feed was idle, the next does not.
#[tokio::test(start_paused = true)]
async fn the_feed_is_wanted_by_a_load_for_its_linger_and_by_a_stream_while_open() {
    let demand = super::Demand::default();
    assert!(!demand.wanted(), "nobody");
    assert!(demand.load(), "the first load finds the feed idle");
    assert!(!demand.load(), "the next finds it reading");
    assert!(demand.wanted());
    tokio::time::advance(super::demand::LINGER - Duration::from_millis(1)).await;
    assert!(demand.wanted(), "within the linger");
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(!demand.wanted(), "past it");

    let (stream, idle) = demand.watch();
    assert!(idle, "a stream that finds nobody");
    let (other, idle) = demand.watch();
    assert!(!idle);
    tokio::time::advance(super::demand::LINGER * 10).await;
    drop(stream);
    assert!(demand.wanted(), "one stream still open");
    drop(other);
    assert!(!demand.wanted(), "none");

    // The feed parked on nobody wakes at a load, and goes on at once.
    let stop = CancellationToken::new();
    let parked = tokio::spawn({
        let demand = demand.clone();
        let stop = stop.clone();
        async move { demand.wanted_or(&stop).await }
    });
    tokio::time::advance(Duration::from_secs(600)).await;
    assert!(
        !parked.is_finished(),
        "nobody for ten minutes: still parked"
    );
    demand.load();
    tokio::time::timeout(Duration::from_millis(1), parked)
        .await
        .expect("woken by the load")
        .unwrap();
}
