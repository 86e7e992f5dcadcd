//! Sizing a group for cluster-autoscaler (SPEC §6.3): the target size, which slots a new claim
//! may take and in what order, the max size a group can reach now, the checks and the plan of
//! IncreaseSize, DeleteNodes and DecreaseTargetSize, the instance a claim shows, and the nodes
//! cluster-autoscaler made up.
//!
//! Pure: no I/O, no clock, no environment, no async. The provider reads the claims, the slots'
//! last claims and the operation records, passes `now` (the store's time of that read) and the
//! group's bounds as plain values, and carries out what these functions return.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::claim::{self, Claim, LastClaim, Phase, Timings};
use super::name::BenchName;
use super::operation::SlotOp;

/// The target size: live claims a scale-down has not marked.
pub fn target(claims: &[Claim]) -> usize {
    claims.iter().filter(|c| c.wants_machine()).count()
}

/// Whether `c` speaks for its slot rather than `held`: a live claim over an ended one, then the
/// newer; on a tie the one seen first keeps speaking.
fn speaks_over(c: &Claim, held: &Claim) -> bool {
    (c.phase.is_live(), c.requested_at) > (held.phase.is_live(), held.requested_at)
}

/// The claim that speaks for each slot (its live one, else its newest), in one pass over the
/// claims.
pub fn speaking(claims: &[Claim]) -> HashMap<&BenchName, &Claim> {
    let mut by_slot: HashMap<&BenchName, &Claim> = HashMap::with_capacity(claims.len());
    for c in claims {
        by_slot
            .entry(&c.slot)
            .and_modify(|held| {
                if speaks_over(c, held) {
                    *held = c;
                }
            })
            .or_insert(c);
    }
    by_slot
}

/// The claim that speaks for `slot`, as [`speaking`] would name it.
pub fn speaker<'a>(slot: &BenchName, claims: &'a [Claim]) -> Option<&'a Claim> {
    claims
        .iter()
        .filter(|c| &c.slot == slot)
        .fold(None, |held, c| match held {
            Some(held) if !speaks_over(c, held) => Some(held),
            _ => Some(c),
        })
}

/// The slots no claim holds and no machine is leaving, before their last claims are read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Unclaimed {
    /// In the order the slots were given.
    pub slots: Vec<BenchName>,
    /// Slots whose machine is being powered off: a live claim marked for deletion, or a machine
    /// fleet told to power off that is not observed off yet (SPEC §4.5).
    pub busy: usize,
}

/// The first sieve of the room (SPEC §6.3): of `slots`, those with no live claim and no machine
/// on its way down. A machine a scale-down is powering off, or one fleet told to power off that
/// has not been observed off yet, is not offered: a claim on it would wait for it to go dark.
/// `settle` is the group's monitor poll interval, the time a shutdown's effect is given.
pub fn unclaimed<'a>(
    slots: impl IntoIterator<Item = &'a BenchName>,
    claims: &[Claim],
    ops: &HashMap<BenchName, SlotOp>,
    now: DateTime<Utc>,
    settle: Duration,
) -> Unclaimed {
    let mut live: HashMap<&BenchName, &Claim> = HashMap::with_capacity(claims.len());
    for c in claims.iter().filter(|c| c.phase.is_live()) {
        live.entry(&c.slot).or_insert(c);
    }
    let mut out = Unclaimed::default();
    for slot in slots {
        let powering_off = match live.get(slot) {
            Some(c) => !c.wants_machine(),
            None => ops.get(slot).is_some_and(|o| o.going_down(now, settle)),
        };
        out.busy += usize::from(powering_off);
        if !live.contains_key(slot) && !powering_off {
            out.slots.push(slot.clone());
        }
    }
    out
}

/// What a group has room for (SPEC §6.3).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Room {
    /// The slots a new claim may take, best first.
    pub free: Vec<BenchName>,
    /// Slots whose machine is being powered off.
    pub busy: usize,
    /// Slots that spent their attempts.
    pub spent: usize,
}

/// The room of a group (SPEC §6.3): of the unclaimed slots, those whose failure streak is short
/// of the bound, the fewest counted failures first, then in their given order. `lasts` are the
/// unclaimed slots' last claims, in the same order.
pub fn room<'a>(
    unclaimed: Unclaimed,
    lasts: impl IntoIterator<Item = Option<&'a LastClaim>>,
    now: DateTime<Utc>,
    timings: &Timings,
) -> Room {
    let mut spent = 0;
    let mut ranked: Vec<(u32, usize, BenchName)> = unclaimed
        .slots
        .into_iter()
        .zip(lasts)
        .enumerate()
        .filter_map(|(i, (slot, last))| {
            if claim::streak_spent(last, now, timings) {
                spent += 1;
                return None;
            }
            Some((claim::failure_streak(last, now, timings), i, slot))
        })
        .collect();
    ranked.sort_unstable_by_key(|(streak, i, _)| (*streak, *i));
    Room {
        free: ranked.into_iter().map(|(_, _, slot)| slot).collect(),
        busy: unclaimed.busy,
        spent,
    }
}

/// A group's max size as cluster-autoscaler should see it now (SPEC §6.3): the configured one,
/// lowered to what the group can reach (its target plus its free slots), never below its min.
pub fn reachable_max(min: u32, max: u32, target: usize, free: usize) -> u32 {
    let reachable = u32::try_from(target.saturating_add(free)).unwrap_or(u32::MAX);
    max.min(reachable).max(min)
}

/// Why an IncreaseSize is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IncreaseRefused {
    /// The target would pass the max size.
    OverMax {
        target: usize,
        delta: usize,
        max: u32,
    },
    /// Fewer free slots than asked, and why the others are not free.
    Short {
        free: usize,
        delta: usize,
        busy: usize,
        spent: usize,
        max: u32,
        /// The group's slots, when its max size is above them.
        slots_under_max: Option<usize>,
    },
}

/// The first check of an IncreaseSize (SPEC §6.3): the target plus `delta` within the max.
pub fn check_increase(target: usize, delta: usize, max: u32) -> Result<(), IncreaseRefused> {
    if target.saturating_add(delta) > max as usize {
        return Err(IncreaseRefused::OverMax { target, delta, max });
    }
    Ok(())
}

/// The slots an IncreaseSize claims (SPEC §6.3): the `delta` best of the room, all or none.
/// `slots` is how many slots the group has.
pub fn pick_increase(
    room: Room,
    delta: usize,
    max: u32,
    slots: usize,
) -> Result<Vec<BenchName>, IncreaseRefused> {
    if room.free.len() < delta {
        return Err(IncreaseRefused::Short {
            free: room.free.len(),
            delta,
            busy: room.busy,
            spent: room.spent,
            max,
            slots_under_max: (max as usize > slots).then_some(slots),
        });
    }
    let mut free = room.free;
    free.truncate(delta);
    Ok(free)
}

/// Whether a node DeleteNodes names is one cluster-autoscaler made up, and why; ordered from
/// the realest, so a node named twice counts as its realest naming.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fake {
    /// A registered node: the minimum holds.
    No,
    /// An instance that never registered (or any other reason): removed even at the minimum.
    Unregistered,
    /// An instance that failed to be created: only its failed claim is dismissed.
    CreateError,
}

impl Fake {
    /// The fake node of cluster-autoscaler's fake-node-reason annotation, if the node has one.
    pub fn of(reason: Option<&str>) -> Fake {
        match reason {
            None => Fake::No,
            Some("create-error") => Fake::CreateError,
            Some(_) => Fake::Unregistered,
        }
    }
}

/// The slots a DeleteNodes names, in the order first named: a slot named twice is one removal,
/// as real as its realest naming.
pub fn namings(named: impl IntoIterator<Item = (BenchName, Fake)>) -> Vec<(BenchName, Fake)> {
    let mut out: Vec<(BenchName, Fake)> = Vec::new();
    for (slot, fake) in named {
        match out.iter_mut().find(|(s, _)| s == &slot) {
            Some(seen) => seen.1 = seen.1.min(fake),
            None => out.push((slot, fake)),
        }
    }
    out
}

/// A DeleteNodes that would take a group below its min size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BelowMin {
    /// The registered nodes named whose slot has a claim that wants its machine.
    pub real: usize,
    pub target: usize,
    pub min: u32,
}

/// The check of a DeleteNodes (SPEC §6.3): removing the registered nodes whose machine a claim
/// still wants must leave the group at its min size at least. Made-up nodes are removed even at
/// the min (they are no machine).
pub fn check_delete(
    named: &[(BenchName, Fake)],
    claims: &[Claim],
    min: u32,
) -> Result<(), BelowMin> {
    let real = named
        .iter()
        .filter(|(slot, fake)| {
            *fake == Fake::No && claims.iter().any(|c| &c.slot == slot && c.wants_machine())
        })
        .count();
    let target = target(claims);
    if real > 0 && target.saturating_sub(real) < min as usize {
        return Err(BelowMin { real, target, min });
    }
    Ok(())
}

/// What DeleteNodes does to one slot it names (SPEC §6.3).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Removal<'a> {
    /// Cancel the claim that wants the slot's machine.
    Cancel(&'a Claim),
    /// Dismiss the slot's failed claim: no machine is given back.
    Dismiss(&'a Claim),
    /// Nothing: the machine is already removed, or a create error names a failed attempt while
    /// a newer claim wants the slot (cluster-autoscaler may act on an instance list read before
    /// that claim was made).
    Nothing,
}

/// The removal of `slot`, named as `fake`, judged from `claims`.
pub fn removal<'a>(slot: &BenchName, fake: Fake, claims: &'a [Claim]) -> Removal<'a> {
    let wanting = claims.iter().find(|c| &c.slot == slot && c.wants_machine());
    match (wanting, fake) {
        (Some(_), Fake::CreateError) => Removal::Nothing,
        (Some(c), Fake::No | Fake::Unregistered) => Removal::Cancel(c),
        (None, _) => match speaker(slot, claims).filter(|c| c.phase == Phase::Failed) {
            Some(c) => Removal::Dismiss(c),
            None => Removal::Nothing,
        },
    }
}

/// What a removal did to its slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Removed {
    /// A pending claim was deleted.
    Cancelled,
    /// A booting or ready claim was marked; the controller powers the machine off.
    PoweringOff,
    /// A failed claim was dismissed.
    Dismissed,
}

impl Removed {
    /// Whether the removal gave a machine (or a request for one) back: a scaling call counts it.
    pub fn gives_back(self) -> bool {
        match self {
            Removed::Cancelled | Removed::PoweringOff => true,
            Removed::Dismissed => false,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Removed::Cancelled => "cancelled",
            Removed::PoweringOff => "powering off",
            Removed::Dismissed => "failed claim dismissed",
        }
    }
}

/// The claims a DecreaseTargetSize may take back (SPEC §6.3): only capacity that does not exist
/// yet, pending claims that want a machine, newest first.
pub fn pending_newest_first(claims: &[Claim]) -> Vec<&Claim> {
    let mut pending: Vec<&Claim> = claims
        .iter()
        .filter(|c| c.phase == Phase::Pending && c.wants_machine())
        .collect();
    pending.sort_by_key(|c| std::cmp::Reverse(c.requested_at));
    pending
}

/// The claim a DecreaseTargetSize takes back next: the newest pending one.
pub fn next_to_take_back(claims: &[Claim]) -> Option<&Claim> {
    pending_newest_first(claims).into_iter().next()
}

/// Why a DecreaseTargetSize is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecreaseRefused {
    /// Fewer requests are pending than asked: the rest are machines that exist.
    Exist { wanted: usize, pending: usize },
    /// The target would fall below the min size.
    BelowMin {
        wanted: usize,
        target: usize,
        min: u32,
    },
}

/// The check of a DecreaseTargetSize of `wanted` (SPEC §6.3).
pub fn check_decrease(claims: &[Claim], wanted: usize, min: u32) -> Result<(), DecreaseRefused> {
    let pending = pending_newest_first(claims).len();
    if pending < wanted {
        return Err(DecreaseRefused::Exist { wanted, pending });
    }
    let target = target(claims);
    if target.saturating_sub(wanted) < min as usize {
        return Err(DecreaseRefused::BelowMin {
            wanted,
            target,
            min,
        });
    }
    Ok(())
}

/// The instance a claim shows cluster-autoscaler (NodeGroupNodes, SPEC §6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Instance {
    /// Pending or booting: the machine is on its way.
    Creating,
    Running,
    /// Marked for deletion: the machine is on its way out.
    Deleting,
    /// A failed claim: creating, with the claim's error.
    Failed,
}

/// The instance `c` shows, or `None` for a completed claim (its slot shows no instance).
pub fn instance(c: &Claim) -> Option<Instance> {
    match (c.phase, c.marked_for_deletion.is_some()) {
        (Phase::Pending | Phase::Booting | Phase::Ready, true) => Some(Instance::Deleting),
        (Phase::Ready, false) => Some(Instance::Running),
        (Phase::Pending | Phase::Booting, false) => Some(Instance::Creating),
        (Phase::Failed, _) => Some(Instance::Failed),
        (Phase::Completed, _) => None,
    }
}

/// How much longer than a claim's own deadline horizon cluster-autoscaler is told to wait for a
/// machine (NodeGroupGetOptions): time for a pass to report the failure.
pub const PROVISION_SLACK: Duration = Duration::from_secs(60);

/// The max node provision time cluster-autoscaler is told (SPEC §6.3): it must give up on a
/// boot after fleet does, so that fleet's failure (a create error) reaches it first: the
/// claim's own horizon (the group's max node provision time, floored by the attempt budget) and
/// one minute for a pass to report it.
pub fn provision_time(max_node_provision_time: Option<Duration>, timings: &Timings) -> Duration {
    max_node_provision_time
        .unwrap_or_default()
        .max(timings.attempt_budget())
        + PROVISION_SLACK
}

#[cfg(test)]
mod tests;
