//! Redis Sentinel (SPEC §2.7, "Sentinel"), against a real setup on loopback: one primary, one
//! replica and three sentinels (`fleet_testing::SentinelSet`). The verbs, the agent and
//! `fleet serve` reach the primary through a `redis+sentinel://` URL and follow it when it is
//! killed and the sentinels promote the replica. Every wait is bounded; nothing sleeps to
//! synchronise.

use crate::support;

use std::time::{Duration, Instant};

use fleet::store::keys::Keys;
use fleet::store::presence::Presence;
use fleet_redis::connect::Endpoint;
use fleet_testing::{SentinelOptions, SentinelSet};
use support::remote::{
    compact, fleet, metrics_addr, ok, raw, readyz, serve_config, subscribed, until,
};
use support::{beat, bounded};

async fn set() -> SentinelSet {
    bounded("the sentinel set to start", SentinelSet::start())
        .await
        .expect("starting the sentinel set")
}

/// A set whose primary, replica and sentinels speak TLS only.
async fn tls_set() -> SentinelSet {
    let options = SentinelOptions {
        tls: true,
        ..SentinelOptions::default()
    };
    bounded("the TLS sentinel set to start", SentinelSet::with(options))
        .await
        .expect("starting the TLS sentinel set")
}

/// Whether `key` exists on the server of `set` on `port`, asked there alone.
async fn exists(set: &SentinelSet, port: u16, key: &str) -> i64 {
    let mut c = set.direct(port).await.expect("a connection to the server");
    redis::cmd("EXISTS")
        .arg(key)
        .query_async(&mut c)
        .await
        .unwrap()
}

#[tokio::test]
async fn beat_state_and_live_go_through_the_sentinels_to_the_primary() {
    let set = set().await;
    let url = set.url();
    ok(&url, &["beat", "bench-01", "--ttl", "1m"]);
    let state = compact(&ok(&url, &["state", "-o", "json"]));
    assert!(
        state.contains(r#""name":"bench-01","state":"UP""#),
        "{state}"
    );
    assert_eq!(ok(&url, &["live"]), "bench-01\n");
    // The beat is on the primary the sentinels name, and nowhere else was written to.
    let primary = set.direct_url(set.primary_port().await.unwrap());
    let exists: i64 = raw(&primary, &["EXISTS", "{fleet}:bench:bench-01"])
        .await
        .unwrap();
    assert_eq!(exists, 1);
}

#[tokio::test]
async fn a_connection_returns_the_failed_call_and_follows_the_new_primary() {
    let mut set = set().await;
    let endpoint = Endpoint::new(set.url(), Duration::from_secs(10));
    let presence = Presence::new(endpoint.open().await.unwrap(), Keys::default());
    presence
        .beat(&beat("bench-01", Duration::from_secs(60)))
        .await
        .unwrap();
    let failover = bounded("the failover", set.kill_primary()).await.unwrap();
    eprintln!("failover {failover:?}");
    // The call on the dead primary's connection fails and says so; nothing runs it again.
    let err = presence
        .beat(&beat("bench-02", Duration::from_secs(60)))
        .await
        .expect_err("the primary is gone");
    let source = std::error::Error::source(&err).expect("a redis error");
    let redis = source.downcast_ref::<redis::RedisError>().unwrap();
    assert!(fleet_redis::conn::is_failover(redis), "{redis}");
    // The next call asks the sentinels and lands on the new primary.
    let asked = Instant::now();
    presence
        .beat(&beat("bench-02", Duration::from_secs(60)))
        .await
        .unwrap();
    eprintln!(
        "the next call landed {:?} after the failover",
        asked.elapsed()
    );
    let exists: i64 = raw(
        &set.direct_url(failover.to),
        &["EXISTS", "{fleet}:bench:bench-02"],
    )
    .await
    .unwrap();
    assert_eq!(exists, 1);
}

// SPEC §2.7: `rediss+sentinel://` is TLS to the sentinels and to the primary, the server's
// certificate checked against `--redis-ca`. Here nothing of the set listens in plain TCP.
#[tokio::test]
async fn verbs_go_through_sentinels_and_a_primary_that_speak_only_tls() {
    let set = tls_set().await;
    let url = set.url();
    assert!(url.starts_with("rediss+sentinel://"), "{url}");
    let ca = set.ca().expect("a TLS set has a CA").display().to_string();
    let tls = |args: &[&str]| -> Vec<String> {
        ["--redis-ca", &ca]
            .iter()
            .chain(args)
            .map(|a| (*a).to_owned())
            .collect()
    };
    let run = |args: &[&str]| {
        ok(
            &url,
            &tls(args).iter().map(String::as_str).collect::<Vec<_>>(),
        )
    };
    run(&["beat", "bench-01", "--ttl", "1m"]);
    let state = compact(&run(&["state", "-o", "json"]));
    assert!(
        state.contains(r#""name":"bench-01","state":"UP""#),
        "{state}"
    );
    assert_eq!(run(&["live"]), "bench-01\n");
    let primary = set.primary_port().await.unwrap();
    assert_eq!(exists(&set, primary, "{fleet}:bench:bench-01").await, 1);
    // Without the CA the sentinels' certificate is not trusted: exit 1, saying TLS, no hang.
    let o = fleet(&url, &["--timeout", "1s", "live"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("TLS failed") || err.contains("certificate"),
        "{err}"
    );
    // The plain scheme against sentinels that speak only TLS: exit 1 within the timeout.
    let plain = url.replacen("rediss+sentinel://", "redis+sentinel://", 1);
    let o = fleet(&plain, &["--timeout", "1s", "--redis-ca", &ca, "live"]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[tokio::test]
async fn a_tls_connection_returns_the_failed_call_and_follows_the_new_primary() {
    let mut set = tls_set().await;
    let presence = Presence::new(set.endpoint().open().await.unwrap(), Keys::default());
    presence
        .beat(&beat("bench-01", Duration::from_secs(60)))
        .await
        .unwrap();
    let failover = bounded("the failover", set.kill_primary()).await.unwrap();
    eprintln!("failover in TLS {failover:?}");
    let err = presence
        .beat(&beat("bench-02", Duration::from_secs(60)))
        .await
        .expect_err("the primary is gone");
    let source = std::error::Error::source(&err).expect("a redis error");
    let redis = source.downcast_ref::<redis::RedisError>().unwrap();
    assert!(fleet_redis::conn::is_failover(redis), "{redis}");
    // The next call asks the sentinels again, over TLS, and lands on the new primary.
    let asked = Instant::now();
    presence
        .beat(&beat("bench-02", Duration::from_secs(60)))
        .await
        .unwrap();
    eprintln!(
        "in TLS, the next call landed {:?} after the failover",
        asked.elapsed()
    );
    assert_eq!(exists(&set, failover.to, "{fleet}:bench:bench-02").await, 1);
    let snapshot = presence.read(&[]).await.unwrap();
    let names: Vec<&str> = snapshot.benches.iter().map(|b| b.name.as_str()).collect();
    assert!(names.contains(&"bench-02"), "{names:?}");
}

#[tokio::test]
async fn a_running_agent_keeps_beating_across_a_failover() {
    let mut set = set().await;
    let url = set.url();
    let mut agent = tokio::process::Command::new(env!("CARGO_BIN_EXE_fleet"))
        .args(["--redis", &url, "--timeout", "1s"])
        .args(["agent", "bench-a", "--interval", "200ms"])
        .env("FLEET_LOG", "info")
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("starting fleet agent");
    let key = "{fleet}:bench:bench-a";
    let first = set.direct_url(set.primary_port().await.unwrap());
    until(
        "the agent's first beat",
        Duration::from_secs(10),
        async || raw::<i64>(&first, &["EXISTS", key]).await == Ok(1),
    )
    .await;
    let failover = bounded("the failover", set.kill_primary()).await.unwrap();
    let promoted = Instant::now();
    // The replica may hold the key from before the kill: remove it, and wait for a new beat.
    let new = set.direct_url(failover.to);
    let _: i64 = raw(&new, &["DEL", key]).await.unwrap();
    until(
        "the agent to beat on the new primary",
        Duration::from_secs(10),
        async || raw::<i64>(&new, &["EXISTS", key]).await == Ok(1),
    )
    .await;
    eprintln!(
        "failover {failover:?}; the agent beat on the new primary {:?} after it",
        promoted.elapsed()
    );
    assert!(
        agent.try_wait().unwrap().is_none(),
        "the agent kept running"
    );
    let state = compact(&ok(&url, &["state", "bench-a", "-o", "json"]));
    assert!(state.contains(r#""state":"UP""#), "{state}");
}

#[tokio::test]
async fn serve_keeps_passing_and_claims_reach_ready_across_a_failover() {
    let mut set = set().await;
    let url = set.url();
    let dir = tempfile::tempdir().unwrap();
    let config = serve_config(dir.path(), &url);
    let args = [
        "--metrics-addr",
        "127.0.0.1:0",
        "--interval",
        "100ms",
        "--blind-grace",
        "0s",
        "--lease",
        "1s",
    ];
    let mut serve = support::Serve::start_at("serve", &url, &config, &args);
    let started = serve.log(&["fleet serve started"]).await;
    let addr = metrics_addr(&started);
    ok(&url, &["claim", "bench-01"]);
    serve.log(&["claim moved", "to=ready"]).await;
    until(
        "/readyz to answer 200",
        Duration::from_secs(10),
        async || readyz(&addr).await == 200,
    )
    .await;

    // The wake listener is subscribed on the primary (SPEC §4.5)...
    let channel = fleet::store::keys::Keys::default().wake_channel();
    let old = set.primary_port().await.unwrap();
    let old_url = set.direct_url(old);
    until(
        "the wake listener on the primary",
        Duration::from_secs(10),
        async || subscribed(&old_url, &channel).await,
    )
    .await;
    let failover = bounded("the failover", set.kill_primary()).await.unwrap();
    let promoted = Instant::now();
    // ...and follows it to the new one.
    let new = set.primary_port().await.unwrap();
    assert_ne!(new, old);
    let new_url = set.direct_url(new);
    until(
        "the wake listener on the new primary",
        Duration::from_secs(15),
        async || subscribed(&new_url, &channel).await,
    )
    .await;
    // The controller's passes go on against the new primary: a new claim reaches ready, and
    // the process says it is ready again.
    ok(&url, &["--timeout", "10s", "claim", "bench-02"]);
    serve.log(&["claim moved", "to=ready", "bench-02"]).await;
    until(
        "/readyz to answer 200 again",
        Duration::from_secs(10),
        async || readyz(&addr).await == 200,
    )
    .await;
    eprintln!(
        "failover {failover:?}; a new claim was ready {:?} after it",
        promoted.elapsed()
    );
    let live = ok(&url, &["live"]);
    assert_eq!(live, "bench-01\nbench-02\n", "{live}");
    let lines = serve.stop().await;
    assert!(
        lines
            .iter()
            .any(|l| l.contains("following the new redis primary")),
        "{lines:#?}"
    );
}

#[test]
fn a_bad_sentinel_or_cluster_url_is_exit_2_naming_what_is_valid_and_never_the_password() {
    for (url, said) in [
        ("redis+sentinel://u:hunter2@127.0.0.1:1", "no master name"),
        ("redis+sentinel://u:hunter2@127.0.0.1:x/m", "port"),
        ("redis+sentinel://u:hunter2@/m", "no host"),
        ("redis+sentinel://u:hunter2@h/m/x", "database"),
        ("redis+cluster://u:hunter2@h:7000/0", "no path"),
        ("rediss+cluster://u:hunter2@h:x", "port"),
    ] {
        for verb in [&["state"][..], &["beat", "b1"], &["agent", "b1"]] {
            let o = fleet(url, verb);
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{url} {verb:?}: {err}");
            assert!(err.contains(said), "{url} {verb:?}: {err}");
            assert!(err.contains("redis+sentinel://"), "{url} {verb:?}: {err}");
            assert!(!err.contains("hunter2"), "{url} {verb:?}: {err}");
        }
    }
}

#[tokio::test]
async fn an_acl_user_reaches_the_primary_and_its_password_never_shows() {
    let set = bounded(
        "the sentinel set to start",
        SentinelSet::with_user("fleet", "s3cret-pw"),
    )
    .await
    .expect("starting the sentinel set");
    let url = set.url();
    assert!(url.contains("fleet:s3cret-pw@"), "{url}");
    ok(&url, &["beat", "bench-01", "--ttl", "1m"]);
    assert_eq!(ok(&url, &["live"]), "bench-01\n");
    // A wrong password is refused by the primary: exit 1, naming the user, never the password.
    let wrong = url.replace("s3cret-pw", "wr0ng-pw");
    let o = fleet(&wrong, &["state"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("authentication failed for user fleet"),
        "{err}"
    );
    assert!(
        !err.contains("wr0ng-pw") && !err.contains("s3cret"),
        "{err}"
    );
    // Sentinels nobody listens on: exit 1 within the timeout, saying what each said.
    let dead = "redis+sentinel://fleet:s3cret-pw@127.0.0.1:1,127.0.0.1:2/mymaster";
    let o = fleet(dead, &["--timeout", "500ms", "state"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("127.0.0.1:2") && err.contains("connection refused"),
        "{err}"
    );
    assert!(!err.contains("s3cret"), "{err}");
}

/// The fleet binary with `--redis url`, `args` and the environment `env`, and how long it took.
fn timed(url: &str, args: &[&str], env: &[(&str, &str)]) -> (std::process::Output, Duration) {
    let started = Instant::now();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_fleet"))
        .envs(env.iter().copied())
        .args(["--redis", url])
        .args(args)
        .output()
        .expect("running fleet");
    (o, started.elapsed())
}

// SPEC §2.7: sentinels whose password is the primary's (`requirepass` on every server and
// sentinel, one password). A sentinel answers fleet's first question `NOAUTH`, and is asked
// again with the URL's user and password.
#[tokio::test]
async fn sentinels_that_share_the_primarys_password_are_asked_again_with_the_urls() {
    let options = SentinelOptions {
        user: Some(("default".to_owned(), "sh4red-pw".to_owned())),
        sentinel_auth: Some((None, "sh4red-pw".to_owned())),
        ..SentinelOptions::default()
    };
    let set = bounded("the sentinel set to start", SentinelSet::with(options))
        .await
        .expect("starting the sentinel set");
    let url = set.url();
    assert!(url.contains("default:sh4red-pw@"), "{url}");
    // The sentinels do ask for the password: the NOAUTH path is the one taken.
    let port = set.sentinel_ports()[0];
    let mut bare = redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let refused = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(fleet_testing::MASTER)
        .query_async::<redis::Value>(&mut bare)
        .await
        .expect_err("a sentinel with a password");
    assert_eq!(refused.code(), Some("NOAUTH"), "{refused}");
    ok(&url, &["beat", "bench-01", "--ttl", "1m"]);
    assert_eq!(ok(&url, &["live"]), "bench-01\n");
    // Without the password, every sentinel asks for one: exit 1 at once (no later round could
    // mend it), naming where the password goes, never the password.
    let no_password = url.replace("default:sh4red-pw@", "");
    let (o, took) = timed(&no_password, &["--timeout", "5s", "live"], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("asks for a password") && err.contains("--sentinel-password-file"),
        "{err}"
    );
    assert!(took < Duration::from_secs(3), "{took:?}: {err}");
    assert!(!err.contains("sh4red"), "{err}");
}

// SPEC §2.7: sentinels with an ACL user and a password of their own, other than the primary's.
// fleet reads them from `--sentinel-user` and `--sentinel-password-file` (or the environment),
// once, before it connects, and never shows the password.
#[tokio::test]
async fn sentinels_with_credentials_of_their_own_are_asked_with_the_password_file() {
    let options = SentinelOptions {
        user: Some(("fleet".to_owned(), "prim4ry-pw".to_owned())),
        sentinel_auth: Some((Some("sentry".to_owned()), "sent1nel-pw".to_owned())),
        ..SentinelOptions::default()
    };
    let mut set = bounded("the sentinel set to start", SentinelSet::with(options))
        .await
        .expect("starting the sentinel set");
    let url = set.url();
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let right = file("sentinel.pw", "sent1nel-pw\n");
    let wrong = file("wrong.pw", "wr0ng-pw\n");
    let empty = file("empty.pw", "");
    let own = [
        "--sentinel-user",
        "sentry",
        "--sentinel-password-file",
        &right,
    ];
    let with = |args: &[&str]| -> Vec<String> {
        own.iter().chain(args).map(|a| (*a).to_owned()).collect()
    };
    let run = |args: &[&str]| {
        ok(
            &url,
            &with(args).iter().map(String::as_str).collect::<Vec<_>>(),
        )
    };
    run(&["beat", "bench-01", "--ttl", "1m"]);
    assert_eq!(run(&["live"]), "bench-01\n");
    // The same from the environment.
    let env = [
        ("FLEET_SENTINEL_USER", "sentry"),
        ("FLEET_SENTINEL_PASSWORD_FILE", right.as_str()),
    ];
    let (o, _) = timed(&url, &["live"], &env);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "bench-01\n");
    let secrets = ["prim4ry", "sent1nel", "wr0ng"];
    let shows_none = |text: &str| secrets.iter().all(|s| !text.contains(s));
    // Without them, the URL's (the primary's) are refused: exit 1 at once, saying what to give.
    let (o, took) = timed(&url, &["--timeout", "5s", "live"], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("refused the URL's user and password") && err.contains("--sentinel-user"),
        "{err}"
    );
    assert!(took < Duration::from_secs(3), "{took:?}: {err}");
    assert!(shows_none(&err), "{err}");
    // A wrong password: exit 1 at once, a clear error naming the user and the flags.
    let (o, took) = timed(
        &url,
        &[
            "--sentinel-user",
            "sentry",
            "--sentinel-password-file",
            &wrong,
            "--timeout",
            "5s",
            "live",
        ],
        &[],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("the sentinels would not answer")
            && err.contains("refused the sentinels' credentials, the user sentry"),
        "{err}"
    );
    assert!(took < Duration::from_secs(3), "{took:?}: {err}");
    assert!(shows_none(&err), "{err}");
    // A file that cannot be read or holds nothing, the user without a file, or the file with a
    // URL of one server: exit 2, before anything connects.
    for (args, said) in [
        (
            vec![
                "--sentinel-password-file",
                "/nonexistent/sentinel.pw",
                "live",
            ],
            "/nonexistent/sentinel.pw: missing",
        ),
        (
            vec!["--sentinel-password-file", empty.as_str(), "live"],
            "empty: write the sentinels' password there",
        ),
        (
            vec!["--sentinel-user", "sentry", "live"],
            "--sentinel-password-file",
        ),
    ] {
        let (o, _) = timed(&url, &args, &[]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(said), "{args:?}: {err}");
        assert!(shows_none(&err), "{err}");
    }
    let (o, _) = timed(
        "redis://127.0.0.1:1",
        &["--sentinel-password-file", &right, "live"],
        &[],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("is not a Sentinel URL"), "{err}");
    let (o, _) = timed(&url, &["--help"], &env);
    let help = String::from_utf8_lossy(&o.stdout);
    assert!(help.contains("--sentinel-password-file"), "{help}");
    assert!(shows_none(&help), "{help}");

    // fleet serve with them in its environment, and its startups' `fleet beat` with the flags
    // (an operation gets none of fleet serve's FLEET_ variables): a claim reaches ready, and
    // again after a failover, the sentinels asked with them anew.
    let config = support::remote::serve_config_with(
        dir.path(),
        &url,
        &[("pool-a", &["bench-02", "bench-03"])],
        &own,
        None,
    );
    let args = [
        "--metrics-addr",
        "127.0.0.1:0",
        "--interval",
        "100ms",
        "--blind-grace",
        "0s",
        "--lease",
        "1s",
    ];
    let mut serve = support::Serve::start_with_env("serve", &url, &config, &args, &env);
    serve.log(&["fleet serve started"]).await;
    run(&["claim", "bench-02"]);
    serve.log(&["claim moved", "to=ready", "bench-02"]).await;
    let failover = bounded("the failover", set.kill_primary()).await.unwrap();
    run(&["--timeout", "10s", "claim", "bench-03"]);
    serve.log(&["claim moved", "to=ready", "bench-03"]).await;
    eprintln!("failover {failover:?}, the sentinels asked with their own credentials");
    let lines = serve.stop().await;
    assert!(lines.iter().all(|l| shows_none(l)), "{lines:#?}");
}
