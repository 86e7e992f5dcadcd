//! The slot's report (SPEC §3.10, §4.7): why a live claim waits, a held machine's phase, and a
//! report written only when it changed.

use super::*;

fn waiting(case: &Case, now: DateTime<Utc>) -> Option<SlotWaiting> {
    let p = case.plan(now);
    p.status
        .unwrap_or_else(|| panic!("a first report: {:#?}", p.steps))
        .waiting
}

// Every reason a live claim that wants its machine can wait, and the cases where it does not.
#[test]
fn why_a_claim_waits_over_its_cases() {
    let booting = claims_of("booting");
    // Its startup completed at t(2); the first budget (uncordon_timeout) ends at t(92), the
    // second (plus readiness_gate_timeout) at t(332).
    assert_eq!(
        waiting(&Case::new(Seen::Down, booting.clone()), t(5)),
        Some(SlotWaiting::FirstBeat { until: t(92) })
    );
    let mut not_usable = Case::new(Seen::Up, booting.clone());
    not_usable.binding = Binding::Bound(None);
    assert_eq!(
        waiting(&not_usable, t(5)),
        Some(SlotWaiting::Usable { until: t(332) }),
        "heard in this pass, not usable yet"
    );
    assert_eq!(
        waiting(&Case::new(Seen::Held, booting.clone()), t(5)),
        Some(SlotWaiting::Held {
            reason: "sleeping".to_owned()
        })
    );
    let mut powering_off = Case::new(Seen::Up, booting.clone());
    powering_off.stored_op = Some(SlotOp {
        kind: OperationKind::Shutdown,
        claim: None,
        attempt: 0,
        started_at: t(3),
        timeout: Duration::from_secs(120),
        controller: "me".to_owned(),
        streak: 1,
        end: None,
        off_at: None,
    });
    assert_eq!(waiting(&powering_off, t(5)), Some(SlotWaiting::PoweringOff));

    let starting = claim_at(1, 0)
        .apply(Move::to(Phase::Booting), t(1))
        .unwrap()
        .start_operation(OperationKind::Startup, Duration::from_secs(300), t(1));
    let mut running = Case::new(Seen::Down, vec![starting]);
    running.here.running = Some(OperationKind::Startup);
    assert_eq!(waiting(&running, t(5)), Some(SlotWaiting::StartupRunning));
    let mut to_start = Case::new(Seen::Down, vec![claim_at(1, 0)]);
    to_start.unreadable = true;
    assert_eq!(waiting(&to_start, t(5)), Some(SlotWaiting::Start));

    let mut ready_not_usable = Case::new(Seen::Up, claims_of("ready"));
    ready_not_usable.binding = Binding::Bound(None);
    assert_eq!(
        waiting(&ready_not_usable, t(5)),
        Some(SlotWaiting::NotUsable)
    );
    for (name, case) in [
        ("ready and usable", Case::new(Seen::Up, claims_of("ready"))),
        ("ready and off", Case::new(Seen::Down, claims_of("ready"))),
        (
            "usable: it goes ready",
            Case::new(Seen::Up, booting.clone()),
        ),
        (
            "marked: it wants nothing",
            Case::new(Seen::Up, claims_of("marked")),
        ),
        ("ended", Case::new(Seen::Up, claims_of("terminal"))),
    ] {
        assert_eq!(waiting(&case, t(5)), None, "{name}");
    }
    let mut blind = Case::new(Seen::Down, booting);
    blind.blind = true;
    assert_eq!(waiting(&blind, t(5)), None, "blind: it is not said");
}

// A ready machine whose bench holds is reported ready and held, never booting again.
#[test]
fn a_held_ready_machine_is_reported_ready_and_held() {
    let p = Case::new(Seen::Held, claims_of("ready")).plan(t(5));
    let status = p.status.expect("a first report");
    assert_eq!(status.phase(), Some(Report::Ready));
    assert_eq!(status.held.as_deref(), Some("sleeping"));
    assert!(!status.usable);
    // Held, and its Node not usable either: not ready.
    let mut node_down = Case::new(Seen::Held, claims_of("ready"));
    node_down.binding = Binding::Bound(None);
    let status = node_down.plan(t(5)).status.expect("a first report");
    assert_ne!(status.phase(), Some(Report::Ready));
}

// The report is written when it changed, stamped with the pass's time; the same slot seen again
// with nothing new writes nothing.
#[test]
fn a_report_is_written_only_when_it_changed() {
    let mut case = Case::new(Seen::Up, claims_of("ready"));
    let first = case.plan(t(5)).status.expect("a first report");
    assert_eq!(first.updated_at, Some(t(5)));
    case.status = first.clone();
    assert_eq!(case.plan(t(6)).status, None, "nothing changed");
    // Something changed: the bench holds now.
    case.bench = bench(Seen::Held, None);
    let changed = case.plan(t(7)).status.expect("the hold is news");
    assert_eq!(changed.updated_at, Some(t(7)));
    assert_eq!(changed.held.as_deref(), Some("sleeping"));
    // A report never written before is written even when it says what the default says.
    let mut fresh = Case::new(Seen::Up, vec![]);
    fresh.blind = true;
    let status = fresh.plan(t(5)).status.expect("a first report");
    assert_eq!(status.updated_at, Some(t(5)));
}
