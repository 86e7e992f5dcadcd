//! The reaction benchmark (README "Benchmarks").
//!
//! 1. From a bench's key expiring to the controller acting on it (the ready claim's machine
//!    observed off), with the controller's own 1 s loop: target under the TTL plus one second,
//!    that is, under one second after the expiry.
//! 2. From a leader's death (its task aborted, the lease not released) to the new leader's first
//!    pass, with a 2 s lease and a 1 s pass interval.
//!
//! Run: `cargo bench --bench faults`. Times are the Redis server's.

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use fleet::config;
use fleet::domain::claim::{Claim, ConditionKind, Move, Phase};
use fleet::domain::name::{BenchName, ClaimName, GroupName};
use fleet::lifecycle::Exec;
use fleet::reconcile::{Controller, Faults};
use fleet::store::claims::ClaimStore;
use fleet::store::keys::Keys;
use fleet::store::lease::Lease;
use fleet::store::presence::{Beat, Presence};
use fleet::telemetry::{Health, Metrics};
use fleet_testing::fixture::{Group, Op};
use fleet_testing::{Fixture, RedisServer};
use tokio_util::sync::CancellationToken;

// The allocator the `fleet` binary runs with (cmd/fleet/main.rs), so what is measured here
// allocates as fleet does.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SLOTS: usize = 6;

/// One group of `SLOTS` slots whose machines are never judged gone within a run.
fn yaml() -> String {
    Fixture::new()
        .group(
            Group::new("pool-a")
                .min(0)
                .max(6)
                .ungated()
                .startup(Op::command(["true"]))
                .shutdown(Op::command(["true"]))
                .timing("machine_gone_grace", "1h"),
        )
        .slots("pool-a", (0..SLOTS).map(|i| format!("bench-{i:02}")))
        .yaml()
}

fn bench(i: usize) -> BenchName {
    BenchName::parse(&format!("bench-{i:02}")).expect("valid")
}

fn group() -> GroupName {
    GroupName::parse("pool-a").expect("valid")
}

async fn controller(
    server: &RedisServer,
    cfg: &Arc<config::Config>,
    holder: &str,
    health: Arc<Health>,
) -> Controller<fleet_redis::conn::Conn, Exec> {
    let (_, rx) = tokio::sync::watch::channel(cfg.clone());
    let manager = server.endpoint().open_lasting().await.expect("redis");
    Controller::new(
        rx,
        Presence::new(manager.clone(), Keys::default()),
        ClaimStore::new(manager.clone(), Keys::default()),
        Arc::new(
            Exec::new(env!("CARGO_BIN_EXE_fleet")).reporting_to(fleet::lifecycle::ReportTo {
                url: server.url(),
                ca_file: None,
                sentinel_auth: None,
                timeout: Duration::from_secs(10),
                prefix: Keys::default().prefix().to_owned(),
            }),
        ),
        Arc::new(Metrics::default()),
        health,
    )
    .with_lease(Lease::new(
        manager,
        Keys::default(),
        holder.to_owned(),
        Duration::from_secs(2),
    ))
    .with_faults(Faults {
        blind_grace: Duration::ZERO,
        ..Faults::default()
    })
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1e3)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let cfg = Arc::new(config::parse(&yaml(), Path::new("bench.yaml"))?);
    let conn = server.endpoint().connect().await?;
    let store = ClaimStore::new(conn.clone(), Keys::default());
    let presence = Presence::new(conn.clone(), Keys::default());

    // Every slot up under a ready claim; benches beat for an hour.
    let now: DateTime<Utc> = store.now().await?;
    for i in 0..SLOTS {
        presence
            .beat(&Beat {
                name: bench(i),
                ttl: Duration::from_secs(3600),
                hold: None,
                load: None,
                cores: None,
            })
            .await?;
        let seed = store.seed(&group(), &bench(i)).await?;
        let c = Claim::new(
            ClaimName::parse(&format!("bench-{i:02}-1"))?,
            bench(i),
            group(),
            None,
            now,
            &Default::default(),
            None,
        );
        store.create(&c, &seed).await?;
        let ready = c
            .apply(Move::to(Phase::Booting), now)?
            .apply(Move::to(Phase::Ready), now)?;
        store.write(&c, &ready, None).await?;
    }

    // 1. Expiry to action.
    let shutdown = CancellationToken::new();
    let a_health = Arc::new(Health::default());
    let a = controller(&server, &cfg, "a", a_health.clone()).await;
    let a_task = tokio::spawn(a.run_leading(
        Duration::from_secs(1),
        Duration::from_secs(1),
        shutdown.clone(),
    ));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut reactions = Vec::new();
    for i in 0..3 {
        // One bench at a time (several at once would read as a fault of the observation).
        let ttl = Duration::from_millis(1500 + 230 * i as u64);
        let receipt = presence
            .beat(&Beat {
                name: bench(i),
                ttl,
                hold: None,
                load: None,
                cores: None,
            })
            .await?;
        let expired_at = receipt.at + TimeDelta::from_std(ttl)?;
        let deadline = Instant::now() + Duration::from_secs(10);
        let acted_at = loop {
            let claims = store.read_groups(&[group()]).await?.remove(0).claims;
            let c = claims.iter().find(|c| c.slot == bench(i)).expect("claim");
            if let Some(off) = c
                .condition(ConditionKind::MachineObservedOff)
                .filter(|c| c.status)
            {
                break off.last_transition_time;
            }
            anyhow::ensure!(Instant::now() < deadline, "the controller never acted");
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        reactions.push((acted_at - expired_at).to_std().unwrap_or_default());
    }
    let reactions = support::sorted(reactions);
    println!(
        "key expiry -> controller acts ({} benches, TTL 1.5-2 s, 1 s passes): median {}, worst {} after the expiry (target: under 1 s, i.e. within TTL + 1 s)",
        reactions.len(),
        ms(support::quantile(&reactions, 0.5)),
        ms(support::quantile(&reactions, 1.0)),
    );

    // 2. Leader death to the new leader's first pass.
    let b_health = Arc::new(Health::default());
    let b = controller(&server, &cfg, "b", b_health.clone()).await;
    let b_task = tokio::spawn(b.run_leading(
        Duration::from_secs(1),
        Duration::from_secs(1),
        shutdown.clone(),
    ));
    tokio::time::sleep(Duration::from_millis(1200)).await;
    a_task.abort(); // death: no release, the lease must lapse
    let died = Instant::now();
    let deadline = died + Duration::from_secs(10);
    while b_health.ready(Duration::from_millis(50)).is_err() {
        anyhow::ensure!(Instant::now() < deadline, "b never took over");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let failover = died.elapsed();
    println!(
        "leader death -> new leader's first pass (2 s lease, 1 s passes): {} (target: within one lease plus one pass)",
        ms(failover)
    );
    shutdown.cancel();
    let _ = b_task.await;
    let _ = a_health;
    Ok(())
}
