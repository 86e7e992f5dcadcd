//! The page's palette and its stream, without a server.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::{mpsc, watch};

use super::{CSS, Published, QUEUE, forward};

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

fn published(n: usize) -> Arc<Published> {
    Arc::new(Published::new(
        format!("frame {n}"),
        true,
        n as u64,
        format!("at {n}"),
    ))
}

#[tokio::test]
async fn a_page_gets_the_newest_frame_then_each_new_one() {
    let (tx, mut frames) = watch::channel(published(0));
    let (queue, mut page) = mpsc::channel(QUEUE);
    let forwarding = tokio::spawn(async move { forward(&mut frames, &queue).await });
    assert_eq!(
        &page.recv().await.unwrap()[..],
        b"event: frame\ndata: frame 0\n\n"
    );
    tx.send_replace(published(1));
    assert_eq!(
        &page.recv().await.unwrap()[..],
        b"event: frame\ndata: frame 1\n\n"
    );
    // The same frame read again: the page gets the read's time only.
    tx.send_replace(Arc::new(Published::new(
        "frame 1".to_owned(),
        true,
        1,
        "at 2".to_owned(),
    )));
    assert_eq!(
        &page.recv().await.unwrap()[..],
        b"event: tick\ndata: at 2\n\n"
    );
    drop(tx);
    forwarding.await.unwrap();
    assert!(page.recv().await.is_none(), "the stream ends with the feed");
}

#[tokio::test]
async fn a_page_that_takes_nothing_is_dropped_after_its_queue_fills() {
    let (tx, mut frames) = watch::channel(published(0));
    let (queue, mut page) = mpsc::channel(QUEUE);
    let forwarding = tokio::spawn(async move { forward(&mut frames, &queue).await });
    // The page takes nothing: each frame is sent once the forwarder has taken the one before,
    // so every one reaches the queue until it is full.
    let mut sent = 1;
    while !forwarding.is_finished() {
        tx.send_replace(published(sent));
        sent += 1;
        tokio::task::yield_now().await;
        assert!(sent < 1_000, "the forwarder never gave up");
    }
    forwarding.await.unwrap();
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
    let p = Published::new("<p>a</p>\n<p>b</p>".to_owned(), true, 3, "t".to_owned());
    assert_eq!(
        &p.frame[..],
        b"event: frame\ndata: <p>a</p>\ndata: <p>b</p>\n\n"
    );
    assert_eq!(&p.tick[..], b"event: tick\ndata: t\n\n");
    let stale = Published::new("x".to_owned(), false, 4, "t".to_owned());
    assert_eq!(&stale.frame[..], b"event: stale\ndata: x\n\n");
}
