//! The controller under faults (SPEC §5): one acting leader with fencing, blind is not DOWN, a
//! wiped store adopts what is on, and an outage powers nothing off. Real redis-server, real
//! operations; controllers in-process so a "paused" leader is simply one that is not driven.

use crate::support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use fleet::config::{self, Config};
use fleet::domain::claim::{Claim, Phase, Reason};
use fleet::domain::name::{ClaimName, GroupName};
use fleet::domain::state::State;
use fleet::lifecycle::Exec;
use fleet::reconcile::{Controller, Faults};
use fleet::store::claims::ClaimStore;
use fleet::store::keys::Keys;
use fleet::store::lease::Lease;
use fleet::store::presence::Presence;
use fleet::telemetry::{Health, Metrics};
use fleet_testing::fixture::{BOOTS, Group, Op, POWERS_OFF};
use fleet_testing::{Fixture, Options, RedisServer};
use redis::aio::MultiplexedConnection;
use support::*;
use tokio::sync::watch;

type Ctl = Controller<fleet_redis::conn::Conn, Exec>;

const SLOTS: [&str; 4] = ["bench-01", "bench-02", "bench-03", "bench-04"];

/// Startup makes the bench beat for an hour; shutdown records that it ran (a file per call) and
/// powers the bench off, so a test can count every shutdown ever fired.
fn pool(name: &str, server: &RedisServer, log: &Path) -> Group {
    Group::new(name)
        .min(0)
        .max(4)
        .ungated()
        .env("BIN", env!("CARGO_BIN_EXE_fleet"))
        .env("REDIS", server.url())
        .env("LOG", log.display().to_string())
        .startup(Op::sh(&format!(
            r#"echo "$FLEET_SLOT" >> "$LOG.startup"; {BOOTS}"#
        )))
        .shutdown(Op::sh(&format!(
            r#"echo "$FLEET_SLOT" >> "$LOG.shutdown"; {POWERS_OFF}"#
        )))
        .timing("job_monitor_poll_interval", "100ms")
        .timing("machine_gone_grace", "1s")
}

fn yaml(server: &RedisServer, log: &Path) -> String {
    Fixture::new()
        .group(pool("pool-a", server, log))
        .slots("pool-a", SLOTS)
        .yaml()
}

struct World {
    server: RedisServer,
    dir: tempfile::TempDir,
    cfg: Arc<Config>,
}

impl World {
    fn new(aof: bool) -> World {
        let server = RedisServer::with(Options {
            aof,
            ..Options::default()
        })
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let cfg = Arc::new(
            config::parse(&yaml(&server, &dir.path().join("ops")), Path::new("t.yaml")).unwrap(),
        );
        World { server, dir, cfg }
    }

    /// A controller as `fleet serve` builds one: over a lasting connection, which reconnects
    /// after the server restarts.
    async fn controller(&self, holder: &str, grace: Duration) -> Ctl {
        let (_, rx) = watch::channel(self.cfg.clone());
        controller_over(self, rx, holder, grace).await
    }

    fn fired(&self, kind: &str) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join(format!("ops.{kind}")))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    async fn store(&self) -> ClaimStore<MultiplexedConnection> {
        ClaimStore::new(conn(&self.server).await, Keys::default())
    }

    async fn claims(&self) -> Vec<Claim> {
        std::sync::Arc::unwrap_or_clone(
            self.store()
                .await
                .read_groups(&[group()])
                .await
                .unwrap()
                .remove(0)
                .claims,
        )
    }

    async fn claim(&self, slot: &str) {
        request_claim(&self.server, "pool-a", slot, &format!("{slot}-1")).await;
    }

    async fn state(&self, slot: &str) -> State {
        let p = presence(&self.server).await;
        let snap = p.read(&[name(slot)]).await.unwrap();
        snap.benches[0].verdict(snap.now).state
    }
}

fn group() -> GroupName {
    GroupName::parse("pool-a").unwrap()
}

/// Leads, then runs passes (waiting for their operations) until one changes nothing.
async fn settle(ctl: &mut Ctl) {
    assert!(ctl.lead().await, "the controller should lead");
    for _ in 0..20 {
        let r = bounded("a pass", ctl.pass()).await.unwrap();
        if r.started.is_empty() && r.stopped.is_empty() && r.writes == 0 {
            return;
        }
        while r.started.iter().chain(&r.stopped).any(|s| ctl.running(s)) {
            bounded("an operation", ctl.operation_ended()).await;
        }
    }
    panic!("never settled");
}

/// Calls `lead` until the controller leads: after an outage or a lapsed lease.
async fn lead_soon(ctl: &mut Ctl, what: &str) {
    bounded(what, async {
        while !ctl.lead().await {
            tokio::task::yield_now().await;
        }
    })
    .await;
}

/// Waits, on the local clock, for `d` to pass: the lease and the graces are real time.
async fn wait(d: Duration) {
    tokio::time::sleep(d).await;
}

/// Brings every slot up under a ready claim, after the first start's blind grace.
async fn all_ready(w: &World, ctl: &mut Ctl, grace: Duration) {
    settle(ctl).await;
    wait(grace + Duration::from_millis(50)).await;
    for slot in SLOTS {
        w.claim(slot).await;
    }
    settle(ctl).await;
    let phases: Vec<Phase> = w.claims().await.iter().map(|c| c.phase).collect();
    assert_eq!(phases, [Phase::Ready; 4]);
}

// SPEC §5.1: one leader; a second controller does not act; a leader that stops renewing is
// replaced within one lease, and its late writes are refused by the fence.
#[tokio::test]
async fn one_leader_acts_and_a_paused_leaders_writes_are_refused() {
    let w = World::new(false);
    let mut a = w.controller("a", Duration::from_millis(200)).await;
    let mut b = w.controller("b", Duration::from_millis(200)).await;
    assert!(a.lead().await);
    assert!(!b.lead().await, "the lease is a's");
    all_ready(&w, &mut a, Duration::from_millis(200)).await;
    let token_a = a.token().unwrap().to_owned();
    // a is paused (not driven) past its lease; b takes over with a newer token.
    wait(Duration::from_millis(900)).await;
    assert!(b.lead().await, "b leads once a's lease lapsed");
    assert!(b.token().unwrap() > token_a.as_str());
    // a resumes and, not knowing, tries to act: a scale-down it would reverse is refused.
    let c = w.claims().await.remove(0);
    let marked = c.mark_for_deletion(Reason::NodeDeleted).unwrap();
    assert!(
        w.store().await.write(&c, &marked, None).await.unwrap(),
        "a request, unfenced"
    );
    let before = w.claims().await;
    let report = a.pass().await;
    assert!(
        report.is_err() || report.unwrap().stopped.is_empty(),
        "a fired nothing"
    );
    assert_eq!(
        w.claims().await,
        before,
        "every write of the deposed leader was refused"
    );
    assert!(w.fired("shutdown").is_empty());
    // b renews first, so its lease cannot have lapsed in the steps above on a slow machine.
    assert!(b.lead().await);
    assert!(!a.lead().await, "a learns it lost");
    // b acts on it.
    settle(&mut b).await;
    let done = w
        .claims()
        .await
        .into_iter()
        .find(|x| x.name == c.name)
        .unwrap();
    assert_eq!(done.phase, Phase::Completed);
    assert_eq!(w.fired("shutdown"), [c.slot.to_string()]);
}

// SPEC §5.1: a clean stop hands over at once.
#[tokio::test]
async fn a_clean_stop_hands_over_at_once() {
    let w = World::new(false);
    let a = w.controller("a", Duration::ZERO).await;
    let mut b = w.controller("b", Duration::ZERO).await;
    let shutdown = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(a.run_leading(
        Duration::from_millis(50),
        Duration::from_secs(1),
        shutdown.clone(),
    ));
    // Wait until a holds the lease (its loop took it), then b is refused.
    bounded("a to lead", async {
        loop {
            let holder: Option<String> = raw(&w.server, &["GET", &Keys::default().leader()]).await;
            if holder.is_some_and(|h| h.starts_with("a ")) {
                break;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(!b.lead().await);
    shutdown.cancel();
    bounded("a to stop", running).await.unwrap();
    assert!(b.lead().await, "a released the lease on its way out");
}

// SPEC §5.2: half the machines that were on vanish in one pass: blind, nothing judged, nothing
// powered; after the grace, what is really gone is judged.
#[tokio::test]
async fn half_the_fleet_vanishing_at_once_powers_nothing_off() {
    let w = World::new(false);
    let mut ctl = w.controller("a", Duration::from_millis(200)).await;
    all_ready(&w, &mut ctl, Duration::from_millis(200)).await;
    let p = presence(&w.server).await;
    for slot in &SLOTS[..2] {
        p.beat(&beat(slot, Duration::ZERO)).await.unwrap();
    }
    let report = ctl.pass().await.unwrap();
    assert!(report.blind);
    assert!(
        w.claims()
            .await
            .iter()
            .all(|c| c.phase == Phase::Ready && c.conditions.len() == 2),
        "nothing was observed off"
    );
    assert!(w.fired("shutdown").is_empty());
    // The benches come back within the grace: nothing happened.
    for slot in &SLOTS[..2] {
        p.beat(&beat(slot, Duration::from_secs(3600)))
            .await
            .unwrap();
    }
    wait(Duration::from_millis(250)).await;
    settle(&mut ctl).await;
    assert!(w.claims().await.iter().all(|c| c.phase == Phase::Ready));
    assert!(w.fired("shutdown").is_empty());
}

// SPEC §5.2/§5.3: Redis restarted empty while every machine is on: no machine is powered off;
// after the grace the running machines are adopted under ready claims.
#[tokio::test]
async fn a_store_wiped_while_machines_are_on_adopts_them_and_powers_nothing_off() {
    let w = World::new(false);
    let mut ctl = w.controller("a", Duration::from_millis(300)).await;
    all_ready(&w, &mut ctl, Duration::from_millis(300)).await;
    let _: () = raw(&w.server, &["FLUSHALL"]).await;
    // The lease went with the data; the controller takes it again.
    assert!(ctl.lead().await);
    let report = ctl.pass().await.unwrap();
    assert!(
        report.blind,
        "a store that lost its marker makes the controller blind"
    );
    // The benches keep beating (their agents re-register them).
    let p = presence(&w.server).await;
    for slot in SLOTS {
        p.beat(&beat(slot, Duration::from_secs(3600)))
            .await
            .unwrap();
    }
    wait(Duration::from_millis(350)).await;
    settle(&mut ctl).await;
    let claims = w.claims().await;
    assert_eq!(claims.len(), 4);
    assert!(
        claims
            .iter()
            .all(|c| c.phase == Phase::Ready && c.reason == Some(Reason::Adopted)),
        "{claims:?}"
    );
    assert!(w.fired("shutdown").is_empty(), "no machine was powered off");
    for slot in SLOTS {
        assert_eq!(w.state(slot).await, State::Up);
    }
}

// SPEC §5.2: Redis stopped for longer than a TTL, claims kept by AOF: while it is down the
// controller is blind; when it returns, the grace lets the benches be heard before anything is
// judged, and nothing is powered off.
#[tokio::test]
async fn redis_down_longer_than_a_ttl_powers_nothing_off() {
    let mut w = World::new(true);
    let mut ctl = w.controller("a", Duration::from_millis(400)).await;
    all_ready(&w, &mut ctl, Duration::from_millis(400)).await;
    // Short promises, so the keys expire during the outage.
    let p = presence(&w.server).await;
    for slot in SLOTS {
        p.beat(&beat(slot, Duration::from_millis(300)))
            .await
            .unwrap();
    }
    w.server.kill();
    assert!(ctl.pass().await.is_err() || ctl.pass().await.unwrap().blind);
    wait(Duration::from_millis(500)).await;
    w.server.restart().unwrap();
    // The keys expired; the benches beat again once Redis is back. The lasting connection
    // reconnects after its first failed call.
    lead_soon(&mut ctl, "leading again").await;
    let report = ctl.pass().await.unwrap();
    assert!(report.blind, "blind for the grace after sight returns");
    let p = presence(&w.server).await;
    for slot in SLOTS {
        p.beat(&beat(slot, Duration::from_secs(3600)))
            .await
            .unwrap();
    }
    wait(Duration::from_millis(450)).await;
    settle(&mut ctl).await;
    assert!(
        w.claims().await.iter().all(|c| c.phase == Phase::Ready),
        "{:?}",
        w.claims().await
    );
    assert!(w.fired("shutdown").is_empty());
}

// SPEC §5.2: the grace follows any outage, not only one that emptied the fleet. Here every key
// outlives the outage, so no bench vanishes and only the lost sight can make the pass blind; the
// pass during the outage fails at its claims read and must still have recorded the loss.
#[tokio::test]
async fn sight_returning_is_blind_for_the_grace_even_when_no_bench_vanished() {
    let mut w = World::new(true);
    let grace = Duration::from_millis(400);
    let mut ctl = w.controller("a", grace).await;
    all_ready(&w, &mut ctl, grace).await;
    w.server.kill();
    assert!(
        ctl.pass().await.is_err(),
        "the claims cannot be read either"
    );
    w.server.restart().unwrap();
    lead_soon(&mut ctl, "leading again").await;
    for slot in SLOTS {
        assert_eq!(
            w.state(slot).await,
            State::Up,
            "the hour-long beats outlived the outage"
        );
    }
    let report = ctl.pass().await.unwrap();
    assert!(report.blind, "blind for the grace after sight returns");
    assert!(report.started.is_empty() && report.stopped.is_empty());
    wait(grace + Duration::from_millis(50)).await;
    let report = ctl.pass().await.unwrap();
    assert!(!report.blind, "the grace ends");
    settle(&mut ctl).await;
    assert!(w.claims().await.iter().all(|c| c.phase == Phase::Ready));
    assert!(w.fired("shutdown").is_empty());
}

// SPEC §5.2: a follower that saw the outage end counts the grace from then: taking over after
// the grace has run out, it acts at once instead of being blind for a whole grace again.
#[tokio::test]
async fn a_follower_counts_the_grace_from_when_sight_returned() {
    let mut w = World::new(true);
    let grace = Duration::from_secs(1);
    let mut a = w.controller("a", grace).await;
    let mut b = w.controller("b", grace).await;
    all_ready(&w, &mut a, grace).await;
    w.server.kill();
    assert!(
        !a.lead().await && !b.lead().await,
        "neither reaches the lease"
    );
    w.server.restart().unwrap();
    lead_soon(&mut a, "a leading again").await;
    assert!(!b.lead().await, "b follows, and sees Redis again");
    assert!(
        a.pass().await.unwrap().blind,
        "the leader is blind for the grace"
    );
    // a stops renewing; by the time its lease lapses, b's grace has run out too.
    wait(grace + Duration::from_millis(100)).await;
    lead_soon(&mut b, "b to lead").await;
    let report = b.pass().await.unwrap();
    assert!(!report.blind, "the grace ran while b followed");
    settle(&mut b).await;
    assert!(w.claims().await.iter().all(|c| c.phase == Phase::Ready));
    assert!(w.fired("shutdown").is_empty());
}

// SPEC §5.3: the wipe record lives in the store, so a leader that takes over during the grace
// keeps the grace and adopts; it never powers the running machines off.
#[tokio::test]
async fn a_leader_that_takes_over_after_a_wipe_keeps_the_grace_and_adopts() {
    let w = World::new(false);
    // a's grace outlasts its lease by far, so b takes over inside it even on a slow machine; b's
    // own grace is zero, so only the wipe record a left can make b blind.
    let grace = Duration::from_secs(3);
    let mut a = w.controller("a", grace).await;
    all_ready(&w, &mut a, grace).await;
    let _: () = raw(&w.server, &["FLUSHALL"]).await;
    assert!(a.lead().await);
    assert!(a.pass().await.unwrap().blind, "a saw the wipe");
    drop(a); // a dies during the grace
    let mut b = w.controller("b", Duration::ZERO).await;
    lead_soon(&mut b, "b to lead").await;
    let p = presence(&w.server).await;
    for slot in SLOTS {
        p.beat(&beat(slot, Duration::from_secs(3600)))
            .await
            .unwrap();
    }
    let report = b.pass().await.unwrap();
    assert!(report.blind, "b keeps the grace a started");
    assert!(report.stopped.is_empty() && report.started.is_empty());
    wait(grace).await;
    settle(&mut b).await;
    let claims = w.claims().await;
    assert_eq!(claims.len(), 4, "{claims:?}");
    assert!(claims.iter().all(|c| c.reason == Some(Reason::Adopted)));
    assert!(w.fired("shutdown").is_empty(), "no machine was powered off");
}

// A claim that cannot be read may be its slot's live claim: no power action on that slot.
#[tokio::test]
async fn an_unreadable_claim_holds_its_slots_machine() {
    let w = World::new(false);
    let mut ctl = w.controller("a", Duration::ZERO).await;
    settle(&mut ctl).await;
    let g = Keys::default().group(&group());
    let junk = r#"{"name":"bench-01-x","slot":"bench-01","phase":"from-a-newer-fleet"}"#;
    let _: () = raw(
        &w.server,
        &[
            "SET",
            &g.claim(&ClaimName::parse("bench-01-x").unwrap()),
            junk,
        ],
    )
    .await;
    let _: () = raw(&w.server, &["ZADD", &g.claims(), "1", "bench-01-x"]).await;
    presence(&w.server)
        .await
        .beat(&beat("bench-01", Duration::from_secs(3600)))
        .await
        .unwrap();
    presence(&w.server)
        .await
        .beat(&beat("bench-02", Duration::from_secs(3600)))
        .await
        .unwrap();
    settle(&mut ctl).await;
    // A first start adopts what is on (bench-02); bench-01 is neither adopted nor shut down.
    assert!(w.fired("shutdown").is_empty());
    let claims = w.claims().await;
    let slots: Vec<&str> = claims.iter().map(|c| c.slot.as_str()).collect();
    assert_eq!(slots, ["bench-02"], "{claims:?}");
    assert_eq!(claims[0].reason, Some(Reason::Adopted));
}

/// Every key of the store with its value (DUMP) and its time to live: what a replica holds.
async fn dump(server: &RedisServer) -> Vec<(String, Vec<u8>, i64)> {
    let mut c = conn(server).await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut c)
        .await
        .unwrap();
    let mut out = Vec::new();
    for key in keys {
        let value: Vec<u8> = redis::cmd("DUMP")
            .arg(&key)
            .query_async(&mut c)
            .await
            .unwrap();
        let ttl: i64 = redis::cmd("PTTL")
            .arg(&key)
            .query_async(&mut c)
            .await
            .unwrap();
        out.push((key, value, ttl.max(0)));
    }
    out
}

/// The store becomes `dumped`: a failover to a replica that had only that.
async fn restore(server: &RedisServer, dumped: &[(String, Vec<u8>, i64)]) {
    let mut c = conn(server).await;
    let _: () = redis::cmd("FLUSHALL").query_async(&mut c).await.unwrap();
    for (key, value, ttl) in dumped {
        let _: () = redis::cmd("RESTORE")
            .arg(key)
            .arg(*ttl)
            .arg(value.as_slice())
            .query_async(&mut c)
            .await
            .unwrap();
    }
}

// SPEC §5.3: a failover to a replica that had not received the leader's last writes rolls the
// store back under a leader that keeps its lease, its token and its fences: no fence refuses
// anything. The written mark tells: blind for the grace, then the machines found on are adopted.
// Without it the leader would power off the two machines whose claims the store lost.
#[tokio::test]
async fn a_store_rolled_back_under_its_leader_is_blind_then_adopts() {
    let w = World::new(false);
    let grace = Duration::from_millis(300);
    let mut ctl = w.controller("a", grace).await;
    settle(&mut ctl).await;
    wait(grace + Duration::from_millis(50)).await;
    w.claim("bench-01").await;
    w.claim("bench-02").await;
    settle(&mut ctl).await;
    let replica = dump(&w.server).await;
    w.claim("bench-03").await;
    w.claim("bench-04").await;
    settle(&mut ctl).await;
    assert_eq!(w.claims().await.len(), 4);
    assert_eq!(w.fired("startup").len(), 4);

    restore(&w.server, &replica).await;
    // The agents of the two machines the store forgot beat on the new primary.
    let p = presence(&w.server).await;
    for slot in ["bench-03", "bench-04"] {
        p.beat(&beat(slot, Duration::from_secs(3600)))
            .await
            .unwrap();
    }
    assert!(
        ctl.lead().await,
        "the rolled-back lease is still this leader's"
    );
    let report = ctl.pass().await.unwrap();
    assert!(
        report.blind,
        "a store that lost the leader's writes makes it blind"
    );
    assert!(report.stopped.is_empty() && report.started.is_empty());
    wait(grace + Duration::from_millis(50)).await;
    settle(&mut ctl).await;
    let claims = w.claims().await;
    assert_eq!(claims.len(), 4, "{claims:?}");
    assert!(claims.iter().all(|c| c.phase == Phase::Ready), "{claims:?}");
    let adopted: Vec<&str> = claims
        .iter()
        .filter(|c| c.reason == Some(Reason::Adopted))
        .map(|c| c.slot.as_str())
        .collect();
    assert_eq!(adopted, ["bench-03", "bench-04"]);
    assert!(w.fired("shutdown").is_empty(), "no machine was powered off");
    assert_eq!(w.fired("startup").len(), 4, "nothing started twice");
}

/// `yaml` with the group named `group`, and a shutdown that powers the bench off only once the
/// test creates `<log>.release`: a power-off the test holds in flight for as long as it needs.
fn held_shutdown_yaml(server: &RedisServer, log: &Path, group: &str) -> String {
    let release = format!("{}.release", log.display());
    let held = [
        r#"echo "$FLEET_SLOT" >> "$LOG.shutdown""#,
        r#"while [ ! -e "$RELEASE" ]; do sleep 0.02; done"#,
        POWERS_OFF,
    ]
    .join("; ");
    Fixture::new()
        .group(
            pool(group, server, log)
                .env("RELEASE", release)
                .shutdown(Op::sh(&held)),
        )
        .slots(group, SLOTS)
        .yaml()
}

/// A controller as `fleet serve` builds one, over `rx` (a test renames a group through it): over a
/// lasting connection, which reconnects after the server restarts.
async fn controller_over(
    w: &World,
    rx: watch::Receiver<Arc<Config>>,
    holder: &str,
    grace: Duration,
) -> Ctl {
    let mut endpoint = w.server.endpoint();
    endpoint.timeout = Duration::from_secs(2);
    let manager = endpoint.open_lasting().await.unwrap();
    let lease = Lease::new(
        manager.clone(),
        Keys::default(),
        holder.to_owned(),
        Duration::from_millis(800),
    );
    Controller::new(
        rx,
        Presence::new(manager.clone(), Keys::default()),
        ClaimStore::new(manager, Keys::default()),
        Arc::new(exec(&w.server)),
        Arc::new(Metrics::default()),
        Arc::new(Health::default()),
    )
    .with_lease(lease)
    .with_faults(Faults {
        blind_grace: grace,
        ..Faults::default()
    })
}

/// The claims of `group`, by slot.
async fn claims_of(w: &World, group: &str) -> Vec<(String, Phase, Option<Reason>)> {
    let g = GroupName::parse(group).unwrap();
    let read = w.store().await.read_groups(&[g]).await.unwrap();
    read[0]
        .claims
        .iter()
        .map(|c| (c.slot.to_string(), c.phase, c.reason))
        .collect()
}

/// A first start on an empty store inside its adoption window (SPEC §5.3): the four machines are
/// on and adopted by pool-a, then bench-01's claim is cancelled and its shutdown fired and held
/// in flight. Returns the controller and the sender of its configuration.
async fn adopted_then_bench_01_shutting_down(
    w: &World,
    grace: Duration,
) -> (Ctl, watch::Sender<Arc<Config>>) {
    let log = w.dir.path().join("ops");
    let cfg = config::parse(
        &held_shutdown_yaml(&w.server, &log, "pool-a"),
        Path::new("t.yaml"),
    )
    .unwrap();
    let (tx, rx) = watch::channel(Arc::new(cfg));
    let mut ctl = controller_over(w, rx, "a", grace).await;
    assert!(ctl.lead().await);
    assert!(ctl.pass().await.unwrap().blind, "a first start is blind");
    let p = presence(&w.server).await;
    for slot in SLOTS {
        p.beat(&beat(slot, Duration::from_secs(3600)))
            .await
            .unwrap();
    }
    wait(grace + Duration::from_millis(50)).await;
    settle(&mut ctl).await;
    let adopted = claims_of(w, "pool-a").await;
    assert_eq!(adopted.len(), 4, "{adopted:?}");
    assert!(
        adopted.iter().all(|(_, _, r)| *r == Some(Reason::Adopted)),
        "{adopted:?}"
    );
    let store = w.store().await;
    let c = w
        .claims()
        .await
        .into_iter()
        .find(|c| c.slot.as_str() == "bench-01")
        .unwrap();
    let now = store.now().await.unwrap();
    fleet::requests::cancel(
        &store,
        &c,
        Reason::DeletedByHand,
        now,
        Duration::from_secs(3600),
    )
    .await
    .unwrap();
    let report = bounded("a pass", ctl.pass()).await.unwrap();
    assert_eq!(report.stopped, [name("bench-01")], "{report:?}");
    bounded("the shutdown to begin", async {
        while w.fired("shutdown") != ["bench-01"] {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    (ctl, tx)
}

/// Passes of the renamed configuration while bench-01's shutdown is held: pool-b adopts the
/// three machines nobody powers off, never bench-01, and nothing is started or shut down.
/// Once its old group's shutdown ended and it went off, passes still neither adopt bench-01
/// into the new name nor start it.
async fn dark_bench_01_stays_unadopted(w: &World, ctl: &mut Ctl) {
    for _ in 0..3 {
        let report = bounded("a pass", ctl.pass()).await.unwrap();
        assert!(report.started.is_empty() && report.stopped.is_empty());
    }
    let claims = claims_of(w, "pool-b").await;
    assert!(
        claims.iter().all(|(slot, _, _)| slot != "bench-01"),
        "{claims:?}"
    );
    assert!(w.fired("startup").is_empty(), "nothing was started");
}

async fn renamed_passes_never_adopt_bench_01(w: &World, ctl: &mut Ctl) {
    for _ in 0..5 {
        let report = bounded("a pass", ctl.pass()).await.unwrap();
        assert!(
            report.started.is_empty() && report.stopped.is_empty(),
            "{report:?}"
        );
        let claims = claims_of(w, "pool-b").await;
        assert!(
            claims.iter().all(|(slot, _, _)| slot != "bench-01"),
            "a machine its old group's shutdown is darkening was adopted: {claims:?}"
        );
        assert_eq!(w.state("bench-01").await, State::Up, "the shutdown is held");
    }
    let claims = claims_of(w, "pool-b").await;
    assert_eq!(
        claims,
        ["bench-02", "bench-03", "bench-04"].map(|s| (
            s.to_owned(),
            Phase::Ready,
            Some(Reason::Adopted)
        )),
        "the machines no shutdown darkens are adopted by the new name"
    );
    assert_eq!(
        w.fired("shutdown"),
        ["bench-01"],
        "one shutdown, never a second"
    );
}

// SPEC §4.1, §5.3: a group renamed inside the wipe-adoption window adopted a machine
// whose old group's shutdown was still running. The new name's pass reads only its own
// operation records, and adoption did not ask what ran here. Now no claim is adopted for that
// slot while the shutdown runs, nor once it ended with the machine off; the other machines are
// adopted as before.
#[tokio::test]
async fn a_group_renamed_while_its_shutdown_runs_never_adopts_that_machine() {
    let w = World::new(false);
    let grace = Duration::from_millis(300);
    let (mut ctl, tx) = adopted_then_bench_01_shutting_down(&w, grace).await;
    let renamed = held_shutdown_yaml(&w.server, &w.dir.path().join("ops"), "pool-b");
    tx.send(Arc::new(
        config::parse(&renamed, Path::new("t.yaml")).unwrap(),
    ))
    .unwrap();
    renamed_passes_never_adopt_bench_01(&w, &mut ctl).await;
    assert!(
        claims_of(&w, "pool-a")
            .await
            .iter()
            .all(|(_, phase, reason)| *phase == Phase::Failed
                && *reason == Some(Reason::SlotDeleted)),
        "the old name's claims ended"
    );
    // The shutdown ends, and the machine goes off: still nothing adopts or starts it.
    std::fs::write(w.dir.path().join("ops.release"), "").unwrap();
    assert_eq!(
        bounded("the shutdown to end", ctl.operation_ended()).await,
        Some(name("bench-01"))
    );
    assert_eq!(w.state("bench-01").await, State::Down);
    dark_bench_01_stays_unadopted(&w, &mut ctl).await;
}

// The same rename read by a successor that never ran the shutdown (SPEC §5.4): it knows of it
// only from the old group's operation record in the store, and adopts the machine no sooner.
#[tokio::test]
async fn a_successor_reading_a_renamed_group_never_adopts_a_machine_its_old_shutdown_darkens() {
    let w = World::new(false);
    let grace = Duration::from_millis(300);
    let (a, _tx) = adopted_then_bench_01_shutting_down(&w, grace).await;
    drop(a); // a dies; its shutdown's wrapper runs on, in its own process group
    let renamed = held_shutdown_yaml(&w.server, &w.dir.path().join("ops"), "pool-b");
    let (_tx_b, rx) = watch::channel(Arc::new(
        config::parse(&renamed, Path::new("t.yaml")).unwrap(),
    ));
    let mut b = controller_over(&w, rx, "b", Duration::ZERO).await;
    lead_soon(&mut b, "b to lead").await;
    renamed_passes_never_adopt_bench_01(&w, &mut b).await;
    // The shutdown ends (its wrapper reports to the old group's record) and the machine goes
    // off: nothing adopts or starts it.
    std::fs::write(w.dir.path().join("ops.release"), "").unwrap();
    bounded("the machine to go off", async {
        while w.state("bench-01").await != State::Down {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    dark_bench_01_stays_unadopted(&w, &mut b).await;
}
