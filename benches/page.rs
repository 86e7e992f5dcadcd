//! The live page's benchmark (issue 16): does a crowd of open pages slow the controller?
//!
//! Starts a private redis-server and a real `fleet serve` over 1 000 slots (10 groups of 100),
//! each with a beating bench, which the controller adopts (a ready claim each). Then, for two windows of the same length, every
//! bench's beat flips between held and not (all 1 000 slots change twice a cycle: the bench's
//! state, the slot's usability): first with no page open, then with 100 pages reading
//! `/events`; then a third window with the pages open and nothing changing. It prints the
//! controller's mean pass time in each window (from `fleet serve`'s own `fleet_pass_seconds`
//! histogram), their ratios, and what the pages received.
//!
//! Run: `cargo bench --bench page` (add `-- --quick` for 5 s windows instead of 20 s).

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fleet::domain::name::{BenchName, Reason};
use fleet::store::keys::Keys;
use fleet::store::presence::{Beat, Presence};
use fleet_testing::fixture::{Group, Op};
use fleet_testing::{Fixture, Options, RedisServer};

// The allocator the `fleet` binary runs with (cmd/fleet/main.rs), so what is measured here
// allocates as fleet does.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SLOTS: usize = 1_000;
const GROUPS: usize = 10;
const PAGES: usize = 100;

/// `GROUPS` groups of `SLOTS / GROUPS` slots each.
fn yaml() -> String {
    let mut fixture = Fixture::new();
    for g in 0..GROUPS {
        fixture = fixture.group(
            Group::new(&format!("pool-{g}"))
                .min(0)
                .max((SLOTS / GROUPS) as u32)
                .ungated()
                .startup(Op::command(["true"]))
                .shutdown(Op::command(["true"])),
        );
    }
    for g in 0..GROUPS {
        let slots = (0..SLOTS / GROUPS).map(|i| format!("b{g}-{i:03}"));
        fixture = fixture.slots(&format!("pool-{g}"), slots);
    }
    fixture.yaml()
}

fn names() -> Vec<BenchName> {
    (0..GROUPS)
        .flat_map(|g| (0..SLOTS / GROUPS).map(move |i| format!("b{g}-{i:03}")))
        .map(|n| BenchName::parse(&n).unwrap())
        .collect()
}

/// `fleet_pass_seconds`' sum and count, from `/metrics`.
fn passes(addr: &str) -> (f64, f64) {
    let text = get(addr, "/metrics");
    let value = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    (
        value("fleet_pass_seconds_sum"),
        value("fleet_pass_seconds_count"),
    )
}

fn get(addr: &str, path: &str) -> String {
    let mut s = TcpStream::connect(addr).expect("connecting");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text
}

/// Beats every bench, held or not, all at once.
async fn beat_all(presence: &Presence<redis::aio::MultiplexedConnection>, held: bool) {
    let reason = Reason::parse("bench").unwrap();
    let beats = names().into_iter().map(|name| {
        let beat = Beat {
            name,
            ttl: Duration::from_secs(60),
            hold: held.then(|| reason.clone()),
            load: None,
            cores: None,
        };
        async move { presence.beat(&beat).await }
    });
    for r in futures::future::join_all(beats).await {
        r.expect("a beat");
    }
}

/// Flips every bench between held and not until `until` (or, with `flip` false, changes
/// nothing); returns the flips.
async fn churn(
    presence: &Presence<redis::aio::MultiplexedConnection>,
    until: Instant,
    flip: bool,
) -> u32 {
    if !flip {
        tokio::time::sleep_until(until.into()).await;
        return 0;
    }
    let mut flips = 0;
    while Instant::now() < until {
        beat_all(presence, flips % 2 == 0).await;
        flips += 1;
        // A flip a pass interval: each pass sees every slot change.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    beat_all(presence, false).await;
    flips
}

/// One window of churn: the mean pass time over it, the passes, the flips.
async fn window(
    addr: &str,
    presence: &Presence<redis::aio::MultiplexedConnection>,
    length: Duration,
    flip: bool,
) -> (Duration, f64, u32) {
    let (sum0, count0) = passes(addr);
    let flips = churn(presence, Instant::now() + length, flip).await;
    let (sum1, count1) = passes(addr);
    let n = (count1 - count0).max(1.0);
    (Duration::from_secs_f64((sum1 - sum0) / n), n, flips)
}

/// A page reading the stream until the process ends, counting frames and bytes.
fn open_page(addr: String, frames: Arc<AtomicU64>, bytes: Arc<AtomicU64>) {
    std::thread::spawn(move || {
        let mut s = TcpStream::connect(&addr).expect("a page connects");
        // The listener answers its own address only (SPEC §4.13).
        write!(s, "GET /events HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
        let mut buf = vec![0u8; 1 << 16];
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 {
                break;
            }
            bytes.fetch_add(n as u64, Ordering::Relaxed);
            let events = buf[..n]
                .windows(12)
                .filter(|w| w == b"event: frame")
                .count();
            frames.fetch_add(events as u64, Ordering::Relaxed);
        }
    });
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let quick = support::Args::new().quick();
    let length = Duration::from_secs(if quick { 5 } else { 20 });
    let server = RedisServer::with(Options {
        tcp: true,
        ..Options::default()
    })?;
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("fleet.yaml");
    std::fs::write(&config, yaml())?;
    let mut serve = std::process::Command::new(env!("CARGO_BIN_EXE_fleet"))
        .args(["--redis", &server.url(), "serve", "--config"])
        .arg(&config)
        .args([
            "--metrics-addr",
            "127.0.0.1:0",
            "--grpc-addr",
            "127.0.0.1:0",
        ])
        .args(["--blind-grace", "0s"])
        .env("FLEET_LOG", "info")
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let addr = metrics_addr(&mut serve)?;
    let conn = server.endpoint().connect().await?;
    let presence = Presence::new(conn.clone(), Keys::default());
    // Machines found on are adopted (no blind grace): each slot gets a ready claim.
    beat_all(&presence, false).await;
    wait_ready(&addr)?;
    println!("page benchmark: {SLOTS} slots ready, a flip of every bench's hold each second");
    let (quiet, quiet_passes, _) = window(&addr, &presence, length, true).await;
    let frames_counter = Arc::new(AtomicU64::new(0));
    let bytes = Arc::new(AtomicU64::new(0));
    for _ in 0..PAGES {
        open_page(addr.clone(), frames_counter.clone(), bytes.clone());
    }
    let frames = &frames_counter;
    let (crowded, crowded_passes, flips) = window(&addr, &presence, length, true).await;
    let frames = frames_now(frames);
    let sent = bytes.load(Ordering::Relaxed);
    // The same pages while nothing changes: each gets the read's time, not the frame.
    let (still, still_passes, _) = window(&addr, &presence, length, false).await;
    let still_frames = frames_now(&frames_counter) - frames;
    let still_bytes = bytes.load(Ordering::Relaxed) - sent;
    println!(
        "mean pass, no page open:   {:>8.2} ms over {quiet_passes:.0} passes",
        ms(quiet)
    );
    println!(
        "mean pass, {PAGES} pages open: {:>8.2} ms over {crowded_passes:.0} passes ({flips} flips)",
        ms(crowded)
    );
    println!(
        "ratio crowded/quiet: {:.2}x; the pages received {frames} frames ({:.1} each, {:.1} MB)",
        ms(crowded) / ms(quiet),
        frames as f64 / PAGES as f64,
        sent as f64 / 1e6
    );
    println!(
        "mean pass, {PAGES} pages open, nothing changing: {:>8.2} ms over {still_passes:.0} passes \
         ({:.2}x quiet); the pages received {still_frames} frames and {:.1} kB",
        ms(still),
        ms(still) / ms(quiet),
        still_bytes as f64 / 1e3
    );
    serve.kill()?;
    Ok(())
}

fn frames_now(frames: &AtomicU64) -> u64 {
    frames.load(Ordering::Relaxed)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The metrics address from `fleet serve`'s start line; its log is drained after.
fn metrics_addr(serve: &mut std::process::Child) -> anyhow::Result<String> {
    use std::io::BufRead;
    let stderr = serve.stderr.take().expect("piped");
    let mut lines = std::io::BufReader::new(stderr).lines();
    for line in lines.by_ref() {
        let line = line?;
        if let Some(addr) = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("metrics="))
        {
            let addr = addr.to_owned();
            std::thread::spawn(move || lines.for_each(drop));
            return Ok(addr);
        }
    }
    anyhow::bail!("fleet serve ended before its start line")
}

/// Waits (bounded) until the page shows every slot ready.
fn wait_ready(addr: &str) -> anyhow::Result<()> {
    let start = Instant::now();
    loop {
        let page = get(addr, "/");
        if page.matches("class=\"badge phase-ready\"").count() >= 2 * SLOTS {
            return Ok(());
        }
        anyhow::ensure!(
            start.elapsed() < Duration::from_secs(120),
            "the slots never all showed ready"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}
