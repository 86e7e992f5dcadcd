//! The live page's listener against a hostile peer (SPEC §4.13, "The listener"): real
//! redis-servers, real `fleet serve` processes, raw sockets. A peer without the token gets no
//! body buffered, nothing through a foreign `Host`, no more streams or connections than the caps
//! derived from the descriptor limit, no connection held past the head's timeout, and no line
//! of its choosing in the event stream; a token fleet could never match is refused at start.
//! Every wait is bounded; nothing sleeps to synchronise.

use crate::support;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fleet_testing::fixture::{Group, Op};
use fleet_testing::{Fixture, RedisServer};
use support::peer::{closed_within, connect_from};
use support::remote::{metrics_addr, sample, until};
use support::{Serve, fleet_ok, http_get, run_fleet, run_fleet_bounded};

const TOKEN: &str = "hostile-test-token-0123456789";

/// Two slots whose scripts beat through `server`, and the token file.
fn setup(dir: &Path, server: &RedisServer) -> (PathBuf, PathBuf) {
    let config = support::remote::serve_config(dir, &server.url());
    let token = dir.join("token");
    std::fs::write(&token, format!("{TOKEN}\n")).unwrap();
    (config, token)
}

const FAST: [&str; 6] = [
    "--metrics-addr",
    "127.0.0.1:0",
    "--interval",
    "100ms",
    "--blind-grace",
    "0s",
];

async fn serve(server: &RedisServer, config: &Path, extra: &[&str]) -> (Serve, String) {
    let mut args = FAST.to_vec();
    args.extend_from_slice(extra);
    let mut serve = Serve::start("serve", server, config, &args);
    let started = serve.log(&["fleet serve started"]).await;
    (serve, metrics_addr(&started))
}

/// Sends `request` on a new connection and reads the answer until the server closes it or
/// `bound` passes; the text read.
fn exchange(addr: &str, request: &[u8], bound: Duration) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(bound)).unwrap();
    s.write_all(request).unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    String::from_utf8_lossy(&got).into_owned()
}

fn status(answer: &str) -> u16 {
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {answer:?}"))
}

/// The head of the answer to a GET of `path` naming `host`: read up to its blank line (a
/// stream's body never ends).
fn head(addr: &str, path: &str, host: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("\r\n\r\n") {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => panic!("reading {path}: {e}"),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// The page's CSRF token, from its first render.
fn csrf_of(page: &str) -> String {
    let at = page
        .find("name=\"fleet-csrf\" content=\"")
        .expect("a CSRF token")
        + 27;
    page[at..].split('"').next().unwrap().to_owned()
}

/// `fleet serve` with the token in `token`, leading and past a pass, so an action would run;
/// its address and its page's CSRF token.
async fn ready_to_act(
    server: &RedisServer,
    config: &Path,
    token: &Path,
) -> (Serve, String, String) {
    let token = token.display().to_string();
    let (mut serve, addr) = serve(server, config, &["--ui-token-file", &token]).await;
    serve.log(&["became the leader"]).await;
    until("ready", Duration::from_secs(10), async || {
        support::remote::readyz(&addr).await == 200
    })
    .await;
    let csrf = csrf_of(&http_get(&addr, "/").1);
    (serve, addr, csrf)
}

#[tokio::test]
async fn an_action_is_refused_on_its_head_before_its_body_is_sent() {
    let server = support::tcp_server();
    let dir = tempfile::tempdir().unwrap();
    let (config, token) = setup(dir.path(), &server);
    let (mut serve, addr, csrf) = ready_to_act(&server, &config, &token).await;
    let bearer = format!("Authorization: Bearer {TOKEN}\r\n");
    let csrf_header = format!("X-Fleet-CSRF: {csrf}\r\n");
    let post = |headers: &str, length: &str| {
        format!(
            "POST /actions/claim HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
             {length}{headers}\r\n"
        )
    };
    // The head alone, declaring a large body that never comes: the answer comes at once, and
    // the connection is closed, since its body was not read.
    let big = "Content-Length: 100000000\r\n";
    for (headers, want) in [
        (String::new(), 401),
        (
            "Authorization: Bearer wrong-token-0123456789\r\n".to_owned(),
            401,
        ),
        (bearer.clone(), 403),
        (
            format!("{bearer}{csrf_header}Origin: http://evil.example\r\n"),
            403,
        ),
        (
            format!("{bearer}{csrf_header}Sec-Fetch-Site: cross-site\r\n"),
            403,
        ),
        // With the token and from this page, a body declared over the limit: 413, unread.
        (format!("{bearer}{csrf_header}"), 413),
    ] {
        let started = Instant::now();
        let answer = exchange(
            &addr,
            post(&headers, big).as_bytes(),
            Duration::from_secs(10),
        );
        assert_eq!(status(&answer), want, "{headers:?}: {answer}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "answered on the head, and closed: {:?}",
            started.elapsed()
        );
    }
    // Expect: 100-continue without the token: refused, never invited to send.
    let answer = exchange(
        &addr,
        post("Expect: 100-continue\r\n", big).as_bytes(),
        Duration::from_secs(10),
    );
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert!(!answer.contains("100 Continue"), "{answer}");
    // A chunked body with the token, past the limit: 413 once 4 kB were read.
    let chunk = "x".repeat(3000);
    let chunked = format!(
        "{}{:x}\r\n{chunk}\r\n{:x}\r\n{chunk}\r\n0\r\n\r\n",
        post(
            &format!("{bearer}{csrf_header}"),
            "Transfer-Encoding: chunked\r\n"
        ),
        chunk.len(),
        chunk.len()
    );
    let answer = exchange(&addr, chunked.as_bytes(), Duration::from_secs(10));
    assert_eq!(status(&answer), 413, "{answer}");
    assert!(answer.contains("at most 4096 bytes"), "{answer}");
    // A body under the limit goes through.
    let body = "{\"target\":\"bench-01\"}";
    let answer = exchange(
        &addr,
        format!(
            "{}{body}",
            post(
                &format!("{bearer}{csrf_header}Connection: close\r\n"),
                &format!("Content-Length: {}\r\n", body.len())
            )
        )
        .as_bytes(),
        Duration::from_secs(10),
    );
    assert_eq!(status(&answer), 200, "{answer}");
    assert!(fleet_ok(&server, &["claims"]).contains("bench-01"));
    serve.stop().await;
}

/// The resident memory of process `pid`, in kB.
fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfinished_uploads_without_the_token_cost_no_buffered_body() {
    let server = support::tcp_server();
    let dir = tempfile::tempdir().unwrap();
    let (config, token) = setup(dir.path(), &server);
    let token_arg = token.display().to_string();
    let (mut serve, addr) = serve(&server, &config, &["--ui-token-file", &token_arg]).await;
    serve.log(&["became the leader"]).await;
    let pid = serve.child.id().unwrap();
    let before = rss_kb(pid);
    // The attack as found: 150 uploads of a 2 MB body without the token, each sending 1 MB of
    // it and never finishing (it cost 437 MB when the body was read before the token).
    let addr_ = addr.clone();
    let (held, peak) = tokio::task::spawn_blocking(move || {
        let mut held = Vec::new();
        let mut peak = 0;
        let megabyte = vec![b'x'; 1 << 20];
        for _ in 0..150 {
            let mut s = TcpStream::connect(&addr_).unwrap();
            s.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
            write!(
                s,
                "POST /actions/claim HTTP/1.1\r\nHost: {addr_}\r\nContent-Length: 2000000\r\n\r\n"
            )
            .unwrap();
            // The server answers 401 and closes: the rest of the body is refused by the kernel.
            let _ = s.write_all(&megabyte);
            held.push(s);
            peak = peak.max(rss_kb(pid));
        }
        (held, peak)
    })
    .await
    .unwrap();
    let grew = peak.saturating_sub(before);
    eprintln!(
        "150 unfinished 2 MB uploads without the token: RSS {before} kB before, peak {peak} kB (+{grew} kB)"
    );
    assert!(
        grew < 30 * 1024,
        "the bodies were buffered: +{grew} kB over 150 uploads"
    );
    drop(held);
    assert_eq!(
        http_get(&addr, "/healthz").0,
        200,
        "the listener still answers"
    );
    serve.stop().await;
}

#[tokio::test]
async fn a_foreign_host_is_misdirected_on_every_route_but_the_liveness_probe() {
    let server = support::tcp_server();
    let dir = tempfile::tempdir().unwrap();
    let (config, token) = setup(dir.path(), &server);
    let token_arg = token.display().to_string();
    let (mut serve, addr) = serve(
        &server,
        &config,
        &[
            "--ui-token-file",
            &token_arg,
            "--ui-host",
            "Fleet.Example.com",
        ],
    )
    .await;
    let port = addr.rsplit(':').next().unwrap().to_owned();
    let page = http_get(&addr, "/").1;
    let asset = |ext: &str| {
        page.split('"')
            .find(|p| p.starts_with("/assets/") && p.ends_with(ext))
            .unwrap_or_else(|| panic!("no {ext} asset in {page}"))
            .to_owned()
    };
    let routes = [
        "/",
        "/events",
        &asset(".css"),
        &asset(".js"),
        "/metrics",
        "/readyz",
    ];
    let foreign = format!("evil.example:{port}");
    for route in routes {
        let refused = head(&addr, route, &foreign);
        assert!(
            refused.starts_with("HTTP/1.1 421"),
            "{route} for {foreign}: {refused}"
        );
    }
    // The refusal says which Host, and how to allow it.
    let said = exchange(
        &addr,
        format!("GET / HTTP/1.1\r\nHost: {foreign}\r\nConnection: close\r\n\r\n").as_bytes(),
        Duration::from_secs(10),
    );
    assert!(
        said.contains("evil.example") && said.contains("--ui-host NAME"),
        "{said}"
    );
    // An action too, before its token is looked at.
    let action = exchange(
        &addr,
        format!(
            "POST /actions/claim HTTP/1.1\r\nHost: {foreign}\r\nAuthorization: Bearer {TOKEN}\r\n\
             Content-Length: 2\r\nConnection: close\r\n\r\n{{}}"
        )
        .as_bytes(),
        Duration::from_secs(10),
    );
    assert_eq!(status(&action), 421, "{action}");
    // A request line in absolute form names its host there.
    let absolute = exchange(
        &addr,
        format!(
            "GET http://evil.example:{port}/ HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
        Duration::from_secs(10),
    );
    assert_eq!(status(&absolute), 421, "{absolute}");
    // The liveness probe answers a constant whatever the Host.
    assert!(head(&addr, "/healthz", &foreign).starts_with("HTTP/1.1 200"));
    // The listener's own address, localhost on loopback (any port: a port-forward's), and the
    // --ui-host name pass on every route.
    for host in [
        addr.clone(),
        format!("localhost:{port}"),
        "localhost:18080".to_owned(),
        format!("fleet.example.com:{port}"),
        "FLEET.EXAMPLE.COM".to_owned(),
    ] {
        for route in routes {
            let answer = head(&addr, route, &host);
            let code = status(&answer);
            assert!(
                code == 200 || (route == "/readyz" && code == 503),
                "{route} for {host}: {answer}"
            );
        }
    }
    // A head larger than 8 kB is refused whole.
    let long = format!(
        "GET / HTTP/1.1\r\nHost: {addr}\r\nX-Pad: {}\r\nConnection: close\r\n\r\n",
        "p".repeat(16 * 1024)
    );
    let answer = exchange(&addr, long.as_bytes(), Duration::from_secs(10));
    assert_eq!(status(&answer), 431, "{answer}");
    serve.stop().await;
}

#[tokio::test]
async fn the_page_listens_apart_from_the_metrics_with_names_from_the_environment() {
    let server = support::tcp_server();
    let dir = tempfile::tempdir().unwrap();
    let (config, _) = setup(dir.path(), &server);
    let mut args = FAST.to_vec();
    args.extend_from_slice(&["--ui-addr", "127.0.0.1:0"]);
    let mut serve = Serve::start_with_env(
        "serve",
        &server.url(),
        &config,
        &args,
        &[("FLEET_UI_HOST", "a.example,b.example")],
    );
    let started = serve.log(&["fleet serve started"]).await;
    let metrics = metrics_addr(&started);
    let ui = started
        .split_whitespace()
        .find_map(|w| w.strip_prefix("ui="))
        .expect("the start line names the page's address")
        .to_owned();
    assert_ne!(ui, metrics);
    assert!(head(&ui, "/", "a.example").starts_with("HTTP/1.1 200"));
    assert!(head(&ui, "/events", "b.example:80").starts_with("HTTP/1.1 200"));
    assert!(head(&ui, "/", "c.example").starts_with("HTTP/1.1 421"));
    assert!(
        head(&ui, "/metrics", &ui).starts_with("HTTP/1.1 404"),
        "no metrics on the page's listener"
    );
    assert!(
        head(&metrics, "/", &metrics).starts_with("HTTP/1.1 404"),
        "no page on the metrics listener"
    );
    assert!(head(&metrics, "/metrics", "a.example").starts_with("HTTP/1.1 200"));
    assert!(head(&metrics, "/metrics", "c.example").starts_with("HTTP/1.1 421"));
    serve.stop().await;
}

/// A `fleet serve` whose descriptor limit is `nofile` (soft and hard), its log read as it comes.
struct Limited {
    child: tokio::process::Child,
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
}

impl Limited {
    fn start(server: &RedisServer, config: &Path, nofile: u64) -> Limited {
        use tokio::io::AsyncBufReadExt;
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_fleet"));
        command
            .args(["--redis", &server.url(), "serve", "--config"])
            .arg(config)
            .args(FAST)
            .args(["--grpc-addr", "127.0.0.1:0"])
            .env("FLEET_LOG", "info")
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        support::limit_nofile(&mut command, nofile);
        let mut child = command.spawn().expect("starting fleet serve");
        let (tx, lines) = tokio::sync::mpsc::unbounded_channel();
        let mut reader = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
        tokio::spawn(async move {
            while let Ok(Some(line)) = reader.next_line().await {
                let _ = tx.send(line);
            }
        });
        Limited { child, lines }
    }

    async fn log(&mut self, words: &[&str]) -> String {
        support::bounded(&format!("fleet serve to log {words:?}"), async {
            loop {
                let line = self.lines.recv().await.expect("fleet serve ended");
                if words.iter().all(|w| line.contains(w)) {
                    return line;
                }
            }
        })
        .await
    }
}

/// A stream on a new connection from 127.0.0.`host`, once its head and first frame came: `Ok`
/// with the socket, or `Err` with the head of a refusal.
fn open_stream(addr: &str, host: u8) -> Result<TcpStream, String> {
    let mut s = connect_from(addr, host);
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET /events HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = s
            .read(&mut buf)
            .unwrap_or_else(|e| panic!("the stream's head in time, from 127.0.0.{host}: {e}"));
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got);
        if !text.starts_with("HTTP/1.1 200") && text.contains("\r\n\r\n") {
            return Err(text.into_owned());
        }
        if text.contains("event: frame") {
            return Ok(s);
        }
    }
}

/// A probe as the kubelet sends it, from 127.0.0.50: its answer's head and body.
fn probe(addr: &str, path: &str) -> String {
    let mut s = connect_from(addr, 50);
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer
}

// Two workers: the test blocks on its sockets while `fleet serve`'s log is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_caps_follow_the_descriptor_limit_and_a_stalled_stream_holds_its_place() {
    let server = support::tcp_server();
    let dir = tempfile::tempdir().unwrap();
    let (config, _) = setup(dir.path(), &server);
    // 256 descriptors: the rule gives 64 connections and 32 streams (SPEC §4.13).
    let mut serve = Limited::start(&server, &config, 256);
    let addr = metrics_addr(&serve.log(&["fleet serve started"]).await);
    let caps = serve.log(&["the listeners' caps"]).await;
    for field in ["nofile=256", "connections=64", "streams=32"] {
        assert!(caps.contains(field), "{field}: {caps}");
    }
    assert!(caps.contains("per_peer=8"), "{caps}");
    // One peer address holds at most its eighth of the connections: its ninth is closed at once,
    // and the others are served beside it.
    let share: Vec<TcpStream> = (0..8).map(|_| connect_from(&addr, 20)).collect();
    until(
        "the peer's eight held",
        Duration::from_secs(10),
        async || sample(&addr, "fleet_http_connections") == 9,
    )
    .await;
    let ninth = closed_within(connect_from(&addr, 20), Duration::from_secs(5));
    assert!(
        ninth.is_some(),
        "a peer's ninth connection was kept (the head's timeout is 10 s)"
    );
    drop(share);
    until(
        "the peer's places given back",
        Duration::from_secs(10),
        async || sample(&addr, "fleet_http_connections") == 1,
    )
    .await;
    let addr_ = addr.clone();
    let passes = move || sample(&addr_, "fleet_pass_seconds_count");
    // From four peers (127.0.0.2 to .5), eight streams each.
    let mut stalled: Vec<TcpStream> = (0..32)
        .map(|i| open_stream(&addr, 2 + i / 8).unwrap_or_else(|e| panic!("stream {i}: {e}")))
        .collect();
    let refused = open_stream(&addr, 6).unwrap_err();
    assert!(refused.starts_with("HTTP/1.1 503"), "stream 33: {refused}");
    // The streams take nothing more, for several reads of the page's feed: they keep their
    // places, and the 33rd is still refused.
    let from = passes();
    until("five more passes", Duration::from_secs(10), async || {
        passes() >= from + 5
    })
    .await;
    assert_eq!(sample(&addr, "fleet_page_streams"), 32);
    assert!(
        open_stream(&addr, 6)
            .unwrap_err()
            .starts_with("HTTP/1.1 503")
    );
    // One closes: its place is free once the server sees it.
    drop(stalled.pop());
    let freed = Instant::now();
    let mut again = None;
    until(
        "a stream in the freed place",
        Duration::from_secs(10),
        async || {
            again = open_stream(&addr, 11).ok();
            again.is_some()
        },
    )
    .await;
    stalled.push(again.unwrap());
    eprintln!(
        "a closed stream's place was taken again {:?} after it closed",
        freed.elapsed()
    );
    // The connections: 32 streams, 31 peers that send nothing, and this request are 64.
    // The idle peers from 127.0.0.6 to .9, eight each (seven from the last).
    let mut idle: Vec<TcpStream> = (0..31).map(|i| connect_from(&addr, 6 + i / 8)).collect();
    let opened = Instant::now();
    assert_eq!(sample(&addr, "fleet_http_connections"), 64);
    // The 64th place goes to a peer that sends its head a byte at a time.
    let mut slow = connect_from(&addr, 9);
    let dripping = std::thread::spawn(move || {
        let start = Instant::now();
        let mut bytes = b"GET / HTTP/1.1\r\nX-Slow: "
            .iter()
            .chain(std::iter::repeat(&b'a'));
        while start.elapsed() < Duration::from_secs(30) {
            if slow.write_all(&[*bytes.next().unwrap()]).is_err() {
                return start.elapsed();
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        start.elapsed()
    });
    // Every place is held. The kubelet's probes, from an address of their own, take the probes'
    // places: each answered at once, twelve /readyz and ten /healthz in turn (the red team's 16
    // peers within their shares made 10 of 12 and 8 of 10 fail, and the pod was restarted).
    for (path, n) in [("/readyz", 12), ("/healthz", 10)] {
        for _ in 0..n {
            let started = Instant::now();
            let answer = probe(&addr, path);
            assert!(answer.starts_with("HTTP/1.1 200"), "{path}: {answer}");
            assert!(
                started.elapsed() < Duration::from_secs(1),
                "{path} took {:?}",
                started.elapsed()
            );
        }
    }
    // A 65th peer that asks for the page on a probe's place is told so at once.
    let mut waiting = connect_from(&addr, 10);
    write!(
        waiting,
        "GET / HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    waiting
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let mut told = String::new();
    let _ = waiting.read_to_string(&mut told);
    assert!(
        told.starts_with("HTTP/1.1 503") && told.contains("only /healthz and /readyz"),
        "the 65th, every place held: {told}"
    );
    // The peers that send nothing, and the one that drips, are closed by the head's timeout
    // (10 s), and the page is served again.
    let last_idle = idle.pop().unwrap();
    let idle_closed =
        closed_within(last_idle, Duration::from_secs(20)).expect("an idle peer closed");
    let since_open = opened.elapsed();
    assert!(
        since_open >= Duration::from_secs(9) && since_open < Duration::from_secs(20),
        "an idle peer was closed {since_open:?} after it connected ({idle_closed:?})"
    );
    let dripped = dripping.join().unwrap();
    assert!(
        dripped >= Duration::from_secs(9) && dripped < Duration::from_secs(20),
        "a peer dripping its head was closed after {dripped:?}"
    );
    let (status, _) = http_get(&addr, "/");
    assert_eq!(status, 200, "the page, once a place freed");
    // The streams were never closed by the head's timeout: they still hold their places.
    assert_eq!(sample(&addr, "fleet_page_streams"), 32);
    drop(idle);
    drop(stalled);
    // A stop does not wait on them.
    let pid = serve.child.id().unwrap().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let stopped = support::bounded("fleet serve to stop", serve.child.wait())
        .await
        .unwrap();
    assert!(stopped.success(), "{stopped:?}");
}

/// One group whose startup prints `output` and fails.
fn failing_config(dir: &Path, output: &str) -> PathBuf {
    Fixture::new()
        .group(
            Group::new("pool-a")
                .min(0)
                .max(1)
                .ungated()
                .startup(Op::sh(&format!("printf '{output}'; exit 1")))
                .shutdown(Op::command(["true"]))
                .timing("job_monitor_poll_interval", "100ms"),
        )
        .slots("pool-a", ["bench-01"])
        .write(dir)
}

#[tokio::test]
async fn an_operations_line_breaks_reach_the_page_as_data_fleet_chose() {
    let server = support::tcp_server();
    let dir = tempfile::tempdir().unwrap();
    // What an output might hold to split the stream: every break SSE reads, and fields.
    let output =
        "one\rretry: 86400000\rthe fleet is fine\r\ntwo\nevent: frame\rdata: forged\r\rthree\n";
    let config = failing_config(dir.path(), output);
    let (mut serve, addr) = serve(&server, &config, &[]).await;
    serve.log(&["became the leader"]).await;
    fleet_ok(&server, &["claim", "bench-01"]);
    // The stream, read until a frame shows the failure's output.
    let mut s = TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    write!(s, "GET /events HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let start = Instant::now();
    let mut raw = Vec::new();
    let mut buf = [0u8; 65536];
    let body = loop {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no frame showed the output: {}",
            String::from_utf8_lossy(&raw)
        );
        match s.read(&mut buf) {
            Ok(0) => panic!("the stream ended"),
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => panic!("reading the stream: {e}"),
        }
        let text = String::from_utf8_lossy(&raw);
        let Some((_, body)) = text.split_once("\r\n\r\n") else {
            continue;
        };
        // Up to the last complete event.
        let Some(end) = body.rfind("\n\n") else {
            continue;
        };
        if body[..end].contains("three") {
            break body[..end + 2].to_owned();
        }
    };
    let (events, others) = support::sse_events(&body);
    assert!(others.is_empty(), "a field fleet did not write: {others:?}");
    for (name, _) in &events {
        assert!(
            ["frame", "delta", "tick", "stale"].contains(&name.as_str()),
            "an event fleet did not name: {name}"
        );
    }
    // The failure comes in the first frame or, once the page has one, as its part of a delta.
    let (_, frame) = events
        .iter()
        .rev()
        .find(|(name, data)| ["frame", "delta"].contains(&name.as_str()) && data.contains("three"))
        .expect("the event with the output");
    // Every LF and CRLF of the output is a line break of the data, a lone CR is shown as its
    // `\u{d}` form as `fleet describe` shows it (SPEC §7 S7), and what looked like fields is text
    // inside the failure's `<pre>`.
    let pre = frame
        .split("<pre>")
        .nth(1)
        .and_then(|p| p.split("</pre>").next())
        .expect("the output's <pre>");
    assert_eq!(
        pre,
        "one\\u{d}retry: 86400000\\u{d}the fleet is fine\ntwo\nevent: frame\\u{d}data: forged\\u{d}\\u{d}three\n[exit status: 1]"
    );
    // The streamed failures are the page's own, each break read as LF.
    let page = http_get(&addr, "/").1;
    let failures = |html: &str| -> String {
        let after = html
            .split("<h2 id=\"s-failures-h\">")
            .nth(1)
            .expect("the failures' part");
        after[..after
            .find("</section>")
            .or_else(|| after.find("</template>"))
            .unwrap()]
            .to_owned()
    };
    let shown = failures(&page);
    assert!(
        shown.contains("one\\u{d}retry: 86400000\\u{d}the fleet is fine\ntwo")
            && shown.contains("forged\\u{d}\\u{d}three")
            && !shown.contains('\r'),
        "the page holds the output's lines as fleet describe shows them: {shown}"
    );
    let read_as_lf = shown.replace("\r\n", "\n").replace('\r', "\n");
    assert_eq!(
        failures(frame),
        read_as_lf,
        "the streamed failures are the page's"
    );
    serve.stop().await;
}

// SPEC §7 S7: an operation's output reaches the page as text: an escape, a bell or a bidi
// control in it arrives as its `\u{…}` form, exactly as `fleet describe` shows it, and never as
// the character a terminal or a browser would act on.
#[tokio::test]
async fn an_operations_controls_reach_the_page_escaped_as_fleet_describe_shows_them() {
    let server = support::tcp_server();
    let dir = tempfile::tempdir().unwrap();
    let output = "booting\n\u{1b}[2Jthe fleet is fine \u{202E}gnp.exe\u{7}\n";
    let config = failing_config(dir.path(), output);
    let (mut serve, addr) = serve(&server, &config, &[]).await;
    serve.log(&["became the leader"]).await;
    fleet_ok(&server, &["claim", "bench-01"]);
    let mut page = String::new();
    until(
        "the page shows the failure's output",
        Duration::from_secs(20),
        async || {
            page = http_get(&addr, "/").1;
            page.contains("[exit status: 1]")
        },
    )
    .await;
    let pre = page
        .split("<pre>")
        .nth(1)
        .and_then(|p| p.split("</pre>").next())
        .expect("the output's <pre>");
    let shown = "\\u{1b}[2Jthe fleet is fine \\u{202e}gnp.exe\\u{7}";
    assert_eq!(pre, format!("booting\n{shown}\n[exit status: 1]"));
    for raw in ['\u{1b}', '\u{7}', '\u{202E}'] {
        assert!(!page.contains(raw), "{raw:?} reached the page: {pre:?}");
    }
    // The same line, as the terminal shows it.
    let described = fleet_ok(&server, &["describe", "bench-01"]);
    assert!(described.contains(&format!("\n  {shown}\n")), "{described}");
    serve.stop().await;
}

// SPEC §4.13 L9: the longest token fleet takes (4 096 characters; a longer one is refused at
// start, in the test below) rides a request's head (L3: 8 KiB) beside a browser's other headers,
// and an action carrying it is answered.
#[tokio::test]
async fn a_token_of_the_most_characters_rides_a_browsers_request_and_is_accepted() {
    let server = support::tcp_server();
    let dir = tempfile::tempdir().unwrap();
    let config = support::remote::serve_config(dir.path(), &server.url());
    let token = dir.path().join("token");
    let longest = "t".repeat(4_096);
    std::fs::write(&token, format!("{longest}\n")).unwrap();
    let (mut serve, addr, csrf) = ready_to_act(&server, &config, &token).await;
    let body = "{\"target\":\"bench-01\"}";
    let request = format!(
        "POST /actions/claim HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nAuthorization: Bearer {longest}\r\nX-Fleet-CSRF: {csrf}\r\n\
         Origin: http://{addr}\r\nSec-Fetch-Site: same-origin\r\nSec-Fetch-Mode: cors\r\n\
         Sec-Fetch-Dest: empty\r\nUser-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 \
         (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36\r\nAccept: */*\r\n\
         Accept-Language: en-GB,en;q=0.9\r\nAccept-Encoding: gzip, deflate, br, zstd\r\n\
         Referer: http://{addr}/\r\nCookie: {}\r\nConnection: close\r\n\r\n{body}",
        body.len(),
        "c".repeat(1_024)
    );
    let answer = exchange(&addr, request.as_bytes(), Duration::from_secs(10));
    assert_eq!(status(&answer), 200, "{answer}");
    serve.stop().await;
}

#[tokio::test]
async fn a_token_that_is_not_printable_ascii_is_refused_at_start_naming_it() {
    let server = support::tcp_server();
    let dir = tempfile::tempdir().unwrap();
    let config = support::remote::serve_config(dir.path(), &server.url());
    let token = dir.path().join("token");
    let config_arg = config.display().to_string();
    let token_arg = token.display().to_string();
    let start = [
        "serve",
        "--config",
        &config_arg,
        "--metrics-addr",
        "127.0.0.1:0",
        "--grpc-addr",
        "127.0.0.1:0",
        "--ui-token-file",
        &token_arg,
    ];
    for (content, said) in [
        (
            "abcdéfghijklmnopqrstuvwxyz\n".as_bytes().to_vec(),
            "the character 'é' (U+00E9) at position 5",
        ),
        (
            "\u{feff}abcdefghijklmnopqrstuvwxyz\n".as_bytes().to_vec(),
            "the character '\\u{feff}' (U+FEFF) at position 1",
        ),
        (
            b"abc\xffdefghijklmnopqrstuvwxyz\n".to_vec(),
            "a byte that is not UTF-8 (0xff) at position 4",
        ),
        (
            b"abcdefgh ijklmnopqrstuvwxyz\n".to_vec(),
            "the character ' ' (U+0020) at position 9",
        ),
        (b"short\n".to_vec(), "has 5 characters, fewer than 16"),
        (
            format!("{}\n", "t".repeat(4_097)).into_bytes(),
            "has 4097 characters, more than 4096: a request's head is at most 8192 bytes",
        ),
    ] {
        std::fs::write(&token, &content).unwrap();
        let o = run_fleet_bounded(&server, &start).await;
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(said), "{said}: {stderr}");
        assert!(
            stderr.contains("openssl rand -hex 24"),
            "says what to do: {stderr}"
        );
    }
    // A --ui-host with a port is a usage error too.
    let o = run_fleet(
        &server,
        &[
            "serve",
            "--config",
            &config_arg,
            "--ui-host",
            "fleet.example.com:9464",
        ],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("without a port"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
