//! Waiting for replicas before a power action (SPEC §5.5) against a real primary and a real
//! replica: an operation is fired only once a replica acknowledged the writes before it; a
//! replica that cannot acknowledge (stopped) holds the operation back, recorded and not fired,
//! and the next pass after it answers fires it exactly once. A single Redis has nothing to wait
//! for.

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use fleet::config;
use fleet::domain::claim::Phase;
use fleet::lifecycle::Exec;
use fleet::reconcile::Controller;
use fleet::store::claims::ClaimStore;
use fleet::store::keys::Keys;
use fleet::store::presence::Presence;
use fleet::store::replicas::{Acks, Replicas, Wanted};
use fleet::telemetry::{Health, Metrics};
use fleet::testing::{Options, RedisServer};
use redis::aio::MultiplexedConnection;
use support::*;
use tokio::sync::watch;

type Ctl = Controller<MultiplexedConnection, Exec>;

fn tcp(args: Vec<String>) -> RedisServer {
    RedisServer::with(Options {
        tcp: true,
        args,
        ..Options::default()
    })
    .unwrap()
}

/// A primary and a replica of it, once the replica's link is up and the primary counts it
/// online. `ROLE` lists a replica still syncing, and after a diskless sync the primary puts it
/// online only at its first acknowledgement: a `WAIT` before that counts none (this failed one
/// run in three once the harness stopped delaying the sync by 5 s).
async fn pair() -> (RedisServer, RedisServer) {
    let primary = tcp(Vec::new());
    let port = primary.port().unwrap().to_string();
    let replica = tcp(vec!["--replicaof".into(), "127.0.0.1".into(), port]);
    bounded("the replica to sync", async {
        loop {
            let info: String = raw(&replica, &["INFO", "replication"]).await;
            let primary_info: String = raw(&primary, &["INFO", "replication"]).await;
            let online = primary_info
                .lines()
                .any(|l| l.starts_with("slave0:") && l.contains("state=online"));
            if info.contains("master_link_status:up") && online {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    (primary, replica)
}

fn signal(server: &RedisServer, sig: &str) {
    let status = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(server.pid().to_string())
        .status()
        .unwrap();
    assert!(status.success());
}

async fn controller(server: &RedisServer, log: &Path, wanted: Wanted) -> Ctl {
    let text = format!(
        r#"groups:
  - name: pool-a
    max_size: 2
    readiness_taints: []
    startup: {{ command: ["sh", "-c", "echo \"$FLEET_CLAIM\" >> \"$LOG\"; \"$BIN\" --redis \"$REDIS\" beat \"$FLEET_SLOT\" --ttl 1h"], env: {{ BIN: {bin:?}, REDIS: {redis:?}, LOG: {log:?} }} }}
    shutdown: {{ command: ["true"] }}
    timings: {{ job_monitor_poll_interval: 100ms }}
slots:
  - {{ name: bench-01, group: pool-a }}
  - {{ name: bench-02, group: pool-a }}
"#,
        bin = env!("CARGO_BIN_EXE_fleet"),
        redis = server.url(),
        log = log.display().to_string(),
    );
    let cfg = config::parse(&text, Path::new("t.yaml")).unwrap();
    let (_tx, rx) = watch::channel(Arc::new(cfg));
    std::mem::forget(_tx);
    Controller::new(
        rx,
        Presence::new(conn(server).await, Keys::default()),
        ClaimStore::new(conn(server).await, Keys::default()),
        Arc::new(exec(server)),
        Arc::new(Metrics::default()),
        Arc::new(Health::default()),
    )
    .with_replicas(Replicas::new(
        conn(server).await,
        Keys::default(),
        wanted,
        Duration::from_millis(800),
    ))
}

fn fired(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Passes, waiting for the operations they start, until one starts none.
async fn settle(ctl: &mut Ctl) {
    for _ in 0..20 {
        let r = bounded("a pass", ctl.pass()).await.unwrap();
        if r.started.is_empty() && r.stopped.is_empty() && r.writes == 0 {
            return;
        }
        while r.started.iter().any(|s| ctl.running(s)) {
            bounded("an operation", ctl.operation_ended()).await;
        }
    }
    panic!("never settled");
}

async fn phase(server: &RedisServer, claim: &str) -> Phase {
    let store = ClaimStore::new(conn(server).await, Keys::default());
    let read = store
        .read_groups(&[fleet::domain::name::GroupName::parse("pool-a").unwrap()])
        .await
        .unwrap();
    read[0]
        .claims
        .iter()
        .find(|c| c.name.as_str() == claim)
        .unwrap()
        .phase
}

#[tokio::test]
async fn an_operation_fires_only_once_a_replica_has_its_record() {
    let (primary, replica) = pair().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("startups");
    let mut ctl = controller(&primary, &log, Wanted::Auto).await;
    // The replica acknowledges: the startup fires at once.
    request_claim(&primary, "pool-a", "bench-01", "c1").await;
    settle(&mut ctl).await;
    assert_eq!(phase(&primary, "c1").await, Phase::Ready);
    assert_eq!(fired(&log), ["c1"]);

    // The replica stops answering: the startup is recorded (the claim boots) but not fired.
    signal(&replica, "STOP");
    request_claim(&primary, "pool-a", "bench-02", "c2").await;
    let report = bounded("a pass", ctl.pass()).await.unwrap();
    assert!(report.started.is_empty(), "{report:?}");
    assert_eq!(phase(&primary, "c2").await, Phase::Booting);
    assert_eq!(fired(&log), ["c1"], "nothing fired without the replica");
    let report = bounded("a pass", ctl.pass()).await.unwrap();
    assert!(report.started.is_empty(), "still held back: {report:?}");

    // It answers again: a pass fires the recorded startup, once. (Within one WAIT's bound of a
    // shortfall the gate answers short without asking, so the first passes may still hold it.)
    signal(&replica, "CONT");
    bounded(
        "the held startup to fire and its claim to be ready",
        async {
            while phase(&primary, "c2").await != Phase::Ready {
                let r = ctl.pass().await.unwrap();
                while r.started.iter().any(|s| ctl.running(s)) {
                    ctl.operation_ended().await;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        },
    )
    .await;
    assert_eq!(fired(&log), ["c1", "c2"], "fired exactly once");
    drop(replica);
}

#[tokio::test]
async fn the_gate_counts_the_replicas_it_wants() {
    let (primary, replica) = pair().await;
    let primary = &primary;
    let gate = |wanted| async move {
        Replicas::new(
            conn(primary).await,
            Keys::default(),
            wanted,
            Duration::from_millis(400),
        )
        .confirm(&group())
        .await
        .unwrap()
    };
    assert_eq!(
        gate(Wanted::Auto).await,
        Acks::Confirmed {
            acked: 1,
            wanted: 1
        }
    );
    assert_eq!(gate(Wanted::Exactly(0)).await, Acks::NotWanted);
    assert_eq!(
        gate(Wanted::Exactly(2)).await,
        Acks::Short {
            acked: 1,
            wanted: 2
        }
    );
    // The counter it waits on is one key of the prefix's tag.
    let n: i64 = raw(primary, &["GET", &Keys::default().replicated()]).await;
    assert_eq!(n, 2, "one increment per wait");
    drop(replica);
    // A single Redis has no replica: nothing to wait for.
    let single = server();
    let alone = Replicas::new(
        conn(&single).await,
        Keys::default(),
        Wanted::Auto,
        Duration::from_millis(400),
    );
    assert_eq!(alone.confirm(&group()).await.unwrap(), Acks::NotWanted);
}

fn group() -> fleet::domain::name::GroupName {
    fleet::domain::name::GroupName::parse("pool-a").unwrap()
}
