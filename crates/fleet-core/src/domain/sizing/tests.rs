//! Tables over the sizing rules: exhaustive where the input space is finite (a claim's phase and
//! mark, a slot's claim and operation, a naming's fakeness), edge tables where it is not (sizes
//! and counts). The rules of the changes are tabled in `changes`.

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

mod changes;

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
            max: 4,
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
            max: 5,
            slots_under_max: Some(3)
        }),
        "a max above the group's slots is named"
    );
}
