//! Redis Cluster (SPEC §2.7, "Cluster"), against a real three-primary cluster on loopback
//! (`fleet_testing::RedisCluster`, joined by `redis-cli --cluster create`): the presence verbs,
//! the controller and the provider's main scenarios through a `redis+cluster://` URL. The fleet
//! keys of the prefix live in one hash slot and each group's in its own, so the groups here are
//! on other nodes than the presence keys, and every read across groups goes one call per group.
//! Every wait is bounded; nothing sleeps to synchronise.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use fleet::domain::name::GroupName;
use fleet::provider::service::Provider;
use fleet::provider::wire::cloud_provider_client::CloudProviderClient;
use fleet::provider::wire::{
    NodeGroupIncreaseSizeRequest, NodeGroupTargetSizeRequest, NodeGroupsRequest,
};
use fleet::store::claims::ClaimStore;
use fleet::store::keys::Keys;
use fleet::store::presence::Presence;
use fleet_testing::fixture::{Group, Op};
use fleet_testing::{ClusterOptions, Fixture, RedisCluster};
use support::remote::{
    compact, fleet, metrics_addr, ok, raw, readyz, serve_config_of, serve_config_with, subscribed,
    until,
};
use support::{beat, bounded};

async fn cluster() -> RedisCluster {
    bounded("the cluster to start", RedisCluster::start())
        .await
        .expect("starting the cluster")
}

/// Two groups whose keys are on other nodes than each other's, and than the presence keys'.
const GROUPS: [&str; 2] = ["pool-a", "pool-c"];

async fn spread(c: &RedisCluster) {
    let keys = Keys::default();
    let presence = c.primary_of(&keys.registry()).await.unwrap();
    let a = c.primary_of(&keys.group(&group(GROUPS[0])).claims()).await;
    let b = c.primary_of(&keys.group(&group(GROUPS[1])).claims()).await;
    let (a, b) = (a.unwrap(), b.unwrap());
    assert!(
        a != b && a != presence && b != presence,
        "the test wants three nodes: presence on {presence}, {} on {a}, {} on {b}",
        GROUPS[0],
        GROUPS[1]
    );
}

fn group(name: &str) -> GroupName {
    GroupName::parse(name).unwrap()
}

#[tokio::test]
async fn beat_state_live_and_hold_go_to_the_node_of_the_fleet_slot() {
    let c = cluster().await;
    let url = c.url();
    ok(&url, &["beat", "bench-01", "--ttl", "1m"]);
    ok(&url, &["beat", "bench-02", "--ttl", "1m", "--load", "0.5"]);
    ok(&url, &["hold", "bench-02", "--reason", "firmware"]);
    ok(&url, &["beat", "bench-02", "--ttl", "1m"]);
    let state = compact(&ok(&url, &["state", "-o", "json"]));
    assert!(
        state.contains(r#""name":"bench-01","state":"UP""#),
        "{state}"
    );
    assert!(
        state.contains(r#""name":"bench-02","state":"HELD""#),
        "{state}"
    );
    assert_eq!(ok(&url, &["live"]), "bench-01\nbench-02\n");
    // The beat is on the node that serves the prefix's hash slot.
    let key = "{fleet}:bench:bench-01";
    let node = c.direct_url(c.primary_of(key).await.unwrap());
    assert_eq!(raw::<i64>(&node, &["EXISTS", key]).await.unwrap(), 1);
    // A bench whose key lapses reads DOWN, by the server's clock.
    ok(&url, &["beat", "bench-01", "--ttl", "0"]);
    let state = compact(&ok(&url, &["state", "bench-01", "-o", "json"]));
    assert!(state.contains(r#""state":"DOWN""#), "{state}");
}

#[tokio::test]
async fn the_library_reads_and_beats_through_a_cluster_connection() {
    let c = cluster().await;
    let conn = c.endpoint().open_lasting().await.unwrap();
    assert!(conn.is_cluster());
    let presence = Presence::new(conn, Keys::default());
    for i in 0..50 {
        presence
            .beat(&beat(&format!("bench-{i:02}"), Duration::from_secs(60)))
            .await
            .unwrap();
    }
    let snapshot = presence.read(&[]).await.unwrap();
    assert_eq!(snapshot.benches.len(), 50);
    for bench in &snapshot.benches {
        let verdict = fleet::domain::state::decide(&bench.reading, snapshot.now);
        assert_eq!(
            verdict.state,
            fleet::domain::state::State::Up,
            "{}",
            bench.name
        );
    }
}

#[tokio::test]
async fn serve_on_a_cluster_claims_reach_ready_and_cancels_complete_in_two_groups() {
    let c = cluster().await;
    spread(&c).await;
    let url = c.url();
    let dir = tempfile::tempdir().unwrap();
    let config = serve_config_of(
        dir.path(),
        &url,
        &[(GROUPS[0], &["bench-01"]), (GROUPS[1], &["bench-02"])],
    );
    let args = [
        "--metrics-addr",
        "127.0.0.1:0",
        "--interval",
        "100ms",
        "--blind-grace",
        "0s",
    ];
    let mut serve = support::Serve::start_at("serve", &url, &config, &args);
    let started = serve.log(&["fleet serve started"]).await;
    let addr = metrics_addr(&started);
    // The wake listener subscribes on the node of the wake channel's slot.
    let channel = Keys::default().wake_channel();
    let node = c.direct_url(c.primary_of(&channel).await.unwrap());
    until(
        "the wake listener on the channel's node",
        Duration::from_secs(10),
        async || subscribed(&node, &channel).await,
    )
    .await;
    ok(&url, &["claim", "bench-01"]);
    ok(&url, &["claim", "bench-02"]);
    // In either order: the two groups' operations run side by side.
    serve
        .logs(&[
            &["claim moved", "to=ready", "bench-01"],
            &["claim moved", "to=ready", "bench-02"],
        ])
        .await;
    until(
        "/readyz to answer 200",
        Duration::from_secs(10),
        async || readyz(&addr).await == 200,
    )
    .await;
    assert_eq!(ok(&url, &["live"]), "bench-01\nbench-02\n");
    // The views read across both groups' nodes.
    let slots = compact(&ok(&url, &["slots", "-o", "json"]));
    for slot in ["bench-01", "bench-02"] {
        assert!(slots.contains(&format!(r#""name":"{slot}""#)), "{slots}");
    }
    let groups = ok(&url, &["groups"]);
    assert!(
        groups.contains(GROUPS[0]) && groups.contains(GROUPS[1]),
        "{groups}"
    );
    let claims = compact(&ok(&url, &["claims", "-o", "json"]));
    let name = claims
        .split(r#""name":""#)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a claim's name")
        .to_owned();
    ok(&url, &["cancel", &name]);
    serve.log(&["claim moved", "to=completed"]).await;
    until(
        "one bench powered off",
        Duration::from_secs(10),
        async || ok(&url, &["live"]).lines().count() == 1,
    )
    .await;
    serve.stop().await;
}

// SPEC §2.7: `rediss+cluster://` is TLS to every node, the certificate checked against
// `--redis-ca` (redis-rs's cluster client takes the CA as its root certificate, for the nodes of
// the URL and for those the slot map names). Nothing of this cluster listens in plain TCP, its
// bus included.
#[tokio::test]
async fn verbs_and_the_library_reach_a_cluster_that_speaks_only_tls() {
    let options = ClusterOptions {
        tls: true,
        ..ClusterOptions::default()
    };
    let c = bounded("the TLS cluster to start", RedisCluster::with(options))
        .await
        .expect("starting the TLS cluster");
    let url = c.url();
    assert!(url.starts_with("rediss+cluster://"), "{url}");
    let ca = c
        .ca()
        .expect("a TLS cluster has a CA")
        .display()
        .to_string();
    ok(
        &url,
        &["--redis-ca", &ca, "beat", "bench-01", "--ttl", "1m"],
    );
    let state = compact(&ok(&url, &["--redis-ca", &ca, "state", "-o", "json"]));
    assert!(
        state.contains(r#""name":"bench-01","state":"UP""#),
        "{state}"
    );
    assert_eq!(ok(&url, &["--redis-ca", &ca, "live"]), "bench-01\n");
    let key = "{fleet}:bench:bench-01";
    let mut node = c.direct(c.primary_of(key).await.unwrap()).await.unwrap();
    let exists: i64 = redis::cmd("EXISTS")
        .arg(key)
        .query_async(&mut node)
        .await
        .unwrap();
    assert_eq!(exists, 1);
    // The library through its lasting connection: beats and the fleet read.
    let conn = c.endpoint().open_lasting().await.unwrap();
    assert!(conn.is_cluster());
    let presence = Presence::new(conn, Keys::default());
    for i in 2..12 {
        presence
            .beat(&beat(&format!("bench-{i:02}"), Duration::from_secs(60)))
            .await
            .unwrap();
    }
    let snapshot = presence.read(&[]).await.unwrap();
    assert_eq!(snapshot.benches.len(), 11);
    // Without the CA the nodes' certificate is not trusted: exit 1, saying TLS, no hang.
    let o = fleet(&url, &["--timeout", "2s", "live"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("TLS failed") || err.contains("certificate"),
        "{err}"
    );

    // fleet serve in TLS: the wake listener's cluster connection of its own (RESP3) subscribes
    // on the channel's node, and a claim reaches ready through a startup that beats in TLS.
    let dir = tempfile::tempdir().unwrap();
    let config = serve_config_with(
        dir.path(),
        &url,
        &[(GROUPS[0], &["bench-20"])],
        &["--redis-ca", &ca],
        None,
    );
    let args = [
        "--redis-ca",
        &ca,
        "--metrics-addr",
        "127.0.0.1:0",
        "--interval",
        "100ms",
        "--blind-grace",
        "0s",
    ];
    let mut serve = support::Serve::start_at("serve", &url, &config, &args);
    serve.log(&["fleet serve started"]).await;
    let channel = Keys::default().wake_channel();
    let node = c.primary_of(&channel).await.unwrap();
    until(
        "the wake listener on the channel's node, in TLS",
        Duration::from_secs(10),
        async || {
            let mut conn = c.direct(node).await.unwrap();
            let reply: Vec<redis::Value> = redis::cmd("PUBSUB")
                .arg("SHARDNUMSUB")
                .arg(&channel)
                .query_async(&mut conn)
                .await
                .unwrap();
            matches!(reply.get(1), Some(redis::Value::Int(n)) if *n >= 1)
        },
    )
    .await;
    ok(&url, &["--redis-ca", &ca, "claim", "bench-20"]);
    serve.log(&["claim moved", "to=ready", "bench-20"]).await;
    serve.stop().await;
}

#[tokio::test]
async fn the_provider_scales_groups_on_other_nodes() {
    let c = cluster().await;
    spread(&c).await;
    let dir = tempfile::tempdir().unwrap();
    let path = serve_config_of(
        dir.path(),
        &c.url(),
        &[
            (GROUPS[0], &["bench-01", "bench-02"]),
            (GROUPS[1], &["bench-03"]),
        ],
    );
    let config = fleet::config::load(&path).unwrap();
    let (_tx, rx) = tokio::sync::watch::channel(Arc::new(config));
    let conn = c.endpoint().open_lasting().await.unwrap();
    let store = ClaimStore::new(conn, Keys::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    support::serve_provider(listener, Provider::new(rx, store));
    let mut client = CloudProviderClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let listed = client
        .node_groups(NodeGroupsRequest {})
        .await
        .unwrap()
        .into_inner()
        .node_groups;
    assert_eq!(listed.len(), 2);
    for (id, delta) in [(GROUPS[0], 2), (GROUPS[1], 1)] {
        client
            .node_group_increase_size(NodeGroupIncreaseSizeRequest {
                delta,
                id: id.into(),
            })
            .await
            .unwrap();
        let target = client
            .node_group_target_size(NodeGroupTargetSizeRequest { id: id.into() })
            .await
            .unwrap()
            .into_inner()
            .target_size;
        assert_eq!(target, delta, "{id}");
    }
    // Past the group's maximum: refused, nothing created.
    let refused = client
        .node_group_increase_size(NodeGroupIncreaseSizeRequest {
            delta: 1,
            id: GROUPS[1].into(),
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::OutOfRange, "{refused}");
}

#[tokio::test]
async fn an_acl_user_reaches_the_cluster_and_its_password_never_shows() {
    let c = bounded(
        "the cluster to start",
        RedisCluster::with_user("fleet", "s3cret-pw"),
    )
    .await
    .expect("starting the cluster");
    let url = c.url();
    assert!(url.contains("fleet:s3cret-pw@"), "{url}");
    ok(&url, &["beat", "bench-01", "--ttl", "1m"]);
    assert_eq!(ok(&url, &["live"]), "bench-01\n");
    let wrong = url.replace("s3cret-pw", "wr0ng-pw");
    let o = fleet(&wrong, &["state"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        !err.contains("wr0ng-pw") && !err.contains("s3cret"),
        "{err}"
    );
    // Nodes nobody listens on: exit 1 within the timeout.
    let o = fleet(
        "redis+cluster://fleet:s3cret-pw@127.0.0.1:1,127.0.0.1:2",
        &["--timeout", "500ms", "state"],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(!err.contains("s3cret"), "{err}");
}

/// Sends `signal` (`STOP`, `CONT`) to the process `pid`.
fn signal(signal: &str, pid: u32) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{signal} {pid}");
}

#[tokio::test]
async fn serve_waits_for_the_replicas_of_the_groups_own_node() {
    let c = bounded("the cluster to start", RedisCluster::with_replicas())
        .await
        .expect("starting the cluster");
    spread(&c).await;
    let url = c.url();
    let dir = tempfile::tempdir().unwrap();
    let config = serve_config_of(dir.path(), &url, &[(GROUPS[0], &["bench-01"])]);
    let args = [
        "--metrics-addr",
        "127.0.0.1:0",
        "--interval",
        "100ms",
        "--blind-grace",
        "0s",
        "--min-replica-acks",
        "1",
    ];
    let mut serve = support::Serve::start_at("serve", &url, &config, &args);
    serve.log(&["fleet serve started"]).await;
    // Connected to every node before a replica stops: a node that answers nothing while fleet
    // serve first connects fails its start (a CI run stopped it in that window).
    serve.log(&["became the leader"]).await;
    // The replica of the group's node stops acknowledging; the prefix's node's replica still
    // does, so only a wait on the group's own node can tell the record is not replicated.
    let keys = Keys::default();
    let replica = c
        .replica_of(&keys.group(&group(GROUPS[0])).claims())
        .await
        .unwrap();
    let pid = c.pid_of(replica).expect("the replica's process");
    signal("STOP", pid);
    ok(&url, &["claim", "bench-01"]);
    serve
        .log(&["the replicas did not acknowledge", "bench-01"])
        .await;
    assert_eq!(ok(&url, &["live"]), "", "nothing was started");
    signal("CONT", pid);
    serve.log(&["claim moved", "to=ready", "bench-01"]).await;
    assert_eq!(ok(&url, &["live"]), "bench-01\n");
    serve.stop().await;
}

#[tokio::test]
async fn a_verb_reaches_the_promoted_replica_after_its_primary_dies() {
    let c = bounded("the cluster to start", RedisCluster::with_replicas())
        .await
        .expect("starting the cluster");
    let url = c.url();
    let keys = Keys::default();
    ok(&url, &["beat", "bench-01", "--ttl", "1h"]);
    let primary = c.primary_of(&keys.registry()).await.unwrap();
    let replica = c.replica_of(&keys.registry()).await.unwrap();
    signal("KILL", c.pid_of(primary).unwrap());
    let killed = std::time::Instant::now();
    // The replica is promoted once the others judge the primary failed (node timeout 2 s);
    // meanwhile a verb fails, exit 1, and nothing is written anywhere else.
    until(
        "a beat to land after the failover",
        Duration::from_secs(30),
        async || {
            fleet(
                &url,
                &["--timeout", "1s", "beat", "bench-02", "--ttl", "1h"],
            )
            .status
            .success()
        },
    )
    .await;
    eprintln!("a beat landed {:?} after the kill", killed.elapsed());
    let promoted = c.direct_url(replica);
    assert_eq!(
        raw::<i64>(&promoted, &["EXISTS", "{fleet}:bench:bench-02"])
            .await
            .unwrap(),
        1
    );
    // bench-01's beat was replicated long before the kill, but replication is asynchronous:
    // only the beat after the failover is certain.
    let live = ok(&url, &["live"]);
    assert!(live.lines().any(|l| l == "bench-02"), "{live}");
}

/// A group whose keys are on the node of the presence keys, so one kill takes both.
async fn group_beside_presence(c: &RedisCluster) -> String {
    let keys = Keys::default();
    let presence = c.primary_of(&keys.registry()).await.unwrap();
    for i in 0..100 {
        let name = format!("pool-{i}");
        if c.primary_of(&keys.group(&group(&name)).claims())
            .await
            .unwrap()
            == presence
        {
            return name;
        }
    }
    panic!("no group of pool-0..pool-99 hashes to the presence keys' node {presence}");
}

// SPEC §2.7 "Cluster", §5.6: the primary that holds both the presence prefix's slot (the lease,
// the beats, the wake channel) and the group's slot (its claims and operation records) is
// SIGKILLed while `fleet serve` runs; its replica is promoted once the others judge it failed.
// The controller is blind meanwhile and then goes on: a claim made once the cluster takes writes
// again reaches ready, no claim's startup ran twice (counted from the startup command's own log),
// and nothing was powered off.
#[tokio::test]
async fn serve_keeps_its_promises_across_the_failover_of_the_presence_and_group_node() {
    let c = bounded("the cluster to start", RedisCluster::with_replicas())
        .await
        .expect("starting the cluster");
    let url = c.url();
    let keys = Keys::default();
    let pool = group_beside_presence(&c).await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("ops.log");
    let config = serve_config_with(
        dir.path(),
        &url,
        &[(&pool, &["bench-01", "bench-02"])],
        &[],
        Some(&log),
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
        "--timeout",
        "1s",
    ];
    let mut serve = support::Serve::start_at("serve", &url, &config, &args);
    let started = serve.log(&["fleet serve started"]).await;
    let addr = metrics_addr(&started);
    ok(&url, &["claim", "bench-01"]);
    serve.log(&["claim moved", "to=ready", "bench-01"]).await;

    // The node's replica has every write so far (WAIT after a write of the test's own on that
    // node): this kill loses nothing, so what follows is the failover alone (the Sentinel chaos
    // test kills with writes lost, §5.7).
    let primary = c.primary_of(&keys.registry()).await.unwrap();
    let replica = c.replica_of(&keys.registry()).await.unwrap();
    let mut node = c.direct(primary).await.unwrap();
    let acked: i64 = redis::pipe()
        .cmd("SET")
        .arg("test-sync:{fleet}")
        .arg(1)
        .ignore()
        .cmd("WAIT")
        .arg(1)
        .arg(2000)
        .query_async::<(i64,)>(&mut node)
        .await
        .unwrap()
        .0;
    assert_eq!(acked, 1, "the replica acknowledged");
    signal("KILL", c.pid_of(primary).unwrap());
    let killed = std::time::Instant::now();

    // A claim is refused until the replica is promoted (the group's node is the one killed),
    // then accepted; a reply lost after the claim was made shows as the refusal that the slot
    // has a live claim. Only those two end the wait. A refusal while the cluster is down names
    // the slot too (`creating claim bench-02-…: ClusterDown`), and this test once took it for the
    // claim and waited 20 s for a claim that was never made: the flake of about one run in
    // twelve on a busy host, where the failover takes longer.
    until(
        "a claim to be accepted after the failover",
        Duration::from_secs(30),
        async || {
            let o = fleet(&url, &["--timeout", "1s", "claim", "bench-02"]);
            let said = String::from_utf8_lossy(&o.stderr).into_owned();
            if !o.status.success() {
                let last = said.trim().lines().last().unwrap_or("");
                eprintln!("a claim during the failover: {last}");
            }
            o.status.success() || said.contains("already has a live claim")
        },
    )
    .await;
    let accepted = killed.elapsed();
    serve.log(&["claim moved", "to=ready", "bench-02"]).await;
    let ready = killed.elapsed();
    until(
        "/readyz to answer 200 again",
        Duration::from_secs(10),
        async || readyz(&addr).await == 200,
    )
    .await;
    eprintln!(
        "killed {primary} (its replica {replica} promoted): a claim accepted {accepted:?} after \
         the kill, ready {ready:?} after it"
    );
    assert!(
        serve.child.try_wait().unwrap().is_none(),
        "fleet serve kept running"
    );
    assert_eq!(c.primary_of(&keys.registry()).await.unwrap(), replica);
    assert_eq!(ok(&url, &["live"]), "bench-01\nbench-02\n");
    let lines = serve.stop().await;
    // Each claim's startup ran once, and nothing was powered off.
    let ops = support::remote::operations(&log);
    let startups: Vec<&str> = ops
        .iter()
        .filter(|(_, _, kind)| kind == "startup")
        .map(|(slot, _, _)| slot.as_str())
        .collect();
    assert_eq!(startups, ["bench-01", "bench-02"], "{ops:?}");
    let claims: std::collections::HashSet<&str> =
        ops.iter().map(|(_, claim, _)| claim.as_str()).collect();
    assert_eq!(claims.len(), 2, "one claim each: {ops:?}");
    assert!(
        !ops.iter().any(|(_, _, kind)| kind == "shutdown"),
        "nothing powered off: {ops:?}"
    );
    assert!(
        !lines
            .iter()
            .any(|l| l.contains("to=completed") || l.contains("to=failed")),
        "{lines:#?}"
    );
}

/// Whether the node on `port` has a subscriber on the sharded channel `channel`.
async fn subscribed_on(c: &RedisCluster, port: u16, channel: &str) -> bool {
    let Ok(mut conn) = c.direct(port).await else {
        return false;
    };
    let reply: Vec<redis::Value> = redis::cmd("PUBSUB")
        .arg("SHARDNUMSUB")
        .arg(channel)
        .query_async(&mut conn)
        .await
        .unwrap_or_default();
    matches!(reply.get(1), Some(redis::Value::Int(n)) if *n >= 1)
}

/// Runs one command on the node on `port` alone.
async fn on_node<T: redis::FromRedisValue>(c: &RedisCluster, port: u16, args: &[&str]) -> T {
    let mut conn = c.direct(port).await.unwrap();
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query_async(&mut conn).await.unwrap()
}

// SPEC §2.7 "Cluster", §4.5: the presence prefix's hash slot (the beats, the lease, the wake
// channel) moves to another primary (IMPORTING, MIGRATING, MIGRATE, SETSLOT NODE) while an agent
// beats and `fleet serve` runs. Calls on the slot fail while it moves (ASK is not followed); then
// the agent's beats land on the new node, `fleet state` reads there, the wake listener, which
// the old node unsubscribed (`sunsubscribe`), subscribes on the new one, and the controller,
// whose tick is minutes away, still passes at once on a bench's first beat.
#[tokio::test]
async fn beats_the_reads_and_the_wake_listener_follow_the_presence_slot_to_another_node() {
    let c = cluster().await;
    let url = c.url();
    let keys = Keys::default();
    let channel = keys.wake_channel();
    let source = c.primary_of(&channel).await.unwrap();
    let target = c.ports().into_iter().find(|p| *p != source).unwrap();
    let dir = tempfile::tempdir().unwrap();
    // Startups that power nothing: a claim waits, booting, for its bench's first beat.
    let config = Fixture::new()
        .group(
            Group::new("pool-a")
                .min(0)
                .max(1)
                .ungated()
                .startup(Op::command(["true"]))
                .shutdown(Op::command(["true"]))
                .timing("machine_gone_grace", "1h"),
        )
        .slots("pool-a", ["bench-01"])
        .write(dir.path());
    // A tick of 5 minutes: after the first pass, only an operation's end or a wake passes.
    let args = [
        "--metrics-addr",
        "127.0.0.1:0",
        "--interval",
        "5m",
        "--lease",
        "10m",
        "--blind-grace",
        "0s",
    ];
    let mut serve = support::Serve::start_at("serve", &url, &config, &args);
    serve.log(&["fleet serve started"]).await;
    until(
        "the wake listener on the slot's node",
        Duration::from_secs(10),
        async || subscribed_on(&c, source, &channel).await,
    )
    .await;
    ok(&url, &["claim", "bench-01"]);
    // The agent's first beat is announced: the pass it wakes starts the claim.
    let mut agent = tokio::process::Command::new(env!("CARGO_BIN_EXE_fleet"))
        .args(["--redis", &url, "--timeout", "1s"])
        .args(["agent", "bench-a", "--interval", "200ms", "--ttl", "1h"])
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("starting fleet agent");
    serve.log(&["claim moved", "to=booting", "bench-01"]).await;
    // The startup's end makes the pass that records it; after it, nothing passes until a wake.
    let store = ClaimStore::new(c.endpoint().open().await.unwrap(), keys.clone());
    until(
        "the startup's outcome recorded",
        Duration::from_secs(10),
        async || {
            let read = store.read_groups(&[group("pool-a")]).await.unwrap();
            read[0].claims.iter().any(|claim| {
                claim
                    .operation
                    .as_ref()
                    .is_some_and(|op| op.outcome.is_some())
            })
        },
    )
    .await;

    // A connection that knows the old slot map.
    let presence = Presence::new(c.endpoint().open_lasting().await.unwrap(), keys.clone());
    presence
        .beat(&beat("bench-b", Duration::from_secs(3600)))
        .await
        .unwrap();

    let moved = bounded("the slot to move", c.move_slot(&channel, target))
        .await
        .unwrap();
    eprintln!("moved {moved:?}");
    // Its first call after the move lands: the old node's MOVED made the driver read the slot
    // map again, and the call it refused (it ran none of it) went once more, to the new node.
    let first = std::time::Instant::now();
    presence
        .beat(&beat("bench-b", Duration::from_secs(3600)))
        .await
        .expect("the first call after the move lands");
    let first = first.elapsed();
    assert_eq!(
        on_node::<i64>(&c, target, &["EXISTS", "{fleet}:bench:bench-b"]).await,
        1
    );
    assert!(moved.keys_moved >= 1, "{moved:?}");
    let count: i64 = on_node(
        &c,
        source,
        &["CLUSTER", "COUNTKEYSINSLOT", &moved.slot.to_string()],
    )
    .await;
    assert_eq!(count, 0, "the old node holds none of the slot's keys");
    // The agent's key moved with the slot: removed there, it comes back with the next beat.
    let key = "{fleet}:bench:bench-a";
    let _: i64 = on_node(&c, target, &["DEL", key]).await;
    until(
        "the agent to beat on the new node",
        Duration::from_secs(10),
        async || on_node::<i64>(&c, target, &["EXISTS", key]).await == 1,
    )
    .await;
    let beat_after = moved.given_up.elapsed();
    until(
        "the wake listener on the new node",
        Duration::from_secs(10),
        async || subscribed_on(&c, target, &channel).await,
    )
    .await;
    let subscribed_after = moved.given_up.elapsed();
    assert!(!subscribed_on(&c, source, &channel).await);
    let state = compact(&ok(&url, &["state", "bench-a", "-o", "json"]));
    assert!(state.contains(r#""state":"UP""#), "{state}");
    // A first beat wakes the controller: with the tick minutes away, nothing else explains a
    // pass, and that pass makes the claim ready.
    let beat = std::time::Instant::now();
    ok(&url, &["beat", "bench-01", "--ttl", "1h"]);
    serve.log(&["claim moved", "to=ready", "bench-01"]).await;
    let woke = beat.elapsed();
    eprintln!(
        "after the move: a connection's first call landed in {first:?}, the agent beat on the \
         new node within {beat_after:?}, the listener subscribed there within \
         {subscribed_after:?}; a first beat made the claim ready in {woke:?}"
    );
    assert!(woke < Duration::from_secs(5), "{woke:?}");
    assert!(
        agent.try_wait().unwrap().is_none(),
        "the agent kept running"
    );
    // The old node ended the subscription itself when it gave the slot up, and this process
    // kept its leadership through the move: its first call after it was not refused.
    let lines = serve.stop().await;
    assert!(
        lines
            .iter()
            .any(|l| l.contains("the wake subscription ended") && l.contains("sunsubscribe")),
        "{lines:#?}"
    );
    assert!(
        !lines.iter().any(|l| l.contains("lost leadership")),
        "{lines:#?}"
    );
}
