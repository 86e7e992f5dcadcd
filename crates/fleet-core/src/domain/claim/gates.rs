//! The gates a live claim passes: the shutdown streak, the readiness gate, and the watch of a ready
//! claim's machine (SPEC §3.6, §3.7, §4.5).

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{Claim, ConditionKind, OperationKind, OperationOutcome, Phase, Power, Timings, add};

/// Whether a shutdown may fire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShutdownGate {
    Fire,
    /// The streak is spent; the shutdown may fire again at `until`.
    Paused {
        until: DateTime<Utc>,
    },
}

/// What the readiness gate decides for a claim in the boot window (SPEC §4.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// The machine is usable: the claim moves to ready.
    Ready,
    /// The machine was heard for the first time since its startup ended: recorded on the claim
    /// (`MachineHeard`), whose budget is the gate's whole budget from then on.
    Heard,
    /// Past the gate's budget without a usable machine: the claim fails ReadinessGateTimeout.
    Fail,
    /// Nothing yet: why the claim waits.
    Wait(Waiting),
}

/// Why a claim in the boot window waits at the readiness gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waiting {
    /// No startup has completed for it yet (it is pending, or its startup runs).
    Startup,
    /// Its startup completed and its bench has not been heard since: until the deadline.
    FirstBeat { until: DateTime<Utc> },
    /// Its bench was heard and is not usable yet (held, not Ready, tainted): until the deadline.
    Usable { until: DateTime<Utc> },
}

/// The readiness gate for one claim (SPEC §4.5): `on` is whether its machine is observed on,
/// `usable` whether it can take work. A booting claim whose startup completed moves to ready when
/// the machine is usable, and a pending claim whose machine is already on and usable moves to
/// ready directly. The budgets run from the startup's end: `uncordon_timeout` for the bench to be
/// heard at all, `uncordon_timeout + readiness_gate_timeout` once it was heard (a machine that
/// reboots while it provisions keeps the whole budget).
pub fn readiness_gate(
    claim: &Claim,
    on: bool,
    usable: bool,
    now: DateTime<Utc>,
    t: &Timings,
) -> Gate {
    let startup_done = claim
        .operation
        .as_ref()
        .filter(|op| {
            op.kind == OperationKind::Startup && op.outcome == Some(OperationOutcome::Completed)
        })
        .map(|op| op.finished_at.unwrap_or(op.started_at));
    if usable && (startup_done.is_some() || (claim.phase == Phase::Pending && on)) {
        return Gate::Ready;
    }
    let Some(ended) = startup_done else {
        return Gate::Wait(Waiting::Startup);
    };
    let heard = claim.is(ConditionKind::MachineHeard);
    if on && !heard {
        return Gate::Heard;
    }
    let (budget, waiting): (Duration, fn(DateTime<Utc>) -> Waiting) = if heard {
        (t.uncordon_timeout + t.readiness_gate_timeout, |until| {
            Waiting::Usable { until }
        })
    } else {
        (t.uncordon_timeout, |until| Waiting::FirstBeat { until })
    };
    let until = add(ended, budget);
    if now >= until {
        Gate::Fail
    } else {
        Gate::Wait(waiting(until))
    }
}

/// What the watch of a ready claim's machine decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Watch {
    Unchanged,
    /// The first pass that sees the machine off: its time is MachineGone's clock.
    MarkObservedOff,
    /// The machine came back within the grace: the claim stays ready.
    ClearObservedOff,
    /// Observed off past the grace: the claim fails MachineGone.
    Gone,
}

/// The watch of a ready claim's machine (SPEC §3.7). Bounded by the observation, not by a pass:
/// the clock is the condition's transition time on the claim, so a restart does not restart it.
pub fn watch_machine(claim: &Claim, power: Power, now: DateTime<Utc>, t: &Timings) -> Watch {
    if claim.phase != Phase::Ready || claim.marked_for_deletion.is_some() {
        return Watch::Unchanged;
    }
    let observed_off = claim
        .condition(ConditionKind::MachineObservedOff)
        .filter(|c| c.status);
    match (power, observed_off) {
        (Power::On, Some(_)) => Watch::ClearObservedOff,
        (Power::On, None) => Watch::Unchanged,
        (Power::Off, None) => Watch::MarkObservedOff,
        (Power::Off, Some(since))
            if now >= add(since.last_transition_time, t.machine_gone_grace) =>
        {
            Watch::Gone
        }
        (Power::Off, Some(_)) => Watch::Unchanged,
    }
}
