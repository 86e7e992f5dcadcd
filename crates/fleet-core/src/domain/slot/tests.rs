//! The slot planner as tables: what one pass plans for a slot, with no Redis and no clock.

use chrono::TimeZone;

use super::*;
use crate::domain::claim::Timings;
use crate::domain::name::Reason as HoldReason;
use crate::domain::state::{HoldRequest, Key, Reading};

mod nodes;
mod outcomes;
mod passes;
mod reports;

fn t(secs: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_800_000_000 + secs, 0).unwrap()
}

fn group() -> GroupName {
    GroupName::parse("pool-a").unwrap()
}

fn slot() -> BenchName {
    BenchName::parse("bench-01").unwrap()
}

fn claim_at(n: u32, at: i64) -> Claim {
    Claim::new(
        ClaimName::parse(&format!("bench-01-{n}")).unwrap(),
        slot(),
        group(),
        None,
        t(at),
        &Timings::default(),
        None,
    )
}

/// The bench as presence reads it: absent (DOWN), UP, or HELD.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seen {
    Down,
    Up,
    Held,
}

fn bench(seen: Seen, cordon: Option<&str>) -> Option<Bench> {
    let reading = match seen {
        Seen::Down => Reading::Missing,
        Seen::Up | Seen::Held => Reading::Beat(Key {
            written_at: t(-1),
            ttl: Duration::from_secs(3600),
            hold: (seen == Seen::Held).then(|| HoldReason::parse("sleeping").unwrap()),
        }),
    };
    Some(Bench {
        name: slot(),
        load: None,
        cores: None,
        reading,
        requested_hold: cordon.map(|r| HoldRequest {
            reason: HoldReason::parse(r).unwrap(),
            until: None,
        }),
    })
}

struct Case {
    timings: Timings,
    bench: Option<Bench>,
    claims: Vec<Claim>,
    blind: bool,
    binding: Binding<'static>,
    /// The slot's Node, when the case binds it to one (overrides `binding`).
    node: Option<NodeView>,
    node_taints: Vec<Taint>,
    off_since: Option<DateTime<Utc>>,
    may_start: bool,
    acting: bool,
    unreadable: bool,
    adopting: bool,
    stored_op: Option<SlotOp>,
    /// The slot's last operation, recorded under a group it left.
    elsewhere_op: Option<SlotOp>,
    here: Here,
    status: SlotStatus,
}

impl Case {
    /// A slot whose store holds what its claims say (the newest operation record among them).
    fn new(seen: Seen, claims: Vec<Claim>) -> Case {
        let ops: Vec<SlotOp> = claims.iter().filter_map(SlotOp::of_claim).collect();
        Case {
            timings: Timings::default(),
            bench: bench(seen, None),
            claims,
            blind: false,
            binding: Binding::Unbound,
            node: None,
            node_taints: Vec::new(),
            off_since: None,
            may_start: true,
            acting: true,
            unreadable: false,
            adopting: false,
            stored_op: operation::merge(ops.iter()),
            elsewhere_op: None,
            here: Here::default(),
            status: SlotStatus::default(),
        }
    }

    fn plan(&self, now: DateTime<Utc>) -> Plan {
        let (g, s) = (group(), slot());
        plan(
            View {
                group: &g,
                slot: &s,
                timings: &self.timings,
                startup_timeout: Duration::from_secs(300),
                shutdown_timeout: Duration::from_secs(120),
                readiness_taints: &[],
                node_taints: &self.node_taints,
                provider_id: "fleet://bench-01",
                binding: match &self.node {
                    Some(n) => Binding::Bound(Some(n)),
                    None => self.binding,
                },
                off_since: self.off_since,
                may_start: self.may_start,
                bench: self.bench.as_ref(),
                blind: self.blind,
                unreadable: self.unreadable,
                adopting: self.adopting,
                acting: self.acting,
                claims: self.claims.clone(),
                stored_op: self.stored_op.clone(),
                remembered_op: None,
                elsewhere_op: self.elsewhere_op.clone(),
                here: self.here.clone(),
                report_slack: Duration::from_secs(30),
                holder: "me",
                status: &self.status,
            },
            now,
        )
    }
}

/// The operations a plan fires: `(kind, for a claim)`.
fn fired(p: &Plan) -> Vec<(OperationKind, bool)> {
    p.steps
        .iter()
        .filter_map(|s| match s {
            Step::Spawn { kind, claim, .. } => Some((*kind, claim.is_some())),
            _ => None,
        })
        .collect()
}

fn writes(p: &Plan) -> Vec<(Phase, Option<Reason>, Event)> {
    p.steps
        .iter()
        .filter_map(|s| match s {
            Step::Write(w) => Some((w.next.phase, w.next.reason, w.event)),
            _ => None,
        })
        .collect()
}

/// The claim kinds of the law's columns, as a slot's one claim at `t(0)`.
fn claims_of(kind: &str) -> Vec<Claim> {
    let c = claim_at(1, 0);
    let booting = || {
        c.apply(Move::to(Phase::Booting), t(1))
            .unwrap()
            .start_operation(OperationKind::Startup, Duration::from_secs(300), t(1))
            .finish_operation(OperationOutcome::Completed, t(2))
            .unwrap()
    };
    let ready = || booting().apply(Move::to(Phase::Ready), t(3)).unwrap();
    match kind {
        "none" => vec![],
        "pending" => vec![c],
        "booting" => vec![booting()],
        "ready" => vec![ready()],
        "marked" => vec![ready().mark_for_deletion(Reason::NodeDeleted).unwrap()],
        "terminal" => vec![
            ready()
                .apply(Move::because(Phase::Failed, Reason::MachineGone), t(4))
                .unwrap(),
        ],
        _ => unreachable!(),
    }
}

// The law's decision reaches the plan over every claim column, power and presence, and every
// reason not to act (blind, an unreadable claim, an operation in flight here): an operation is
// planned exactly when the law fires one and nothing forbids it.
#[test]
fn the_plan_fires_what_the_law_fires_unless_something_forbids_it() {
    let now = t(10);
    for kind in ["none", "pending", "booting", "ready", "marked", "terminal"] {
        for seen in [Seen::Down, Seen::Up, Seen::Held] {
            for (blind, unreadable, running) in [
                (false, false, None),
                (true, false, None),
                (false, true, None),
                (false, false, Some(OperationKind::Startup)),
                (false, false, Some(OperationKind::Shutdown)),
            ] {
                let mut case = Case::new(seen, claims_of(kind));
                case.blind = blind;
                case.unreadable = unreadable;
                case.here.running = running;
                let p = case.plan(now);
                let power = match seen {
                    Seen::Down => Power::Off,
                    Seen::Up | Seen::Held => Power::On,
                };
                let claims = claims_of(kind);
                let decision = law::decide(Input {
                    claim: ClaimInput::of(current(&claims)),
                    power,
                    usable: seen == Seen::Up,
                });
                let forbidden = blind || unreadable || running.is_some();
                let want = match (decision.fires, forbidden) {
                    (_, true) | (Fires::Nothing | Fires::CompleteClaim, _) => vec![],
                    (Fires::StartNode, false) => vec![(OperationKind::Startup, true)],
                    (Fires::ShutdownNode, false) => {
                        vec![(OperationKind::Shutdown, kind == "marked")]
                    }
                };
                let case_name = format!(
                    "{kind} {seen:?} blind={blind} unreadable={unreadable} running={running:?}"
                );
                assert_eq!(fired(&p), want, "{case_name}");
                assert_eq!(p.power, (!blind).then_some(power), "{case_name}");
                if blind {
                    assert!(
                        p.steps
                            .iter()
                            .all(|s| !matches!(s, Step::Cordon { .. } | Step::Uncordon)),
                        "{case_name}: nothing touches a bench it cannot see"
                    );
                }
            }
        }
    }
}

#[test]
fn a_start_is_recorded_on_the_claim_and_the_slot_before_it_runs() {
    let mut case = Case::new(Seen::Down, claims_of("pending"));
    case.bench = bench(Seen::Down, Some("fleet: draining for claim bench-01-0"));
    let p = case.plan(t(10));
    let [
        Step::Uncordon,
        Step::Record(start),
        Step::Spawn {
            kind,
            claim,
            started_at,
        },
    ] = &p.steps[..]
    else {
        panic!("{:#?}", p.steps)
    };
    let Start { old, next, op } = start.as_ref();
    assert_eq!((old.phase, next.phase), (Phase::Pending, Phase::Booting));
    assert!(next.version > old.version);
    assert_eq!(*kind, OperationKind::Startup);
    assert_eq!(claim.as_deref(), Some(next));
    assert_eq!(op.started_at, *started_at);
    assert_eq!(
        next.running_operation().map(|o| o.started_at),
        Some(*started_at)
    );
    assert_eq!(
        (
            op.kind,
            op.claim.as_ref(),
            op.attempt,
            op.timeout,
            op.controller.as_str()
        ),
        (
            OperationKind::Startup,
            Some(&old.name),
            1,
            Duration::from_secs(300),
            "me"
        )
    );
    // An operator's hold is never lifted.
    case.bench = bench(Seen::Down, Some("kernel upgrade"));
    assert!(!case.plan(t(10)).steps.contains(&Step::Uncordon));
}

#[test]
fn a_startup_fires_once_per_attempt_whatever_the_claim_says() {
    let mut case = Case::new(Seen::Down, claims_of("pending"));
    let c = &case.claims[0];
    // The store's record shows this attempt's startup, done; the claim lost its write.
    case.stored_op = Some(SlotOp {
        kind: OperationKind::Startup,
        claim: Some(c.name.clone()),
        attempt: c.attempt,
        started_at: t(1),
        timeout: Duration::from_secs(300),
        controller: "gone".to_owned(),
        streak: 0,
        end: None,
        off_at: None,
    });
    let p = case.plan(t(5));
    assert_eq!(fired(&p), vec![]);
    assert_eq!(
        writes(&p),
        vec![(Phase::Booting, None, Event::Booting)],
        "restored to booting with the recorded operation, not fired again"
    );
    let Some(Step::Write(w)) = p.steps.first() else {
        panic!("{:#?}", p.steps)
    };
    assert!(w.then.restores);
}

#[test]
fn an_operation_that_ended_here_is_settled_before_anything_else() {
    let c = claims_of("pending")[0].clone();
    let booting = c
        .apply(Move::to(Phase::Booting), t(1))
        .unwrap()
        .start_operation(OperationKind::Startup, Duration::from_secs(300), t(1));
    for (outcome, phase, reason) in [
        (
            OperationOutcome::Failed,
            Phase::Failed,
            Some(Reason::StartupJobFailed),
        ),
        (
            OperationOutcome::TimedOut,
            Phase::Failed,
            Some(Reason::StartupJobTimeout),
        ),
        (OperationOutcome::Completed, Phase::Booting, None),
    ] {
        let mut case = Case::new(Seen::Down, vec![booting.clone()]);
        case.here.finished = Some(Done {
            kind: OperationKind::Startup,
            claim: Some(c.name.clone()),
            started_at: Some(t(1)),
            outcome,
            duration: Duration::from_secs(2),
            tail: "out".to_owned(),
        });
        let p = case.plan(t(3));
        assert!(matches!(p.steps[0], Step::EndHere { .. }), "{outcome:?}");
        assert!(matches!(p.steps[1], Step::Ended(_)), "{outcome:?}");
        let Step::Write(w) = &p.steps[2] else {
            panic!("{:#?}", p.steps)
        };
        assert_eq!(
            (w.next.phase, w.next.reason),
            (phase, reason),
            "{outcome:?}"
        );
        assert!(w.then.settles);
        assert_eq!(w.detail.as_deref(), Some("out"));
        // Nothing fires on the strength of a failed boot: the machine is off and the claim
        // terminal; after a completed one the readiness gate waits for the first beat.
        assert_eq!(fired(&p), vec![], "{outcome:?}");
    }
}

#[test]
fn an_unreported_operation_is_judged_only_once_it_can_no_longer_report() {
    let c = claims_of("pending")[0].clone();
    let booting = c
        .apply(Move::to(Phase::Booting), t(0))
        .unwrap()
        .start_operation(OperationKind::Startup, Duration::from_secs(300), t(0));
    let mut case = Case::new(Seen::Down, vec![booting]);
    case.timings.stuck_threshold = Duration::from_secs(900);
    // In flight until timeout + slack (330 s), late until stuck_threshold (900 s).
    for now in [0, 329, 330, 899] {
        let p = case.plan(t(now));
        assert!(
            !p.steps
                .iter()
                .any(|s| matches!(s, Step::EndUnreported { .. })),
            "{now}: {:#?}",
            p.steps
        );
        assert_eq!(fired(&p), vec![], "{now}");
    }
    let p = case.plan(t(900));
    let Step::EndUnreported { end, .. } = &p.steps[0] else {
        panic!("{:#?}", p.steps)
    };
    assert_eq!(end.outcome, OperationOutcome::Abandoned);
    assert_eq!(
        writes(&p)[0],
        (Phase::Failed, Some(Reason::StuckTransition), Event::Failed)
    );
    // Blind, it is not judged at all.
    case.blind = true;
    assert!(
        !case
            .plan(t(900))
            .steps
            .iter()
            .any(|s| matches!(s, Step::EndUnreported { .. }))
    );
}

#[test]
fn a_machine_found_on_after_a_wipe_is_adopted_never_powered_off() {
    let mut case = Case::new(Seen::Up, vec![]);
    case.adopting = true;
    let p = case.plan(t(10));
    let [Step::Adopt(c)] = &p.steps[..] else {
        panic!("{:#?}", p.steps)
    };
    assert_eq!((c.phase, c.reason), (Phase::Ready, Some(Reason::Adopted)));
    assert_eq!(p.status.and_then(|s| s.claim), Some(c.name.clone()));
    // Not adopting: the law shuts the unwanted machine down.
    case.adopting = false;
    assert_eq!(
        fired(&case.plan(t(10))),
        vec![(OperationKind::Shutdown, false)]
    );
}

/// A shutdown recorded under the group the slot left: started at `t(0)` with a 120 s timeout,
/// ended (`Some`) or still running (`None`).
fn shutdown_elsewhere(end: Option<(OperationOutcome, i64)>) -> SlotOp {
    SlotOp {
        kind: OperationKind::Shutdown,
        claim: Some(ClaimName::parse("bench-01-adopted1").unwrap()),
        attempt: 1,
        started_at: t(0),
        timeout: Duration::from_secs(120),
        controller: "me".to_owned(),
        streak: 0,
        end: end.map(|(outcome, at)| OpEnd {
            outcome,
            finished_at: t(at),
            duration_ms: 1000,
            tail: String::new(),
        }),
        off_at: None,
    }
}

// A group renamed inside the adoption window (SPEC §5.3) adopted a machine whose old
// group's shutdown was still running: the new group's pass reads only its own operation
// records. Over what the old group's record can say, the machine seen on or off, and the time
// since: while that shutdown runs, or may still be darkening the machine, nothing adopts it and
// no other power action is taken; once it failed, timed out unreported, or left the machine on
// past its timeout and settle, or the slot's own newer operation replaced it, the machine is
// adopted as any other.
#[test]
fn a_machine_its_old_groups_shutdown_is_darkening_is_never_adopted() {
    use OperationOutcome::{Completed, Failed};
    // (row, the old group's shutdown, the slot's own record, an operation running here, seen,
    // now, adopted, fired)
    let own_failed_shutdown = SlotOp {
        started_at: t(20),
        claim: None,
        end: Some(OpEnd {
            outcome: Failed,
            finished_at: t(21),
            duration_ms: 1000,
            tail: String::new(),
        }),
        ..shutdown_elsewhere(None)
    };
    let startup_elsewhere = SlotOp {
        kind: OperationKind::Startup,
        ..shutdown_elsewhere(None)
    };
    // The slot's own record, older than the old group's (which started at t(5)), or started at
    // the same instant as it (t(0)): only a record started after it replaces it.
    let later_elsewhere = SlotOp {
        started_at: t(5),
        ..shutdown_elsewhere(None)
    };
    let own_older = SlotOp {
        started_at: t(2),
        ..own_failed_shutdown.clone()
    };
    let own_same_instant = SlotOp {
        started_at: t(0),
        ..own_failed_shutdown.clone()
    };
    type Row = (
        &'static str,
        Option<SlotOp>,
        Option<SlotOp>,
        Option<OperationKind>,
        Seen,
        i64,
        bool,
    );
    let rows: Vec<Row> = vec![
        (
            "running, on",
            Some(shutdown_elsewhere(None)),
            None,
            None,
            Seen::Up,
            10,
            false,
        ),
        (
            "running, held",
            Some(shutdown_elsewhere(None)),
            None,
            None,
            Seen::Held,
            10,
            false,
        ),
        (
            "running, off",
            Some(shutdown_elsewhere(None)),
            None,
            None,
            Seen::Down,
            10,
            false,
        ),
        (
            "running, on, to its last second of slack",
            Some(shutdown_elsewhere(None)),
            None,
            None,
            Seen::Up,
            149,
            false,
        ),
        (
            "completed, still on",
            Some(shutdown_elsewhere(Some((Completed, 5)))),
            None,
            None,
            Seen::Up,
            10,
            false,
        ),
        (
            "completed, on to its last second of settle",
            Some(shutdown_elsewhere(Some((Completed, 5)))),
            None,
            None,
            Seen::Up,
            149,
            false,
        ),
        (
            "completed, off",
            Some(shutdown_elsewhere(Some((Completed, 5)))),
            None,
            None,
            Seen::Down,
            10,
            false,
        ),
        (
            "its command failed: it powered nothing off",
            Some(shutdown_elsewhere(Some((Failed, 5)))),
            None,
            None,
            Seen::Up,
            10,
            true,
        ),
        (
            "unreported past its timeout and slack",
            Some(shutdown_elsewhere(None)),
            None,
            None,
            Seen::Up,
            151,
            true,
        ),
        (
            "completed, and the machine stayed on past its timeout and settle",
            Some(shutdown_elsewhere(Some((Completed, 5)))),
            None,
            None,
            Seen::Up,
            151,
            true,
        ),
        (
            "the slot's own operation since replaced it",
            Some(shutdown_elsewhere(None)),
            Some(own_failed_shutdown),
            None,
            Seen::Up,
            30,
            true,
        ),
        (
            "the slot's own record is older: the old group's still stands",
            Some(later_elsewhere),
            Some(own_older),
            None,
            Seen::Up,
            10,
            false,
        ),
        (
            "the slot's own record started the same instant: it is the slot's last",
            Some(shutdown_elsewhere(None)),
            Some(own_same_instant),
            None,
            Seen::Up,
            30,
            true,
        ),
        (
            "a startup of the old group runs",
            Some(startup_elsewhere),
            None,
            None,
            Seen::Up,
            10,
            false,
        ),
        (
            "a shutdown runs here, its record lost with the store",
            None,
            None,
            Some(OperationKind::Shutdown),
            Seen::Up,
            10,
            false,
        ),
        ("nothing elsewhere", None, None, None, Seen::Up, 10, true),
    ];
    for (row, elsewhere, own, running, seen, now, adopted) in rows {
        let mut case = Case::new(seen, vec![]);
        case.adopting = true;
        case.elsewhere_op = elsewhere;
        case.stored_op = own;
        case.here.running = running;
        let p = case.plan(t(now));
        let adopts = p.steps.iter().any(|s| matches!(s, Step::Adopt(_)));
        assert_eq!(
            adopts,
            adopted && seen != Seen::Down,
            "{row}: {:#?}",
            p.steps
        );
        assert_eq!(fired(&p), vec![], "{row}: no power action: {:#?}", p.steps);
    }
}

// With a claim of the new group on the slot: while the old group's shutdown may still darken the
// machine, the claim is not made ready on it (it is not capacity) and waits for it to go off;
// once the machine is off and that shutdown ended, the claim starts it.
#[test]
fn a_claim_of_the_new_group_waits_for_the_old_groups_shutdown_to_end() {
    let mut case = Case::new(Seen::Up, claims_of("pending"));
    case.elsewhere_op = Some(shutdown_elsewhere(None));
    let p = case.plan(t(10));
    assert_eq!((fired(&p), writes(&p)), (vec![], vec![]), "{:#?}", p.steps);
    assert_eq!(
        p.status.and_then(|s| s.waiting),
        Some(SlotWaiting::PoweringOff)
    );
    // Off, and the shutdown still running: nothing is started under it.
    case.bench = bench(Seen::Down, None);
    assert_eq!(fired(&case.plan(t(11))), vec![]);
    // Ended: the claim starts the machine.
    case.elsewhere_op = Some(shutdown_elsewhere(Some((OperationOutcome::Completed, 12))));
    assert_eq!(
        fired(&case.plan(t(13))),
        vec![(OperationKind::Startup, true)]
    );
    // Completed, and the machine still on: still not capacity, and not shut down again.
    case.bench = bench(Seen::Up, None);
    let p = case.plan(t(13));
    assert_eq!((fired(&p), writes(&p)), (vec![], vec![]), "{:#?}", p.steps);
}

#[test]
fn a_marked_claim_is_shut_down_cordoned_then_paused_once_its_attempts_are_spent() {
    let case = Case::new(Seen::Up, claims_of("marked"));
    let p = case.plan(t(10));
    let kinds: Vec<&str> = p
        .steps
        .iter()
        .map(|s| match s {
            Step::Record(_) => "record",
            Step::Cordon { .. } => "cordon",
            Step::Spawn { .. } => "spawn",
            _ => "other",
        })
        .collect();
    assert_eq!(kinds, ["record", "cordon", "spawn"]);
    let mut spent = claims_of("marked")[0].clone();
    for n in 0..3 {
        spent = spent.record_shutdown_attempt(t(n * 200), &case.timings);
    }
    let case = Case::new(Seen::Up, vec![spent.clone()]);
    let p = case.plan(t(700));
    assert_eq!(fired(&p), vec![]);
    let [Step::Write(w)] = &p.steps[..] else {
        panic!("{:#?}", p.steps)
    };
    assert_eq!(w.then.warns, Some(Reason::ShutdownAttemptLimitReached));
    // Recorded once per pause.
    let warned = Case::new(Seen::Up, vec![w.next.clone()]);
    assert_eq!(warned.plan(t(701)).steps, vec![]);
}

#[test]
fn a_claim_on_a_machine_going_down_waits_for_it_to_go_dark() {
    let op = SlotOp {
        kind: OperationKind::Shutdown,
        claim: None,
        attempt: 0,
        started_at: t(0),
        timeout: Duration::from_secs(120),
        controller: "me".to_owned(),
        streak: 1,
        end: Some(OpEnd {
            outcome: OperationOutcome::Completed,
            finished_at: t(1),
            duration_ms: 1000,
            tail: String::new(),
        }),
        off_at: None,
    };
    let mut case = Case::new(Seen::Up, claims_of("pending"));
    case.stored_op = Some(op);
    let p = case.plan(t(5));
    assert_eq!(fired(&p), vec![]);
    assert_eq!(writes(&p), vec![], "not ready on a machine going down");
    assert_eq!(
        p.status.and_then(|s| s.waiting),
        Some(SlotWaiting::PoweringOff)
    );
    // Once it reads DOWN: observed off, then started.
    case.bench = bench(Seen::Down, None);
    let p = case.plan(t(6));
    assert!(
        matches!(p.steps[0], Step::ObserveOff { .. }),
        "{:#?}",
        p.steps
    );
    assert_eq!(fired(&p), vec![(OperationKind::Startup, true)]);
}

#[test]
fn a_held_ready_machine_is_reported_ready_and_held() {
    let case = Case::new(Seen::Held, claims_of("ready"));
    let p = case.plan(t(10));
    let status = p.status.expect("a first report");
    assert_eq!(status.phase(), Some(Report::Ready));
    assert_eq!(status.held.as_deref(), Some("sleeping"));
    assert_eq!(
        status.waiting,
        Some(SlotWaiting::Held {
            reason: "sleeping".to_owned()
        })
    );
    // Blind: no phase is recorded, power is unknown.
    let mut blind = Case::new(Seen::Up, claims_of("ready"));
    blind.blind = true;
    let status = blind.plan(t(10)).status.expect("a first report");
    assert_eq!((status.phase(), status.power), (None, None));
}

#[test]
fn an_operation_recorded_by_a_lost_reply_runs_once_the_record_shows_it() {
    let mut case = Case::new(Seen::Down, claims_of("pending"));
    let c = &case.claims[0];
    let next = c
        .apply(Move::to(Phase::Booting), t(1))
        .unwrap()
        .start_operation(OperationKind::Startup, Duration::from_secs(300), t(1));
    let op = SlotOp::of_claim(&next).unwrap();
    case.here.uncertain = Some(Recorded {
        op: op.clone(),
        claim: Some(next.clone()),
    });
    // The store does not show it: nothing runs, and the question is gone with the pass that
    // read no record... unless there is none at all, when it is kept.
    let p = case.plan(t(2));
    assert!(!p.steps.iter().any(|s| matches!(s, Step::RunRecorded(_))));
    assert!(p.uncertain.is_some(), "no record at all: still uncertain");
    // The store shows it recorded (the claim too): it runs, once.
    case.claims = vec![next];
    case.stored_op = Some(op);
    let p = case.plan(t(2));
    assert!(matches!(p.steps[0], Step::RunRecorded(_)), "{:#?}", p.steps);
    assert_eq!(p.uncertain, None);
    assert_eq!(fired(&p), vec![], "nothing else fires while it runs");
}

#[test]
fn current_is_the_newest_live_claim_else_the_last_ended() {
    let a = claims_of("terminal")[0].clone();
    let b = claim_at(2, 5);
    assert_eq!(current(&[a.clone(), b.clone()]), Some(&b));
    assert_eq!(current(std::slice::from_ref(&a)), Some(&a));
    assert_eq!(current(&[]), None);
    let c = claim_at(3, 6);
    assert_eq!(current(&[b, c.clone()]), Some(&c));
}

#[test]
fn the_claims_of_a_departed_slot_fail_slot_deleted_then_are_collected() {
    let timings = Timings::default();
    let live = claim_at(1, 0);
    let ended = claims_of("terminal")[0].clone();
    let steps = departed(&[&live, &ended], t(10), &timings);
    let [Step::Write(w)] = &steps[..] else {
        panic!("{steps:#?}")
    };
    assert_eq!(
        (w.next.phase, w.next.reason, w.event),
        (Phase::Failed, Some(Reason::SlotDeleted), Event::Failed)
    );
    let later = t(4) + chrono::TimeDelta::from_std(timings.ttl_after_finished).unwrap();
    let steps = departed(&[&ended], later, &timings);
    assert_eq!(steps, vec![Step::Collect(Box::new(ended))]);
}

// The report is never an input: the last report only continues itself (its history ring); no
// step is planned from it. Every claim column and presence, planned after an empty report and
// after one that says the opposite of everything, plans the same steps.
#[test]
fn no_step_is_planned_from_the_last_report() {
    let liar = SlotStatus {
        history: History::default(),
        power: Some(Power::On),
        usable: true,
        claim: Some(ClaimName::parse("bench-01-9").unwrap()),
        updated_at: Some(t(9)),
        held: Some("held".to_owned()),
        waiting: Some(SlotWaiting::NotUsable),
    };
    for kind in ["none", "pending", "booting", "ready", "marked", "terminal"] {
        for seen in [Seen::Down, Seen::Up, Seen::Held] {
            let case = Case::new(seen, claims_of(kind));
            let honest = case.plan(t(10));
            let mut lied_to = case;
            lied_to.status = liar.clone();
            assert_eq!(lied_to.plan(t(10)).steps, honest.steps, "{kind} {seen:?}");
        }
    }
}

// SPEC §5.2: a bound slot whose Node cannot be seen is blind, not unusable. With the Node known
// to be missing, a booting claim runs out of time, fails and its machine is powered off; with the
// Node unseen, nothing is judged and nothing fires, and a ready claim stays ready.
#[test]
fn a_bound_slot_whose_node_cannot_be_seen_is_blind_not_unusable() {
    let late = t(24 * 3600);
    let mut missing = Case::new(Seen::Up, claims_of("booting"));
    missing.binding = Binding::Bound(None);
    let p = missing.plan(late);
    assert!(
        writes(&p).iter().any(|(phase, ..)| *phase == Phase::Failed),
        "a Node known to be missing is unusable: {:#?}",
        p.steps
    );
    assert_eq!(p.status.as_ref().map(|s| s.usable), Some(false));

    for (kind, seen) in [
        ("booting", Seen::Up),
        ("ready", Seen::Down),
        ("ready", Seen::Up),
    ] {
        let mut unseen = Case::new(seen, claims_of(kind));
        unseen.binding = Binding::Unseen;
        let p = unseen.plan(late);
        assert!(p.steps.is_empty(), "{kind} {seen:?}: {:#?}", p.steps);
        assert_eq!(p.power, None, "{kind} {seen:?}: power is not judged");
        if let Some(status) = &p.status {
            assert_eq!((status.power, status.waiting.clone()), (None, None));
        }
    }
}
