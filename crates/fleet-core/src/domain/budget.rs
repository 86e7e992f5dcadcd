//! The power-on budget (SPEC §4.11): how many machines may be powering on at once, and how many
//! may start in any minute, per group and for the whole fleet. Twenty servers powering on at once
//! can trip a breaker; the budget spaces their inrush.
//!
//! The counts come from the slots' operation records, which live in Redis under the fence: a
//! startup counts from its start until its operation ends (its record's end is written), and
//! toward the minute it started in. A new leader reads the same records, so the budget holds
//! across failover. Claims beyond the budget wait, pending, in request order; their deadline still
//! runs, and cluster-autoscaler's IncreaseSize is never refused for it. Pure: no I/O.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Duration, Utc};

use super::name::{BenchName, ClaimName, GroupName};

/// The window of `per_minute`.
pub const MINUTE: Duration = Duration::seconds(60);

/// A budget: each bound optional.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PowerOnBudget {
    /// The most startups in flight at once.
    pub max_concurrent: Option<u32>,
    /// The most startups begun in any 60 s.
    pub per_minute: Option<u32>,
}

impl PowerOnBudget {
    pub fn is_unbounded(&self) -> bool {
        self.max_concurrent.is_none() && self.per_minute.is_none()
    }

    /// How many more startups may begin now, given the startups on record; `None` when
    /// unbounded.
    pub fn room(&self, starts: &[Startup], now: DateTime<Utc>) -> Option<u32> {
        let count = |f: &dyn Fn(&&Startup) -> bool| {
            u32::try_from(starts.iter().filter(f).count()).unwrap_or(u32::MAX)
        };
        let running = self
            .max_concurrent
            .map(|max| max.saturating_sub(count(&|s| s.running)));
        let recent = self
            .per_minute
            .map(|max| max.saturating_sub(count(&|s| now - s.started_at < MINUTE)));
        match (running, recent) {
            (None, None) => None,
            (Some(a), None) | (None, Some(a)) => Some(a),
            (Some(a), Some(b)) => Some(a.min(b)),
        }
    }
}

/// A startup on record: when it began, and whether its operation is still in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Startup {
    pub started_at: DateTime<Utc>,
    pub running: bool,
}

/// A slot whose claim waits to be started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub group: GroupName,
    pub slot: BenchName,
    pub requested_at: DateTime<Utc>,
    pub claim: ClaimName,
}

/// Which of the candidates may start this pass: in request order (then claim name, so every
/// leader grants the same), each one taking one from its group's room and one from the fleet's;
/// a candidate that does not fit waits, and so does every later one of its group (request order
/// holds within a group; a group with room is not held back by another's full budget).
pub fn grant(
    fleet: Option<u32>,
    groups: &BTreeMap<GroupName, Option<u32>>,
    mut candidates: Vec<Candidate>,
) -> BTreeSet<BenchName> {
    candidates.sort_by(|a, b| (a.requested_at, &a.claim).cmp(&(b.requested_at, &b.claim)));
    let mut fleet_left = fleet;
    let mut group_left = groups.clone();
    let mut blocked: BTreeSet<GroupName> = BTreeSet::new();
    let mut granted = BTreeSet::new();
    for c in candidates {
        if blocked.contains(&c.group) {
            continue;
        }
        let left = group_left.get(&c.group).copied().flatten();
        let fits = left.is_none_or(|n| n > 0) && fleet_left.is_none_or(|n| n > 0);
        if !fits {
            blocked.insert(c.group.clone());
            continue;
        }
        if let Some(Some(n)) = group_left.get_mut(&c.group) {
            *n -= 1;
        }
        if let Some(n) = fleet_left.as_mut() {
            *n -= 1;
        }
        granted.insert(c.slot);
    }
    granted
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000 + s, 0).unwrap()
    }

    fn cand(group: &str, slot: &str, at: i64) -> Candidate {
        Candidate {
            group: GroupName::parse(group).unwrap(),
            slot: BenchName::parse(slot).unwrap(),
            requested_at: t(at),
            claim: ClaimName::parse(&format!("{slot}-1")).unwrap(),
        }
    }

    fn names(set: &BTreeSet<BenchName>) -> Vec<&str> {
        set.iter().map(BenchName::as_str).collect()
    }

    // The room over its inputs: each bound alone, both (the smaller wins), running and recent
    // counted apart, a start exactly 60 s old out of the minute.
    #[test]
    fn the_room_is_the_tighter_of_the_two_bounds() {
        let starts = [
            Startup {
                started_at: t(0),
                running: true,
            },
            Startup {
                started_at: t(30),
                running: false,
            },
            Startup {
                started_at: t(-61),
                running: true,
            },
        ];
        let b = |c, m| PowerOnBudget {
            max_concurrent: c,
            per_minute: m,
        };
        assert_eq!(b(None, None).room(&starts, t(59)), None);
        assert_eq!(
            b(Some(5), None).room(&starts, t(59)),
            Some(3),
            "two running"
        );
        assert_eq!(
            b(None, Some(5)).room(&starts, t(59)),
            Some(3),
            "two in the minute"
        );
        assert_eq!(
            b(None, Some(5)).room(&starts, t(60)),
            Some(4),
            "t(0) left the minute"
        );
        assert_eq!(
            b(Some(1), Some(5)).room(&starts, t(59)),
            Some(0),
            "full, never negative"
        );
        assert_eq!(b(Some(4), Some(3)).room(&starts, t(59)), Some(1));
        assert!(b(None, None).is_unbounded() && !b(Some(1), None).is_unbounded());
    }

    // Request order, within the group's and the fleet's room; a full group blocks only itself.
    #[test]
    fn grants_go_in_request_order_within_both_rooms() {
        let groups: BTreeMap<GroupName, Option<u32>> = [
            (GroupName::parse("a").unwrap(), Some(2)),
            (GroupName::parse("b").unwrap(), None),
        ]
        .into();
        let cs = vec![
            cand("a", "a3", 3),
            cand("a", "a1", 1),
            cand("b", "b1", 2),
            cand("a", "a2", 2),
            cand("b", "b2", 5),
        ];
        assert_eq!(
            names(&grant(None, &groups, cs.clone())),
            ["a1", "a2", "b1", "b2"]
        );
        assert_eq!(
            names(&grant(Some(3), &groups, cs.clone())),
            ["a1", "a2", "b1"]
        );
        assert_eq!(
            names(&grant(Some(0), &groups, cs.clone())),
            Vec::<&str>::new()
        );
        let unbounded = BTreeMap::new();
        assert_eq!(grant(None, &unbounded, cs.clone()).len(), 5);
        // The same grant whatever order the candidates come in.
        let mut reversed = cs.clone();
        reversed.reverse();
        assert_eq!(
            grant(Some(3), &groups, reversed),
            grant(Some(3), &groups, cs)
        );
    }

    proptest::proptest! {
        // Never more granted than either room; the granted ones are the earliest of each group.
        #[test]
        fn a_grant_never_exceeds_a_room(
            fleet in proptest::option::of(0u32..6),
            room_a in proptest::option::of(0u32..4),
            ats in proptest::collection::vec((0u8..2, 0i64..20), 0..10),
        ) {
            let groups: BTreeMap<GroupName, Option<u32>> = [
                (GroupName::parse("a").unwrap(), room_a),
                (GroupName::parse("b").unwrap(), None),
            ].into();
            let cs: Vec<Candidate> = ats.iter().enumerate().map(|(i, (g, at))| {
                cand(if *g == 0 { "a" } else { "b" }, &format!("s{i}"), *at)
            }).collect();
            let granted = grant(fleet, &groups, cs.clone());
            if let Some(f) = fleet {
                proptest::prop_assert!(granted.len() as u32 <= f);
            }
            let in_a = cs.iter().filter(|c| c.group.as_str() == "a" && granted.contains(&c.slot)).count();
            if let Some(r) = room_a {
                proptest::prop_assert!(in_a as u32 <= r);
            }
            for c in &cs {
                if granted.contains(&c.slot) {
                    for earlier in cs.iter().filter(|e| e.group == c.group
                        && (e.requested_at, &e.claim) < (c.requested_at, &c.claim)) {
                        proptest::prop_assert!(granted.contains(&earlier.slot), "request order");
                    }
                }
            }
        }
    }
}
