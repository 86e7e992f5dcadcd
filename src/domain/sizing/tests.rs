//! Tables over the sizing rules: exhaustive where the input space is finite (a claim's phase and
//! mark, a slot's claim and operation, a naming's fakeness), edge tables where it is not (sizes
//! and counts).

use chrono::DateTime;

use super::*;
use crate::domain::claim::{OperationKind, OperationOutcome, Reason};
use crate::domain::name::{ClaimName, GroupName};
use crate::domain::operation::OpEnd;

fn t(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap()
}

fn slot(n: u32) -> BenchName {
    BenchName::parse(&format!("bench-{n:02}")).unwrap()
}

fn slots(ns: &[u32]) -> Vec<BenchName> {
    ns.iter().map(|n| slot(*n)).collect()
}

/// A claim on slot `n`, requested at `at`, in `phase`, marked for deletion or not.
fn claim(n: u32, at: i64, phase: Phase, marked: bool) -> Claim {
    let mut c = Claim::new(
        ClaimName::for_slot(&slot(n), &format!("{at:x}")),
        slot(n),
        GroupName::parse("pool-a").unwrap(),
        None,
        t(at),
        &Timings::default(),
        None,
    );
    c.phase = phase;
    c.marked_for_deletion = marked.then_some(Reason::NodeDeleted);
    c
}

/// The digest of a slot's last claim: failed at attempt `attempt`, `ago` seconds before t(0).
fn failed_last(n: u32, attempt: u32, ago: i64) -> LastClaim {
    LastClaim {
        name: ClaimName::for_slot(&slot(n), "1"),
        phase: Phase::Failed,
        attempt,
        group: GroupName::parse("pool-a").unwrap(),
        reason: Some(Reason::DeadlineExceeded),
        requested_at: t(-ago - 60),
        deadline_at: None,
        finished_at: Some(t(-ago)),
        reached_ready: false,
        streak_reset_at: None,
        call: None,
    }
}

fn shutdown(started: i64, outcome: Option<OperationOutcome>, off: bool) -> SlotOp {
    SlotOp {
        kind: OperationKind::Shutdown,
        claim: None,
        attempt: 0,
        started_at: t(started),
        timeout: Duration::from_secs(60),
        controller: "ctl".into(),
        streak: 1,
        end: outcome.map(|outcome| OpEnd {
            outcome,
            finished_at: t(started + 1),
            duration_ms: 1000,
            tail: String::new(),
        }),
        off_at: off.then(|| t(started + 2)),
    }
}

const SETTLE: Duration = Duration::from_secs(30);

// Every phase, marked or not: only a live, unmarked claim counts toward the target.
#[test]
fn the_target_counts_live_claims_a_scale_down_has_not_marked() {
    for phase in Phase::ALL {
        for marked in [false, true] {
            let want = usize::from(phase.is_live() && !marked);
            assert_eq!(
                target(&[claim(1, 0, phase, marked)]),
                want,
                "{phase} marked={marked}"
            );
        }
    }
    let many = [
        claim(1, 0, Phase::Ready, false),
        claim(2, 0, Phase::Pending, false),
        claim(3, 0, Phase::Booting, true),
        claim(4, 0, Phase::Failed, false),
    ];
    assert_eq!(target(&many), 2);
    assert_eq!(target(&[]), 0);
}

// Every pair of phases for an older and a newer claim on one slot: a live claim speaks over an
// ended one, then the newer; on a tie the first seen keeps speaking.
#[test]
fn the_live_claim_speaks_for_its_slot_else_the_newest() {
    for older in Phase::ALL {
        for newer in Phase::ALL {
            let claims = [claim(1, 0, older, false), claim(1, 10, newer, false)];
            let want = if older.is_live() && !newer.is_live() {
                &claims[0]
            } else {
                &claims[1]
            };
            assert_eq!(speaking(&claims)[&slot(1)], want, "{older} then {newer}");
            assert_eq!(
                speaker(&slot(1), &claims),
                Some(want),
                "{older} then {newer}"
            );
            // Seen the other way round, the same claim speaks.
            let reversed = [claims[1].clone(), claims[0].clone()];
            assert_eq!(speaking(&reversed)[&slot(1)], want, "{newer} first");
            assert_eq!(speaker(&slot(1), &reversed), Some(want), "{newer} first");
        }
    }
    let tie = [claim(1, 0, Phase::Failed, false), {
        let mut c = claim(1, 0, Phase::Completed, false);
        c.name = ClaimName::for_slot(&slot(1), "b");
        c
    }];
    assert_eq!(
        speaking(&tie)[&slot(1)].name,
        tie[0].name,
        "a tie keeps the first"
    );
    assert_eq!(speaker(&slot(1), &tie).unwrap().name, tie[0].name);
    assert_eq!(speaker(&slot(2), &tie), None);
    assert!(!speaking(&tie).contains_key(&slot(2)));
}

/// What a slot holds for the first sieve of the room.
#[derive(Clone, Copy, Debug)]
enum Holds {
    Nothing,
    Claim(Phase, bool),
}

// Every claim a slot can hold (none, or each phase, marked or not) against every operation
// record (none, a startup, a shutdown still going, one seen off, one that failed, one past its
// window): a slot is offered only with no live claim and no machine going down.
#[test]
fn a_slot_is_unclaimed_without_a_live_claim_or_a_machine_going_down() {
    let mut holdings = vec![Holds::Nothing];
    for phase in Phase::ALL {
        for marked in [false, true] {
            holdings.push(Holds::Claim(phase, marked));
        }
    }
    let startup = SlotOp {
        kind: OperationKind::Startup,
        ..shutdown(0, None, false)
    };
    let records = [
        ("none", None, false),
        ("startup", Some(startup), false),
        ("shutdown running", Some(shutdown(0, None, false)), true),
        (
            "shutdown completed",
            Some(shutdown(0, Some(OperationOutcome::Completed), false)),
            true,
        ),
        ("shutdown seen off", Some(shutdown(0, None, true)), false),
        (
            "shutdown failed",
            Some(shutdown(0, Some(OperationOutcome::Failed), false)),
            false,
        ),
        // Started 90 s ago: past its 60 s timeout and the 30 s settle.
        (
            "shutdown past its window",
            Some(shutdown(-90, None, false)),
            false,
        ),
    ];
    for holds in &holdings {
        for (what, record, going_down) in &records {
            let claims: Vec<Claim> = match holds {
                Holds::Nothing => vec![],
                Holds::Claim(phase, marked) => vec![claim(1, 0, *phase, *marked)],
            };
            let ops: HashMap<BenchName, SlotOp> =
                record.iter().map(|o| (slot(1), o.clone())).collect();
            let live = match holds {
                Holds::Nothing => None,
                Holds::Claim(phase, marked) => phase.is_live().then_some(*marked),
            };
            let (offered, busy) = match live {
                Some(marked) => (false, marked),
                None => (!going_down, *going_down),
            };
            let got = unclaimed(&slots(&[1]), &claims, &ops, t(0), SETTLE);
            assert_eq!(
                got,
                Unclaimed {
                    slots: if offered { slots(&[1]) } else { vec![] },
                    busy: usize::from(busy),
                },
                "{holds:?} with {what}"
            );
        }
    }
}

#[test]
fn unclaimed_slots_keep_their_given_order_and_other_slots_claims_do_not_count() {
    let claims = [
        claim(2, 0, Phase::Ready, false),
        claim(4, 0, Phase::Booting, true),
        claim(9, 0, Phase::Pending, false),
    ];
    let ops = HashMap::from([(slot(5), shutdown(0, None, false))]);
    let got = unclaimed(&slots(&[6, 1, 2, 3, 4, 5]), &claims, &ops, t(0), SETTLE);
    assert_eq!(got.slots, slots(&[6, 1, 3]));
    assert_eq!(got.busy, 2, "slot 4's marked claim and slot 5's shutdown");
}

// The ranking: a spent streak is left out and counted; the rest, fewest counted failures first,
// then in the given order. Timings: 3 attempts, a 30 min cooldown.
#[test]
fn the_room_ranks_free_slots_by_their_failure_streak_then_their_order() {
    let timings = Timings::default();
    assert_eq!(
        (timings.max_attempts, timings.failed_slot_cooldown.as_secs()),
        (3, 1800)
    );
    // row, the slots' last claims, the free slots in order, how many spent
    type Row = (&'static str, Vec<Option<LastClaim>>, Vec<u32>, usize);
    let rows: &[Row] = &[
        ("no slot", vec![], vec![], 0),
        (
            "fresh slots keep their order",
            vec![None, None, None],
            vec![1, 2, 3],
            0,
        ),
        (
            "one failure ranks after none",
            vec![Some(failed_last(1, 1, 0)), None, None],
            vec![2, 3, 1],
            0,
        ),
        (
            "two failures rank after one",
            vec![Some(failed_last(1, 2, 0)), Some(failed_last(2, 1, 0)), None],
            vec![3, 2, 1],
            0,
        ),
        (
            "three failures spend the slot",
            vec![Some(failed_last(1, 3, 0)), None, Some(failed_last(3, 1, 0))],
            vec![2, 3],
            1,
        ),
        (
            "a streak past its cooldown counts nothing",
            vec![
                Some(failed_last(1, 3, 1800)),
                Some(failed_last(2, 1, 0)),
                None,
            ],
            vec![1, 3, 2],
            0,
        ),
        (
            "one second short of the cooldown it still counts",
            vec![Some(failed_last(1, 3, 1799)), None, None],
            vec![2, 3],
            1,
        ),
        (
            "every slot spent",
            vec![
                Some(failed_last(1, 3, 0)),
                Some(failed_last(2, 4, 0)),
                Some(failed_last(3, 9, 0)),
            ],
            vec![],
            3,
        ),
    ];
    for (row, lasts, free, spent) in rows {
        let candidates = Unclaimed {
            slots: slots(&[1, 2, 3][..lasts.len()]),
            busy: 4,
        };
        let got = room(candidates, lasts.iter().map(Option::as_ref), t(0), &timings);
        assert_eq!(
            got,
            Room {
                free: slots(free),
                busy: 4,
                spent: *spent
            },
            "{row}"
        );
    }
}

// Edges of min, max, target and free: the configured max, lowered to what the group can reach,
// never below its min.
#[test]
fn the_reachable_max_is_the_max_lowered_to_target_plus_free_never_below_min() {
    let rows = [
        // min, max, target, free, want
        (0, 10, 0, 0, 0),
        (0, 10, 3, 2, 5),
        (0, 10, 8, 2, 10),
        (0, 10, 8, 5, 10),
        (2, 10, 0, 1, 2),
        (2, 10, 0, 0, 2),
        (5, 5, 0, 0, 5),
        (0, 0, 4, 4, 0),
        (0, u32::MAX, usize::MAX, 1, u32::MAX),
        (0, 7, u32::MAX as usize + 1, 0, 7),
    ];
    for (min, max, target, free, want) in rows {
        assert_eq!(
            reachable_max(min, max, target, free),
            want,
            "min {min} max {max} target {target} free {free}"
        );
    }
}

#[test]
fn an_increase_past_the_max_is_refused_before_the_room_is_read() {
    let rows = [
        // target, delta, max, ok
        (0, 1, 1, true),
        (0, 2, 1, false),
        (1, 1, 2, true),
        (2, 1, 2, false),
        (0, 0, 0, true),
        (1, usize::MAX, 5, false),
    ];
    for (target, delta, max, ok) in rows {
        let got = check_increase(target, delta, max);
        let want = if ok {
            Ok(())
        } else {
            Err(IncreaseRefused::OverMax { target, delta, max })
        };
        assert_eq!(got, want, "target {target} + {delta} against max {max}");
    }
}

#[test]
fn an_increase_takes_the_best_free_slots_all_or_none() {
    let room_of = |free: &[u32], busy, spent| Room {
        free: slots(free),
        busy,
        spent,
    };
    assert_eq!(
        pick_increase(room_of(&[3, 1, 2], 0, 0), 2, 3, 3),
        Ok(slots(&[3, 1]))
    );
    assert_eq!(
        pick_increase(room_of(&[3, 1, 2], 0, 0), 3, 3, 3),
        Ok(slots(&[3, 1, 2]))
    );
    assert_eq!(pick_increase(room_of(&[], 0, 0), 0, 3, 3), Ok(vec![]));
    assert_eq!(
        pick_increase(room_of(&[1], 2, 1), 2, 4, 4),
        Err(IncreaseRefused::Short {
            free: 1,
            delta: 2,
            busy: 2,
            spent: 1,
            slots_under_max: None
        })
    );
    assert_eq!(
        pick_increase(room_of(&[1], 0, 0), 2, 5, 3),
        Err(IncreaseRefused::Short {
            free: 1,
            delta: 2,
            busy: 0,
            spent: 0,
            slots_under_max: Some(3)
        }),
        "a max above the group's slots is named"
    );
}

// Every annotation value that matters, and every pair of namings of one slot.
#[test]
fn fake_nodes_are_recognised_and_a_slot_named_twice_is_as_real_as_its_realest_naming() {
    let rows = [
        (None, Fake::No),
        (Some("create-error"), Fake::CreateError),
        (Some("unregistered"), Fake::Unregistered),
        (Some(""), Fake::Unregistered),
        (Some("Create-Error"), Fake::Unregistered),
    ];
    for (reason, want) in rows {
        assert_eq!(Fake::of(reason), want, "{reason:?}");
    }
    let all = [Fake::No, Fake::Unregistered, Fake::CreateError];
    for first in all {
        for second in all {
            let want = match (first, second) {
                (Fake::No, _) | (_, Fake::No) => Fake::No,
                (Fake::Unregistered, _) | (_, Fake::Unregistered) => Fake::Unregistered,
                (Fake::CreateError, Fake::CreateError) => Fake::CreateError,
            };
            let got = namings([(slot(2), Fake::No), (slot(1), first), (slot(1), second)]);
            assert_eq!(
                got,
                vec![(slot(2), Fake::No), (slot(1), want)],
                "{first:?} then {second:?}"
            );
        }
    }
}

#[test]
fn a_delete_of_registered_nodes_must_leave_the_min() {
    let claims = [
        claim(1, 0, Phase::Ready, false),
        claim(2, 0, Phase::Pending, false),
        claim(3, 0, Phase::Ready, true),
        claim(4, 0, Phase::Failed, false),
    ];
    // The target is 2 (slots 1 and 2).
    // row, the slots named, the min, the registered nodes counted when refused
    type Row = (&'static str, Vec<(u32, Fake)>, u32, Option<usize>);
    let rows: &[Row] = &[
        ("one of two at min 1", vec![(1, Fake::No)], 1, None),
        (
            "two of two at min 1",
            vec![(1, Fake::No), (2, Fake::No)],
            1,
            Some(2),
        ),
        (
            "two of two at min 0",
            vec![(1, Fake::No), (2, Fake::No)],
            0,
            None,
        ),
        ("one of two at min 2", vec![(2, Fake::No)], 2, Some(1)),
        (
            "a made-up node at the min",
            vec![(1, Fake::Unregistered)],
            2,
            None,
        ),
        (
            "a create error at the min",
            vec![(1, Fake::CreateError)],
            2,
            None,
        ),
        (
            "a marked claim is no machine wanted",
            vec![(3, Fake::No)],
            2,
            None,
        ),
        (
            "a failed claim is no machine wanted",
            vec![(4, Fake::No)],
            2,
            None,
        ),
        ("a slot without a claim", vec![(5, Fake::No)], 2, None),
        (
            "below a min above the target",
            vec![(1, Fake::No)],
            5,
            Some(1),
        ),
    ];
    for (row, named, min, refused) in rows {
        let named: Vec<(BenchName, Fake)> = named.iter().map(|(n, f)| (slot(*n), *f)).collect();
        let want = match refused {
            None => Ok(()),
            Some(real) => Err(BelowMin {
                real: *real,
                target: 2,
                min: *min,
            }),
        };
        assert_eq!(check_delete(&named, &claims, *min), want, "{row}");
    }
}

// Every claim the slot's newest claim can be (none, each phase, marked or not) under every
// naming: the claim that wants the machine is cancelled unless a create error names an older
// attempt; a failed speaker is dismissed; anything else is nothing to do.
#[test]
fn each_named_slot_is_cancelled_dismissed_or_left_by_its_claims() {
    let mut holdings = vec![None];
    for phase in Phase::ALL {
        for marked in [false, true] {
            holdings.push(Some((phase, marked)));
        }
    }
    for holds in holdings {
        for fake in [Fake::No, Fake::Unregistered, Fake::CreateError] {
            // An older failed claim on the slot, and the newest as the row says.
            let mut claims = vec![claim(1, 0, Phase::Completed, false)];
            if let Some((phase, marked)) = holds {
                claims.push(claim(1, 10, phase, marked));
            }
            let newest = claims.last().unwrap();
            let wants = newest.wants_machine() && holds.is_some();
            let want = match (wants, fake, holds) {
                (true, Fake::CreateError, _) => Removal::Nothing,
                (true, _, _) => Removal::Cancel(newest),
                (false, _, Some((Phase::Failed, _))) => Removal::Dismiss(newest),
                (false, _, _) => Removal::Nothing,
            };
            assert_eq!(
                removal(&slot(1), fake, &claims),
                want,
                "{holds:?} named {fake:?}"
            );
        }
    }
    // A live claim speaks over a newer failed one: nothing is dismissed.
    let claims = [
        claim(1, 0, Phase::Ready, true),
        claim(1, 10, Phase::Failed, false),
    ];
    assert_eq!(removal(&slot(1), Fake::No, &claims), Removal::Nothing);
    // A failed claim of another slot is not this slot's.
    let claims = [claim(2, 0, Phase::Failed, false)];
    assert_eq!(
        removal(&slot(1), Fake::CreateError, &claims),
        Removal::Nothing
    );
}

#[test]
fn only_a_cancellation_or_a_mark_gives_a_machine_back() {
    let rows = [
        (Removed::Cancelled, true, "cancelled"),
        (Removed::PoweringOff, true, "powering off"),
        (Removed::Dismissed, false, "failed claim dismissed"),
    ];
    for (removed, gives_back, text) in rows {
        assert_eq!(removed.gives_back(), gives_back, "{removed:?}");
        assert_eq!(removed.as_str(), text);
    }
}

#[test]
fn a_decrease_takes_back_pending_requests_newest_first() {
    let claims = [
        claim(1, 0, Phase::Pending, false),
        claim(2, 30, Phase::Pending, false),
        claim(3, 20, Phase::Booting, false),
        claim(4, 40, Phase::Ready, false),
        claim(5, 10, Phase::Pending, false),
        claim(6, 50, Phase::Failed, false),
        {
            // Pending claims are never marked; were one, it would want no machine.
            let mut c = claim(7, 60, Phase::Pending, false);
            c.marked_for_deletion = Some(Reason::NodeDeleted);
            c
        },
    ];
    let order: Vec<&BenchName> = pending_newest_first(&claims)
        .iter()
        .map(|c| &c.slot)
        .collect();
    assert_eq!(order, vec![&slot(2), &slot(5), &slot(1)]);
    assert_eq!(next_to_take_back(&claims).map(|c| &c.slot), Some(&slot(2)));
    assert_eq!(next_to_take_back(&claims[2..4]), None);
    // On a tie, the first listed goes first.
    let tie = [
        claim(1, 5, Phase::Pending, false),
        claim(2, 5, Phase::Pending, false),
    ];
    assert_eq!(next_to_take_back(&tie).map(|c| &c.slot), Some(&slot(1)));
}

#[test]
fn a_decrease_is_refused_past_the_pending_requests_or_below_the_min() {
    // The target is 4: two pending, one booting, one ready.
    let claims = [
        claim(1, 0, Phase::Pending, false),
        claim(2, 0, Phase::Pending, false),
        claim(3, 0, Phase::Booting, false),
        claim(4, 0, Phase::Ready, false),
    ];
    let rows = [
        // wanted, min, want
        (1, 0, Ok(())),
        (2, 2, Ok(())),
        (
            3,
            0,
            Err(DecreaseRefused::Exist {
                wanted: 3,
                pending: 2,
            }),
        ),
        (
            2,
            3,
            Err(DecreaseRefused::BelowMin {
                wanted: 2,
                target: 4,
                min: 3,
            }),
        ),
        // Both: the pending requests are named first.
        (
            3,
            4,
            Err(DecreaseRefused::Exist {
                wanted: 3,
                pending: 2,
            }),
        ),
        (0, 4, Ok(())),
        (
            0,
            5,
            Err(DecreaseRefused::BelowMin {
                wanted: 0,
                target: 4,
                min: 5,
            }),
        ),
    ];
    for (wanted, min, want) in rows {
        assert_eq!(
            check_decrease(&claims, wanted, min),
            want,
            "wanted {wanted} at min {min}"
        );
    }
}

// Every phase, marked or not.
#[test]
fn every_claim_shows_the_instance_its_phase_and_mark_say() {
    for phase in Phase::ALL {
        for marked in [false, true] {
            let want = match (phase, marked) {
                (Phase::Completed, _) => None,
                (Phase::Failed, _) => Some(Instance::Failed),
                (_, true) => Some(Instance::Deleting),
                (Phase::Ready, false) => Some(Instance::Running),
                (Phase::Pending | Phase::Booting, false) => Some(Instance::Creating),
            };
            assert_eq!(
                instance(&claim(1, 0, phase, marked)),
                want,
                "{phase} marked={marked}"
            );
        }
    }
}

#[test]
fn cluster_autoscaler_waits_a_minute_past_the_claims_own_horizon() {
    let timings = Timings::default();
    let budget = timings.attempt_budget();
    let rows = [
        (None, budget + PROVISION_SLACK),
        (Some(Duration::ZERO), budget + PROVISION_SLACK),
        (
            Some(budget - Duration::from_secs(1)),
            budget + PROVISION_SLACK,
        ),
        (
            Some(budget + Duration::from_secs(1)),
            budget + Duration::from_secs(61),
        ),
        (
            Some(Duration::from_secs(40 * 60)),
            Duration::from_secs(41 * 60),
        ),
    ];
    for (configured, want) in rows {
        assert_eq!(provision_time(configured, &timings), want, "{configured:?}");
    }
}
