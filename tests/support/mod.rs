//! Shared test helpers: a private redis-server per test, connections and names.
#![allow(dead_code)]

pub mod acl;
pub mod browser;
pub mod contract;
pub mod peer;
pub mod remote;

use std::time::Duration;

use fleet::domain::name::{BenchName, Reason};
use fleet::store::keys::Keys;
use fleet::store::presence::{Beat, Presence};
use fleet_testing::RedisServer;
use redis::aio::MultiplexedConnection;

/// A private redis-server that listens on a loopback port too (for processes that reach it by
/// `redis://`, or a test that reads its port).
pub fn tcp_server() -> RedisServer {
    RedisServer::with(fleet_testing::Options {
        tcp: true,
        ..Default::default()
    })
    .expect("starting redis-server")
}

pub fn server() -> RedisServer {
    RedisServer::start().expect("starting redis-server")
}

pub async fn conn(server: &RedisServer) -> MultiplexedConnection {
    server.endpoint().connect().await.expect("connecting")
}

pub async fn presence(server: &RedisServer) -> Presence<MultiplexedConnection> {
    Presence::new(conn(server).await, Keys::default())
}

pub fn name(s: &str) -> BenchName {
    BenchName::parse(s).expect("valid test name")
}

pub fn reason(s: &str) -> Reason {
    Reason::parse(s).expect("valid test reason")
}

pub fn beat(n: &str, ttl: Duration) -> Beat {
    Beat {
        name: name(n),
        ttl,
        hold: None,
        load: None,
        cores: None,
    }
}

/// Runs a raw command on the server (to play a foreign writer, or to look at a key).
pub async fn raw<T: redis::FromRedisValue>(server: &RedisServer, args: &[&str]) -> T {
    let mut c = conn(server).await;
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query_async(&mut c).await.expect("raw command")
}

/// How often Redis ran a command since it started (`INFO commandstats`).
pub async fn command_calls(server: &RedisServer, command: &str) -> u64 {
    let info: String = raw(server, &["INFO", "commandstats"]).await;
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next()?.parse::<u64>().ok())
        .unwrap_or(0)
}

/// Sets the descriptor limit (soft and hard) of the process `command` starts.
pub fn limit_nofile(command: &mut tokio::process::Command, nofile: u64) {
    let limit = libc::rlimit {
        rlim_cur: nofile,
        rlim_max: nofile,
    };
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        command.pre_exec(move || {
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
}

/// Bounds every await in a test: a hang fails instead of blocking CI.
pub async fn bounded<F: std::future::Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(20), f)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

/// The flags of a quick `fleet serve` in a test: metrics on a free port, a pass every 100 ms, no
/// blind grace, a lease of a second.
pub const QUICK_SERVE: [&str; 8] = [
    "--metrics-addr",
    "127.0.0.1:0",
    "--interval",
    "100ms",
    "--blind-grace",
    "0s",
    "--lease",
    "1s",
];

/// A `fleet serve` process, its log lines read as they come.
pub struct Serve {
    pub name: &'static str,
    pub child: tokio::process::Child,
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
    /// Every line read so far.
    pub seen: Vec<String>,
}

impl Serve {
    /// The process's peak resident memory so far, in bytes (`VmHWM`).
    pub fn peak(&self) -> u64 {
        let pid = self.child.id().expect("running");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .expect("VmHWM");
        kb * 1024
    }

    /// Starts `fleet serve` on `server` with `config` and the extra `args` (its log at INFO).
    pub fn start(
        name: &'static str,
        server: &RedisServer,
        config: &std::path::Path,
        args: &[&str],
    ) -> Serve {
        Serve::start_at(name, &server.url(), config, args)
    }

    /// `start` against the Redis at `url` (a URL naming an ACL user, say).
    pub fn start_at(
        name: &'static str,
        url: &str,
        config: &std::path::Path,
        args: &[&str],
    ) -> Serve {
        Serve::start_with_env(name, url, config, args, &[])
    }

    /// `start_at` with `env` set for the process (and so for the operations it runs).
    pub fn start_with_env(
        name: &'static str,
        url: &str,
        config: &std::path::Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Serve {
        Serve::start_limited(name, url, config, args, env, None)
    }

    /// `start_with_env`, the process's descriptor limit `nofile` (soft and hard) when given, as
    /// a unit's `LimitNOFILE` or a container's sets it.
    pub fn start_limited(
        name: &'static str,
        url: &str,
        config: &std::path::Path,
        args: &[&str],
        env: &[(&str, &str)],
        nofile: Option<u64>,
    ) -> Serve {
        use tokio::io::AsyncBufReadExt;
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_fleet"));
        if let Some(nofile) = nofile {
            limit_nofile(&mut command, nofile);
        }
        let mut child = command
            .args(["--redis", url, "serve", "--config"])
            .arg(config)
            .args(args)
            // Every process its own provider port, unless the test names one.
            .args(if args.contains(&"--grpc-addr") {
                &[][..]
            } else {
                &["--grpc-addr", "127.0.0.1:0"][..]
            })
            // FLEET_TEST_SERVE_LOG gives the processes another filter (`info,redis=debug`) to
            // look into a failure.
            .env(
                "FLEET_LOG",
                std::env::var("FLEET_TEST_SERVE_LOG").unwrap_or_else(|_| "info".to_owned()),
            )
            // After the log's default: a test's own `FLEET_LOG` stands.
            .envs(env.iter().copied())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("starting fleet serve");
        let (tx, lines) = tokio::sync::mpsc::unbounded_channel();
        let mut reader = tokio::io::BufReader::new(child.stderr.take().expect("piped")).lines();
        tokio::spawn(async move {
            while let Ok(Some(line)) = reader.next_line().await {
                let _ = tx.send(line);
            }
        });
        Serve {
            name,
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Reads the log until a line contains every one of `words`.
    /// On a timeout it fails showing the last lines it read, so the failure says why.
    pub async fn log(&mut self, words: &[&str]) -> String {
        self.log_within(words, Duration::from_secs(20)).await
    }

    /// `log`, waiting at most `bound`: for what waits on another program's clock.
    pub async fn log_within(&mut self, words: &[&str], bound: Duration) -> String {
        let name = self.name;
        let found = tokio::time::timeout(bound, async {
            while let Some(line) = self.lines.recv().await {
                self.seen.push(line.clone());
                if words.iter().all(|w| line.contains(w)) {
                    return Some(line);
                }
            }
            None
        })
        .await;
        let tail = self.seen[self.seen.len().saturating_sub(40)..].join("\n");
        match found {
            Ok(Some(line)) => line,
            Ok(None) => panic!("{name} ended before logging {words:?}; its last lines:\n{tail}"),
            Err(_) => panic!(
                "timed out after {bound:?}: {name} to log {words:?}; its last lines:\n{tail}"
            ),
        }
    }

    /// Reads the log until each of `lines` (the words one line must contain) has been seen, in
    /// any order: for events of concurrent operations, whose order is the scheduler's.
    pub async fn logs(&mut self, lines: &[&[&str]]) {
        let name = self.name;
        let mut left: Vec<&[&str]> = lines.to_vec();
        bounded(&format!("{name} to log {lines:?}"), async {
            while let Some(line) = self.lines.recv().await {
                self.seen.push(line.clone());
                left.retain(|words| !words.iter().all(|w| line.contains(w)));
                if left.is_empty() {
                    return;
                }
            }
            panic!("{name} ended before logging {left:?}");
        })
        .await
    }

    /// Every line logged so far, without waiting for more (for a failure's message).
    pub fn drain(&mut self) -> &[String] {
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push(line);
        }
        &self.seen
    }

    /// Stops the process (SIGTERM), reads the rest of its log and returns every line it logged.
    pub async fn stop(&mut self) -> Vec<String> {
        self.signal("-TERM");
        bounded(&format!("{} to stop", self.name), async {
            while let Some(line) = self.lines.recv().await {
                self.seen.push(line);
            }
        })
        .await;
        self.seen.clone()
    }

    /// Sends a signal (`-TERM`, `-STOP`, ...) to the process.
    pub fn signal(&self, sig: &str) {
        let pid = self.child.id().expect("running").to_string();
        assert!(
            std::process::Command::new("kill")
                .args([sig, &pid])
                .status()
                .expect("kill")
                .success()
        );
    }
}

/// Asks for a machine on `slot` of `group` as a request would: a pending claim named `claim`,
/// its attempt seeded from the slot's digest, requested at the server's time, default timings.
pub async fn request_claim(
    server: &RedisServer,
    group: &str,
    slot: &str,
    claim: &str,
) -> fleet::domain::claim::Claim {
    request_claim_with(server, group, slot, claim, &Default::default()).await
}

/// `request_claim` with the group's `timings`, which set the claim's deadline.
pub async fn request_claim_with(
    server: &RedisServer,
    group: &str,
    slot: &str,
    claim: &str,
    timings: &fleet::domain::claim::Timings,
) -> fleet::domain::claim::Claim {
    use fleet::store::claims::{ClaimStore, Created};
    let store = ClaimStore::new(conn(server).await, fleet::store::keys::Keys::default());
    let group = fleet::domain::name::GroupName::parse(group).expect("valid group");
    let seed = store.seed(&group, &name(slot)).await.expect("seed");
    let now = store.now().await.expect("TIME");
    let c = fleet::domain::claim::Claim::new(
        fleet::domain::name::ClaimName::parse(claim).expect("valid claim name"),
        name(slot),
        group,
        seed.last.as_ref(),
        now,
        timings,
        None,
    );
    assert_eq!(
        store.create(&c, &seed).await.expect("create"),
        Created::Created
    );
    c
}

/// One HTTP/1.1 GET of `path` from `addr` (a `fleet serve` endpoint): (status, body).
pub fn http_get(addr: &str, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connecting");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("a read timeout");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .expect("sending the request");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("reading the answer");
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// The operation runner as `fleet serve` builds it: each operation in its own `fleet operation`
/// process, which reports the outcome to `server`.
pub fn exec(server: &RedisServer) -> fleet::lifecycle::Exec {
    fleet::lifecycle::Exec::new(env!("CARGO_BIN_EXE_fleet")).reporting_to(
        fleet::lifecycle::ReportTo {
            url: server.url(),
            ca_file: None,
            sentinel_auth: None,
            timeout: Duration::from_secs(10),
            prefix: Keys::default().prefix().to_owned(),
        },
    )
}

/// A connection that loses replies: the first `times` commands whose packed bytes hold every one
/// of `needles` fail with a timeout, after the server applied them (`applied`) or before it saw
/// them. It plays a network that drops a reply, which is exactly the ambiguous write.
#[derive(Clone)]
pub struct LoseReply<C> {
    inner: C,
    rules: std::sync::Arc<std::sync::Mutex<Vec<Rule>>>,
}

#[derive(Clone, Debug)]
pub struct Rule {
    pub needles: Vec<&'static str>,
    pub times: usize,
    pub applied: bool,
}

impl<C> LoseReply<C> {
    pub fn new(inner: C) -> Self {
        Self {
            inner,
            rules: Default::default(),
        }
    }

    pub fn lose(&self, rule: Rule) {
        self.rules.lock().unwrap().push(rule);
    }

    /// How many replies are still to be lost.
    pub fn pending(&self) -> usize {
        self.rules.lock().unwrap().iter().map(|r| r.times).sum()
    }

    fn matches(&self, packed: &[u8]) -> Option<bool> {
        let text = String::from_utf8_lossy(packed);
        let mut rules = self.rules.lock().unwrap();
        let rule = rules
            .iter_mut()
            .find(|r| r.times > 0 && r.needles.iter().all(|n| text.contains(n)))?;
        rule.times -= 1;
        Some(rule.applied)
    }
}

fn lost() -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "the reply was lost (test)",
    ))
}

impl<C: redis::aio::ConnectionLike + Send> redis::aio::ConnectionLike for LoseReply<C> {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        let rule = self.matches(&cmd.get_packed_command());
        Box::pin(async move {
            match rule {
                None => self.inner.req_packed_command(cmd).await,
                Some(applied) => {
                    if applied {
                        let _ = self.inner.req_packed_command(cmd).await;
                    }
                    Err(lost())
                }
            }
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        self.inner.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}

/// Runs the `fleet` binary against `server` with `args`, and returns what it did.
pub fn run_fleet(server: &RedisServer, args: &[&str]) -> std::process::Output {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_fleet"))
        .arg("--redis")
        .arg(server.url())
        .args(args)
        .output()
        .expect("running fleet");
    contract::check(args, &String::from_utf8_lossy(&o.stdout));
    o
}

/// `run_fleet`, awaited within `bounded`'s bound: a `fleet` that would hang (a file it reads
/// without end, say) fails the test, and is killed, instead of holding CI.
pub async fn run_fleet_bounded(server: &RedisServer, args: &[&str]) -> std::process::Output {
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_fleet"))
        .arg("--redis")
        .arg(server.url())
        .args(args)
        .kill_on_drop(true)
        .output();
    let o = bounded(&format!("fleet {args:?}"), child)
        .await
        .expect("running fleet");
    contract::check(args, &String::from_utf8_lossy(&o.stdout));
    o
}

/// `run_fleet` that must succeed: its stdout.
pub fn fleet_ok(server: &RedisServer, args: &[&str]) -> String {
    let o = run_fleet(server, args);
    assert!(
        o.status.success(),
        "fleet {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// What a [`Meddled`] connection runs before a call: given the call's packed bytes (one command or
/// a whole pipeline), a future to await first (a write through another connection), or none.
pub type Before =
    std::sync::Arc<dyn Fn(&[u8]) -> Option<futures::future::BoxFuture<'static, ()>> + Send + Sync>;

/// A connection that lets another writer in before the calls it chooses: the writes between a
/// read's round trips that a read in several must notice.
#[derive(Clone)]
pub struct Meddled {
    inner: MultiplexedConnection,
    before: Before,
}

impl Meddled {
    pub fn new(
        inner: MultiplexedConnection,
        before: impl Fn(&[u8]) -> Option<futures::future::BoxFuture<'static, ()>>
        + Send
        + Sync
        + 'static,
    ) -> Self {
        Meddled {
            inner,
            before: std::sync::Arc::new(before),
        }
    }
}

impl redis::aio::ConnectionLike for Meddled {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        Box::pin(async move {
            if let Some(write) = (self.before)(&cmd.get_packed_command()) {
                write.await;
            }
            self.inner.req_packed_command(cmd).await
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        Box::pin(async move {
            if let Some(write) = (self.before)(&pipeline.get_packed_pipeline()) {
                write.await;
            }
            self.inner
                .req_packed_commands(pipeline, offset, count)
                .await
        })
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}

/// A beat as an agent of the previous release sends it (SPEC §2.11, the upgrade order): its
/// script (`tests/fixtures/beat-0.1.lua`) whole, as the user `conn` connects as, with that
/// release's arguments. It adds the bench's name to the join set, which this release only reads.
pub async fn previous_beat<C: redis::aio::ConnectionLike>(
    conn: &mut C,
    keys: &Keys,
    bench: &str,
    ttl_ms: u64,
) -> redis::RedisResult<redis::Value> {
    previous_beat_with(conn, keys, bench, ttl_ms, ["", "", ""]).await
}

/// `previous_beat` with that release's explicit hold, load and cores (`""` for none).
pub async fn previous_beat_with<C: redis::aio::ConnectionLike>(
    conn: &mut C,
    keys: &Keys,
    bench: &str,
    ttl_ms: u64,
    [hold, load, cores]: [&str; 3],
) -> redis::RedisResult<redis::Value> {
    const SCRIPT: &str = include_str!("../fixtures/beat-0.1.lua");
    let n = name(bench);
    redis::cmd("EVAL")
        .arg(SCRIPT)
        .arg(2)
        .arg(keys.heartbeat(&n))
        .arg(keys.joined_key(&n))
        .arg(bench)
        .arg(ttl_ms)
        .arg(hold)
        .arg(load)
        .arg(cores)
        .arg(keys.hold_requests())
        .arg(keys.joined())
        .arg(keys.off_request(&n))
        .arg(keys.off_ack(&n))
        .arg(keys.wake_channel())
        .query_async(conn)
        .await
}

/// The provider over `config` and the store of `server`, served on a loopback socket as `fleet
/// serve` serves it, and a client of it: what cluster-autoscaler talks to.
pub async fn provider_client(
    server: &RedisServer,
    config: std::sync::Arc<fleet::config::Config>,
) -> fleet::provider::wire::cloud_provider_client::CloudProviderClient<tonic::transport::Channel> {
    use fleet::provider::wire::cloud_provider_client::CloudProviderClient;
    let (_tx, rx) = tokio::sync::watch::channel(config);
    let service = fleet::provider::service::Provider::new(
        rx,
        fleet::store::claims::ClaimStore::new(conn(server).await, Keys::default()),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    serve_provider(listener, service);
    CloudProviderClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
}

/// Serves `provider` on `listener` as `fleet serve` does (no leadership to follow, the bounds of
/// a 1 024-descriptor process), until the test ends.
pub fn serve_provider<C>(
    listener: tokio::net::TcpListener,
    provider: fleet::provider::service::Provider<C>,
) -> tokio::task::JoinHandle<Result<(), fleet::provider::server::ServeError>>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    tokio::spawn(fleet::provider::server::serve(
        listener,
        None,
        std::sync::Arc::new(provider),
        (
            None,
            fleet::provider::server::Bounds::of(1_024, &Default::default()),
        ),
        tokio_util::sync::CancellationToken::new(),
    ))
}

/// The events of a stream as an SSE client reads them (the WHATWG rules): a line ends at CRLF,
/// CR or LF; a blank line ends an event; `event` names it; `data` lines join with LF; any other
/// field is recorded. (name, data) per event, and the other fields seen.
pub fn sse_events(stream: &str) -> (Vec<(String, String)>, Vec<String>) {
    let mut events = Vec::new();
    let mut others = Vec::new();
    let mut name: Option<String> = None;
    let mut data: Option<String> = None;
    let mut rest = stream;
    while let Some(at) = rest.find(['\r', '\n']) {
        let line = &rest[..at];
        rest = &rest[at + if rest[at..].starts_with("\r\n") { 2 } else { 1 }..];
        if line.is_empty() {
            if let Some(mut d) = data.take() {
                d.pop();
                events.push((name.take().unwrap_or_else(|| "message".to_owned()), d));
            }
            name = None;
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => name = Some(value.to_owned()),
            "data" => {
                let d = data.get_or_insert_with(String::new);
                d.push_str(value);
                d.push('\n');
            }
            _ => others.push(line.to_owned()),
        }
    }
    (events, others)
}
