//! The middle of a slot's pass as tables (SPEC §4.5): the claim controller's judgment, fleet's
//! cordon, the readiness gate, adoption, the input law's operations and the operation record.

use super::*;
use crate::domain::claim::ConditionKind;

fn fleet_cordon() -> Option<&'static str> {
    Some("fleet: draining for claim bench-01-1")
}

fn with_hold(mut case: Case, seen: Seen, hold: Option<&str>) -> Case {
    case.bench = bench(seen, hold);
    case
}

/// A shutdown record of the slot, started at `t(at)` for `claim`, still running.
fn shutdown_record(at: i64) -> SlotOp {
    SlotOp {
        kind: OperationKind::Shutdown,
        claim: None,
        attempt: 0,
        started_at: t(at),
        timeout: Duration::from_secs(120),
        controller: "me".to_owned(),
        streak: 1,
        end: None,
        off_at: None,
    }
}

fn gate_writes(p: &Plan) -> Vec<(Phase, Event)> {
    p.steps
        .iter()
        .filter_map(|s| match s {
            Step::Write(w) if matches!(w.event, Event::Ready | Event::Observed) => {
                Some((w.next.phase, w.event))
            }
            Step::Write(w) if w.next.reason == Some(Reason::ReadinessGateTimeout) => {
                Some((w.next.phase, w.event))
            }
            _ => None,
        })
        .collect()
}

// SPEC §4.5 step 6: the gate moves a booted claim to ready when the machine is usable, records
// that it was heard when it is on and not usable, and fails it when its budget runs out.
#[test]
fn the_readiness_gate_moves_records_or_fails_the_claim_in_its_boot_window() {
    let p = Case::new(Seen::Up, claims_of("booting")).plan(t(5));
    assert_eq!(gate_writes(&p), [(Phase::Ready, Event::Ready)]);
    let Some(Step::Write(w)) = p.steps.iter().find(|s| matches!(s, Step::Write(_))) else {
        panic!("{:#?}", p.steps)
    };
    assert_eq!(w.duration_ms, Some(5000), "the time since the request");

    let p = Case::new(Seen::Held, claims_of("booting")).plan(t(5));
    assert_eq!(gate_writes(&p), [(Phase::Booting, Event::Observed)]);
    let Some(Step::Write(w)) = p.steps.first() else {
        panic!("{:#?}", p.steps)
    };
    assert!(w.next.is(ConditionKind::MachineHeard));

    // Never heard, past the first budget (uncordon_timeout after the startup ended at t(2)).
    let p = Case::new(Seen::Down, claims_of("booting")).plan(t(93));
    assert_eq!(gate_writes(&p), [(Phase::Failed, Event::Failed)]);
    let p = Case::new(Seen::Down, claims_of("booting")).plan(t(91));
    assert_eq!(gate_writes(&p), []);

    // A claim out of its boot window, or one that no longer wants the machine, is not gated.
    for kind in ["ready", "marked"] {
        let p = Case::new(Seen::Up, claims_of(kind)).plan(t(5));
        assert_eq!(gate_writes(&p), [], "{kind}");
    }
    let booting = claims_of("booting").remove(0);
    let marked = booting.mark_for_deletion(Reason::NodeDeleted).unwrap();
    let p = Case::new(Seen::Up, vec![marked]).plan(t(5));
    assert_eq!(
        gate_writes(&p),
        [],
        "a marked booting claim is not moved to ready"
    );
}

// A machine on its way down is not capacity: the gate does not run while a shutdown of the slot
// is in flight here, has just ended here, is recorded on a claim, or may still be taking effect.
// A startup is none of these.
#[test]
fn the_readiness_gate_waits_while_the_slot_shuts_down() {
    let booting = claims_of("booting");
    let mut running_here = Case::new(Seen::Up, booting.clone());
    running_here.here.running = Some(OperationKind::Shutdown);
    let mut going_down = Case::new(Seen::Up, booting.clone());
    going_down.stored_op = Some(shutdown_record(3));
    let older = claim_at(0, -10)
        .apply(Move::to(Phase::Completed), t(-5))
        .unwrap()
        .start_operation(OperationKind::Shutdown, Duration::from_secs(120), t(-4));
    let mut on_a_claim = Case::new(Seen::Up, vec![older, booting[0].clone()]);
    on_a_claim.stored_op = None;
    for (name, case) in [
        ("running here", running_here),
        ("on its way down", going_down),
        ("recorded on a claim", on_a_claim),
    ] {
        let p = case.plan(t(5));
        assert_eq!(gate_writes(&p), [], "{name}: {:#?}", p.steps);
    }

    let mut startup_here = Case::new(Seen::Up, booting.clone());
    startup_here.here.running = Some(OperationKind::Startup);
    assert_eq!(
        gate_writes(&startup_here.plan(t(5))),
        [(Phase::Ready, Event::Ready)]
    );
    let mut startup_ended = Case::new(Seen::Up, booting.clone());
    startup_ended.here.finished = Some(Done {
        kind: OperationKind::Startup,
        claim: None,
        started_at: Some(t(0)),
        outcome: OperationOutcome::Completed,
        duration: Duration::from_secs(1),
        tail: String::new(),
    });
    assert_eq!(
        gate_writes(&startup_ended.plan(t(5))),
        [(Phase::Ready, Event::Ready)]
    );
    // A pending claim on a machine already on and usable, whose own record shows a startup
    // running: a startup is not a shutdown, the gate takes it.
    let pending =
        claim_at(1, 0).start_operation(OperationKind::Startup, Duration::from_secs(300), t(1));
    let p = Case::new(Seen::Up, vec![pending]).plan(t(5));
    assert_eq!(
        gate_writes(&p),
        [(Phase::Ready, Event::Ready)],
        "{:#?}",
        p.steps
    );
}

// SPEC §5.3: a machine found on after a wipe is adopted only when everything is seen, nothing is
// on its way down and no claim is there.
#[test]
fn adoption_needs_sight_an_on_machine_and_no_claim() {
    let adopts = |case: &Case| {
        case.plan(t(10))
            .steps
            .iter()
            .any(|s| matches!(s, Step::Adopt(_)))
    };
    let base = || {
        let mut case = Case::new(Seen::Up, vec![]);
        case.adopting = true;
        case
    };
    assert!(adopts(&base()));
    let mut not_adopting = base();
    not_adopting.adopting = false;
    let mut blind = base();
    blind.blind = true;
    let mut unreadable = base();
    unreadable.unreadable = true;
    let mut going_down = base();
    going_down.stored_op = Some(shutdown_record(5));
    let off = with_hold(base(), Seen::Down, None);
    let mut claimed = base();
    claimed.claims = claims_of("terminal");
    for (name, case) in [
        ("not adopting", not_adopting),
        ("blind", blind),
        ("unreadable", unreadable),
        ("on its way down", going_down),
        ("off", off),
        ("a claim is there", claimed),
    ] {
        assert!(!adopts(&case), "{name}");
    }
}

// Fleet's cordon is lifted when a claim wants the machine, or once the machine is off with
// nothing in flight and no live claim; never while blind, on its way down, or by a follower; and
// never an operator's hold.
#[test]
fn fleet_lifts_its_own_cordon_exactly_when_it_is_over() {
    let lifts = |case: &Case| case.plan(t(10)).steps.contains(&Step::Uncordon);
    let cordoned = |seen: Seen, claims: Vec<Claim>| {
        let case = Case::new(seen, claims);
        with_hold(case, seen, fleet_cordon())
    };
    assert!(lifts(&cordoned(Seen::Up, claims_of("ready"))), "wanted");
    assert!(lifts(&cordoned(Seen::Down, vec![])), "over: off, no claim");
    assert!(
        lifts(&cordoned(Seen::Down, claims_of("terminal"))),
        "over: off, only an ended claim"
    );

    let mut running = cordoned(Seen::Down, vec![]);
    running.here.running = Some(OperationKind::Shutdown);
    let mut recorded = cordoned(Seen::Down, vec![]);
    recorded.stored_op = Some(SlotOp {
        kind: OperationKind::Startup,
        ..shutdown_record(5)
    });
    let mut blind = cordoned(Seen::Up, claims_of("ready"));
    blind.blind = true;
    let mut follower = cordoned(Seen::Up, claims_of("ready"));
    follower.acting = false;
    let mut going_down = cordoned(Seen::Up, claims_of("ready"));
    going_down.stored_op = Some(shutdown_record(5));
    for (name, case) in [
        ("on, no claim", cordoned(Seen::Up, vec![])),
        ("a startup running here", running),
        ("a recorded startup", recorded),
        ("blind", blind),
        ("a follower", follower),
        ("on its way down", going_down),
        (
            "an operator's hold",
            with_hold(
                Case::new(Seen::Up, claims_of("ready")),
                Seen::Up,
                Some("maintenance"),
            ),
        ),
    ] {
        assert!(!lifts(&case), "{name}");
    }
}

// SPEC §3.8: the claim controller's judgment is written, and the rest of the pass sees what it
// wrote: a booting claim past its deadline fails, is not moved to ready by the gate, and its
// machine is shut down as one no claim wants. A superseded claim says so.
#[test]
fn the_judgment_is_written_and_the_pass_goes_on_from_it() {
    let deadline = claims_of("booting")[0].deadline_at.unwrap();
    let late = deadline + chrono::TimeDelta::seconds(1);
    let p = Case::new(Seen::Up, claims_of("booting")).plan(late);
    assert_eq!(
        writes(&p),
        [(Phase::Failed, Some(Reason::DeadlineExceeded), Event::Failed)],
        "{:#?}",
        p.steps
    );
    assert_eq!(fired(&p), [(OperationKind::Shutdown, false)]);

    let older = claim_at(1, 0);
    let newer = claim_at(2, 5);
    let p = Case::new(Seen::Down, vec![older, newer]).plan(t(6));
    assert!(
        writes(&p).contains(&(Phase::Failed, Some(Reason::Superseded), Event::Superseded)),
        "{:#?}",
        p.steps
    );
}

// The input law's shutdown of a claim that ended is the slot's, not the claim's, even when the
// claim was marked before it ended.
#[test]
fn a_shutdown_for_an_ended_marked_claim_is_unclaimed() {
    let ended = claims_of("marked")[0]
        .apply(Move::because(Phase::Failed, Reason::MachineGone), t(5))
        .unwrap();
    assert!(ended.marked_for_deletion.is_some());
    let p = Case::new(Seen::Up, vec![ended]).plan(t(6));
    assert_eq!(
        fired(&p),
        [(OperationKind::Shutdown, false)],
        "{:#?}",
        p.steps
    );
}

// SPEC §3.6: a shutdown that completed while the bench still beats waits one monitor poll for
// the observation before the next fires.
#[test]
fn a_completed_shutdown_waits_one_poll_before_the_next() {
    let marked = claims_of("marked").remove(0);
    let shut = marked
        .record_shutdown_attempt(t(10), &Timings::default())
        .start_operation(OperationKind::Shutdown, Duration::from_secs(120), t(10))
        .finish_operation(OperationOutcome::Completed, t(20))
        .unwrap();
    let case = Case::new(Seen::Up, vec![shut]);
    let poll = chrono::TimeDelta::from_std(case.timings.job_monitor_poll_interval).unwrap();
    let settled = t(20) + poll;
    let before = case.plan(settled - chrono::TimeDelta::milliseconds(1));
    assert_eq!(fired(&before), [], "{:#?}", before.steps);
    let at = case.plan(settled);
    assert_eq!(
        fired(&at),
        [(OperationKind::Shutdown, true)],
        "{:#?}",
        at.steps
    );
}

// SPEC §4.9: a shutdown of a machine no claim wants carries its streak on the slot's record.
#[test]
fn an_unclaimed_shutdown_records_its_streak() {
    let p = Case::new(Seen::Up, vec![]).plan(t(10));
    let Some(Step::RecordUnclaimed(op)) = p
        .steps
        .iter()
        .find(|s| matches!(s, Step::RecordUnclaimed(_)))
    else {
        panic!("{:#?}", p.steps)
    };
    assert_eq!(
        (op.kind, op.claim.as_ref(), op.streak),
        (OperationKind::Shutdown, None, 1)
    );
}

// SPEC §5.4: the slot's record is put back where the store lacks it or holds an older one, and a
// pending claim whose startup the record shows fired goes back to booting with it, once.
#[test]
fn the_record_is_restored_and_a_fired_startup_is_never_lost() {
    let restores = |p: &Plan| p.steps.iter().any(|s| matches!(s, Step::RestoreOp(_)));
    let booting = claims_of("booting");
    assert!(
        !restores(&Case::new(Seen::Up, booting.clone()).plan(t(5))),
        "the store has it"
    );
    let mut older = Case::new(Seen::Up, booting.clone());
    older.stored_op = Some(shutdown_record(-5));
    assert!(restores(&older.plan(t(5))), "the store holds an older one");
    let mut lost = Case::new(Seen::Up, booting);
    lost.stored_op = None;
    assert!(restores(&lost.plan(t(5))), "the store lost it");

    let restored = |p: &Plan| {
        p.steps.iter().any(
            |s| matches!(s, Step::Write(w) if w.then.restores && w.next.phase == Phase::Booting),
        )
    };
    let pending = claim_at(1, 0);
    let fired_for = |c: &Claim, at: i64| SlotOp {
        kind: OperationKind::Startup,
        claim: Some(c.name.clone()),
        attempt: c.attempt,
        ..shutdown_record(at)
    };
    let mut lost_write = Case::new(Seen::Down, vec![pending.clone()]);
    lost_write.stored_op = Some(fired_for(&pending, 1));
    assert!(
        restored(&lost_write.plan(t(5))),
        "{:#?}",
        lost_write.plan(t(5)).steps
    );

    // The claim's own record names an older startup: the newer one is restored.
    let own_older = pending.start_operation(OperationKind::Startup, Duration::from_secs(300), t(0));
    let mut newer = Case::new(Seen::Down, vec![own_older.clone()]);
    newer.stored_op = Some(fired_for(&pending, 1));
    assert!(restored(&newer.plan(t(5))));

    // Not restored: the claim records that very startup; the record is another attempt's; the
    // claim is no longer pending.
    let own_same = pending.start_operation(OperationKind::Startup, Duration::from_secs(300), t(1));
    let mut same = Case::new(Seen::Down, vec![own_same]);
    same.stored_op = Some(fired_for(&pending, 1));
    let mut other_attempt = Case::new(Seen::Down, vec![pending.clone()]);
    other_attempt.stored_op = Some(SlotOp {
        attempt: pending.attempt + 1,
        ..fired_for(&pending, 1)
    });
    for (name, case) in [
        ("the same startup", same),
        ("another attempt", other_attempt),
    ] {
        assert!(!restored(&case.plan(t(5))), "{name}");
    }
}

// SPEC §4.11: a start the power-on budget does not grant waits: nothing recorded, nothing
// fired, the claim still pending, the report saying it waits for the budget.
#[test]
fn a_start_beyond_the_power_on_budget_waits_pending() {
    let mut case = Case::new(Seen::Down, claims_of("pending"));
    case.may_start = false;
    let p = case.plan(t(5));
    assert_eq!(fired(&p), vec![]);
    assert!(
        !p.steps
            .iter()
            .any(|s| matches!(s, Step::Record(_) | Step::Write(_)))
    );
    assert_eq!(
        p.status.as_ref().and_then(|s| s.waiting.clone()),
        Some(SlotWaiting::PowerBudget)
    );
    case.may_start = true;
    assert_eq!(
        fired(&case.plan(t(5))),
        vec![(OperationKind::Startup, true)]
    );
}
