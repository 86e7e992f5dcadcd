//! The lifecycle controller end to end (SPEC §4.5): a real redis-server, real operations (the
//! `fleet` binary writing the bench's beat, as a power switch would), real passes. Durations are
//! configured short; a test that needs time to pass waits for the instant it needs, computed from
//! what the claim recorded.

use crate::support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use fleet::config::{self, Config};
use fleet::domain::claim::{Claim, OperationKind, Phase, Reason};
use fleet::domain::law::{Power, Report};
use fleet::domain::name::{BenchName, ClaimName, GroupName};
use fleet::domain::state::State;
use fleet::lifecycle::Exec;
use fleet::reconcile::{Controller, Faults};
use fleet::store::claims::{ClaimStore, Created, Event};
use fleet::store::keys::Keys;
use fleet::store::presence::Presence;
use fleet::telemetry::{Health, Metrics};
use fleet_testing::fixture::{BOOTS, Group, Op, POWERS_OFF, Slot};
use fleet_testing::{Fixture, RedisServer};
use redis::aio::MultiplexedConnection;
use support::*;
use tokio::sync::watch;

type Ctl = Controller<MultiplexedConnection, Exec>;

/// A group whose startup runs the script `startup` and whose shutdown runs `shutdown`, each within
/// 10 s, with the fleet binary as `$BIN` and the server as `$REDIS`: `BOOTS` makes the bench beat
/// (a machine that boots at once), `POWERS_OFF` makes it read DOWN.
fn pool(name: &str, server: &RedisServer, startup: &str, shutdown: &str, timings: &str) -> Group {
    Group::new(name)
        .min(0)
        .ungated()
        .env("BIN", env!("CARGO_BIN_EXE_fleet"))
        .env("REDIS", server.url())
        .startup(Op::sh(startup).timeout("10s"))
        .shutdown(Op::sh(shutdown).timeout("10s"))
        .timings(timings)
}

/// `pool` as pool-a, with `slots`.
fn yaml(
    server: &RedisServer,
    startup: &str,
    shutdown: &str,
    timings: &str,
    slots: &[&str],
) -> String {
    Fixture::new()
        .group(pool("pool-a", server, startup, shutdown, timings))
        .slots("pool-a", slots)
        .yaml()
}

const FAST: &str = "job_monitor_poll_interval: 100ms";

struct Harness {
    server: RedisServer,
    ctl: Ctl,
    store: ClaimStore<MultiplexedConnection>,
    presence: Presence<MultiplexedConnection>,
    config: watch::Sender<Arc<Config>>,
}

fn group() -> GroupName {
    GroupName::parse("pool-a").unwrap()
}

async fn harness(startup: &str, shutdown: &str, timings: &str, slots: &[&str]) -> Harness {
    let server = server();
    let text = yaml(&server, startup, shutdown, timings, slots);
    let cfg =
        config::parse(&text, Path::new("test.yaml")).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let (tx, rx) = watch::channel(Arc::new(cfg));
    let store = ClaimStore::new(conn(&server).await, Keys::default());
    let presence = Presence::new(conn(&server).await, Keys::default());
    let ctl = Controller::new(
        rx,
        Presence::new(conn(&server).await, Keys::default()),
        ClaimStore::new(conn(&server).await, Keys::default()),
        Arc::new(exec(&server)),
        Arc::new(Metrics::default()),
        Arc::new(Health::default()),
    );
    Harness {
        server,
        ctl,
        store,
        presence,
        config: tx,
    }
}

impl Harness {
    /// Creates a claim on `slot` as the provider or `fleet claim` would.
    async fn claim(&self, slot: &str, n: u32) -> Claim {
        let cfg = self.config.borrow().clone();
        let g = cfg.group(&group()).unwrap();
        let seed = self.store.seed(&group(), &name(slot)).await.unwrap();
        let (secs, micros): (i64, i64) = raw(&self.server, &["TIME"]).await;
        let now = chrono::DateTime::from_timestamp(secs, (micros * 1000) as u32).unwrap();
        let c = Claim::new(
            ClaimName::parse(&format!("{slot}-{n}")).unwrap(),
            name(slot),
            group(),
            seed.last.as_ref(),
            now,
            &g.timings,
            g.max_node_provision_time,
        );
        assert_eq!(
            self.store.create(&c, &seed).await.unwrap(),
            Created::Created
        );
        c
    }

    async fn claims(&self) -> Vec<Claim> {
        std::sync::Arc::unwrap_or_clone(
            self.store
                .read_groups(&[group()])
                .await
                .unwrap()
                .remove(0)
                .claims,
        )
    }

    async fn the_claim(&self, name: &str) -> Claim {
        self.claims()
            .await
            .into_iter()
            .find(|c| c.name.as_str() == name)
            .unwrap_or_else(|| panic!("no claim {name}"))
    }

    async fn state(&self, slot: &str) -> State {
        let snap = self.presence.read(&[name(slot)]).await.unwrap();
        snap.benches[0].verdict(snap.now).state
    }

    /// Runs passes, waiting for every operation they start, until a pass starts none.
    async fn settle(&mut self) {
        for _ in 0..20 {
            let report = bounded("a pass", self.ctl.pass()).await.unwrap();
            if report.started.is_empty() && report.stopped.is_empty() && report.writes == 0 {
                return;
            }
            while report
                .started
                .iter()
                .chain(&report.stopped)
                .any(|s| self.ctl.running(s))
            {
                bounded("an operation", self.ctl.operation_ended()).await;
            }
        }
        panic!("the slot never settled");
    }

    /// Waits until `at` (the server's time) has passed, then settles.
    async fn at(&mut self, at: chrono::DateTime<chrono::Utc>) {
        let (secs, micros): (i64, i64) = raw(&self.server, &["TIME"]).await;
        let now = chrono::DateTime::from_timestamp(secs, (micros * 1000) as u32).unwrap();
        if let Ok(wait) = (at - now).to_std() {
            tokio::time::sleep(wait + Duration::from_millis(20)).await;
        }
        self.settle().await;
    }

    async fn events(&self, claim: &str) -> Vec<Event> {
        let name = ClaimName::parse(claim).unwrap();
        self.store
            .timeline(&group(), &name)
            .await
            .unwrap()
            .iter()
            .map(|e| e.event)
            .collect()
    }

    async fn slot_phase(&self, slot: &str) -> Option<Report> {
        self.store
            .read_slots(&group(), &[name(slot)])
            .await
            .unwrap()[0]
            .0
            .as_ref()
            .and_then(|s| s.phase())
    }
}

#[tokio::test]
async fn a_claim_boots_its_machine_and_moves_pending_booting_ready() {
    let mut h = harness(BOOTS, POWERS_OFF, FAST, &["bench-01"]).await;
    h.settle().await;
    assert_eq!(h.slot_phase("bench-01").await, Some(Report::Off));
    h.claim("bench-01", 1).await;
    h.settle().await;
    let c = h.the_claim("bench-01-1").await;
    assert_eq!((c.phase, c.attempt, c.deadline_at), (Phase::Ready, 1, None));
    let op = c.operation.clone().unwrap();
    assert_eq!(op.kind, OperationKind::Startup);
    assert_eq!(h.state("bench-01").await, State::Up);
    assert_eq!(
        h.events("bench-01-1").await,
        [
            Event::Created,
            Event::Booting,
            Event::Operation,
            Event::Ready
        ]
    );
    assert_eq!(h.slot_phase("bench-01").await, Some(Report::Ready));
    let status = h
        .store
        .read_slots(&group(), &[name("bench-01")])
        .await
        .unwrap()
        .remove(0)
        .0
        .unwrap();
    assert_eq!(
        (
            status.power,
            status.usable,
            status.history.activations_total()
        ),
        (Some(Power::On), true, 1)
    );
    assert_eq!(
        status.claim.map(|c| c.to_string()),
        Some("bench-01-1".to_owned())
    );
}

// Three failing startups spend the slot's attempts; the fourth claim fails before a machine is
// bought.
#[tokio::test]
async fn a_failing_startup_spends_three_attempts_and_the_fourth_claim_buys_nothing() {
    let mut h = harness("echo no power; exit 1", POWERS_OFF, FAST, &["bench-01"]).await;
    for n in 1..=3 {
        h.claim("bench-01", n).await;
        h.settle().await;
        let c = h.the_claim(&format!("bench-01-{n}")).await;
        assert_eq!(
            (c.phase, c.attempt, c.reason),
            (Phase::Failed, n, Some(Reason::StartupJobFailed)),
            "attempt {n}"
        );
    }
    let timeline = h
        .store
        .timeline(&group(), &ClaimName::parse("bench-01-3").unwrap())
        .await
        .unwrap();
    assert!(
        timeline
            .iter()
            .any(|e| e.detail.as_deref().is_some_and(|d| d.contains("no power"))),
        "{timeline:?}"
    );
    h.claim("bench-01", 4).await;
    h.settle().await;
    let c = h.the_claim("bench-01-4").await;
    assert_eq!(
        (c.phase, c.attempt, c.reason),
        (Phase::Failed, 4, Some(Reason::AttemptLimitExceeded))
    );
    assert_eq!(c.operation, None, "no fourth machine was bought");
}

// A boot that outlives its deadline (its operation runs longer than the attempt budget allows)
// fails DeadlineExceeded mid-boot; when the machine then comes up, the law shuts it down.
#[tokio::test]
async fn a_boot_that_never_comes_fails_at_its_deadline_and_is_forced_off() {
    // The deadline (1.8 s) leaves the first pass time to boot on a loaded machine, and the boot
    // (3 s) outlives it.
    let startup = r#"sleep 3; "$BIN" --redis "$REDIS" beat "$FLEET_SLOT" --ttl 1h"#;
    let timings = "job_timeout: 300ms, job_monitor_poll_interval: 300ms, uncordon_timeout: 300ms, readiness_gate_timeout: 300ms, max_uncordon_retry_interval: 300ms, budget_slack: 300ms";
    let mut h = harness(startup, POWERS_OFF, timings, &["bench-01"]).await;
    let c = h.claim("bench-01", 1).await;
    assert_eq!(
        c.deadline_at,
        Some(c.requested_at + chrono::TimeDelta::milliseconds(1800))
    );
    h.settle().await;
    let c = h.the_claim("bench-01-1").await;
    assert_eq!(
        (c.phase, c.reason),
        (Phase::Failed, Some(Reason::DeadlineExceeded))
    );
    let events = h.events("bench-01-1").await;
    assert_eq!(
        events[..3],
        [Event::Created, Event::Booting, Event::Operation],
        "{events:?}"
    );
    assert_eq!(events[3], Event::Failed, "{events:?}");
    assert_eq!(
        h.state("bench-01").await,
        State::Down,
        "the machine that came up late was forced off"
    );
    assert_eq!(h.slot_phase("bench-01").await, Some(Report::Off));
}

// A ready machine that vanishes: observed off, then failed MachineGone past the grace; one that
// comes back inside the grace stays ready.
#[tokio::test]
async fn a_ready_machine_that_vanishes_fails_machine_gone_and_one_that_returns_stays() {
    let mut h = harness(
        BOOTS,
        POWERS_OFF,
        // A grace the steps below fit in with room to spare on a loaded machine.
        "job_monitor_poll_interval: 100ms, machine_gone_grace: 3s",
        &["bench-01", "bench-02"],
    )
    .await;
    h.claim("bench-01", 1).await;
    h.claim("bench-02", 1).await;
    h.settle().await;
    // One at a time: two machines vanishing in one pass would read as a fault of the
    // observation (SPEC §5.2), and nothing would be judged.
    for slot in ["bench-01", "bench-02"] {
        assert_eq!(h.the_claim(&format!("{slot}-1")).await.phase, Phase::Ready);
        h.presence.beat(&beat(slot, Duration::ZERO)).await.unwrap();
        h.settle().await;
    }
    let gone = h.the_claim("bench-01-1").await;
    let since = gone
        .condition(fleet::domain::claim::ConditionKind::MachineObservedOff)
        .unwrap()
        .last_transition_time;
    assert_eq!(
        h.slot_phase("bench-01").await,
        Some(Report::Booting),
        "a ready claim with its machine off reports booting"
    );
    // bench-02 comes back inside the grace.
    h.presence
        .beat(&beat("bench-02", Duration::from_secs(3600)))
        .await
        .unwrap();
    h.settle().await;
    h.at(since + chrono::TimeDelta::seconds(3)).await;
    let gone = h.the_claim("bench-01-1").await;
    assert_eq!(
        (gone.phase, gone.reason),
        (Phase::Failed, Some(Reason::MachineGone))
    );
    let back = h.the_claim("bench-02-1").await;
    assert_eq!(back.phase, Phase::Ready);
    assert!(!back.is(fleet::domain::claim::ConditionKind::MachineObservedOff));
}

// A shutdown script that exits 0 and powers nothing off: each operation is one attempt, firing
// stops after the bound, and resumes after the reset grace.
#[tokio::test]
async fn a_no_op_shutdown_is_counted_stops_after_the_bound_and_resumes_after_the_grace() {
    // The poll interval spaces the attempts; it is long enough that the pass recording one
    // attempt's outcome and the next pass can never straddle it on a loaded machine, so each
    // step below fires exactly one attempt.
    let timings = "job_monitor_poll_interval: 1s, shutdown_attempt_reset_grace: 3s";
    let mut h = harness(BOOTS, "true", timings, &["bench-01"]).await;
    h.claim("bench-01", 1).await;
    h.settle().await;
    let c = h.the_claim("bench-01-1").await;
    let marked = c.mark_for_deletion(Reason::NodeDeleted).unwrap();
    assert!(h.store.write(&c, &marked, None).await.unwrap());
    let mut last = None;
    for _ in 0..3 {
        h.settle().await;
        let c = h.the_claim("bench-01-1").await;
        last = c.last_shutdown_attempt_at;
        h.at(c.operation.unwrap().finished_at.unwrap() + chrono::TimeDelta::seconds(1))
            .await;
    }
    let c = h.the_claim("bench-01-1").await;
    assert_eq!((c.phase, c.shutdown_attempts), (Phase::Ready, 3));
    let snap = h.presence.read(&[name("bench-01")]).await.unwrap();
    let row = snap.benches[0].row(snap.now);
    assert_eq!(row.state, State::Up, "the machine is still on");
    assert!(
        row.requested_hold.unwrap().starts_with("fleet: draining"),
        "and cordoned"
    );
    h.settle().await;
    let paused = h.the_claim("bench-01-1").await;
    assert_eq!(
        paused.shutdown_attempts, 3,
        "no fourth shutdown inside the grace"
    );
    // The pause is recorded on the claim (it was only a debug log).
    assert_eq!(paused.reason, Some(Reason::ShutdownAttemptLimitReached));
    assert!(h.events("bench-01-1").await.contains(&Event::Warned));
    assert_eq!(h.slot_phase("bench-01").await, Some(Report::Draining));
    h.at(last.unwrap() + chrono::TimeDelta::seconds(3)).await;
    let c = h.the_claim("bench-01-1").await;
    assert_eq!(
        c.shutdown_attempts, 1,
        "the streak restarted after the grace"
    );
}

// A booting claim cannot be interrupted: cancelled mid-boot, it is reversed once the boot lands.
#[tokio::test]
async fn a_booting_claim_that_is_cancelled_is_reversed_not_interrupted() {
    let startup = r#"sleep 0.3; "$BIN" --redis "$REDIS" beat "$FLEET_SLOT" --ttl 1h"#;
    let mut h = harness(startup, POWERS_OFF, FAST, &["bench-01"]).await;
    h.claim("bench-01", 1).await;
    let report = h.ctl.pass().await.unwrap();
    assert_eq!(report.started.len(), 1);
    let c = h.the_claim("bench-01-1").await;
    assert_eq!(c.phase, Phase::Booting);
    let marked = c.mark_for_deletion(Reason::DeletedByHand).unwrap();
    assert!(h.store.write(&c, &marked, None).await.unwrap());
    bounded("the boot", h.ctl.operation_ended()).await;
    h.settle().await;
    let c = h.the_claim("bench-01-1").await;
    assert_eq!(
        (c.phase, c.reason),
        (Phase::Completed, Some(Reason::DeletedByHand))
    );
    assert_eq!(
        c.operation.map(|op| op.kind),
        Some(OperationKind::Shutdown),
        "the boot ran to its end, then the shutdown"
    );
    assert_eq!(h.state("bench-01").await, State::Down);
}

// A scale-down of a ready claim: cordon, shutdown, and completed once the machine is off.
#[tokio::test]
async fn a_marked_claim_is_reversed_and_completes_when_the_machine_is_off() {
    let mut h = harness(BOOTS, POWERS_OFF, FAST, &["bench-01"]).await;
    h.claim("bench-01", 1).await;
    h.settle().await;
    let c = h.the_claim("bench-01-1").await;
    let marked = c
        .mark_for_deletion(Reason::CancelledByDecreaseTargetSize)
        .unwrap();
    assert!(h.store.write(&c, &marked, None).await.unwrap());
    h.settle().await;
    let c = h.the_claim("bench-01-1").await;
    assert_eq!(
        (c.phase, c.reason),
        (
            Phase::Completed,
            Some(Reason::CancelledByDecreaseTargetSize)
        )
    );
    assert_eq!(h.state("bench-01").await, State::Down);
    assert_eq!(h.slot_phase("bench-01").await, Some(Report::Off));
    // The next claim on the slot lifts fleet's cordon and boots again, as attempt 1.
    h.claim("bench-01", 2).await;
    h.settle().await;
    let c = h.the_claim("bench-01-2").await;
    assert_eq!((c.phase, c.attempt), (Phase::Ready, 1));
    assert_eq!(h.state("bench-01").await, State::Up);
}

// A slot removed from the configuration ends its claims SlotDeleted.
#[tokio::test]
async fn a_slot_removed_from_the_config_ends_its_claims() {
    let mut h = harness(BOOTS, POWERS_OFF, FAST, &["bench-01", "bench-02"]).await;
    h.claim("bench-02", 1).await;
    h.settle().await;
    let text = yaml(&h.server, BOOTS, POWERS_OFF, FAST, &["bench-01"]);
    h.config
        .send(Arc::new(config::parse(&text, Path::new("t")).unwrap()))
        .unwrap();
    h.settle().await;
    let c = h.the_claim("bench-02-1").await;
    assert_eq!(
        (c.phase, c.reason),
        (Phase::Failed, Some(Reason::SlotDeleted))
    );
}

// No claim and a machine that is on: the machine is unwanted and is shut down.
#[tokio::test]
async fn a_machine_no_claim_wants_is_shut_down() {
    let mut h = harness(BOOTS, POWERS_OFF, FAST, &["bench-01"]).await;
    h.presence
        .beat(&beat("bench-01", Duration::from_secs(3600)))
        .await
        .unwrap();
    h.settle().await;
    assert_eq!(h.state("bench-01").await, State::Down);
    assert_eq!(h.slot_phase("bench-01").await, Some(Report::Off));
}

// While presence cannot be read the controller takes no power action.
#[tokio::test]
async fn a_blind_controller_takes_no_power_action() {
    let mut h = harness(BOOTS, POWERS_OFF, FAST, &["bench-01"]).await;
    h.presence
        .beat(&beat("bench-01", Duration::from_secs(3600)))
        .await
        .unwrap();
    // Presence is unreadable: the registry is not a set.
    let _: () = raw(&h.server, &["DEL", &Keys::default().registry()]).await;
    let _: () = raw(
        &h.server,
        &["SET", &Keys::default().registry(), "not a set"],
    )
    .await;
    let report = h.ctl.pass().await.unwrap();
    assert!(report.blind);
    assert!(report.stopped.is_empty() && report.started.is_empty());
    let _: () = raw(&h.server, &["DEL", &Keys::default().registry()]).await;
    let _: () = raw(
        &h.server,
        &["SADD", &Keys::default().registry(), "bench-01"],
    )
    .await;
    let slot = BenchName::parse("bench-01").unwrap();
    assert!(!h.ctl.running(&slot));
}

/// A slot's Kubernetes Node as the test sets it: the Nodes trait, which the Kubernetes client
/// implements, standing in for an API server that cannot run here.
#[derive(Clone, Default)]
struct TestNodes(
    Arc<std::sync::Mutex<std::collections::HashMap<String, fleet::domain::node::NodeView>>>,
    /// Set: the API server cannot be reached.
    Arc<std::sync::atomic::AtomicBool>,
    /// The claim moves told, in order (each an Event with Kubernetes).
    Arc<std::sync::Mutex<Vec<fleet::reconcile::ClaimMove>>>,
);

impl TestNodes {
    /// The moves told since the last call: (claim, from, to, deleted).
    fn told(&self) -> Vec<(String, Option<Phase>, Phase, bool)> {
        self.2
            .lock()
            .unwrap()
            .drain(..)
            .map(|m| (m.claim.to_string(), m.from, m.to, m.deleted))
            .collect()
    }
}

impl fleet::reconcile::Nodes for TestNodes {
    async fn read(&self) -> Result<Vec<fleet::domain::node::NodeView>, String> {
        if self.1.load(std::sync::atomic::Ordering::SeqCst) {
            return Err("connection refused".to_owned());
        }
        Ok(self.0.lock().unwrap().values().cloned().collect())
    }

    fn observed(&self) -> bool {
        true
    }

    fn moved(&self, m: fleet::reconcile::ClaimMove) {
        self.2.lock().unwrap().push(m);
    }

    /// Applies the write as the API server would: refused when the Node changed since it was
    /// read; every write lands a new resourceVersion.
    async fn write(
        &self,
        w: &fleet::domain::slot::NodeWrite,
    ) -> Result<(), fleet::reconcile::NodeWriteError> {
        use fleet::domain::slot::NodeAction;
        let mut all = self.0.lock().unwrap();
        let Some(node) = all
            .get_mut(&w.node)
            .filter(|n| n.resource_version == w.resource_version && n.uid == w.uid)
        else {
            return Err(fleet::reconcile::NodeWriteError::Conflict(w.node.clone()));
        };
        let next = node.resource_version.parse::<u64>().unwrap() + 1;
        node.resource_version = next.to_string();
        match &w.action {
            NodeAction::Taints(edit) => node.taints = edit.apply(&node.taints),
            NodeAction::ProviderId(id) => node.provider_id = Some(id.clone()),
            NodeAction::Delete => {
                all.remove(&w.node);
            }
        }
        Ok(())
    }
}

// SPEC §3.12 8: every claim move the store accepted is told once (an Event with
// Kubernetes), whoever made it: the controller's own, and those another writer made between two
// passes (a claim made by `fleet claim` or the provider, a pending one cancelled). A refused
// request is no move, so nothing is told of it. bench-02's claim is kept pending by the power-on
// budget: one start a minute, bench-01's.
#[tokio::test]
async fn every_accepted_move_is_told_once_whoever_made_it_and_a_refused_one_never() {
    let server = server();
    let cfg = Fixture::new()
        .group(
            pool("pool-a", &server, BOOTS, POWERS_OFF, FAST)
                .power_on(fleet_testing::fixture::PowerOn::new().per_minute(1)),
        )
        .slots("pool-a", ["bench-01", "bench-02"])
        .config();
    let catalog = fleet::store::catalog::Catalog::of(&cfg);
    let (mut ctl, nodes) = with_test_nodes(&server, cfg).await;
    let store = ClaimStore::new(conn(&server).await, Keys::default());
    ctl.pass().await.unwrap();
    assert_eq!(nodes.told(), [], "no claim, no move");

    let pending = Some(Phase::Pending);
    request_claim(&server, "pool-a", "bench-01", "bench-01-1").await;
    ctl.pass().await.unwrap();
    assert_eq!(
        nodes.told(),
        [
            ("bench-01-1".into(), None, Phase::Pending, false),
            ("bench-01-1".into(), pending, Phase::Booting, false),
        ],
        "the claim made between passes, then the controller's own move"
    );
    bounded("startup", ctl.operation_ended()).await;

    let waiting = request_claim(&server, "pool-a", "bench-02", "bench-02-1").await;
    ctl.pass().await.unwrap();
    assert_eq!(
        nodes.told(),
        [("bench-02-1".into(), None, Phase::Pending, false)],
        "made, and waiting for the budget: no more"
    );
    ctl.pass().await.unwrap();
    assert_eq!(nodes.told(), [], "a steady pass tells nothing");

    // A claim on a slot that holds a live one is refused: no move, nothing told.
    let now = store.now().await.unwrap();
    let refused = fleet::requests::claim_slot(
        &store,
        catalog.group(&GroupName::parse("pool-a").unwrap()).unwrap(),
        &BenchName::parse("bench-02").unwrap(),
        now,
    )
    .await;
    assert!(refused.is_err(), "{refused:?}");
    // The pending claim cancelled (`fleet cancel`, DecreaseTargetSize): deleted, and told.
    let cancelled = fleet::requests::cancel(
        &store,
        &waiting,
        Reason::CancelledByDecreaseTargetSize,
        now,
        Duration::from_secs(3600),
    )
    .await
    .unwrap();
    assert!(matches!(cancelled, fleet::requests::Cancelled::Deleted));
    ctl.pass().await.unwrap();
    assert_eq!(
        nodes.told(),
        [("bench-02-1".into(), pending, Phase::Pending, true)]
    );
    ctl.pass().await.unwrap();
    assert_eq!(nodes.told(), [], "told once");
}

/// A controller over `cfg` whose Nodes port is a `TestNodes`, and that port.
async fn with_test_nodes(
    server: &RedisServer,
    cfg: Config,
) -> (
    Controller<MultiplexedConnection, Exec, TestNodes>,
    TestNodes,
) {
    let (_, rx) = watch::channel(Arc::new(cfg));
    let nodes = TestNodes::default();
    let ctl = Controller::new(
        rx,
        Presence::new(conn(server).await, Keys::default()),
        ClaimStore::new(conn(server).await, Keys::default()),
        Arc::new(exec(server)),
        Arc::new(Metrics::default()),
        Arc::new(Health::default()),
    )
    .with_nodes(nodes.clone());
    (ctl, nodes)
}

/// One slot, bench-01, bound to its Node, with the Cilium readiness taint as the group's gate.
fn bound_config(server: &RedisServer, timings: &str) -> Config {
    let gate = "node.cilium.io/agent-not-ready:NoExecute";
    Fixture::new()
        .group(pool("pool-a", server, BOOTS, POWERS_OFF, timings).readiness_taints([gate]))
        .slot(Slot::new("bench-01", "pool-a").kubernetes_node("bench-01"))
        .config()
}

/// A Ready Node that still carries the readiness taint.
fn gated_node() -> fleet::domain::node::NodeView {
    fleet::domain::node::NodeView {
        name: "bench-01".into(),
        uid: "uid-bench-01".into(),
        resource_version: "1".into(),
        provider_id: Some("fleet://bench-01".into()),
        ready: true,
        unschedulable: false,
        taints: vec!["node.cilium.io/agent-not-ready:NoExecute".parse().unwrap()],
    }
}

// SPEC §3.1: a bound slot is usable only when its Node is Ready, not cordoned, and free of the
// group's readiness taints; the readiness gate waits for it.
#[tokio::test]
async fn the_readiness_gate_waits_for_a_bound_slots_node() {
    let server = server();
    let cfg = bound_config(&server, FAST);
    let (mut ctl, nodes) = with_test_nodes(&server, cfg).await;
    let store = ClaimStore::new(conn(&server).await, Keys::default());
    request_claim(&server, "pool-a", "bench-01", "bench-01-1").await;
    let phase = |store: ClaimStore<MultiplexedConnection>| async move {
        store
            .read_groups(&[group()])
            .await
            .unwrap()
            .remove(0)
            .claims[0]
            .phase
    };
    let report = ctl.pass().await.unwrap();
    assert_eq!(report.started.len(), 1);
    bounded("startup", ctl.operation_ended()).await;
    ctl.pass().await.unwrap();
    assert_eq!(
        phase(store.clone()).await,
        Phase::Booting,
        "no Node yet: not usable"
    );
    nodes
        .0
        .lock()
        .unwrap()
        .insert("bench-01".into(), gated_node());
    ctl.pass().await.unwrap();
    assert_eq!(
        phase(store.clone()).await,
        Phase::Booting,
        "a readiness taint holds the gate"
    );
    nodes
        .0
        .lock()
        .unwrap()
        .get_mut("bench-01")
        .unwrap()
        .taints
        .clear();
    ctl.pass().await.unwrap();
    assert_eq!(phase(store.clone()).await, Phase::Ready);
}

// SPEC §3.12, the Node's life through a boot and a power-off, with the real controller and a
// Nodes port that applies each write as the API server would (resourceVersion checked): the
// gate releases fleet's old cordon and cluster-autoscaler's leftover before the claim reads
// ready; an empty provider ID is filled; a shutdown taints the Node after recording itself; a
// Node left NotReady by a machine off for `delete_stale_node_after` is deleted.
#[tokio::test]
async fn a_bound_nodes_life_release_provider_id_cordon_and_stale_deletion() {
    let server = server();
    let cfg = bound_config(
        &server,
        "job_monitor_poll_interval: 100ms, delete_stale_node_after: 300ms",
    );
    let (_tx, rx) = watch::channel(Arc::new(cfg));
    let nodes = TestNodes::default();
    let mut node = gated_node();
    node.provider_id = None;
    node.taints = vec![
        "fleet.dev/draining:NoSchedule".parse().unwrap(),
        "ToBeDeletedByClusterAutoscaler=1:NoSchedule"
            .parse()
            .unwrap(),
        "example.com/owned-by-someone-else:NoExecute"
            .parse()
            .unwrap(),
    ];
    nodes.0.lock().unwrap().insert("bench-01".into(), node);
    let mut ctl = Controller::new(
        rx,
        Presence::new(conn(&server).await, Keys::default()),
        ClaimStore::new(conn(&server).await, Keys::default()),
        Arc::new(exec(&server)),
        Arc::new(Metrics::default()),
        Arc::new(Health::default()),
    )
    .with_nodes(nodes.clone());
    let store = ClaimStore::new(conn(&server).await, Keys::default());
    let the_claim = |store: ClaimStore<MultiplexedConnection>| async move {
        store
            .read_groups(&[group()])
            .await
            .unwrap()
            .remove(0)
            .claims[0]
            .clone()
    };
    let the_node = || nodes.0.lock().unwrap().get("bench-01").cloned();
    let keys = |n: &fleet::domain::node::NodeView| -> Vec<String> {
        n.taints.iter().map(|t| t.key.clone()).collect()
    };

    request_claim(&server, "pool-a", "bench-01", "bench-01-1").await;
    assert_eq!(ctl.pass().await.unwrap().started.len(), 1);
    bounded("startup", ctl.operation_ended()).await;
    ctl.pass().await.unwrap();
    assert_eq!(the_claim(store.clone()).await.phase, Phase::Ready);
    assert_eq!(
        keys(&the_node().unwrap()),
        ["example.com/owned-by-someone-else"],
        "released before ready; someone else's taint kept"
    );
    ctl.pass().await.unwrap();
    assert_eq!(
        the_node().unwrap().provider_id.as_deref(),
        Some("fleet://bench-01"),
        "the empty provider ID is filled"
    );

    let c = the_claim(store.clone()).await;
    let marked = c.mark_for_deletion(Reason::NodeDeleted).unwrap();
    assert!(store.write(&c, &marked, None).await.unwrap());
    let report = ctl.pass().await.unwrap();
    assert_eq!(report.stopped.len(), 1, "the shutdown fires");
    assert_eq!(
        keys(&the_node().unwrap()),
        ["example.com/owned-by-someone-else", "fleet.dev/draining"],
        "cordoned by fleet's own taint"
    );
    assert!(
        !the_node().unwrap().unschedulable,
        "never spec.unschedulable"
    );
    bounded("shutdown", ctl.operation_ended()).await;
    ctl.pass().await.unwrap();
    // The kubelet is gone with the machine: the Node goes NotReady; it is kept until the
    // machine has been seen off for the whole wait.
    nodes.0.lock().unwrap().get_mut("bench-01").unwrap().ready = false;
    ctl.pass().await.unwrap();
    assert!(the_node().is_some(), "not deleted before the wait");
    // Past the wait (a deadline, not a synchronisation), the next pass deletes it.
    tokio::time::sleep(Duration::from_millis(320)).await;
    ctl.pass().await.unwrap();
    assert_eq!(the_node(), None, "the stale Node is deleted");
}

// SPEC §5.2: an API server out of reach is blindness for the bound slots, not unusability. A
// booting claim whose Node cannot be seen outlives its deadline with no judgment and no power
// action; its report says power and usability unknown; once the Nodes are seen again (after the
// grace) the claim is judged again by the seed's rules.
#[tokio::test]
async fn nodes_out_of_sight_leave_a_booting_claim_booting_with_no_power_action() {
    let server = server();
    let timings = "job_timeout: 300ms, job_monitor_poll_interval: 300ms, uncordon_timeout: 300ms, readiness_gate_timeout: 300ms, max_uncordon_retry_interval: 300ms, budget_slack: 300ms";
    let cfg = bound_config(&server, timings);
    let timings = cfg.groups[&group()].timings.clone();
    let (_tx, rx) = watch::channel(Arc::new(cfg));
    let nodes = TestNodes::default();
    nodes
        .0
        .lock()
        .unwrap()
        .insert("bench-01".into(), gated_node());
    let metrics = Arc::new(Metrics::default());
    let grace = Duration::from_millis(500);
    let mut ctl = Controller::new(
        rx,
        Presence::new(conn(&server).await, Keys::default()),
        ClaimStore::new(conn(&server).await, Keys::default()),
        Arc::new(exec(&server)),
        metrics.clone(),
        Arc::new(Health::default()),
    )
    .with_faults(Faults {
        blind_grace: grace,
        ..Faults::default()
    })
    .with_nodes(nodes.clone());
    let store = ClaimStore::new(conn(&server).await, Keys::default());
    request_claim_with(&server, "pool-a", "bench-01", "bench-01-1", &timings).await;
    let the_claim = |store: ClaimStore<MultiplexedConnection>| async move {
        store
            .read_groups(&[group()])
            .await
            .unwrap()
            .remove(0)
            .claims[0]
            .clone()
    };
    assert_eq!(ctl.pass().await.unwrap().started.len(), 1);
    bounded("startup", ctl.operation_ended()).await;
    ctl.pass().await.unwrap();
    assert_eq!(
        the_claim(store.clone()).await.phase,
        Phase::Booting,
        "the readiness taint holds the gate"
    );

    // The API server goes out of reach, past the claim's deadline.
    nodes.1.store(true, std::sync::atomic::Ordering::SeqCst);
    let deadline = the_claim(store.clone()).await.deadline_at.unwrap();
    let report = ctl.pass().await.unwrap();
    assert!(report.stopped.is_empty() && report.started.is_empty());
    let (secs, micros): (i64, i64) = raw(&server, &["TIME"]).await;
    let now = chrono::DateTime::from_timestamp(secs, (micros * 1000) as u32).unwrap();
    if let Ok(wait) = (deadline - now).to_std() {
        // Waiting out the deadline itself, not synchronising with anything.
        tokio::time::sleep(wait + Duration::from_millis(50)).await;
    }
    for _ in 0..3 {
        let report = ctl.pass().await.unwrap();
        assert!(
            report.stopped.is_empty() && report.started.is_empty(),
            "no power action on a slot whose Node cannot be seen: {report:?}"
        );
    }
    let c = the_claim(store.clone()).await;
    assert_eq!((c.phase, c.reason), (Phase::Booting, None), "{c:?}");
    assert!(metrics.encode().contains("fleet_kubernetes_blind 1"));
    let status = store
        .read_slots(&group(), &[name("bench-01")])
        .await
        .unwrap()[0]
        .0
        .clone()
        .unwrap();
    assert_eq!(
        (status.power, status.waiting),
        (None, None),
        "the report says the slot is not seen (the views show usable unknown)"
    );

    // The Nodes are seen again, usable: blind for the grace, then judged again by the seed's
    // rules. Blindness does not stretch a deadline: past it, the claim fails DeadlineExceeded
    // and its machine is powered off, as it would have been had the Nodes been seen.
    nodes.1.store(false, std::sync::atomic::Ordering::SeqCst);
    nodes
        .0
        .lock()
        .unwrap()
        .get_mut("bench-01")
        .unwrap()
        .taints
        .clear();
    let report = ctl.pass().await.unwrap();
    assert!(report.stopped.is_empty(), "{report:?}");
    assert_eq!(
        the_claim(store.clone()).await.phase,
        Phase::Booting,
        "the grace"
    );
    // Waiting out the grace itself, not synchronising with anything.
    tokio::time::sleep(grace).await;
    let report = ctl.pass().await.unwrap();
    assert!(metrics.encode().contains("fleet_kubernetes_blind 0"));
    let c = the_claim(store.clone()).await;
    assert_eq!(
        (c.phase, c.reason),
        (Phase::Failed, Some(Reason::DeadlineExceeded))
    );
    assert_eq!(report.stopped, [name("bench-01")], "{report:?}");
    bounded("shutdown", ctl.operation_ended()).await;
}

// A controller that stops with an operation in flight: the next one never fires it again for
// that claim; it judges the recorded operation by its own timeout.
#[tokio::test]
async fn a_restarted_controller_never_fires_an_operation_twice_for_a_claim() {
    let startup = "sleep 30";
    let text_timings = FAST;
    let server = server();
    let text = Fixture::new()
        .group(
            pool("pool-a", &server, startup, POWERS_OFF, text_timings)
                .startup(Op::sh(startup).timeout("1s"))
                .shutdown(Op::sh(POWERS_OFF).timeout("1s")),
        )
        .slots("pool-a", ["bench-01"])
        .yaml();
    let cfg = Arc::new(config::parse(&text, Path::new("t.yaml")).unwrap());
    let make = |cfg: Arc<Config>| {
        let server = &server;
        async move {
            let (_, rx) = watch::channel(cfg);
            Controller::new(
                rx,
                Presence::new(conn(server).await, Keys::default()),
                ClaimStore::new(conn(server).await, Keys::default()),
                Arc::new(exec(server)),
                Arc::new(Metrics::default()),
                Arc::new(Health::default()),
            )
        }
    };
    let store = ClaimStore::new(conn(&server).await, Keys::default());
    request_claim(&server, "pool-a", "bench-01", "bench-01-1").await;
    let mut first = make(cfg.clone()).await;
    assert_eq!(first.pass().await.unwrap().started.len(), 1);
    drop(first); // the controller is gone; its operation is recorded on the claim as running
    // Read at once: the operation's 1 s timeout may pass before the second controller's pass.
    let booting = store
        .read_groups(&[group()])
        .await
        .unwrap()
        .remove(0)
        .claims[0]
        .clone();
    let op = booting.running_operation().cloned().unwrap();
    let mut second = make(cfg).await;
    let report = second.pass().await.unwrap();
    assert!(
        report.started.is_empty(),
        "the startup was not fired a second time"
    );
    // Past the operation's own timeout it is recorded JobTimeout, and the claim fails.
    let until = op.started_at + chrono::TimeDelta::from_std(op.timeout).unwrap();
    let (secs, micros): (i64, i64) = raw(&server, &["TIME"]).await;
    let now = chrono::DateTime::from_timestamp(secs, (micros * 1000) as u32).unwrap();
    if let Ok(wait) = (until - now).to_std() {
        tokio::time::sleep(wait + Duration::from_millis(20)).await;
    }
    // Its wrapper kills it there and reports the outcome to the slot's record a moment later
    // (after draining the output): wait for the report, then a pass records it on the claim.
    bounded("the wrapper's report", async {
        loop {
            let read = store.read_groups(&[group()]).await.unwrap().remove(0);
            if read.operations.by_slot[&name("bench-01")].end.is_some() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let report = second.pass().await.unwrap();
    assert!(report.started.is_empty());
    let c = store
        .read_groups(&[group()])
        .await
        .unwrap()
        .remove(0)
        .claims[0]
        .clone();
    assert_eq!(
        (c.phase, c.reason),
        (Phase::Failed, Some(Reason::StartupJobTimeout))
    );
}

/// The lines an operation log holds (each operation appends one).
fn log_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

// A machine no claim wants is told to power off, and the command returns before the
// machine goes dark (as a BMC soft-off does). A claim that arrives then (the provider offered
// the slot in the old code) must not go ready on the dying machine: it waits for the machine to
// be observed off, and then starts it.
#[tokio::test]
async fn a_claim_on_a_machine_going_down_waits_for_it_to_go_dark_then_starts_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("ops");
    let startup = format!(r#"echo "startup $FLEET_CLAIM" >> {log:?}; {BOOTS}"#);
    // Returns at once; the machine stays on until the test powers it off.
    let shutdown = format!(r#"echo "shutdown $FLEET_CLAIM" >> {log:?}"#);
    let mut h = harness(&startup, &shutdown, FAST, &["bench-01"]).await;
    h.presence
        .beat(&beat("bench-01", Duration::from_secs(3600)))
        .await
        .unwrap();
    h.settle().await;
    assert_eq!(log_lines(&log), ["shutdown "]);
    assert_eq!(h.state("bench-01").await, State::Up, "not dark yet");

    h.claim("bench-01", 1).await;
    h.settle().await;
    let c = h.the_claim("bench-01-1").await;
    assert_eq!(
        (c.phase, c.operation),
        (Phase::Pending, None),
        "no claim goes ready on a machine on its way down"
    );
    let snap = h.presence.read(&[name("bench-01")]).await.unwrap();
    assert!(
        snap.benches[0]
            .requested_hold
            .as_ref()
            .is_some_and(|r| r.reason.as_str().starts_with("fleet: draining")),
        "the cordon stays while the machine goes down"
    );

    // The machine goes dark: the claim starts it again.
    h.presence
        .beat(&beat("bench-01", Duration::ZERO))
        .await
        .unwrap();
    h.settle().await;
    let c = h.the_claim("bench-01-1").await;
    assert_eq!((c.phase, c.attempt), (Phase::Ready, 1));
    assert_eq!(
        c.operation.map(|o| o.kind),
        Some(OperationKind::Startup),
        "ready through its own startup"
    );
    assert_eq!(log_lines(&log), ["shutdown ", "startup bench-01-1"]);
    assert_eq!(h.state("bench-01").await, State::Up);
}

// Redis loses the write that recorded a boot (a restart under appendfsync everysec
// drops the last second): the claim reads pending again, and the slot's operation record is gone.
// The controller remembers the startup it fired for the claim's attempt, puts the record back,
// and never fires it a second time (the old code fired it again, 3 s later).
#[tokio::test]
async fn a_lost_booting_write_never_fires_the_startup_twice() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("ops");
    let startup =
        format!(r#"echo "startup $FLEET_CLAIM $FLEET_ATTEMPT" >> {log:?}; sleep 1; {BOOTS}"#);
    let mut h = harness(&startup, POWERS_OFF, FAST, &["bench-01"]).await;
    let c = h.claim("bench-01", 1).await;
    let g = Keys::default().group(&group());
    let before: String = raw(&h.server, &["GET", &g.claim(&c.name)]).await;
    let report = bounded("a pass", h.ctl.pass()).await.unwrap();
    assert_eq!(report.started, [name("bench-01")]);
    // The store loses the write: the claim and the slot's record as they were before it.
    let _: () = raw(&h.server, &["SET", &g.claim(&c.name), &before]).await;
    let _: () = raw(
        &h.server,
        &[
            "HDEL",
            &g.operations(),
            "bench-01",
            "bench-01:end",
            "bench-01:off",
        ],
    )
    .await;
    assert_eq!(h.the_claim("bench-01-1").await.phase, Phase::Pending);
    h.settle().await;
    bounded("the startup", h.ctl.operation_ended()).await;
    h.settle().await;
    let c = h.the_claim("bench-01-1").await;
    assert_eq!((c.phase, c.attempt), (Phase::Ready, 1));
    assert_eq!(log_lines(&log), ["startup bench-01-1 1"], "fired once");
    let timeline = h.store.timeline(&group(), &c.name).await.unwrap();
    assert!(
        timeline.iter().any(|e| e.event == Event::Booting
            && e.detail
                .as_deref()
                .is_some_and(|d| d.starts_with("restored"))),
        "{timeline:?}"
    );
}

/// A controller whose store connection loses replies.
async fn lossy(
    h: &Harness,
) -> (
    Controller<LoseReply<MultiplexedConnection>, fleet::lifecycle::Exec>,
    LoseReply<MultiplexedConnection>,
) {
    let lossy = LoseReply::new(conn(&h.server).await);
    let ctl = Controller::new(
        h.config.subscribe(),
        Presence::new(lossy.clone(), Keys::default()),
        ClaimStore::new(lossy.clone(), Keys::default()),
        Arc::new(exec(&h.server)),
        Arc::new(Metrics::default()),
        Arc::new(Health::default()),
    );
    (ctl, lossy)
}

const BOOTING_WRITE: [&str; 2] = ["Writes a claim's next state", r#""phase":"booting""#];

// The write that records a boot is applied, and its reply is lost. The old code took
// the error for "not written", ran nothing, and the claim failed StartupJobTimeout after the
// operation's timeout. The write is read back before the pass decides: the startup runs, once.
#[tokio::test]
async fn a_lost_reply_on_the_booting_write_is_read_back_and_the_startup_runs_once() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("ops");
    let startup = format!(r#"echo "startup $FLEET_CLAIM" >> {log:?}; {BOOTS}"#);
    let h = harness(&startup, POWERS_OFF, FAST, &["bench-01"]).await;
    let (mut ctl, lossy) = lossy(&h).await;
    lossy.lose(Rule {
        needles: BOOTING_WRITE.to_vec(),
        times: 1,
        applied: true,
    });
    h.claim("bench-01", 1).await;
    let report = bounded("a pass", ctl.pass()).await.unwrap();
    assert_eq!(lossy.pending(), 0, "the reply was lost");
    assert_eq!(
        report.started,
        [name("bench-01")],
        "run after the read-back"
    );
    bounded("the startup", ctl.operation_ended()).await;
    for _ in 0..3 {
        bounded("a pass", ctl.pass()).await.unwrap();
    }
    let c = h.the_claim("bench-01-1").await;
    assert_eq!(c.phase, Phase::Ready);
    assert_eq!(log_lines(&log), ["startup bench-01-1"]);
}

// The read-back failing too: the next pass finds the operation recorded and not
// running anywhere, and runs it; never twice, never left to time out.
#[tokio::test]
async fn a_booting_write_whose_outcome_stays_unknown_runs_at_the_next_pass() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("ops");
    let startup = format!(r#"echo "startup $FLEET_CLAIM" >> {log:?}; {BOOTS}"#);
    let h = harness(&startup, POWERS_OFF, FAST, &["bench-01"]).await;
    let (mut ctl, lossy) = lossy(&h).await;
    lossy.lose(Rule {
        needles: BOOTING_WRITE.to_vec(),
        times: 1,
        applied: true,
    });
    lossy.lose(Rule {
        needles: vec!["\r\n$3\r\nGET\r\n", ":claim:bench-01-1"],
        times: 1,
        applied: false,
    });
    h.claim("bench-01", 1).await;
    let report = bounded("a pass", ctl.pass()).await.unwrap();
    assert_eq!(lossy.pending(), 0, "both replies were lost");
    assert!(report.started.is_empty(), "not run while unknown");
    assert_eq!(h.the_claim("bench-01-1").await.phase, Phase::Booting);
    let report = bounded("a pass", ctl.pass()).await.unwrap();
    assert_eq!(report.started, [name("bench-01")], "run once it is known");
    bounded("the startup", ctl.operation_ended()).await;
    for _ in 0..3 {
        bounded("a pass", ctl.pass()).await.unwrap();
    }
    assert_eq!(h.the_claim("bench-01-1").await.phase, Phase::Ready);
    assert_eq!(log_lines(&log), ["startup bench-01-1"]);
}

// A renamed group is a removal plus an addition. The old group's ready claim ends
// SlotDeleted (the old code left it ready in Redis forever, and revived it when the name came
// back), is collected after the group's own ttl_after_finished, and the group is forgotten. The
// machine is the new group's, where no claim wants it: powered off.
#[tokio::test]
async fn a_renamed_groups_claims_end_slot_deleted_and_are_collected() {
    let timings = "job_monitor_poll_interval: 100ms, ttl_after_finished: 1s";
    let mut h = harness(BOOTS, POWERS_OFF, timings, &["bench-01"]).await;
    h.claim("bench-01", 1).await;
    h.settle().await;
    assert_eq!(h.the_claim("bench-01-1").await.phase, Phase::Ready);
    let renamed = Fixture::new()
        .group(pool("pool-b", &h.server, BOOTS, POWERS_OFF, timings))
        .slots("pool-b", ["bench-01"])
        .yaml();
    h.config
        .send(Arc::new(config::parse(&renamed, Path::new("t")).unwrap()))
        .unwrap();
    h.settle().await;
    let c = h.the_claim("bench-01-1").await;
    assert_eq!(
        (c.phase, c.reason),
        (Phase::Failed, Some(Reason::SlotDeleted))
    );
    assert_eq!(
        h.state("bench-01").await,
        State::Down,
        "pool-b's machine, wanted by no claim"
    );
    let g = Keys::default().group(&group());
    h.at(c.finished_at.unwrap() + chrono::TimeDelta::seconds(1))
        .await;
    assert!(h.claims().await.is_empty(), "collected");
    let index: usize = raw(&h.server, &["ZCARD", &g.claims()]).await;
    let kept: i64 = raw(&h.server, &["PTTL", &g.timeline(&c.name)]).await;
    let known: bool = raw(&h.server, &["HEXISTS", &Keys::default().groups(), "pool-a"]).await;
    assert_eq!(index, 0);
    assert!(kept > 0, "the timeline expires: {kept}");
    assert!(!known, "the removed group is forgotten once empty");
    // The old name comes back: nothing revives.
    let back = yaml(&h.server, BOOTS, POWERS_OFF, timings, &["bench-01"]);
    h.config
        .send(Arc::new(config::parse(&back, Path::new("t")).unwrap()))
        .unwrap();
    h.settle().await;
    assert!(h.claims().await.is_empty());
    assert_eq!(h.state("bench-01").await, State::Down);
}

// A removed slot's ended claim, its index entry and its timeline are collected
// after ttl_after_finished (the old code kept them forever).
#[tokio::test]
async fn a_removed_slots_ended_claims_are_collected() {
    let timings = "job_monitor_poll_interval: 100ms, ttl_after_finished: 1s";
    let mut h = harness(BOOTS, POWERS_OFF, timings, &["bench-01", "bench-02"]).await;
    h.claim("bench-02", 1).await;
    h.settle().await;
    let text = yaml(&h.server, BOOTS, POWERS_OFF, timings, &["bench-01"]);
    h.config
        .send(Arc::new(config::parse(&text, Path::new("t")).unwrap()))
        .unwrap();
    h.settle().await;
    let c = h.the_claim("bench-02-1").await;
    assert_eq!(
        (c.phase, c.reason),
        (Phase::Failed, Some(Reason::SlotDeleted))
    );
    h.at(c.finished_at.unwrap() + chrono::TimeDelta::seconds(1))
        .await;
    assert!(h.claims().await.is_empty(), "collected");
    let g = Keys::default().group(&group());
    let index: usize = raw(&h.server, &["ZCARD", &g.claims()]).await;
    let kept: i64 = raw(&h.server, &["PTTL", &g.timeline(&c.name)]).await;
    assert_eq!(index, 0);
    assert!(kept > 0, "the timeline expires: {kept}");
}

// An operation another controller started stays in flight until its wrapper reports it,
// whatever the machine reads meanwhile: a power-off that darkens the machine at once and keeps
// running (polling until dark, then forcing it off if it must) is not over because the bench
// reads DOWN. A successor that ended it early would start a new claim's machine while the old
// shutdown could still force it off.
#[tokio::test]
async fn an_operation_another_controller_started_stays_in_flight_until_it_reports() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("ops");
    let go = dir.path().join("go");
    let startup = format!(r#"echo startup >> {log:?}; {BOOTS}"#);
    let shutdown = format!(
        r#"{POWERS_OFF}; while [ ! -e {go:?} ]; do sleep 0.05; done; echo shutdown done >> {log:?}"#
    );
    let mut h = harness(&startup, &shutdown, FAST, &["bench-01"]).await;
    h.presence
        .beat(&beat("bench-01", Duration::from_secs(3600)))
        .await
        .unwrap();
    let report = bounded("a pass", h.ctl.pass()).await.unwrap();
    assert_eq!(report.stopped, [name("bench-01")]);
    bounded("the machine to go dark", async {
        while h.state("bench-01").await != State::Down {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    // The controller that fired it is gone; its successor finds the shutdown still running.
    let mut successor: Ctl = Controller::new(
        h.config.subscribe(),
        Presence::new(conn(&h.server).await, Keys::default()),
        ClaimStore::new(conn(&h.server).await, Keys::default()),
        Arc::new(exec(&h.server)),
        Arc::new(Metrics::default()),
        Arc::new(Health::default()),
    );
    h.claim("bench-01", 1).await;
    for _ in 0..3 {
        let report = bounded("a pass", successor.pass()).await.unwrap();
        assert!(report.started.is_empty(), "started while the shutdown runs");
    }
    assert_eq!(h.the_claim("bench-01-1").await.phase, Phase::Pending);
    std::fs::write(&go, "").unwrap();
    bounded("the shutdown's report", async {
        loop {
            let read = h.store.read_groups(&[group()]).await.unwrap().remove(0);
            if read.operations.by_slot[&name("bench-01")].end.is_some() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    for _ in 0..20 {
        let report = bounded("a pass", successor.pass()).await.unwrap();
        if !report.started.is_empty() {
            bounded("the startup", successor.operation_ended()).await;
        }
        if h.the_claim("bench-01-1").await.phase == Phase::Ready {
            break;
        }
    }
    assert_eq!(h.the_claim("bench-01-1").await.phase, Phase::Ready);
    assert_eq!(log_lines(&log), ["shutdown done", "startup"]);
}

async fn status(h: &Harness, slot: &str) -> fleet::store::claims::SlotStatus {
    h.store
        .read_slots(&group(), &[name(slot)])
        .await
        .unwrap()
        .remove(0)
        .0
        .unwrap()
}

async fn requested_hold(h: &Harness, slot: &str) -> Option<String> {
    let snap = h.presence.read(&[name(slot)]).await.unwrap();
    snap.benches[0].row(snap.now).requested_hold
}

// A completed scale-down left `requested: fleet: draining for claim …` on its bench
// for good. Fleet lifts its own request once the machine is off and the claim that set it ended.
#[tokio::test]
async fn fleets_cordon_ends_with_the_claim_that_set_it() {
    let mut h = harness(BOOTS, POWERS_OFF, FAST, &["bench-01", "bench-02"]).await;
    h.claim("bench-01", 1).await;
    h.settle().await;
    let c = h.the_claim("bench-01-1").await;
    let marked = c.mark_for_deletion(Reason::NodeDeleted).unwrap();
    assert!(h.store.write(&c, &marked, None).await.unwrap());
    h.settle().await;
    assert_eq!(h.the_claim("bench-01-1").await.phase, Phase::Completed);
    assert_eq!(requested_hold(&h, "bench-01").await, None);
    // The same for a machine no claim wanted, once its shutdown took effect.
    h.presence
        .beat(&beat("bench-02", Duration::from_secs(3600)))
        .await
        .unwrap();
    h.settle().await;
    assert_eq!(h.state("bench-02").await, State::Down);
    assert_eq!(requested_hold(&h, "bench-02").await, None);
}

// A ready machine whose bench holds showed slot phase `booting` (history `ready →
// booting`, which reads like a reboot). A hold never sends the phase backwards: ready, and held.
// A claim that waits on a held bench says so.
#[tokio::test]
async fn a_held_ready_machine_stays_ready_and_a_claim_on_a_held_bench_says_it_waits() {
    let mut h = harness(BOOTS, POWERS_OFF, FAST, &["bench-01", "bench-02"]).await;
    h.claim("bench-01", 1).await;
    h.settle().await;
    let mut held = beat("bench-01", Duration::from_secs(3600));
    held.hold = Some(reason("maintenance"));
    h.presence.beat(&held).await.unwrap();
    h.settle().await;
    let s = status(&h, "bench-01").await;
    assert_eq!(s.phase(), Some(Report::Ready));
    assert_eq!(
        s.history.previous_phase(),
        Some(Report::Booting),
        "no ready → booting"
    );
    assert_eq!(s.held.as_deref(), Some("maintenance"));
    assert_eq!(
        s.waiting,
        Some(fleet::store::claims::SlotWaiting::Held {
            reason: "maintenance".into()
        })
    );
    // A new claim on a bench that is on and holds waits, and says why.
    let mut held = beat("bench-02", Duration::from_secs(3600));
    held.hold = Some(reason("disk swap"));
    h.presence.beat(&held).await.unwrap();
    h.claim("bench-02", 1).await;
    h.settle().await;
    assert_eq!(h.the_claim("bench-02-1").await.phase, Phase::Pending);
    assert_eq!(
        status(&h, "bench-02").await.waiting,
        Some(fleet::store::claims::SlotWaiting::Held {
            reason: "disk swap".into()
        })
    );
    // Released: it goes ready.
    h.presence
        .beat(&beat("bench-02", Duration::from_secs(3600)))
        .await
        .unwrap();
    h.settle().await;
    assert_eq!(h.the_claim("bench-02-1").await.phase, Phase::Ready);
    assert_eq!(status(&h, "bench-02").await.waiting, None);
}

// ShutdownJobTimeout at the controller: a scale-down whose shutdown outlives its
// timeout is recorded on the claim as a warning; the claim stays marked and live.
#[tokio::test]
async fn a_shutdown_that_outlives_its_timeout_is_recorded_shutdown_job_timeout() {
    let mut h = harness(BOOTS, "sleep 30", FAST, &["bench-01"]).await;
    let text = Fixture::new()
        .group(
            pool("pool-a", &h.server, BOOTS, "sleep 30", FAST)
                .shutdown(Op::sh("sleep 30").timeout("1s")),
        )
        .slots("pool-a", ["bench-01"])
        .yaml();
    assert!(text.contains("timeout: 1s"), "{text}");
    h.config
        .send(Arc::new(config::parse(&text, Path::new("t")).unwrap()))
        .unwrap();
    h.claim("bench-01", 1).await;
    h.settle().await;
    let c = h.the_claim("bench-01-1").await;
    let marked = c.mark_for_deletion(Reason::NodeDeleted).unwrap();
    assert!(h.store.write(&c, &marked, None).await.unwrap());
    h.settle().await;
    let c = h.the_claim("bench-01-1").await;
    assert_eq!(
        (c.phase, c.reason, c.marked_for_deletion),
        (
            Phase::Ready,
            Some(Reason::ShutdownJobTimeout),
            Some(Reason::NodeDeleted)
        )
    );
    assert_eq!(
        c.operation.and_then(|o| o.outcome),
        Some(fleet::domain::claim::OperationOutcome::TimedOut)
    );
    assert!(
        h.events("bench-01-1").await.contains(&Event::Operation),
        "the outcome is on the timeline"
    );
}

// ReadinessGateTimeout at the controller: a startup that completes and a bench that
// never beats fail the claim once the gate's first budget passes, and the machine is left alone.
#[tokio::test]
async fn a_machine_never_heard_after_its_startup_fails_readiness_gate_timeout() {
    let timings =
        "job_monitor_poll_interval: 100ms, uncordon_timeout: 500ms, readiness_gate_timeout: 500ms";
    let mut h = harness("true", POWERS_OFF, timings, &["bench-01"]).await;
    h.claim("bench-01", 1).await;
    h.settle().await;
    let c = h.the_claim("bench-01-1").await;
    assert_eq!(c.phase, Phase::Booting);
    assert!(matches!(
        status(&h, "bench-01").await.waiting,
        Some(fleet::store::claims::SlotWaiting::FirstBeat { .. })
    ));
    let ended = c.operation.unwrap().finished_at.unwrap();
    h.at(ended + chrono::TimeDelta::milliseconds(500)).await;
    let c = h.the_claim("bench-01-1").await;
    assert_eq!(
        (c.phase, c.reason),
        (Phase::Failed, Some(Reason::ReadinessGateTimeout))
    );
}

// The seed's ForceCleanup. A startup whose controller died with it (no wrapper ever
// reported) and whose machine never came on is in flight until its timeout and report slack,
// then late, then abandoned at stuck_threshold from its start: its claim fails StuckTransition
// and the slot's record shows why. Nothing is run again for it.
#[tokio::test]
async fn an_operation_nobody_reports_is_abandoned_at_stuck_threshold_and_fails_stuck_transition() {
    // A controller now gone recorded the startup as it does (claim and slot record in one
    // write), `ago` seconds before the claim, so that each bound is crossed without waiting.
    async fn orphaned(ago: i64) -> (Claim, Option<fleet::domain::operation::OpEnd>, bool) {
        use fleet::domain::claim::Move;
        use fleet::domain::operation::SlotOp;
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("ops");
        let startup = format!(r#"echo startup >> {log:?}; {BOOTS}"#);
        let mut h = harness(&startup, POWERS_OFF, "stuck_threshold: 45s", &["bench-01"]).await;
        let c = h.claim("bench-01", 1).await;
        // Stamped as the controller stamps it (the store keeps milliseconds).
        let started =
            fleet::domain::operation::stamp(c.requested_at - chrono::TimeDelta::seconds(ago));
        let next = c
            .apply(Move::to(Phase::Booting), c.requested_at)
            .unwrap()
            .start_operation(OperationKind::Startup, Duration::from_secs(10), started);
        let op = SlotOp {
            kind: OperationKind::Startup,
            claim: Some(c.name.clone()),
            attempt: c.attempt,
            started_at: started,
            timeout: Duration::from_secs(10),
            controller: "a controller now gone".to_owned(),
            streak: 0,
            end: None,
            off_at: None,
        };
        assert!(
            h.store
                .write_recording(&c, &next, None, Some(&op))
                .await
                .unwrap()
        );
        h.settle().await;
        let read = h.store.read_groups(&[group()]).await.unwrap().remove(0);
        let end = read.operations.by_slot[&name("bench-01")].end.clone();
        (h.the_claim("bench-01-1").await, end, log.exists())
    }
    // Its timeout (10 s) and report slack (30 s) have not both passed: in flight.
    let (c, end, ran) = orphaned(30).await;
    assert_eq!((c.phase, end, ran), (Phase::Booting, None, false));
    // Overdue, but short of stuck_threshold (45 s): late, not judged yet.
    let (c, end, ran) = orphaned(44).await;
    assert_eq!((c.phase, end, ran), (Phase::Booting, None, false));
    // Past stuck_threshold with the machine still off: abandoned.
    let (c, end, ran) = orphaned(50).await;
    assert_eq!(
        (c.phase, c.reason),
        (Phase::Failed, Some(Reason::StuckTransition))
    );
    let end = end.expect("the slot's record ends");
    assert!(end.tail.contains("stuck_threshold"), "{}", end.tail);
    assert!(!ran, "nothing was run for it");
}

// A new controller reads what the last one reported, `STATUS_PIECE` slots a round
// trip, and rewrites none of it: each status key carries a TTL that a rewrite (a `SET`) would
// clear, on both sides of a piece's edge.
#[tokio::test]
async fn a_new_controller_reads_every_status_of_a_group_larger_than_a_piece_and_rewrites_none() {
    use fleet::store::slots::STATUS_PIECE;
    let names: Vec<String> = (0..=STATUS_PIECE)
        .map(|i| format!("bench-{i:05}"))
        .collect();
    let slots: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut h = harness(BOOTS, POWERS_OFF, FAST, &slots).await;
    let report = bounded("the first pass", h.ctl.pass()).await.unwrap();
    assert_eq!(report.slots, STATUS_PIECE + 1);
    let keys: Vec<String> = (names.iter())
        .map(|n| Keys::default().group(&group()).slot(&name(n)))
        .collect();
    let ttls = |command: &'static str| {
        let mut pipe = redis::pipe();
        for key in &keys {
            let c = pipe.cmd(command).arg(key);
            if command == "PEXPIRE" {
                c.arg(3_600_000);
            }
        }
        pipe
    };
    let mut conn = conn(&h.server).await;
    let set: Vec<i64> = ttls("PEXPIRE").query_async(&mut conn).await.unwrap();
    assert!(set.iter().all(|s| *s == 1), "every slot has a status");
    let cfg = h.config.borrow().clone();
    let mut next = Controller::new(
        watch::channel(cfg).1,
        Presence::new(conn.clone(), Keys::default()),
        ClaimStore::new(conn.clone(), Keys::default()),
        Arc::new(exec(&h.server)),
        Arc::new(Metrics::default()),
        Arc::new(Health::default()),
    );
    bounded("the new controller's pass", next.pass())
        .await
        .unwrap();
    let left: Vec<i64> = ttls("PTTL").query_async(&mut conn).await.unwrap();
    let rewritten: Vec<&str> = (left.iter().zip(&names))
        .filter(|(ttl, _)| **ttl < 0)
        .map(|(_, n)| n.as_str())
        .collect();
    assert!(rewritten.is_empty(), "rewritten: {rewritten:?}");
}
