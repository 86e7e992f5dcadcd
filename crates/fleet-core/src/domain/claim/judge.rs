//! The claim controller's judgment of one claim (SPEC §3.8), and supersession.

use chrono::{DateTime, Utc};

use super::{Claim, OperationKind, Power, Reason, Timings, Watch, add, watch_machine};

/// What the claim controller observes of one claim's world.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Context<'a> {
    pub now: DateTime<Utc>,
    /// The machine's observed power; `None` when the controller is blind (SPEC §3.9).
    pub power: Option<Power>,
    /// Whether the claim's slot is still configured.
    pub slot_exists: bool,
    /// Whether a newer live claim owns the slot.
    pub superseded: bool,
    pub timings: &'a Timings,
}

/// The claim controller's decision for one claim (SPEC §3.8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Judgment {
    Keep,
    Fail(Reason),
    /// A marked claim whose machine is observed off ends completed with its mark's reason.
    Complete(Reason),
    Watch(Watch),
    /// A terminal claim past its TTL after finishing: delete it (the digest stays on the slot).
    Collect,
}

/// Judges one claim, in the order of SPEC §3.8. Nothing that depends on seeing the machine is
/// decided while the controller is blind: blind is not DOWN.
pub fn judge(claim: &Claim, ctx: &Context<'_>) -> Judgment {
    let t = ctx.timings;
    if claim.phase.is_terminal() {
        return match claim.finished_at {
            Some(at) if ctx.now >= add(at, t.ttl_after_finished) => Judgment::Collect,
            Some(_) => Judgment::Keep,
            // A terminal claim without a finish time (a foreign write) is collected a TTL after
            // it was requested, so it cannot live forever.
            None if ctx.now >= add(claim.requested_at, t.ttl_after_finished) => Judgment::Collect,
            None => Judgment::Keep,
        };
    }
    if !ctx.slot_exists {
        return Judgment::Fail(Reason::SlotDeleted);
    }
    if ctx.superseded {
        return Judgment::Fail(Reason::Superseded);
    }
    if claim.phase.in_boot_window() && claim.attempt > t.max_attempts {
        return Judgment::Fail(Reason::AttemptLimitExceeded);
    }
    let Some(power) = ctx.power else {
        return Judgment::Keep;
    };
    if claim.overdue(ctx.now) {
        return Judgment::Fail(Reason::DeadlineExceeded);
    }
    if let Some(reason) = claim.marked_for_deletion {
        // A boot is reversed, never interrupted: a machine observed off while its startup is
        // still in flight has not come up yet, so the claim cannot complete before it has.
        let booting = claim
            .running_operation()
            .is_some_and(|op| op.kind == OperationKind::Startup);
        return match (power, booting) {
            (Power::Off, false) => Judgment::Complete(reason),
            (Power::Off, true) | (Power::On, _) => Judgment::Keep,
        };
    }
    match watch_machine(claim, power, ctx.now, t) {
        Watch::Unchanged => Judgment::Keep,
        Watch::Gone => Judgment::Fail(Reason::MachineGone),
        w @ (Watch::MarkObservedOff | Watch::ClearObservedOff) => Judgment::Watch(w),
    }
}

/// Of a slot's live claims, the ones that must fail Superseded: every one but the newest (by
/// request time, then by name, so every controller picks the same one).
pub fn superseded<'a>(live: &[&'a Claim]) -> Vec<&'a Claim> {
    let newest = live
        .iter()
        .filter(|c| c.phase.is_live())
        .max_by(|a, b| (a.requested_at, &a.name).cmp(&(b.requested_at, &b.name)));
    match newest {
        None => Vec::new(),
        Some(newest) => live
            .iter()
            .filter(|c| c.phase.is_live() && c.name != newest.name)
            .copied()
            .collect(),
    }
}
