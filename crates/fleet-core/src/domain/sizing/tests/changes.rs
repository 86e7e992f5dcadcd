//! Tables over the rules of DeleteNodes and DecreaseTargetSize, the instance a claim shows and
//! the provision time cluster-autoscaler is told.

use super::*;

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
        (
            "made-up nodes alone, under a min above the target",
            vec![(1, Fake::Unregistered), (2, Fake::CreateError)],
            5,
            None,
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
