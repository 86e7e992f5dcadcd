//! The power-on budget's grants for one pass (SPEC §4.11): the startups on record and the
//! claims that wait, read once for the whole fleet, go to `domain::budget`, which decides.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};

use crate::config::Config;
use crate::domain::budget::{self, Candidate, Startup};
use crate::domain::claim::{OperationKind, Phase};
use crate::domain::name::BenchName;
use crate::store::claims::GroupClaims;

/// Which slots may start this pass; `None` when no budget is set anywhere.
pub(super) fn grants(
    config: &Config,
    read: &[GroupClaims],
    now: DateTime<Utc>,
) -> Option<BTreeSet<BenchName>> {
    let bounded = !config.power_on.is_unbounded()
        || config.groups.values().any(|g| !g.power_on.is_unbounded());
    if !bounded {
        return None;
    }
    let mut fleet_starts = Vec::new();
    let mut rooms = BTreeMap::new();
    let mut candidates = Vec::new();
    for gc in read {
        let ops = &gc.operations.by_slot;
        let starts: Vec<Startup> = ops
            .values()
            .filter(|op| op.kind == OperationKind::Startup)
            .map(|op| Startup {
                started_at: op.started_at,
                running: op.end.is_none(),
            })
            .collect();
        if let Some(group) = config.groups.get(&gc.group) {
            rooms.insert(group.name.clone(), group.power_on.room(&starts, now));
        }
        fleet_starts.extend(starts);
        // A claim waits to be started when it is pending and wants its machine, and no
        // operation of its slot is in flight (it could not start this pass anyway).
        for c in gc.claims.iter().filter(|c| {
            c.phase == Phase::Pending
                && c.wants_machine()
                && ops.get(&c.slot).is_none_or(|op| op.end.is_some())
        }) {
            candidates.push(Candidate {
                group: c.group.clone(),
                slot: c.slot.clone(),
                requested_at: c.requested_at,
                claim: c.name.clone(),
            });
        }
    }
    let fleet = config.power_on.room(&fleet_starts, now);
    Some(budget::grant(fleet, &rooms, candidates))
}
