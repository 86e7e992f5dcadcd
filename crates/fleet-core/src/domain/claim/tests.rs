use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};

use super::*;
use crate::domain::law::{self, ClaimInput, Fires, Input, Report};
use crate::domain::name::{BenchName, ClaimName, GroupName};

fn t(secs: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_800_000_000 + secs, 0).unwrap()
}

fn mins(m: u64) -> Duration {
    Duration::from_secs(m * 60)
}

fn claim_with(attempt_of_last: Option<LastClaim>, at: i64) -> Claim {
    Claim::new(
        ClaimName::parse("bench-01-1").unwrap(),
        BenchName::parse("bench-01").unwrap(),
        GroupName::parse("pool-a").unwrap(),
        attempt_of_last.as_ref(),
        t(at),
        &Timings::default(),
        None,
    )
}

fn claim() -> Claim {
    claim_with(None, 0)
}

fn ctx(now: i64, power: Option<Power>, timings: &Timings) -> Context<'_> {
    Context {
        now: t(now),
        power,
        slot_exists: true,
        superseded: false,
        timings,
    }
}

// SPEC §3.2, the legal-move table over all 25 (from, to) pairs.
#[test]
fn the_legal_move_table_over_every_pair() {
    use Phase::*;
    let legal = [
        (Pending, Booting),
        (Pending, Ready),
        (Pending, Completed),
        (Pending, Failed),
        (Booting, Ready),
        (Booting, Completed),
        (Booting, Failed),
        (Ready, Completed),
        (Ready, Failed),
    ];
    for from in Phase::ALL {
        for to in Phase::ALL {
            let want = legal.contains(&(from, to));
            assert_eq!(check_move(from, to).is_ok(), want, "{from} -> {to}");
            if !want {
                assert_eq!(check_move(from, to), Err(IllegalMove { from, to }));
            }
        }
    }
}

#[test]
fn phase_predicates_over_every_phase() {
    use Phase::*;
    let rows = [
        // phase, live, terminal, cancelable, boot window
        (Pending, true, false, true, true),
        (Booting, true, false, false, true),
        (Ready, true, false, false, false),
        (Failed, false, true, false, false),
        (Completed, false, true, false, false),
    ];
    for (p, live, terminal, cancelable, window) in rows {
        assert_eq!(
            (
                p.is_live(),
                p.is_terminal(),
                p.is_cancelable(),
                p.in_boot_window()
            ),
            (live, terminal, cancelable, window),
            "{p}"
        );
        assert_eq!(
            p.legal_next().is_empty(),
            terminal,
            "{p}: a terminal phase has no next"
        );
    }
    assert_eq!(cancellation(Pending), Cancellation::Delete);
    assert_eq!(cancellation(Booting), Cancellation::Reverse);
    assert_eq!(cancellation(Ready), Cancellation::Reverse);
    assert_eq!(cancellation(Failed), Cancellation::Nothing);
    assert_eq!(cancellation(Completed), Cancellation::Nothing);
}

#[test]
fn an_illegal_move_writes_nothing() {
    let c = claim();
    let before = c.clone();
    assert_eq!(
        c.apply(Move::to(Phase::Pending), t(1)),
        Err(IllegalMove {
            from: Phase::Pending,
            to: Phase::Pending
        }),
        "re-applying the current phase is refused"
    );
    let failed = c
        .apply(Move::because(Phase::Failed, Reason::DeadlineExceeded), t(1))
        .unwrap();
    for to in Phase::ALL {
        assert!(
            failed.apply(Move::to(to), t(2)).is_err(),
            "terminal -> {to}"
        );
    }
    assert_eq!(c, before, "apply never changes the claim it is given");
}

#[test]
fn moves_record_conditions_finish_times_and_versions() {
    let c = claim();
    assert_eq!((c.phase, c.attempt, c.version), (Phase::Pending, 1, 1));
    let booting = c.apply(Move::to(Phase::Booting), t(10)).unwrap();
    assert!(booting.is(ConditionKind::MachineCommitted));
    assert_eq!(booting.version, 2);
    assert!(booting.deadline_at.is_some());
    let ready = booting.apply(Move::to(Phase::Ready), t(20)).unwrap();
    assert!(ready.is(ConditionKind::Ready));
    assert_eq!(
        ready.deadline_at, None,
        "the move to ready clears the deadline"
    );
    assert_eq!(
        ready
            .condition(ConditionKind::Ready)
            .unwrap()
            .last_transition_time,
        t(20)
    );
    let done = ready
        .apply(Move::because(Phase::Completed, Reason::NodeDeleted), t(30))
        .unwrap();
    assert_eq!(
        (done.finished_at, done.reason),
        (Some(t(30)), Some(Reason::NodeDeleted))
    );
    assert!(!done.is(ConditionKind::Ready));
    assert!(done.digest().reached_ready);
    assert_eq!(done.version, 4);
}

// The seed's worked example: the attempt budget with the default constants is 12m10s.
#[test]
fn the_attempt_budget_is_12m10s_with_the_default_constants() {
    let t = Timings::default();
    assert_eq!(t.attempt_budget(), Duration::from_secs(12 * 60 + 10));
    assert_eq!(t.machine_gone_grace, t.attempt_budget(), "one boot window");
    assert_eq!(t.max_attempts, 3);
    assert_eq!(t.shutdown_attempt_reset_grace, mins(30));
    assert_eq!(t.ttl_after_finished, mins(60));
}

#[test]
fn the_deadline_is_the_budget_floored_by_the_groups_max_provision_time() {
    let timings = Timings::default();
    assert_eq!(timings.deadline_at(t(0), None), t(730));
    assert_eq!(timings.deadline_at(t(0), Some(mins(5))), t(730));
    assert_eq!(timings.deadline_at(t(0), Some(mins(20))), t(1200));
    let mut short = timings.clone();
    short.job_timeout = mins(1);
    assert_eq!(
        short.attempt_budget(),
        Duration::from_secs(8 * 60 + 10),
        "every constant counts"
    );
}

// The seed's worked example: a budget without the operation's own timeout (7m10s) fails a claim
// in the middle of the machine it is still buying; the real budget does not.
#[test]
fn a_7m10s_budget_would_fail_a_claim_mid_boot_and_the_real_budget_does_not() {
    let real = Timings::default();
    // The first sketch left the operation's own timeout out of the sum.
    let mut sketch = real.clone();
    sketch.job_timeout = Duration::ZERO;
    assert_eq!(sketch.attempt_budget(), Duration::from_secs(7 * 60 + 10));
    // One real boot, each stage inside its own budget: the operation runs 4m50s, the node takes
    // 85s to register, the gate takes 3m50s. The machine is usable at 10m05s.
    let boot_done: i64 = 290 + 85 + 230;
    for (timings, survives) in [(&real, true), (&sketch, false)] {
        let requested = claim_with(None, 0);
        let booting = Claim {
            deadline_at: Some(timings.deadline_at(t(0), None)),
            ..requested.apply(Move::to(Phase::Booting), t(1)).unwrap()
        };
        // A pass every 10 s through the boot: does the controller fail it before it is usable?
        let failed_at = (0..boot_done).step_by(10).find(|now| {
            judge(&booting, &ctx(*now, Some(Power::On), timings))
                == Judgment::Fail(Reason::DeadlineExceeded)
        });
        assert_eq!(
            failed_at.is_none(),
            survives,
            "budget {:?}: failed at {failed_at:?}",
            timings.attempt_budget()
        );
        if !survives {
            assert_eq!(
                failed_at,
                Some(430),
                "the sketch fails the claim at 7m10s, mid-boot"
            );
        }
    }
}

#[test]
fn a_ready_claim_is_never_overdue() {
    let timings = Timings::default();
    let ready = claim()
        .apply(Move::to(Phase::Booting), t(1))
        .unwrap()
        .apply(Move::to(Phase::Ready), t(60))
        .unwrap();
    assert!(!ready.overdue(t(100_000)));
    assert_eq!(
        judge(&ready, &ctx(100_000, Some(Power::On), &timings)),
        Judgment::Keep
    );
    let pending = claim();
    assert!(!pending.overdue(t(729)));
    assert!(pending.overdue(t(730)));
}

#[test]
fn attempts_are_seeded_once_from_the_slots_last_claim() {
    let last = |phase, attempt, reached_ready| LastClaim {
        name: ClaimName::parse("x").unwrap(),
        phase,
        attempt,
        group: GroupName::parse("g").unwrap(),
        reason: None,
        requested_at: t(0),
        deadline_at: None,
        finished_at: None,
        reached_ready,
        streak_reset_at: None,
        call: None,
    };
    let tm = Timings::default();
    let seed = |l: Option<&LastClaim>| seed_attempt(l, t(0), &tm);
    assert_eq!(seed(None), 1);
    assert_eq!(seed(Some(&last(Phase::Failed, 1, false))), 2);
    assert_eq!(seed(Some(&last(Phase::Failed, 2, false))), 3);
    assert_eq!(
        seed(Some(&last(Phase::Failed, 3, false))),
        4,
        "past the bound: failed before buying"
    );
    assert_eq!(seed(Some(&last(Phase::Completed, 2, false))), 1);
    assert_eq!(seed(Some(&last(Phase::Completed, 2, true))), 1);
    assert_eq!(
        seed(Some(&last(Phase::Failed, 2, true))),
        1,
        "a machine was produced"
    );
    assert_eq!(seed(Some(&last(Phase::Failed, u32::MAX, false))), u32::MAX);
    // Nothing rewrites the attempt after the seed.
    let c = claim_with(Some(last(Phase::Failed, 2, false)), 0);
    let ready = c
        .apply(Move::to(Phase::Booting), t(1))
        .unwrap()
        .apply(Move::to(Phase::Ready), t(2))
        .unwrap();
    assert_eq!((c.attempt, ready.attempt), (3, 3));
}

// Past the bound the claim fails before a machine is bought; a ready claim with attempt 4 is a
// success, not a fifth attempt (the window bounds the check).
#[test]
fn the_attempt_bound_fails_a_claim_before_a_machine_is_bought() {
    let timings = Timings::default();
    let mut c = claim();
    for (attempt, want) in [
        (1, Judgment::Keep),
        (3, Judgment::Keep),
        (4, Judgment::Fail(Reason::AttemptLimitExceeded)),
    ] {
        c.attempt = attempt;
        assert_eq!(
            judge(&c, &ctx(1, Some(Power::Off), &timings)),
            want,
            "attempt {attempt}"
        );
        // The law would boot a pending claim; the judgment comes first in a pass.
        assert_eq!(
            law::decide(Input {
                claim: ClaimInput::of(Some(&c)),
                power: Power::Off,
                usable: false
            })
            .fires,
            Fires::StartNode
        );
    }
    c.attempt = 4;
    let ready = c
        .apply(Move::to(Phase::Booting), t(1))
        .unwrap()
        .apply(Move::to(Phase::Ready), t(2))
        .unwrap();
    assert_eq!(
        judge(&ready, &ctx(3, Some(Power::On), &timings)),
        Judgment::Keep
    );
}

#[test]
fn shutdown_attempts_are_counted_per_operation_bounded_and_reset_after_the_grace() {
    let timings = Timings::default();
    let ready = claim()
        .apply(Move::to(Phase::Booting), t(1))
        .unwrap()
        .apply(Move::to(Phase::Ready), t(2))
        .unwrap();
    let mut c = ready.mark_for_deletion(Reason::NodeDeleted).unwrap();
    for n in 1..=3 {
        assert_eq!(
            c.shutdown_gate(t(n * 60), &timings),
            ShutdownGate::Fire,
            "attempt {n}"
        );
        c = c.record_shutdown_attempt(t(n * 60), &timings);
        assert_eq!(c.shutdown_attempts, n as u32);
    }
    // The streak is spent: paused until 30m after the last attempt.
    assert_eq!(
        c.shutdown_gate(t(200), &timings),
        ShutdownGate::Paused {
            until: t(180 + 1800)
        }
    );
    assert_eq!(
        c.shutdown_gate(t(180 + 1799), &timings),
        ShutdownGate::Paused {
            until: t(180 + 1800)
        }
    );
    assert_eq!(c.shutdown_streak(t(180 + 1800), &timings), 0);
    assert_eq!(c.shutdown_gate(t(180 + 1800), &timings), ShutdownGate::Fire);
    let again = c.record_shutdown_attempt(t(180 + 1800), &timings);
    assert_eq!(
        again.shutdown_attempts, 1,
        "the count restarts after the grace"
    );
    let reset = c.reset_shutdown_attempts();
    assert_eq!(
        (reset.shutdown_attempts, reset.last_shutdown_attempt_at),
        (0, None)
    );
    assert_eq!(reset.shutdown_gate(t(200), &timings), ShutdownGate::Fire);
    // The boot attempt is untouched by the shutdown streak.
    assert_eq!(again.attempt, ready.attempt);
    // The pause's warning lasts as long as the pause: a new streak or a reset ends it, so the
    // next pause is recorded anew; other warnings stay.
    let warned = c.warn(Reason::ShutdownAttemptLimitReached);
    assert_eq!(
        warned
            .record_shutdown_attempt(t(180 + 1800), &timings)
            .reason,
        None
    );
    assert_eq!(warned.reset_shutdown_attempts().reason, None);
    let timed_out = c.warn(Reason::ShutdownJobTimeout);
    assert_eq!(
        timed_out
            .record_shutdown_attempt(t(180 + 1800), &timings)
            .reason,
        Some(Reason::ShutdownJobTimeout)
    );
}

// The seed's worked example: a ready claim with its machine observed off reports booting and
// fires nothing until the MachineGone grace; a machine back inside it clears the clock.
#[test]
fn machine_gone_is_bounded_by_the_observation_not_by_a_pass() {
    let timings = Timings::default();
    let grace = timings.machine_gone_grace.as_secs() as i64;
    let ready = claim()
        .apply(Move::to(Phase::Booting), t(1))
        .unwrap()
        .apply(Move::to(Phase::Ready), t(2))
        .unwrap();
    let off = Input {
        claim: ClaimInput::of(Some(&ready)),
        power: Power::Off,
        usable: false,
    };
    assert_eq!(
        (law::report(off), law::transition(off)),
        (Report::Booting, None)
    );

    let j = judge(&ready, &ctx(100, Some(Power::Off), &timings));
    assert_eq!(j, Judgment::Watch(Watch::MarkObservedOff));
    let watched = ready.watched(Watch::MarkObservedOff, t(100)).unwrap();
    assert!(watched.is(ConditionKind::MachineObservedOff));
    assert_eq!(
        judge(&watched, &ctx(100 + grace - 1, Some(Power::Off), &timings)),
        Judgment::Keep
    );
    assert_eq!(
        judge(&watched, &ctx(100 + grace, Some(Power::Off), &timings)),
        Judgment::Fail(Reason::MachineGone)
    );
    // Back inside the grace: the condition flips off, the claim stays ready.
    assert_eq!(
        judge(&watched, &ctx(200, Some(Power::On), &timings)),
        Judgment::Watch(Watch::ClearObservedOff)
    );
    let back = watched.watched(Watch::ClearObservedOff, t(200)).unwrap();
    assert_eq!(back.phase, Phase::Ready);
    assert!(!back.is(ConditionKind::MachineObservedOff));
    // Off again: the clock starts again from the new observation.
    let again = back.watched(Watch::MarkObservedOff, t(300)).unwrap();
    assert_eq!(
        judge(&again, &ctx(100 + grace, Some(Power::Off), &timings)),
        Judgment::Keep
    );
    let gone = again.watched(Watch::Gone, t(300 + grace)).unwrap();
    assert_eq!(
        (gone.phase, gone.reason),
        (Phase::Failed, Some(Reason::MachineGone))
    );
    assert_eq!(
        watch_machine(&claim(), Power::Off, t(0), &timings),
        Watch::Unchanged,
        "only a ready claim is watched"
    );
}

#[test]
fn the_claim_controller_judges_in_order_and_nothing_it_cannot_see() {
    let timings = Timings::default();
    let c = claim();
    let mut x = ctx(10_000, Some(Power::Off), &timings);
    assert_eq!(judge(&c, &x), Judgment::Fail(Reason::DeadlineExceeded));
    x.superseded = true;
    assert_eq!(judge(&c, &x), Judgment::Fail(Reason::Superseded));
    x.slot_exists = false;
    assert_eq!(judge(&c, &x), Judgment::Fail(Reason::SlotDeleted));
    // Blind: no deadline, no machine-gone, no completion for a machine it cannot see.
    let blind = ctx(10_000, None, &timings);
    assert_eq!(judge(&c, &blind), Judgment::Keep);
    let ready = c
        .apply(Move::to(Phase::Booting), t(1))
        .unwrap()
        .apply(Move::to(Phase::Ready), t(2))
        .unwrap();
    let marked = ready
        .mark_for_deletion(Reason::CancelledByDecreaseTargetSize)
        .unwrap();
    assert_eq!(judge(&marked, &blind), Judgment::Keep);
    assert_eq!(
        judge(&marked, &ctx(50, Some(Power::On), &timings)),
        Judgment::Keep
    );
    assert_eq!(
        judge(&marked, &ctx(50, Some(Power::Off), &timings)),
        Judgment::Complete(Reason::CancelledByDecreaseTargetSize)
    );
}

#[test]
fn terminal_claims_are_collected_a_ttl_after_they_finish() {
    let timings = Timings::default();
    let failed = claim()
        .apply(
            Move::because(Phase::Failed, Reason::StartupJobFailed),
            t(100),
        )
        .unwrap();
    assert_eq!(
        judge(&failed, &ctx(100 + 3599, Some(Power::Off), &timings)),
        Judgment::Keep
    );
    assert_eq!(
        judge(&failed, &ctx(100 + 3600, None, &timings)),
        Judgment::Collect
    );
    let mut foreign = failed.clone();
    foreign.finished_at = None;
    assert_eq!(
        judge(&foreign, &ctx(3600, None, &timings)),
        Judgment::Collect
    );
}

#[test]
fn marking_and_cancelling_follow_the_phase() {
    let c = claim();
    assert_eq!(
        c.mark_for_deletion(Reason::NodeDeleted),
        Err(NotMarkable::Pending)
    );
    let booting = c.apply(Move::to(Phase::Booting), t(1)).unwrap();
    let marked = booting.mark_for_deletion(Reason::NodeDeleted).unwrap();
    assert!(marked.phase.is_live() && !marked.wants_machine());
    assert_eq!(
        marked.mark_for_deletion(Reason::DeletedByHand),
        Err(NotMarkable::AlreadyMarked)
    );
    let done = booting.apply(Move::to(Phase::Failed), t(2)).unwrap();
    assert_eq!(
        done.mark_for_deletion(Reason::NodeDeleted),
        Err(NotMarkable::Terminal)
    );
}

#[test]
fn the_newest_live_claim_owns_the_slot() {
    let a = claim_with(None, 0);
    let b = Claim {
        name: ClaimName::parse("bench-01-2").unwrap(),
        ..claim_with(None, 5)
    };
    let c = Claim {
        name: ClaimName::parse("bench-01-3").unwrap(),
        ..claim_with(None, 5)
    };
    let old_failed = Claim {
        phase: Phase::Failed,
        ..claim_with(None, 9)
    };
    let losers: Vec<&str> = superseded(&[&a, &b, &c, &old_failed])
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(
        losers,
        ["bench-01-1", "bench-01-2"],
        "ties go to the greater name; terminal claims are not live"
    );
    assert!(superseded(&[&a]).is_empty());
    assert!(superseded(&[]).is_empty());
}

#[test]
fn every_reason_has_its_name() {
    let names: Vec<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(
        names,
        [
            "DeadlineExceeded",
            "AttemptLimitExceeded",
            "Superseded",
            "SlotDeleted",
            "StartupJobFailed",
            "StartupJobTimeout",
            "ShutdownJobTimeout",
            "ShutdownAttemptLimitReached",
            "ReadinessGateTimeout",
            "MachineGone",
            "StuckTransition",
            "NodeDeleted",
            "CancelledByDecreaseTargetSize",
            "DeletedByHand",
            "Adopted",
        ]
    );
    let deletions: Vec<Reason> = Reason::ALL
        .into_iter()
        .filter(|r| r.is_deletion())
        .collect();
    assert_eq!(
        deletions,
        [
            Reason::NodeDeleted,
            Reason::CancelledByDecreaseTargetSize,
            Reason::DeletedByHand
        ]
    );
    for r in Reason::ALL {
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            format!("\"{}\"", r.as_str())
        );
    }
}

#[test]
fn an_operation_is_recorded_before_it_runs_and_its_outcome_once() {
    let c = claim().apply(Move::to(Phase::Booting), t(1)).unwrap();
    assert_eq!(c.running_operation(), None);
    assert_eq!(
        c.finish_operation(OperationOutcome::Completed, t(2)),
        None,
        "nothing in flight"
    );
    let started = c.start_operation(OperationKind::Startup, Duration::from_secs(300), t(1));
    assert_eq!(started.version, c.version + 1);
    let op = started.running_operation().unwrap();
    assert_eq!(
        (op.kind, op.started_at, op.timeout),
        (OperationKind::Startup, t(1), Duration::from_secs(300))
    );
    let done = started
        .finish_operation(OperationOutcome::Failed, t(9))
        .unwrap();
    assert_eq!(done.running_operation(), None);
    let op = done.operation.clone().unwrap();
    assert_eq!(
        (op.outcome, op.finished_at),
        (Some(OperationOutcome::Failed), Some(t(9)))
    );
    assert_eq!(
        done.finish_operation(OperationOutcome::Completed, t(10)),
        None,
        "recorded once"
    );
    assert_eq!(
        OperationOutcome::TimedOut.event(),
        crate::domain::fsm::Event::JobTimeout
    );
    assert_eq!(
        OperationOutcome::Failed.event(),
        crate::domain::fsm::Event::JobFailed
    );
    assert_eq!(
        OperationOutcome::Completed.event(),
        crate::domain::fsm::Event::JobCompleted
    );
}

#[test]
fn an_adopted_claim_is_ready_with_no_deadline() {
    let c = Claim::adopted(
        ClaimName::parse("bench-01-adopted").unwrap(),
        BenchName::parse("bench-01").unwrap(),
        GroupName::parse("pool-a").unwrap(),
        t(5),
        &Timings::default(),
    );
    assert_eq!(
        (c.phase, c.reason, c.deadline_at, c.attempt),
        (Phase::Ready, Some(Reason::Adopted), None, 1)
    );
    assert!(c.is(ConditionKind::Ready) && c.wants_machine());
    assert_eq!(
        judge(&c, &ctx(10_000, Some(Power::On), &Timings::default())),
        Judgment::Keep
    );
}

#[test]
fn a_condition_keeps_its_transition_time_while_its_status_holds() {
    let ready = claim()
        .apply(Move::to(Phase::Booting), t(1))
        .unwrap()
        .apply(Move::to(Phase::Ready), t(2))
        .unwrap();
    let off = ready.watched(Watch::MarkObservedOff, t(10)).unwrap();
    let again = off.watched(Watch::MarkObservedOff, t(20)).unwrap();
    let since = |c: &Claim| {
        c.condition(ConditionKind::MachineObservedOff)
            .unwrap()
            .last_transition_time
    };
    assert_eq!(
        (since(&off), since(&again)),
        (t(10), t(10)),
        "the clock is the first observation"
    );
    assert_eq!(
        ready.watched(Watch::Unchanged, t(30)).unwrap(),
        ready,
        "an unchanged watch writes nothing"
    );
}

#[test]
fn every_write_bumps_the_version_by_one() {
    let timings = Timings::default();
    let c = claim();
    assert_eq!(c.reset_shutdown_attempts().version, c.version + 1);
    assert_eq!(
        c.record_shutdown_attempt(t(1), &timings).version,
        c.version + 1
    );
    assert_eq!(c.warn(Reason::ShutdownJobTimeout).version, c.version + 1);
    let booting = c.apply(Move::to(Phase::Booting), t(1)).unwrap();
    assert_eq!(
        booting
            .mark_for_deletion(Reason::NodeDeleted)
            .unwrap()
            .version,
        booting.version + 1
    );
    assert_eq!(
        booting
            .watched(Watch::MarkObservedOff, t(2))
            .unwrap()
            .version,
        booting.version + 1
    );
}

#[test]
fn a_terminal_claim_without_a_finish_time_is_kept_until_a_ttl_after_its_request() {
    let timings = Timings::default();
    let mut foreign = claim()
        .apply(Move::because(Phase::Failed, Reason::StartupJobFailed), t(0))
        .unwrap();
    foreign.finished_at = None;
    assert_eq!(judge(&foreign, &ctx(3599, None, &timings)), Judgment::Keep);
    assert_eq!(
        judge(&foreign, &ctx(3600, None, &timings)),
        Judgment::Collect
    );
}

#[test]
fn a_marked_claim_does_not_complete_while_its_startup_is_in_flight() {
    let timings = Timings::default();
    let booting = claim()
        .apply(Move::to(Phase::Booting), t(1))
        .unwrap()
        .start_operation(OperationKind::Startup, Duration::from_secs(300), t(1));
    let marked = booting.mark_for_deletion(Reason::NodeDeleted).unwrap();
    assert_eq!(
        judge(&marked, &ctx(10, Some(Power::Off), &timings)),
        Judgment::Keep
    );
    let done = marked
        .finish_operation(OperationOutcome::Completed, t(20))
        .unwrap();
    assert_eq!(
        judge(&done, &ctx(30, Some(Power::Off), &timings)),
        Judgment::Complete(Reason::NodeDeleted)
    );
}

#[test]
fn phases_have_their_names() {
    assert_eq!(
        Phase::ALL.map(|p| p.to_string()),
        ["pending", "booting", "ready", "failed", "completed"]
    );
    assert_eq!(Reason::MachineGone.to_string(), "MachineGone");
    assert_eq!(OperationKind::Shutdown.as_str(), "shutdown");
}

mod model;

#[test]
fn a_failure_streak_ends_after_the_cooldown_or_an_operators_reset() {
    let tm = Timings::default(); // cooldown 30m, bound 3
    let cooldown = tm.failed_slot_cooldown.as_secs() as i64;
    let failed = |attempt, finished| LastClaim {
        name: ClaimName::parse("x").unwrap(),
        phase: Phase::Failed,
        attempt,
        group: GroupName::parse("g").unwrap(),
        reason: Some(Reason::DeadlineExceeded),
        requested_at: t(0),
        deadline_at: None,
        finished_at: finished,
        reached_ready: false,
        streak_reset_at: None,
        call: None,
    };
    let spent = failed(3, Some(t(100)));
    // Within the cooldown the slot is spent and a claim on it would be attempt 4.
    assert_eq!(failure_streak(Some(&spent), t(100 + cooldown - 1), &tm), 3);
    assert!(streak_spent(Some(&spent), t(100 + cooldown - 1), &tm));
    assert_eq!(seed_attempt(Some(&spent), t(100 + cooldown - 1), &tm), 4);
    // From the cooldown's end (measured from the failure, not the request) it starts afresh.
    assert_eq!(failure_streak(Some(&spent), t(100 + cooldown), &tm), 0);
    assert!(!streak_spent(Some(&spent), t(100 + cooldown), &tm));
    assert_eq!(seed_attempt(Some(&spent), t(100 + cooldown), &tm), 1);
    // A digest without a finish time counts from its request.
    assert_eq!(failure_streak(Some(&failed(3, None)), t(cooldown), &tm), 0);
    assert_eq!(
        failure_streak(Some(&failed(3, None)), t(cooldown - 1), &tm),
        3
    );
    // An operator's reset ends it at once, and keeps everything else of the digest.
    let reset = spent.reset_streak(t(200));
    assert_eq!(reset.attempt, 3);
    assert_eq!(reset.streak_reset_at, Some(t(200)));
    assert_eq!(failure_streak(Some(&reset), t(201), &tm), 0);
    assert_eq!(seed_attempt(Some(&reset), t(201), &tm), 1);
    // A streak short of the bound is not spent.
    assert!(!streak_spent(Some(&failed(2, Some(t(100)))), t(101), &tm));
    assert!(!streak_spent(None, t(0), &tm));
}

// The readiness gate over its whole input space: phase (pending, booting), the startup (none,
// running, completed, failed), the machine on or off, usable or not, heard or not, and the time
// against both budgets (uncordon 90 s, then 4 m more).
#[test]
fn the_readiness_gate_over_its_whole_input_space() {
    let tm = Timings::default();
    let ended = 100; // the startup ends at t(100)
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Startup {
        None,
        Running,
        Completed,
        Failed,
    }
    for pending in [true, false] {
        for startup in [
            Startup::None,
            Startup::Running,
            Startup::Completed,
            Startup::Failed,
        ] {
            for on in [false, true] {
                for usable in [false, true] {
                    for heard in [false, true] {
                        for at in [ended + 10, ended + 90, ended + 200, ended + 330] {
                            let mut c = claim();
                            if !pending {
                                c = c.apply(Move::to(Phase::Booting), t(0)).unwrap();
                            }
                            if startup != Startup::None {
                                c = c.start_operation(OperationKind::Startup, mins(5), t(1));
                            }
                            match startup {
                                Startup::Completed => {
                                    c = c
                                        .finish_operation(OperationOutcome::Completed, t(ended))
                                        .unwrap()
                                }
                                Startup::Failed => {
                                    c = c
                                        .finish_operation(OperationOutcome::Failed, t(ended))
                                        .unwrap()
                                }
                                Startup::None | Startup::Running => {}
                            }
                            if heard {
                                c = c.heard(t(ended));
                            }
                            let got = readiness_gate(&c, on, usable, t(at), &tm);
                            let done = startup == Startup::Completed;
                            let budget = if heard { 90 + 240 } else { 90 };
                            let want = if usable && (done || (pending && on)) {
                                Gate::Ready
                            } else if !done {
                                Gate::Wait(Waiting::Startup)
                            } else if on && !heard {
                                Gate::Heard
                            } else if at >= ended + budget {
                                Gate::Fail
                            } else if heard {
                                Gate::Wait(Waiting::Usable {
                                    until: t(ended + budget),
                                })
                            } else {
                                Gate::Wait(Waiting::FirstBeat {
                                    until: t(ended + budget),
                                })
                            };
                            assert_eq!(
                                got,
                                want,
                                "pending={pending} {startup:?} on={on} usable={usable} heard={heard} at=+{}",
                                at - ended
                            );
                        }
                    }
                }
            }
        }
    }
}

// A machine that reboots while it provisions: heard after its startup, then dark past the first
// budget. It keeps the whole budget (it used to fail ReadinessGateTimeout at once).
#[test]
fn a_machine_that_reboots_while_it_provisions_keeps_the_whole_budget() {
    let tm = Timings::default();
    let c = claim()
        .apply(Move::to(Phase::Booting), t(0))
        .unwrap()
        .start_operation(OperationKind::Startup, mins(5), t(0))
        .finish_operation(OperationOutcome::Completed, t(100))
        .unwrap();
    assert_eq!(readiness_gate(&c, true, false, t(110), &tm), Gate::Heard);
    let heard = c.heard(t(110));
    assert!(heard.is(ConditionKind::MachineHeard));
    // Dark at +120 s, past the 90 s first budget: still waiting for it to be usable.
    assert_eq!(
        readiness_gate(&heard, false, false, t(220), &tm),
        Gate::Wait(Waiting::Usable {
            until: t(100 + 330)
        })
    );
    assert_eq!(readiness_gate(&c, false, false, t(220), &tm), Gate::Fail);
}

#[test]
fn a_call_is_named_as_the_store_spells_it() {
    for (call, name) in [
        (Call::IncreaseSize, "IncreaseSize"),
        (Call::Claim, "Claim"),
        (Call::Adoption, "Adoption"),
    ] {
        assert_eq!(call.as_str(), name);
        let stored = serde_json::to_string(&call).unwrap();
        assert_eq!(stored, format!("\"{name}\""), "the digest keeps {name} so");
    }
}

// The store's compare-and-set keys on the version: every change of a claim raises it by exactly
// one, whatever it changes, so two writers of one version can never both land.
#[test]
fn every_change_raises_the_version_by_one() {
    let t0 = Timings::default();
    let started = claim().start_operation(OperationKind::Startup, mins(5), t(1));
    let finished = started
        .finish_operation(OperationOutcome::Completed, t(2))
        .unwrap();
    let booting = claim().apply(Move::to(Phase::Booting), t(1)).unwrap();
    let marked = booting.mark_for_deletion(Reason::NodeDeleted).unwrap();
    let watched = claim()
        .apply(Move::to(Phase::Ready), t(1))
        .unwrap()
        .watched(Watch::MarkObservedOff, t(2))
        .unwrap();
    let base = claim().version;
    let ready = claim().apply(Move::to(Phase::Ready), t(1)).unwrap();
    let changes = [
        (base, started.version, "start_operation"),
        (started.version, finished.version, "finish_operation"),
        (base, claim().heard(t(1)).version, "heard"),
        (
            base,
            claim().warn(Reason::ShutdownJobTimeout).version,
            "warn",
        ),
        (base, ready.version, "apply"),
        (booting.version, marked.version, "mark_for_deletion"),
        (ready.version, watched.version, "watched"),
        (
            base,
            claim().record_shutdown_attempt(t(1), &t0).version,
            "record_shutdown_attempt",
        ),
        (
            base,
            claim().reset_shutdown_attempts().version,
            "reset_shutdown_attempts",
        ),
    ];
    for (before, after, what) in changes {
        assert_eq!(after, before + 1, "{what} raises the version by one");
    }
    // A claim at a later version: still one, not a product or a difference.
    let mut later = claim();
    later.version = 7;
    assert_eq!(later.heard(t(1)).version, 8);
    let later = later.start_operation(OperationKind::Shutdown, mins(1), t(1));
    assert_eq!(later.version, 8);
    assert_eq!(
        later
            .finish_operation(OperationOutcome::Failed, t(2))
            .unwrap()
            .version,
        9
    );
}

// A catalog written before `failed_slot_cooldown` existed reads with the default cooldown.
#[test]
fn timings_without_the_cooldown_read_with_its_default() {
    let t = Timings {
        failed_slot_cooldown: Duration::from_secs(1),
        ..Timings::default()
    };
    let mut stored = serde_json::to_value(&t).unwrap();
    stored
        .as_object_mut()
        .unwrap()
        .remove("failed_slot_cooldown")
        .expect("the field is stored");
    let read: Timings = serde_json::from_value(stored).unwrap();
    assert_eq!(
        read.failed_slot_cooldown,
        Timings::default().failed_slot_cooldown
    );
    assert!(!read.failed_slot_cooldown.is_zero());
}
