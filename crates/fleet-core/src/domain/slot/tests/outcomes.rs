//! What an operation's outcome means for its claim (SPEC §3.4, §5.4), over every kind, outcome
//! and phase the claim can be in when it comes back; and the slot's operation record.

use super::*;

/// A claim of `phase` whose `kind` operation started at `t(1)` and still runs.
fn running(kind: OperationKind, phase: Phase) -> Claim {
    let c = claim_at(1, 0);
    let c = match phase {
        Phase::Pending => c,
        Phase::Booting => c.apply(Move::to(Phase::Booting), t(1)).unwrap(),
        Phase::Ready => c
            .apply(Move::to(Phase::Booting), t(1))
            .unwrap()
            .apply(Move::to(Phase::Ready), t(1))
            .unwrap(),
        Phase::Completed => c.apply(Move::to(Phase::Completed), t(1)).unwrap(),
        Phase::Failed => c
            .apply(Move::because(Phase::Failed, Reason::DeadlineExceeded), t(1))
            .unwrap(),
    };
    c.start_operation(kind, Duration::from_secs(300), t(1))
}

fn done(kind: OperationKind, outcome: OperationOutcome, started_at: i64) -> Done {
    Done {
        kind,
        claim: Some(ClaimName::parse("bench-01-1").unwrap()),
        started_at: Some(t(started_at)),
        outcome,
        duration: Duration::from_millis(1500),
        tail: "the last lines".to_owned(),
    }
}

/// The outcome's write in a plan: the write that records an operation of `kind`.
fn outcome_write(p: &Plan, kind: OperationKind) -> Option<Write> {
    p.steps.iter().find_map(|s| match s {
        Step::Write(w)
            if w.operation == Some(kind)
                && w.next
                    .operation
                    .as_ref()
                    .is_some_and(|o| o.outcome.is_some()) =>
        {
            Some((**w).clone())
        }
        _ => None,
    })
}

/// What the outcome means, as SPEC §3.4 says it: the reason the claim fails with, if it fails,
/// and whether a warning is recorded.
fn meaning(kind: OperationKind, outcome: OperationOutcome, phase: Phase) -> (Option<Reason>, bool) {
    use OperationOutcome::*;
    match (kind, outcome) {
        (OperationKind::Startup, Failed) if phase == Phase::Booting => {
            (Some(Reason::StartupJobFailed), false)
        }
        (OperationKind::Startup, TimedOut) if phase == Phase::Booting => {
            (Some(Reason::StartupJobTimeout), false)
        }
        (_, Abandoned) if phase.is_live() => (Some(Reason::StuckTransition), false),
        (OperationKind::Shutdown, TimedOut) => (None, true),
        _ => (None, false),
    }
}

#[test]
fn an_outcome_means_what_the_node_state_machine_says_over_every_kind_outcome_and_phase() {
    use OperationOutcome::*;
    for kind in [OperationKind::Startup, OperationKind::Shutdown] {
        for outcome in [Completed, Failed, TimedOut, Abandoned] {
            for phase in Phase::ALL {
                let c = running(kind, phase);
                let seen = if kind == OperationKind::Startup {
                    Seen::Up
                } else {
                    Seen::Down
                };
                let mut case = Case::new(seen, vec![c.clone()]);
                case.here.finished = Some(done(kind, outcome, 1));
                let p = case.plan(t(2));
                let name = format!("{kind:?} {outcome:?} on a {phase} claim");
                let w = outcome_write(&p, kind).unwrap_or_else(|| panic!("{name}: {:#?}", p.steps));
                let (fails, warns) = meaning(kind, outcome, phase);
                let recorded = w.next.operation.as_ref().unwrap();
                assert_eq!(
                    (recorded.outcome, recorded.finished_at),
                    (Some(outcome), Some(t(2))),
                    "{name}"
                );
                assert_eq!(w.old, c, "{name}");
                assert!(
                    w.then.settles,
                    "{name}: this process's operation is settled"
                );
                assert_eq!(w.duration_ms, Some(1500), "{name}");
                assert_eq!(w.detail.as_deref(), Some("the last lines"), "{name}");
                match fails {
                    Some(reason) => {
                        assert_eq!(
                            (w.next.phase, w.next.reason, w.event),
                            (Phase::Failed, Some(reason), Event::Failed),
                            "{name}"
                        );
                    }
                    None => {
                        assert_eq!(w.next.phase, phase, "{name}");
                        assert_eq!(w.event, Event::Operation, "{name}");
                    }
                }
                if warns {
                    assert_eq!(w.then.warns, Some(Reason::ShutdownJobTimeout), "{name}");
                    assert_eq!(w.next.reason, Some(Reason::ShutdownJobTimeout), "{name}");
                } else {
                    assert_eq!(w.then.warns, None, "{name}");
                }
                // The operation ended here: its end goes to the slot's record before anything.
                assert!(
                    p.steps.iter().any(|s| matches!(s, Step::EndHere { started_at, end }
                        if *started_at == t(1) && end.outcome == outcome && end.duration_ms == 1500)),
                    "{name}: {:#?}",
                    p.steps
                );
                assert_eq!(
                    p.steps
                        .iter()
                        .filter(|s| matches!(s, Step::Ended(_)))
                        .count(),
                    1,
                    "{name}"
                );
            }
        }
    }
}

// An outcome closes only the operation it belongs to: an older operation's outcome, or one for a
// claim that is gone, writes nothing and settles.
#[test]
fn an_outcome_of_another_operation_writes_nothing() {
    let c = running(OperationKind::Startup, Phase::Booting);
    for (name, d) in [
        (
            "an older operation",
            done(OperationKind::Startup, OperationOutcome::Failed, 0),
        ),
        (
            "a claim that is gone",
            Done {
                claim: Some(ClaimName::parse("bench-01-9").unwrap()),
                ..done(OperationKind::Startup, OperationOutcome::Failed, 1)
            },
        ),
        (
            "no claim",
            Done {
                claim: None,
                ..done(OperationKind::Startup, OperationOutcome::Failed, 1)
            },
        ),
    ] {
        let mut case = Case::new(Seen::Up, vec![c.clone()]);
        case.here.finished = Some(d);
        let p = case.plan(t(2));
        assert_eq!(outcome_write(&p, OperationKind::Startup), None, "{name}");
        assert!(p.steps.contains(&Step::Settled), "{name}: {:#?}", p.steps);
    }
    // An outcome recorded once: the claim's operation has ended already.
    let ended = c
        .finish_operation(OperationOutcome::Completed, t(2))
        .unwrap();
    let mut case = Case::new(Seen::Up, vec![ended]);
    case.here.finished = Some(done(OperationKind::Startup, OperationOutcome::Failed, 1));
    let p = case.plan(t(3));
    assert_eq!(outcome_write(&p, OperationKind::Startup), None);
}

// The end of this process's operation closes the slot's record within the pass: a startup that
// failed here no longer blocks the shutdown of the machine it may have left on, which is planned
// in the same pass. The end of another operation closes nothing.
#[test]
fn the_record_takes_the_end_of_its_own_operation_only() {
    let c = running(OperationKind::Startup, Phase::Booting);
    let mut case = Case::new(Seen::Up, vec![c.clone()]);
    case.here.finished = Some(done(OperationKind::Startup, OperationOutcome::TimedOut, 1));
    let p = case.plan(t(2));
    assert_eq!(
        fired(&p),
        [(OperationKind::Shutdown, false)],
        "{:#?}",
        p.steps
    );

    let mut other = Case::new(Seen::Up, vec![c]);
    other.here.finished = Some(done(OperationKind::Startup, OperationOutcome::TimedOut, 0));
    let p = other.plan(t(2));
    assert_eq!(fired(&p), [], "{:#?}", p.steps);
}
