//! Helpers for tests that reach Redis by URL (a Sentinel set, a Cluster) rather than through a
//! private server's handle: running the binary, raw commands on one node, bounded polling, and a
//! `fleet serve` configuration whose scripts beat through the same URL.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use fleet_redis::connect::Endpoint;
use fleet_testing::Fixture;
use fleet_testing::fixture::{Group, Op};

/// Runs the fleet binary with `--redis url`.
pub fn fleet(url: &str, args: &[&str]) -> Output {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_fleet"))
        .args(["--redis", url])
        .args(args)
        .output()
        .expect("running fleet");
    super::contract::check(args, &String::from_utf8_lossy(&o.stdout));
    o
}

/// `fleet` that must succeed: its stdout.
pub fn ok(url: &str, args: &[&str]) -> String {
    let o = fleet(url, args);
    assert!(
        o.status.success(),
        "fleet {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// JSON without its layout.
pub fn compact(json: &str) -> String {
    json.split_whitespace().collect()
}

/// A raw command on the server at `url` (a plain URL of one server).
pub async fn raw<T: redis::FromRedisValue>(url: &str, args: &[&str]) -> redis::RedisResult<T> {
    let mut c = Endpoint::new(url, Duration::from_secs(2))
        .connect()
        .await
        .map_err(|e| redis::RedisError::from(std::io::Error::other(e.to_string())))?;
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query_async(&mut c).await
}

/// Polls `check` every 50 ms until it holds, within `bound`; says what it waited for.
pub async fn until(what: &str, bound: Duration, mut check: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + bound;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {bound:?}: {what}"
        );
        // Polling another process's state: nothing wakes this test sooner.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether the server at `url` has a subscriber on the sharded channel `channel`.
pub async fn subscribed(url: &str, channel: &str) -> bool {
    let reply: Vec<redis::Value> = raw(url, &["PUBSUB", "SHARDNUMSUB", channel])
        .await
        .unwrap_or_default();
    matches!(reply.get(1), Some(redis::Value::Int(n)) if *n >= 1)
}

/// A `fleet serve` configuration in `dir`: one group `pool-a` of two slots, `bench-01` and
/// `bench-02`, whose startup and shutdown scripts beat the slot's key through `url`.
pub fn serve_config(dir: &Path, url: &str) -> PathBuf {
    serve_config_of(dir, url, &[("pool-a", &["bench-01", "bench-02"])])
}

/// A `fleet serve` configuration in `dir` of `groups` (each a name and its slots), whose
/// startup and shutdown scripts beat the slot's key through `url`.
pub fn serve_config_of(dir: &Path, url: &str, groups: &[(&str, &[&str])]) -> PathBuf {
    serve_config_with(dir, url, groups, &[], None)
}

/// `serve_config_of`, whose scripts give their `fleet beat` the global `flags` too (`--redis-ca
/// F` for a TLS setup, the sentinels' credentials: the operations get no `FLEET_` variable of
/// `fleet serve`'s) and, with `log`, first append `<slot> <claim> <startup|shutdown>` to that
/// file: a test counts the operations that ran from it.
pub fn serve_config_with(
    dir: &Path,
    url: &str,
    groups: &[(&str, &[&str])],
    flags: &[&str],
    log: Option<&Path>,
) -> PathBuf {
    let logged = |kind: &str| match log {
        Some(_) => format!(r#"echo "$FLEET_SLOT ${{FLEET_CLAIM:--}} {kind}" >> "$LOG"; "#),
        None => String::new(),
    };
    let flags: Vec<String> = flags.iter().map(|f| format!(r#""{f}""#)).collect();
    let beat = |kind: &str, ttl: &str| {
        Op::sh(&format!(
            r#"{}"$BIN" --redis "$REDIS" {} beat "$FLEET_SLOT" --ttl {ttl}"#,
            logged(kind),
            flags.join(" ")
        ))
    };
    let mut fixture = Fixture::new();
    for (group, _) in groups {
        let mut pool = Group::new(group)
            .min(0)
            .ungated()
            .env("BIN", env!("CARGO_BIN_EXE_fleet"))
            .env("REDIS", url);
        if let Some(log) = log {
            pool = pool.env("LOG", log.display().to_string());
        }
        fixture = fixture.group(
            pool.startup(beat("startup", "1h"))
                .shutdown(beat("shutdown", "0"))
                .timing("job_monitor_poll_interval", "100ms"),
        );
    }
    for (group, names) in groups {
        fixture = fixture.slots(group, *names);
    }
    fixture.write(dir)
}

/// The lines of an operations log that `serve_config_with` wrote (none when there is no file
/// yet), each as `(slot, claim, kind)`.
pub fn operations(log: &Path) -> Vec<(String, String, String)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(w.len(), 3, "a log line of three words: {l:?}");
            (w[0].to_owned(), w[1].to_owned(), w[2].to_owned())
        })
        .collect()
}

/// The metrics address a `fleet serve` start line names (`metrics=ADDR`).
pub fn metrics_addr(started: &str) -> String {
    started
        .split_whitespace()
        .find_map(|w| w.strip_prefix("metrics="))
        .expect("the start line names the metrics address")
        .to_owned()
}

/// The status `/readyz` answers at `addr`.
pub async fn readyz(addr: &str) -> u16 {
    let addr = addr.to_owned();
    tokio::task::spawn_blocking(move || super::http_get(&addr, "/readyz").0)
        .await
        .unwrap()
}

/// The value of an unlabelled sample of `/metrics` at `addr`.
pub fn sample(addr: &str, name: &str) -> u64 {
    let (_, text) = super::http_get(addr, "/metrics");
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics")) as u64
}
