//! NodeClaims: phases and their legal moves, deadlines, attempts, shutdown attempts,
//! machine-gone, cancellation, supersession and collection (SPEC §3.2, §3.3, §3.5 to §3.8).
//!
//! A claim is the request for a machine on a slot: a machine is wanted on a slot exactly when a
//! live claim names it. Every move goes through `Claim::apply`, which refuses what the legal-move
//! table refuses and returns the new claim (the caller writes it with a compare-and-set on the
//! old phase and version); a refused move writes nothing. Pure: no I/O, no clock.
//!
//! - `phase`: the phases, the reasons a claim ends, the legal-move table, cancellation.
//! - `timings`: the seed's constants, per group, and the budgets they add up to.
//! - `gates`: the shutdown streak, the readiness gate and the watch of a ready claim's machine.
//! - `judge`: the claim controller's judgment of one claim, and supersession.
//! - `streak`: a slot's digest of its last claim, and the failure streak read from it.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::name::{BenchName, ClaimName, GroupName};
use super::power::Power;

mod gates;
mod judge;
mod phase;
mod streak;
mod timings;

pub use gates::*;
pub use judge::*;
pub use phase::*;
pub use streak::*;
pub use timings::*;

/// The durable record of a claim: what is true about this attempt, and since when.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ConditionKind {
    /// The machine is up and usable (the claim reached ready).
    Ready,
    /// The power-on has been asked for (the claim reached booting).
    MachineCommitted,
    /// A ready claim's machine is observed off; its transition time is MachineGone's clock.
    MachineObservedOff,
    /// The machine was heard (its bench beat) after its startup ended: from then on the readiness
    /// gate gives it its whole budget, so a machine that reboots while it provisions is not failed
    /// at once for being dark.
    MachineHeard,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Condition {
    pub kind: ConditionKind,
    pub status: bool,
    pub last_transition_time: DateTime<Utc>,
}

/// The call that made a claim (the seed's `call`, kept on the last-claim digest).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Call {
    /// cluster-autoscaler's NodeGroupIncreaseSize.
    IncreaseSize,
    /// A hand-made request: `fleet claim`.
    Claim,
    /// The controller adopted a machine found on after the store lost its claims.
    Adoption,
}

impl Call {
    pub fn as_str(self) -> &'static str {
        match self {
            Call::IncreaseSize => "IncreaseSize",
            Call::Claim => "Claim",
            Call::Adoption => "Adoption",
        }
    }
}

/// A claim (SPEC §3.2).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Claim {
    pub name: ClaimName,
    pub slot: BenchName,
    pub group: GroupName,
    pub phase: Phase,
    /// Why it ended, or the last warning recorded on it (ShutdownJobTimeout).
    pub reason: Option<Reason>,
    /// Which machine this claim buys for its slot, seeded once at creation.
    pub attempt: u32,
    /// Shutdown operations fired for this claim's scale-down in the current streak.
    pub shutdown_attempts: u32,
    pub last_shutdown_attempt_at: Option<DateTime<Utc>>,
    /// Set when a scale-down marks the claim: it is live and owns the slot, and is not a want.
    pub marked_for_deletion: Option<Reason>,
    pub requested_at: DateTime<Utc>,
    /// The end of the boot window; cleared by the move to ready.
    pub deadline_at: Option<DateTime<Utc>>,
    /// The group's max node provision time when the claim was made (history is not rewritten).
    pub max_node_provision_time: Option<Duration>,
    pub finished_at: Option<DateTime<Utc>>,
    pub conditions: Vec<Condition>,
    /// The lifecycle operation in flight, or the last one that ran for this claim. Recorded on
    /// the claim before the operation starts, so a controller that restarts knows it was fired.
    #[serde(default)]
    pub operation: Option<Operation>,
    /// Bumped by every write; the store's compare-and-set checks it.
    pub version: u64,
    /// The call that made it; `None` on a claim written before calls were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<Call>,
}

/// Which lifecycle operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OperationKind {
    Startup,
    Shutdown,
}

impl OperationKind {
    pub fn as_str(self) -> &'static str {
        match self {
            OperationKind::Startup => "startup",
            OperationKind::Shutdown => "shutdown",
        }
    }
}

/// How an operation ended: the state machine's JobCompleted, JobFailed or JobTimeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OperationOutcome {
    Completed,
    Failed,
    TimedOut,
    /// No outcome came by `stuck_threshold`: the operation was abandoned (the seed's
    /// ForceCleanup), and its claim fails StuckTransition.
    Abandoned,
}

impl OperationOutcome {
    /// The state machine's event for this outcome.
    pub fn event(self) -> super::fsm::Event {
        match self {
            OperationOutcome::Completed => super::fsm::Event::JobCompleted,
            OperationOutcome::Failed => super::fsm::Event::JobFailed,
            OperationOutcome::TimedOut => super::fsm::Event::JobTimeout,
            OperationOutcome::Abandoned => super::fsm::Event::ForceCleanup,
        }
    }
}

/// A lifecycle operation, as recorded on its claim.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operation {
    pub kind: OperationKind,
    pub started_at: DateTime<Utc>,
    /// The operation's own timeout: past `started_at + timeout` it is killed (JobTimeout).
    pub timeout: Duration,
    /// `None` while it runs.
    pub outcome: Option<OperationOutcome>,
    pub finished_at: Option<DateTime<Utc>>,
}

impl Operation {
    pub fn running(&self) -> bool {
        self.outcome.is_none()
    }
}

/// What a caller asks of `Claim::apply`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Move {
    pub to: Phase,
    pub reason: Option<Reason>,
}

impl Move {
    pub fn to(to: Phase) -> Self {
        Move { to, reason: None }
    }

    pub fn because(to: Phase, reason: Reason) -> Self {
        Move {
            to,
            reason: Some(reason),
        }
    }
}

impl Claim {
    /// A new pending claim, its attempt seeded from the slot's last claim and its deadline born
    /// with it.
    pub fn new(
        name: ClaimName,
        slot: BenchName,
        group: GroupName,
        last: Option<&LastClaim>,
        requested_at: DateTime<Utc>,
        timings: &Timings,
        max_node_provision_time: Option<Duration>,
    ) -> Self {
        Claim {
            name,
            slot,
            group,
            phase: Phase::Pending,
            reason: None,
            attempt: seed_attempt(last, requested_at, timings),
            shutdown_attempts: 0,
            last_shutdown_attempt_at: None,
            marked_for_deletion: None,
            requested_at,
            deadline_at: Some(timings.deadline_at(requested_at, max_node_provision_time)),
            max_node_provision_time,
            finished_at: None,
            conditions: Vec::new(),
            operation: None,
            version: 1,
            call: None,
        }
    }

    /// The same new claim, made by `call`.
    pub fn made_by(mut self, call: Call) -> Self {
        self.call = Some(call);
        self
    }

    /// A ready claim for a machine found on after the store lost its claims (SPEC §5.3): it
    /// reached ready without a boot, so it carries no deadline and counts no attempt of its own.
    pub fn adopted(
        name: ClaimName,
        slot: BenchName,
        group: GroupName,
        now: DateTime<Utc>,
        timings: &Timings,
    ) -> Self {
        let mut c = Claim::new(name, slot, group, None, now, timings, None).made_by(Call::Adoption);
        c.phase = Phase::Ready;
        c.reason = Some(Reason::Adopted);
        c.deadline_at = None;
        c.set(ConditionKind::Ready, true, now);
        c
    }

    /// A live claim that a scale-down has not marked wants a machine (law 1's WantsMachine).
    pub fn wants_machine(&self) -> bool {
        self.phase.is_live() && self.marked_for_deletion.is_none()
    }

    /// The condition of `kind`, if it was ever set.
    pub fn condition(&self, kind: ConditionKind) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.kind == kind)
    }

    /// Whether the condition of `kind` is true.
    pub fn is(&self, kind: ConditionKind) -> bool {
        self.condition(kind).is_some_and(|c| c.status)
    }

    /// Sets a condition, moving its transition time only when its status changes.
    fn set(&mut self, kind: ConditionKind, status: bool, now: DateTime<Utc>) {
        match self.conditions.iter_mut().find(|c| c.kind == kind) {
            Some(c) if c.status == status => {}
            Some(c) => {
                c.status = status;
                c.last_transition_time = now;
            }
            None => self.conditions.push(Condition {
                kind,
                status,
                last_transition_time: now,
            }),
        }
    }

    /// The claim after one move (SPEC §3.2), or the refusal. The booting → ready move clears the
    /// deadline: a claim that reached ready owns a machine, and a boot budget is no licence to
    /// destroy capacity that is serving. A terminal move stamps `finished_at`.
    pub fn apply(&self, mv: Move, now: DateTime<Utc>) -> Result<Claim, IllegalMove> {
        check_move(self.phase, mv.to)?;
        let mut next = self.clone();
        next.phase = mv.to;
        if mv.reason.is_some() {
            next.reason = mv.reason;
        }
        match mv.to {
            Phase::Pending => {}
            Phase::Booting => next.set(ConditionKind::MachineCommitted, true, now),
            Phase::Ready => {
                next.set(ConditionKind::Ready, true, now);
                next.deadline_at = None;
            }
            Phase::Failed | Phase::Completed => {
                if next.is(ConditionKind::Ready) {
                    next.set(ConditionKind::Ready, false, now);
                }
                next.finished_at = Some(now);
            }
        }
        next.version += 1;
        Ok(next)
    }

    /// Marks a live, committed claim for deletion (a scale-down). A pending claim is cancelled
    /// by deleting it instead (`cancellation`); a terminal one has nothing to reverse.
    pub fn mark_for_deletion(&self, reason: Reason) -> Result<Claim, NotMarkable> {
        match (self.phase, self.marked_for_deletion) {
            (Phase::Booting | Phase::Ready, None) => {
                let mut next = self.clone();
                next.marked_for_deletion = Some(reason);
                next.version += 1;
                Ok(next)
            }
            (Phase::Booting | Phase::Ready, Some(_)) => Err(NotMarkable::AlreadyMarked),
            (Phase::Pending, _) => Err(NotMarkable::Pending),
            (Phase::Failed | Phase::Completed, _) => Err(NotMarkable::Terminal),
        }
    }

    /// Whether the claim is past its deadline inside the boot window.
    pub fn overdue(&self, now: DateTime<Utc>) -> bool {
        self.phase.in_boot_window() && self.deadline_at.is_some_and(|d| now >= d)
    }

    /// The current shutdown streak: the count, unless the grace since the last attempt has
    /// passed, after which the streak is spent no longer (SPEC §3.6).
    pub fn shutdown_streak(&self, now: DateTime<Utc>, t: &Timings) -> u32 {
        match self.last_shutdown_attempt_at {
            Some(last) if now >= add(last, t.shutdown_attempt_reset_grace) => 0,
            _ => self.shutdown_attempts,
        }
    }

    /// Whether a shutdown may be fired for this claim now, or when it may next.
    pub fn shutdown_gate(&self, now: DateTime<Utc>, t: &Timings) -> ShutdownGate {
        if self.shutdown_streak(now, t) < t.max_attempts {
            ShutdownGate::Fire
        } else {
            let last = self.last_shutdown_attempt_at.unwrap_or(now);
            ShutdownGate::Paused {
                until: add(last, t.shutdown_attempt_reset_grace),
            }
        }
    }

    /// Counts one shutdown operation fired for this claim (one per operation, never per pass).
    pub fn record_shutdown_attempt(&self, now: DateTime<Utc>, t: &Timings) -> Claim {
        let mut next = self.clone();
        next.shutdown_attempts = self.shutdown_streak(now, t).saturating_add(1);
        next.last_shutdown_attempt_at = Some(now);
        // A new streak ends the pause the warning told of: the next pause is recorded anew.
        if next.shutdown_attempts == 1 {
            next.end_pause_warning();
        }
        next.version += 1;
        next
    }

    /// Resets the shutdown streak (the operator's escape hatch), and with it the pause.
    pub fn reset_shutdown_attempts(&self) -> Claim {
        let mut next = self.clone();
        next.shutdown_attempts = 0;
        next.last_shutdown_attempt_at = None;
        next.end_pause_warning();
        next.version += 1;
        next
    }

    fn end_pause_warning(&mut self) {
        if self.reason == Some(Reason::ShutdownAttemptLimitReached) && self.phase.is_live() {
            self.reason = None;
        }
    }

    /// Records the start of a lifecycle operation on the claim. The caller writes this before it
    /// runs the operation, so a restarted controller knows the operation was fired and never
    /// fires it a second time for this claim.
    pub fn start_operation(
        &self,
        kind: OperationKind,
        timeout: Duration,
        now: DateTime<Utc>,
    ) -> Claim {
        let mut next = self.clone();
        next.operation = Some(Operation {
            kind,
            started_at: now,
            timeout,
            outcome: None,
            finished_at: None,
        });
        next.version += 1;
        next
    }

    /// Records how the operation in flight ended. A claim with no operation in flight is returned
    /// unchanged (`None`): an outcome is recorded once.
    pub fn finish_operation(&self, outcome: OperationOutcome, now: DateTime<Utc>) -> Option<Claim> {
        let op = self.operation.as_ref().filter(|op| op.running())?;
        let mut next = self.clone();
        next.operation = Some(Operation {
            outcome: Some(outcome),
            finished_at: Some(now),
            ..op.clone()
        });
        next.version += 1;
        Some(next)
    }

    /// The operation in flight, if one is recorded as running.
    pub fn running_operation(&self) -> Option<&Operation> {
        self.operation.as_ref().filter(|op| op.running())
    }

    /// Records that the machine was heard after its startup ended (`Gate::Heard`).
    pub fn heard(&self, now: DateTime<Utc>) -> Claim {
        let mut next = self.clone();
        next.set(ConditionKind::MachineHeard, true, now);
        next.version += 1;
        next
    }

    /// Records a warning reason without moving the phase (ShutdownJobTimeout).
    pub fn warn(&self, reason: Reason) -> Claim {
        let mut next = self.clone();
        next.reason = Some(reason);
        next.version += 1;
        next
    }

    /// Applies the watch of a ready claim's machine (SPEC §3.7).
    pub fn watched(&self, watch: Watch, now: DateTime<Utc>) -> Result<Claim, IllegalMove> {
        let mut next = self.clone();
        match watch {
            Watch::Unchanged => return Ok(next),
            Watch::MarkObservedOff => next.set(ConditionKind::MachineObservedOff, true, now),
            Watch::ClearObservedOff => next.set(ConditionKind::MachineObservedOff, false, now),
            Watch::Gone => {
                return self.apply(Move::because(Phase::Failed, Reason::MachineGone), now);
            }
        }
        next.version += 1;
        Ok(next)
    }

    /// The digest of this claim that the slot keeps after the claim is collected.
    pub fn digest(&self) -> LastClaim {
        LastClaim {
            name: self.name.clone(),
            phase: self.phase,
            attempt: self.attempt,
            group: self.group.clone(),
            reason: self.reason,
            requested_at: self.requested_at,
            deadline_at: self.deadline_at,
            finished_at: self.finished_at,
            reached_ready: self.condition(ConditionKind::Ready).is_some(),
            streak_reset_at: None,
            call: self.call,
        }
    }
}

/// Why a claim cannot be marked for deletion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotMarkable {
    #[error("a pending claim is cancelled by deleting it, not marked")]
    Pending,
    #[error("the claim is already marked for deletion")]
    AlreadyMarked,
    #[error("the claim has ended; there is nothing to reverse")]
    Terminal,
}

#[cfg(test)]
mod tests;
