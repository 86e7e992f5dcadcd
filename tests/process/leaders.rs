//! Several `fleet serve` processes on one Redis (SPEC §5.1): one acts; a leader stopped with
//! SIGSTOP past its lease is replaced, and once resumed has every write refused; a leader killed
//! with SIGKILL is replaced within a lease.

use crate::support;

use std::time::Duration;

use fleet_testing::fixture::{BOOTS, Group, Op, POWERS_OFF};
use fleet_testing::{Fixture, RedisServer};
use support::*;

/// One slot whose operations log the claim (`$LOG.startup`, `$LOG.shutdown`) before the bench
/// beats or reads DOWN; `wait` goes between the startup's log and its beat.
fn fixture(server: &RedisServer, log: &std::path::Path, wait: &str) -> Fixture {
    let startup = format!(r#"echo "$FLEET_CLAIM" >> "$LOG.startup"; {wait}{BOOTS}"#);
    let shutdown = format!(r#"echo "$FLEET_CLAIM" >> "$LOG.shutdown"; {POWERS_OFF}"#);
    Fixture::new()
        .group(
            Group::new("pool-a")
                .min(0)
                .max(1)
                .ungated()
                .env("BIN", env!("CARGO_BIN_EXE_fleet"))
                .env("REDIS", server.url())
                .env("LOG", log.display().to_string())
                .startup(Op::sh(&startup).timeout("10s"))
                .shutdown(Op::sh(&shutdown).timeout("10s"))
                .timing("job_monitor_poll_interval", "100ms"),
        )
        .slots("pool-a", ["bench-01"])
}

fn yaml(server: &RedisServer, log: &std::path::Path) -> String {
    fixture(server, log, "").yaml()
}

const ARGS: [&str; 10] = [
    "--metrics-addr",
    "127.0.0.1:0",
    "--interval",
    "100ms",
    "--lease",
    "1s",
    "--blind-grace",
    "0s",
    "--holder",
    "",
];

/// Starts a `fleet serve` named `name` (its lease holder id).
fn start(name: &'static str, server: &RedisServer, config: &std::path::Path) -> Serve {
    let mut args = ARGS;
    args[9] = name;
    Serve::start(name, server, config, &args)
}

fn ops(dir: &std::path::Path, kind: &str) -> usize {
    std::fs::read_to_string(dir.join(format!("ops.{kind}")))
        .unwrap_or_default()
        .lines()
        .count()
}

#[tokio::test]
async fn a_stopped_leader_is_replaced_and_its_late_writes_are_refused() {
    let server = server();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("fleet.yaml");
    std::fs::write(&config, yaml(&server, &dir.path().join("ops"))).unwrap();
    let mut a = start("a", &server, &config);
    a.log(&["became the leader"]).await;
    let mut b = start("b", &server, &config);
    b.log(&["fleet serve started"]).await;

    fleet_ok(&server, &["claim", "bench-01"]);
    a.log(&["claim moved", "to=ready"]).await;
    assert_eq!(ops(dir.path(), "startup"), 1);

    // a stops (SIGSTOP) past its lease: b takes over.
    a.signal("-STOP");
    b.log(&["became the leader"]).await;
    let claims: serde_json::Value =
        serde_json::from_str(&fleet_ok(&server, &["claims", "-o", "json"])).unwrap();
    let name = claims[0]["name"].as_str().unwrap().to_owned();
    fleet_ok(&server, &["cancel", &name]);
    b.log(&["claim moved", "to=completed"]).await;
    // a resumes: it finds it lost the lease (or has its first write refused) and acts no more.
    a.signal("-CONT");
    a.log(&["lost leadership"]).await;
    assert_eq!(ops(dir.path(), "startup"), 1, "no second startup");
    assert_eq!(ops(dir.path(), "shutdown"), 1, "one shutdown, by b");

    // b is killed outright: a takes over within a lease.
    b.signal("-KILL");
    a.log(&["became the leader"]).await;
    fleet_ok(&server, &["claim", "bench-01"]);
    a.log(&["claim moved", "to=ready"]).await;
    assert_eq!(ops(dir.path(), "startup"), 2);
    a.signal("-TERM");
    let status = bounded("a to stop", a.child.wait()).await.unwrap();
    assert_eq!(status.code(), Some(0));
}

/// Scale cycles through three `fleet serve` processes while the leader is stopped (SIGSTOP past
/// its lease, then resumed) or killed (SIGKILL, then replaced) at random, seeded. Every cycle
/// converges; every claim's startup and shutdown each ran exactly once.
async fn cycles_through_three_leaders(cycles: usize) {
    use rand::{Rng, SeedableRng};
    let seed: u64 = std::env::var("FLEET_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(7);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let server = server();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("fleet.yaml");
    std::fs::write(&config, yaml(&server, &dir.path().join("ops"))).unwrap();
    let names = [
        "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p",
    ];
    let mut next = 0;
    let mut procs: Vec<Serve> = Vec::new();
    for _ in 0..3 {
        procs.push(start(names[next], &server, &config));
        next += 1;
    }
    procs[0].log(&["fleet serve started"]).await;
    let store = fleet::store::claims::ClaimStore::new(
        conn(&server).await,
        fleet::store::keys::Keys::default(),
    );
    let group = fleet::domain::name::GroupName::parse("pool-a").unwrap();
    let phase_of = |name: String| {
        let store = store.clone();
        let group = group.clone();
        async move {
            store
                .read_groups(&[group])
                .await
                .unwrap()
                .remove(0)
                .claims
                .iter()
                .find(|c| c.name.as_str() == name)
                .map(|c| c.phase)
        }
    };
    let leader = |server: &RedisServer| {
        let url = server.url();
        async move {
            let mut c = fleet_redis::connect::Endpoint::new(url, Duration::from_secs(5))
                .connect()
                .await
                .unwrap();
            let holder: Option<String> = redis::cmd("GET")
                .arg(fleet::store::keys::Keys::default().leader())
                .query_async(&mut c)
                .await
                .unwrap();
            holder.and_then(|h| h.split(' ').next().map(str::to_owned))
        }
    };
    let mut claims = Vec::new();
    for cycle in 0..cycles {
        let out = fleet_ok(&server, &["claim", "bench-01"]);
        let name = out.split_whitespace().nth(2).unwrap().to_owned();
        // A fault while the claim is in flight.
        let fault = rng.random_range(0..3);
        if fault > 0
            && let Some(holder) = leader(&server).await
            && let Some(i) = procs.iter().position(|p| p.name == holder)
        {
            if fault == 1 {
                procs[i].signal("-STOP");
                tokio::time::sleep(Duration::from_millis(1500)).await;
                procs[i].signal("-CONT");
            } else {
                procs[i].signal("-KILL");
                let _ = procs[i].child.wait().await;
                procs.remove(i);
                procs.push(start(names[next % names.len()], &server, &config));
                next += 1;
            }
        }
        // The claim converges to ready, or, when a leader died between recording its startup and
        // running it, to failed StartupJobTimeout once the operation's own timeout has passed (the
        // startup is never fired twice): then it is asked for again, as cluster-autoscaler would.
        let mut name = name;
        for want in ["ready", "completed"] {
            if want == "completed" {
                fleet_ok(&server, &["cancel", &name]);
            }
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            loop {
                let phase = phase_of(name.clone()).await;
                if phase.is_some_and(|p| p.as_str() == want) {
                    break;
                }
                if want == "ready" && phase.is_some_and(|p| p.as_str() == "failed") {
                    let out = fleet_ok(&server, &["claim", "bench-01"]);
                    claims.push(name);
                    name = out.split_whitespace().nth(2).unwrap().to_owned();
                    continue;
                }
                if tokio::time::Instant::now() > deadline {
                    let claims = fleet_ok(&server, &["claims", "-o", "json"]);
                    let state = fleet_ok(&server, &["state", "-o", "json"]);
                    let describe = fleet_ok(&server, &["describe", "bench-01", "-o", "json"]);
                    panic!(
                        "cycle {cycle} (seed {seed}): {name} never became {want}\nclaims: {claims}\nstate: {state}\ndescribe: {describe}"
                    );
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        claims.push(name);
    }
    for kind in ["startup", "shutdown"] {
        let log =
            std::fs::read_to_string(dir.path().join(format!("ops.{kind}"))).unwrap_or_default();
        for name in &claims {
            let n = log.lines().filter(|l| l == name).count();
            assert!(n <= 1, "seed {seed}: {kind} of {name} ran {n} times");
        }
    }
}

#[tokio::test]
async fn scale_cycles_through_three_leaders_with_faults_converge() {
    cycles_through_three_leaders(4).await;
}

#[tokio::test]
#[ignore = "the long form: 50 cycles through three leaders (a few minutes)"]
async fn fifty_scale_cycles_through_three_leaders_with_faults() {
    cycles_through_three_leaders(50).await;
}

// A clean stop (a rolling restart) does not take the startup in flight with it. The
// old controller killed it (kill_on_drop) and its successor failed the claim StartupJobTimeout,
// burning an attempt on every restart. Now the operation runs on in its wrapper, which reports
// its real outcome to the store; the successor records it and the claim goes ready on attempt 1,
// with the startup run once.
#[tokio::test]
async fn a_clean_stop_leaves_the_startup_running_and_the_successor_records_its_outcome() {
    let server = server();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("ops");
    let go = dir.path().join("ops.go");
    let config = dir.path().join("fleet.yaml");
    // The startup waits for the test to let it finish: it is certainly in flight at the stop.
    let text = fixture(
        &server,
        &log,
        r#"while [ ! -e "$LOG.go" ]; do sleep 0.05; done; "#,
    )
    .yaml();
    assert!(text.contains("while"), "{text}");
    std::fs::write(&config, text).unwrap();
    let mut a = start("a", &server, &config);
    a.log(&["became the leader"]).await;
    let mut b = start("b", &server, &config);
    b.log(&["fleet serve started"]).await;
    fleet_ok(&server, &["claim", "bench-01"]);
    a.log(&["starting machine"]).await;
    a.signal("-TERM");
    let status = bounded("a to stop", a.child.wait()).await.unwrap();
    assert_eq!(status.code(), Some(0));
    b.log(&["became the leader"]).await;
    std::fs::write(&go, "").unwrap();
    b.log(&["claim moved", "to=ready"]).await;
    assert_eq!(ops(dir.path(), "startup"), 1, "the startup ran once");
    let claims: serde_json::Value =
        serde_json::from_str(&fleet_ok(&server, &["claims", "-o", "json"])).unwrap();
    assert_eq!(claims[0]["phase"], "ready", "{claims}");
    assert_eq!(claims[0]["attempt"], 1, "{claims}");
}
