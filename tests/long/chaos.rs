//! Crash anywhere (SPEC §5.4): scale cycles through controllers that die at random points
//! (seeded, reproducible) and are replaced by new ones. Every cycle must converge to the claim's
//! intended end, with no operation fired twice for a claim and no illegal move in any timeline.
//!
//! CI runs a short form; `cargo test --test long chaos::fifty -- --ignored` runs 50 cycles, and
//! `FLEET_CHAOS_SEED` replays a seed.

use crate::support;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use fleet::config;
use fleet::domain::claim::{Claim, Phase, Reason, check_move};
use fleet::domain::name::{ClaimName, GroupName};
use fleet::lifecycle::Exec;
use fleet::reconcile::{Controller, Faults};
use fleet::requests;
use fleet::store::catalog::Catalog;
use fleet::store::claims::ClaimStore;
use fleet::store::keys::Keys;
use fleet::store::lease::Lease;
use fleet::store::presence::Presence;
use fleet::telemetry::{Health, Metrics};
use fleet_testing::fixture::{BOOTS, Group, Op, POWERS_OFF};
use fleet_testing::{Fixture, RedisServer};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use support::*;
use tokio::sync::watch;

type Ctl = Controller<fleet_redis::conn::Conn, Exec>;
const SLOTS: [&str; 3] = ["bench-01", "bench-02", "bench-03"];
const LEASE: Duration = Duration::from_millis(300);

/// Startups that log the claim, pause and boot the bench; shutdowns that log it and power it off.
fn yaml(server: &RedisServer, log: &Path) -> String {
    let startup = format!(r#"echo "$FLEET_CLAIM" >> "$LOG.startup"; sleep 0.05; {BOOTS}"#);
    let shutdown = format!(r#"echo "$FLEET_CLAIM" >> "$LOG.shutdown"; {POWERS_OFF}"#);
    Fixture::new()
        .group(
            Group::new("pool-a")
                .min(0)
                .max(3)
                .ungated()
                .env("BIN", env!("CARGO_BIN_EXE_fleet"))
                .env("REDIS", server.url())
                .env("LOG", log.display().to_string())
                .startup(Op::sh(&startup).timeout("5s"))
                .shutdown(Op::sh(&shutdown).timeout("5s"))
                .timing("job_monitor_poll_interval", "50ms"),
        )
        .slots("pool-a", SLOTS)
        .yaml()
}

struct Chaos {
    server: RedisServer,
    dir: tempfile::TempDir,
    cfg: Arc<config::Config>,
    generation: u32,
}

impl Chaos {
    /// A new controller process: a new holder, so it must wait for a dead one's lease to lapse.
    async fn controller(&mut self) -> Ctl {
        self.generation += 1;
        let (_, rx) = watch::channel(self.cfg.clone());
        let manager = self.server.endpoint().open_lasting().await.unwrap();
        let lease = Lease::new(
            manager.clone(),
            Keys::default(),
            format!("ctl-{}", self.generation),
            LEASE,
        );
        Controller::new(
            rx,
            Presence::new(manager.clone(), Keys::default()),
            ClaimStore::new(manager, Keys::default()),
            Arc::new(exec(&self.server)),
            Arc::new(Metrics::default()),
            Arc::new(Health::default()),
        )
        .with_lease(lease)
        .with_faults(Faults {
            blind_grace: Duration::ZERO,
            ..Faults::default()
        })
    }

    fn log(&self, kind: &str) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join(format!("ops.{kind}")))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

fn group() -> GroupName {
    GroupName::parse("pool-a").unwrap()
}

async fn claim_of(
    store: &ClaimStore<redis::aio::MultiplexedConnection>,
    name: &ClaimName,
) -> Option<Claim> {
    store
        .read_groups(&[group()])
        .await
        .unwrap()
        .remove(0)
        .claims
        .iter()
        .find(|c| &c.name == name)
        .cloned()
}

/// Drives `ctl` (replacing it when the dice say it dies) until `done` holds for the claim.
async fn drive_until(
    chaos: &mut Chaos,
    ctl: &mut Ctl,
    rng: &mut StdRng,
    store: &ClaimStore<redis::aio::MultiplexedConnection>,
    name: &ClaimName,
    done: impl Fn(&Claim) -> bool,
    crashes: &mut u32,
) {
    for _ in 0..400 {
        if claim_of(store, name).await.is_some_and(|c| done(&c)) {
            return;
        }
        if rng.random_bool(0.15) {
            // The controller dies here: between passes, or with an operation in flight.
            *crashes += 1;
            *ctl = chaos.controller().await;
        }
        if !ctl.lead().await {
            // A dead leader's lease must lapse first.
            tokio::time::sleep(LEASE / 4).await;
            continue;
        }
        let report = ctl.pass().await.unwrap_or_default();
        for slot in report.started.iter().chain(&report.stopped) {
            if rng.random_bool(0.5) && ctl.running(slot) {
                // Let the operation end before the next step (otherwise the next pass, or the next
                // controller, meets it still running).
                let _ = bounded("an operation", ctl.operation_ended()).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "claim {name} never converged: {:?}",
        claim_of(store, name).await
    );
}

async fn run(cycles: usize) {
    let seed: u64 = std::env::var("FLEET_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20261130);
    let mut rng = StdRng::seed_from_u64(seed);
    let server = server();
    let dir = tempfile::tempdir().unwrap();
    let cfg = Arc::new(
        config::parse(&yaml(&server, &dir.path().join("ops")), Path::new("t.yaml")).unwrap(),
    );
    let mut c = conn(&server).await;
    Catalog::of(&cfg)
        .publish(&mut c, &Keys::default())
        .await
        .unwrap();
    let mut chaos = Chaos {
        server,
        dir,
        cfg,
        generation: 0,
    };
    let store = ClaimStore::new(conn(&chaos.server).await, Keys::default());
    let catalog = Catalog::of(&chaos.cfg);
    let mut ctl = chaos.controller().await;
    let mut crashes = 0;
    let mut names = Vec::new();
    for cycle in 0..cycles {
        let slot = name(SLOTS[cycle % SLOTS.len()]);
        let now = store.now().await.unwrap();
        let c = requests::claim_slot(&store, &catalog.groups[0], &slot, now)
            .await
            .unwrap();
        drive_until(
            &mut chaos,
            &mut ctl,
            &mut rng,
            &store,
            &c.name,
            |c| c.phase == Phase::Ready,
            &mut crashes,
        )
        .await;
        let ready = claim_of(&store, &c.name).await.unwrap();
        let now = store.now().await.unwrap();
        requests::cancel(
            &store,
            &ready,
            Reason::NodeDeleted,
            now,
            Duration::from_secs(3600),
        )
        .await
        .unwrap();
        drive_until(
            &mut chaos,
            &mut ctl,
            &mut rng,
            &store,
            &c.name,
            |c| c.phase == Phase::Completed,
            &mut crashes,
        )
        .await;
        names.push((c.name.clone(), slot));
    }
    // Every operation ran at most once per claim.
    for kind in ["startup", "shutdown"] {
        let mut count: HashMap<String, usize> = HashMap::new();
        for claim in chaos.log(kind) {
            *count.entry(claim).or_default() += 1;
        }
        for (claim, n) in &count {
            if kind == "startup" {
                assert_eq!(*n, 1, "seed {seed}: claim {claim} started {n} times");
            }
        }
        if kind == "startup" {
            assert_eq!(count.len(), cycles, "seed {seed}: one startup per cycle");
        }
    }
    // No illegal move in any timeline, and every claim ended completed.
    for (name, _) in &names {
        let c = claim_of(&store, name).await.unwrap();
        assert_eq!(
            (c.phase, c.reason),
            (Phase::Completed, Some(Reason::NodeDeleted)),
            "seed {seed}"
        );
        let timeline = store.timeline(&group(), name).await.unwrap();
        let phases: Vec<Phase> = timeline.iter().map(|e| e.phase).collect();
        for pair in phases.windows(2) {
            if pair[0] != pair[1] {
                assert!(
                    check_move(pair[0], pair[1]).is_ok(),
                    "seed {seed}: {name}: {:?}",
                    phases
                );
            }
        }
    }
    eprintln!("chaos: seed {seed}, {cycles} cycles, {crashes} controller deaths, converged");
}

#[tokio::test]
async fn controllers_dying_at_random_points_converge_without_a_double_startup() {
    run(9).await;
}

#[tokio::test]
#[ignore = "the long form: 50 cycles (about a minute)"]
async fn fifty_cycles_of_controllers_dying_at_random_points() {
    run(50).await;
}
