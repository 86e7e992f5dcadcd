//! The soak: cluster-autoscaler-like traffic against `fleet serve` processes for a
//! while, with startups that fail at random, shutdowns that return before the machine goes dark
//! (as a BMC soft-off does, leaving a background child behind), and the leader SIGKILLed at
//! random and replaced. At every step it checks fleet's safety promises from the store:
//!
//! - at most one live claim per slot;
//! - the target within [min, max];
//! - no claim attempt's startup fired twice (the startups' own log);
//! - no shutdown fired for a slot whose live claim wants its machine;
//! - no claim ready on a machine fleet last told to power off (and not yet seen off);
//!
//! and, once the traffic stops, that the fleet converges: every claim settled, every wanted
//! machine on and every other one off.
//!
//! Seeded (`FLEET_SOAK_SEED`). CI runs the short form; `cargo test --test long soak:: -- --ignored` runs
//! five minutes, and `FLEET_SOAK_SECS` sets any length.

use crate::support;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use fleet::domain::claim::{Claim, OperationKind, Phase};
use fleet::domain::name::{BenchName, GroupName};
use fleet::domain::operation::SlotOp;
use fleet::domain::state::State;
use fleet::provider::wire::cloud_provider_client::CloudProviderClient;
use fleet::provider::wire::*;
use fleet::store::claims::ClaimStore;
use fleet::store::keys::Keys;
use fleet_testing::fixture::{Group, Op};
use fleet_testing::{Fixture, RedisServer};
use rand::{Rng, SeedableRng};
use redis::aio::MultiplexedConnection;
use support::*;
use tonic::Code;
use tonic::transport::Channel;

const SLOTS: usize = 6;
const MIN: i32 = 0;
const MAX: i32 = 5;
/// The group's job_monitor_poll_interval: how long past its timeout a shutdown may take effect.
const SETTLE: Duration = Duration::from_millis(300);

fn yaml(server: &RedisServer, log: &std::path::Path) -> String {
    // The startup logs every fire first. By the claim's name (so a retry of the same attempt
    // would behave the same), one claim in four fails before powering anything on, one in four
    // powers the machine on and then fails (leaving a machine no claim wants), and the rest boot
    // the bench. The shutdown returns at once and powers the bench off a second later from a
    // background child that keeps the operation's output open.
    let startup = r#"echo "$FLEET_CLAIM $FLEET_ATTEMPT" >> "$LOG.startup"; h=$(printf %s "$FLEET_CLAIM" | cksum | cut -d' ' -f1); if [ $((h % 4)) -eq 0 ]; then echo no power; exit 1; fi; sleep 0.2; "$BIN" --redis "$REDIS" beat "$FLEET_SLOT" --ttl 1h; if [ $((h % 4)) -eq 1 ]; then echo on, but the node failed; exit 2; fi"#;
    let shutdown = r#"echo "$FLEET_SLOT $FLEET_CLAIM" >> "$LOG.shutdown"; (sleep 1; "$BIN" --redis "$REDIS" beat "$FLEET_SLOT" --ttl 0) & exit 0"#;
    Fixture::new()
        .group(
            Group::new("pool-a")
                .min(MIN as u32)
                .max(MAX as u32)
                .ungated()
                .env("BIN", env!("CARGO_BIN_EXE_fleet"))
                .env("REDIS", server.url())
                .env("LOG", log.display().to_string())
                .startup(Op::sh(startup).timeout("5s"))
                .shutdown(Op::sh(shutdown).timeout("5s"))
                .timing("job_monitor_poll_interval", "300ms")
                .timing("uncordon_timeout", "3s")
                .timing("readiness_gate_timeout", "3s")
                .timing("failed_slot_cooldown", "3s")
                .timing("machine_gone_grace", "5s")
                .timing("ttl_after_finished", "3s")
                .timing("shutdown_attempt_reset_grace", "3s")
                .timing("stuck_threshold", "40s"),
        )
        .slots("pool-a", (1..=SLOTS).map(|i| format!("bench-{i:02}")))
        .yaml()
}

/// A `fleet serve` process and its provider's client.
struct Proc {
    name: String,
    serve: Serve,
    client: CloudProviderClient<Channel>,
}

async fn start(name: &'static str, server: &RedisServer, config: &std::path::Path) -> Proc {
    let args = [
        "--metrics-addr",
        "127.0.0.1:0",
        "--interval",
        "100ms",
        "--lease",
        "1s",
        "--blind-grace",
        "0s",
        "--holder",
        name,
    ];
    let mut serve = Serve::start(name, server, config, &args);
    let line = serve.log(&["fleet serve started"]).await;
    let addr = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("grpc="))
        .expect("the start line names the provider's address")
        .to_owned();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap();
    Proc {
        name: name.to_owned(),
        serve,
        client: CloudProviderClient::new(channel),
    }
}

/// What one read of the store saw.
struct Seen {
    at: DateTime<Utc>,
    claims: Vec<Claim>,
    ops: HashMap<BenchName, SlotOp>,
    target: usize,
}

async fn look(store: &ClaimStore<MultiplexedConnection>) -> Seen {
    let g = GroupName::parse("pool-a").unwrap();
    let read = store
        .read_groups(std::slice::from_ref(&g))
        .await
        .unwrap()
        .remove(0);
    Seen {
        at: read.now,
        claims: std::sync::Arc::unwrap_or_clone(read.claims),
        ops: read.operations.by_slot,
        target: store.target(&g).await.unwrap(),
    }
}

fn wanting<'a>(seen: &'a Seen, slot: &BenchName) -> Option<&'a Claim> {
    seen.claims
        .iter()
        .find(|c| &c.slot == slot && c.wants_machine())
}

/// The safety checks of one step, against the step before it.
fn check(before: &Seen, now: &Seen, startups: &[String]) {
    // One live claim per slot.
    let mut live: BTreeMap<&BenchName, usize> = BTreeMap::new();
    for c in now.claims.iter().filter(|c| c.phase.is_live()) {
        *live.entry(&c.slot).or_default() += 1;
    }
    assert!(live.values().all(|n| *n <= 1), "two live claims: {live:?}");
    // The target within its bounds.
    let target = i32::try_from(now.target).unwrap();
    assert!((MIN..=MAX).contains(&target), "target {target}");
    // No claim attempt's startup fired twice.
    let mut seen = HashSet::new();
    for line in startups {
        assert!(seen.insert(line), "a startup fired twice: {line}");
    }
    for (slot, op) in &now.ops {
        if op.kind != OperationKind::Shutdown || op.started_at <= before.at {
            continue;
        }
        match &op.claim {
            // A shutdown of a machine no claim wants, fired since the last look, while a claim
            // that wanted the machine existed at both looks (and so throughout: a mark is never
            // lifted, and only a mark or an end stops a claim wanting its machine).
            None => {
                if let (Some(a), Some(b)) = (wanting(before, slot), wanting(now, slot)) {
                    assert_ne!(
                        a.name, b.name,
                        "{slot}: a shutdown fired while claim {} wanted the machine",
                        a.name
                    );
                }
            }
            // A scale-down's shutdown: its claim is marked, or has ended.
            Some(name) => {
                let c = now.claims.iter().find(|c| &c.name == name);
                assert!(
                    c.is_none_or(|c| !c.wants_machine()),
                    "{slot}: claim {name}'s own shutdown fired while it wanted the machine"
                );
            }
        }
    }
    // No claim ready on a machine fleet last told to power off and has not seen off since.
    for c in now.claims.iter().filter(|c| c.phase == Phase::Ready) {
        if c.marked_for_deletion.is_some() {
            continue;
        }
        if let Some(op) = now.ops.get(&c.slot) {
            assert!(
                !op.going_down(now.at, SETTLE),
                "{}: claim {} is ready on a machine going down ({op:?})",
                c.slot,
                c.name
            );
        }
    }
}

fn lines(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Creates a claim on `slot` as a request that read the slot free (the create itself still
/// checks, atomically, that no live claim holds the slot).
async fn race_a_claim(store: &ClaimStore<MultiplexedConnection>, slot: &BenchName) -> bool {
    let catalog = fleet::store::catalog::CatalogGroup {
        name: GroupName::parse("pool-a").unwrap(),
        min_size: 0,
        max_size: MAX as u32,
        max_node_provision_time: None,
        timings: Default::default(),
        slots: Vec::new(),
    };
    let now = store.now().await.unwrap();
    fleet::requests::claim_slot(store, &catalog, slot, now)
        .await
        .is_ok()
}

/// Whether a refusal is one cluster-autoscaler meets in normal life and backs off from.
fn expected(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        Code::Unavailable
            | Code::ResourceExhausted
            | Code::OutOfRange
            | Code::FailedPrecondition
            | Code::Aborted
            | Code::NotFound
    )
}

async fn soak(duration: Duration) {
    let seed: u64 = std::env::var("FLEET_SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(11);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let server = server();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("ops");
    let config = dir.path().join("fleet.yaml");
    std::fs::write(&config, yaml(&server, &log)).unwrap();
    let names = [
        "p00", "p01", "p02", "p03", "p04", "p05", "p06", "p07", "p08", "p09", "p10", "p11", "p12",
        "p13", "p14", "p15", "p16", "p17", "p18", "p19", "p20", "p21", "p22", "p23", "p24", "p25",
    ];
    let mut next = 0;
    let mut procs = Vec::new();
    for _ in 0..2 {
        procs.push(start(names[next], &server, &config).await);
        next += 1;
    }
    let store = ClaimStore::new(conn(&server).await, Keys::default());
    let presence = presence(&server).await;
    let mut before = look(&store).await;
    let (mut calls, mut refused, mut kills, mut steps) = (0usize, 0usize, 0usize, 0usize);
    let started = Instant::now();
    while started.elapsed() < duration {
        steps += 1;
        // The leader, as the lease says; cluster-autoscaler reaches it through the Service.
        let holder: Option<String> = raw(&server, &["GET", &Keys::default().leader()]).await;
        let leader = holder
            .and_then(|h| h.split_whitespace().next().map(str::to_owned))
            .and_then(|h| procs.iter().position(|p| p.name == h));
        if let Some(i) = leader {
            let client = &mut procs[i].client;
            let nodes = client
                .node_group_nodes(NodeGroupNodesRequest {
                    id: "pool-a".into(),
                })
                .await
                .map(|r| r.into_inner().instances)
                .unwrap_or_default();
            let result = match rng.random_range(0..12) {
                // A request that raced a shutdown: a provider that read the slot free before the
                // controller recorded its shutdown creates the claim after. Played by creating
                // the claim straight through the store on a slot with no live claim.
                10 | 11 => {
                    let live: HashSet<&BenchName> = before
                        .claims
                        .iter()
                        .filter(|c| c.phase.is_live())
                        .map(|c| &c.slot)
                        .collect();
                    let free: Vec<BenchName> = (1..=SLOTS)
                        .map(|i| name(&format!("bench-{i:02}")))
                        .filter(|s| !live.contains(s))
                        .collect();
                    if !free.is_empty() && before.target < MAX as usize {
                        let slot = free[rng.random_range(0..free.len())].clone();
                        let _ = race_a_claim(&store, &slot).await;
                    }
                    Ok(())
                }
                0..=3 => client
                    .node_group_increase_size(NodeGroupIncreaseSizeRequest {
                        id: "pool-a".into(),
                        delta: rng.random_range(1..=2),
                    })
                    .await
                    .map(|_| ()),
                4..=7 if !nodes.is_empty() => {
                    let pick = &nodes[rng.random_range(0..nodes.len())];
                    // An instance that failed is one cluster-autoscaler deletes as a fake node.
                    let failed = pick.status.as_ref().is_some_and(|s| s.error_info.is_some());
                    let mut node = ExternalGrpcNode {
                        provider_id: pick.id.clone(),
                        ..Default::default()
                    };
                    if failed {
                        node.annotations.insert(
                            fleet::provider::service::FAKE_NODE_REASON.into(),
                            "create-error".into(),
                        );
                    }
                    client
                        .node_group_delete_nodes(NodeGroupDeleteNodesRequest {
                            id: "pool-a".into(),
                            nodes: vec![node],
                        })
                        .await
                        .map(|_| ())
                }
                _ => client
                    .node_group_decrease_target_size(NodeGroupDecreaseTargetSizeRequest {
                        id: "pool-a".into(),
                        delta: -1,
                    })
                    .await
                    .map(|_| ()),
            };
            calls += 1;
            if let Err(status) = result {
                assert!(expected(&status), "an unexpected refusal: {status:?}");
                refused += 1;
            }
            // Now and then the leader dies outright; a new process takes its place.
            if rng.random_range(0..40) == 0 && next < names.len() {
                let mut dead = procs.remove(i);
                dead.serve.signal("-KILL");
                let _ = dead.serve.child.wait().await;
                kills += 1;
                procs.push(start(names[next], &server, &config).await);
                next += 1;
            }
        }
        let now = look(&store).await;
        check(&before, &now, &lines(&log.with_extension("startup")));
        before = now;
        tokio::time::sleep(Duration::from_millis(rng.random_range(50..250))).await;
    }

    // The traffic stops: the fleet converges. A leader killed between recording an operation and
    // firing it leaves an operation nobody runs or reports: it is in flight until its timeout and
    // the report slack (35 s here), then done if the machine shows it, else late until
    // stuck_threshold (40 s here, 15 min by default), when it is abandoned (SPEC §5.4). The
    // fleet is given that long and a margin.
    let converged = Instant::now();
    let mut last = String::new();
    let settled = loop {
        let now = look(&store).await;
        check(&before, &now, &lines(&log.with_extension("startup")));
        let snap = presence.read(&[]).await.unwrap();
        let on: HashSet<String> = snap
            .benches
            .iter()
            .filter(|b| b.verdict(snap.now).state != State::Down)
            .map(|b| b.name.to_string())
            .collect();
        let ready: HashSet<String> = now
            .claims
            .iter()
            .filter(|c| c.phase == Phase::Ready && c.wants_machine())
            .map(|c| c.slot.to_string())
            .collect();
        let busy = now.claims.iter().any(|c| {
            matches!(c.phase, Phase::Pending | Phase::Booting)
                || (c.phase.is_live() && c.marked_for_deletion.is_some())
        });
        let running = now.ops.values().any(SlotOp::running);
        if !busy && !running && on == ready {
            break true;
        }
        // What keeps it from converging, said if it never does.
        last = format!(
            "on but not ready: {:?}; ready but not on: {:?}; busy claims: {:?}; running operations: {:?}",
            on.difference(&ready).collect::<Vec<_>>(),
            ready.difference(&on).collect::<Vec<_>>(),
            now.claims
                .iter()
                .filter(|c| matches!(c.phase, Phase::Pending | Phase::Booting)
                    || (c.phase.is_live() && c.marked_for_deletion.is_some()))
                .map(|c| format!("{} {} {:?} {:?}", c.name, c.phase, c.reason, c.operation))
                .collect::<Vec<_>>(),
            now.ops
                .iter()
                .filter(|(_, o)| o.running())
                .collect::<Vec<_>>(),
        );
        before = now;
        if converged.elapsed() > Duration::from_secs(90) {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let startups = lines(&log.with_extension("startup"));
    let shutdowns = lines(&log.with_extension("shutdown"));
    eprintln!(
        "soak: {:?}, seed {seed}, {steps} steps, {calls} calls ({refused} refused as CA expects), \
         {kills} leaders killed, {} startups, {} shutdowns, converged in {:?}",
        duration,
        startups.len(),
        shutdowns.len(),
        converged.elapsed()
    );
    assert!(
        settled,
        "the fleet did not converge within 90 s of the traffic stopping: {last}"
    );
    assert!(
        startups.len() > 3 && shutdowns.len() > 3,
        "the soak did little"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_soak_keeps_every_promise() {
    let secs = std::env::var("FLEET_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    soak(Duration::from_secs(secs)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the long soak: five minutes"]
async fn a_five_minute_soak_keeps_every_promise() {
    soak(Duration::from_secs(300)).await;
}
