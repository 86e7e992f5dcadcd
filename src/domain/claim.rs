//! NodeClaims: phases and their legal moves, deadlines, attempts, shutdown attempts,
//! machine-gone, cancellation, supersession and collection (SPEC §3.2, §3.3, §3.5 to §3.8).
//!
//! A claim is the request for a machine on a slot: a machine is wanted on a slot exactly when a
//! live claim names it. Every move goes through `Claim::apply`, which refuses what the legal-move
//! table refuses and returns the new claim (the caller writes it with a compare-and-set on the
//! old phase and version); a refused move writes nothing. Pure: no I/O, no clock.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

use super::name::{BenchName, ClaimName, GroupName};
use super::power::Power;

/// A claim's phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Claimed; no startup operation yet. The only cancelable phase.
    Pending,
    /// The startup operation exists and the power-on has been asked for. Committed.
    Booting,
    /// The machine is up and usable.
    Ready,
    /// The attempt produced no usable machine and never will. Terminal.
    Failed,
    /// The claim ended with the machine released. Terminal.
    Completed,
}

impl Phase {
    pub const ALL: [Phase; 5] = [
        Phase::Pending,
        Phase::Booting,
        Phase::Ready,
        Phase::Failed,
        Phase::Completed,
    ];

    /// The legal next phases (SPEC §3.2); a move to anything else is refused.
    pub fn legal_next(self) -> &'static [Phase] {
        use Phase::*;
        match self {
            Pending => &[Booting, Ready, Completed, Failed],
            Booting => &[Ready, Completed, Failed],
            Ready => &[Completed, Failed],
            Failed | Completed => &[],
        }
    }

    /// A live claim wants (or holds) a machine: pending, booting, ready.
    pub fn is_live(self) -> bool {
        match self {
            Phase::Pending | Phase::Booting | Phase::Ready => true,
            Phase::Failed | Phase::Completed => false,
        }
    }

    pub fn is_terminal(self) -> bool {
        !self.is_live()
    }

    /// Only a pending claim can be cancelled, by deleting it: nothing is in flight.
    pub fn is_cancelable(self) -> bool {
        match self {
            Phase::Pending => true,
            Phase::Booting | Phase::Ready | Phase::Failed | Phase::Completed => false,
        }
    }

    /// The boot window: the phases a deadline and the attempt bound apply to.
    pub fn in_boot_window(self) -> bool {
        match self {
            Phase::Pending | Phase::Booting => true,
            Phase::Ready | Phase::Failed | Phase::Completed => false,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "pending",
            Phase::Booting => "booting",
            Phase::Ready => "ready",
            Phase::Failed => "failed",
            Phase::Completed => "completed",
        }
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a claim ended, or why it was marked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Reason {
    /// Still in the boot window at its deadline.
    DeadlineExceeded,
    /// Its attempt number is past the bound: failed before a machine is bought.
    AttemptLimitExceeded,
    /// A newer live claim owns the slot.
    Superseded,
    /// The slot left the configuration.
    SlotDeleted,
    /// The startup operation exited non-zero.
    StartupJobFailed,
    /// The startup operation outlived its timeout.
    StartupJobTimeout,
    /// The shutdown operation outlived its timeout (recorded; the claim stays).
    ShutdownJobTimeout,
    /// A scale-down's shutdowns are spent: no more fire until the reset grace (recorded; the
    /// claim stays).
    ShutdownAttemptLimitReached,
    /// The machine never became usable within the readiness gate's budgets.
    ReadinessGateTimeout,
    /// A ready claim's machine was observed off past one boot window.
    MachineGone,
    /// An operation stuck past the stuck threshold was abandoned.
    StuckTransition,
    /// cluster-autoscaler deleted the node (scale-down).
    NodeDeleted,
    /// cluster-autoscaler decreased the target size.
    CancelledByDecreaseTargetSize,
    /// An operator cancelled the claim.
    DeletedByHand,
    /// A machine found on after the store lost its claims, taken under a ready claim so that
    /// cluster-autoscaler, not an accident, decides whether it is still needed.
    Adopted,
}

impl Reason {
    pub const ALL: [Reason; 15] = [
        Reason::DeadlineExceeded,
        Reason::AttemptLimitExceeded,
        Reason::Superseded,
        Reason::SlotDeleted,
        Reason::StartupJobFailed,
        Reason::StartupJobTimeout,
        Reason::ShutdownJobTimeout,
        Reason::ShutdownAttemptLimitReached,
        Reason::ReadinessGateTimeout,
        Reason::MachineGone,
        Reason::StuckTransition,
        Reason::NodeDeleted,
        Reason::CancelledByDecreaseTargetSize,
        Reason::DeletedByHand,
        Reason::Adopted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::DeadlineExceeded => "DeadlineExceeded",
            Reason::AttemptLimitExceeded => "AttemptLimitExceeded",
            Reason::Superseded => "Superseded",
            Reason::SlotDeleted => "SlotDeleted",
            Reason::StartupJobFailed => "StartupJobFailed",
            Reason::StartupJobTimeout => "StartupJobTimeout",
            Reason::ShutdownJobTimeout => "ShutdownJobTimeout",
            Reason::ShutdownAttemptLimitReached => "ShutdownAttemptLimitReached",
            Reason::ReadinessGateTimeout => "ReadinessGateTimeout",
            Reason::MachineGone => "MachineGone",
            Reason::StuckTransition => "StuckTransition",
            Reason::NodeDeleted => "NodeDeleted",
            Reason::CancelledByDecreaseTargetSize => "CancelledByDecreaseTargetSize",
            Reason::DeletedByHand => "DeletedByHand",
            Reason::Adopted => "Adopted",
        }
    }

    /// The reasons a request to remove a machine carries (a claim's deletion mark).
    pub fn is_deletion(self) -> bool {
        matches!(
            self,
            Reason::NodeDeleted | Reason::CancelledByDecreaseTargetSize | Reason::DeletedByHand
        )
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A move the legal-move table refuses. Nothing is written for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("illegal claim move {from} -> {to}")]
pub struct IllegalMove {
    pub from: Phase,
    pub to: Phase,
}

/// Checks one move against the table.
pub fn check_move(from: Phase, to: Phase) -> Result<(), IllegalMove> {
    if from.legal_next().contains(&to) {
        Ok(())
    } else {
        Err(IllegalMove { from, to })
    }
}

/// The seed's constants, each configurable per group (SPEC §3.5).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timings {
    /// The bound on one startup or shutdown operation.
    pub job_timeout: Duration,
    /// How often an operation in flight is looked at.
    pub job_monitor_poll_interval: Duration,
    /// The readiness gate's first budget: for the node to register.
    pub uncordon_timeout: Duration,
    /// The readiness gate's second budget: for the node to become usable once registered.
    pub readiness_gate_timeout: Duration,
    /// The longest pause between two looks of the readiness gate.
    pub max_uncordon_retry_interval: Duration,
    /// The slack at the end of the attempt budget.
    pub budget_slack: Duration,
    /// The most consecutive attempts a slot spends, and the most shutdowns a scale-down fires
    /// in one streak.
    pub max_attempts: u32,
    /// How long a ready claim's machine may be observed off before the claim fails MachineGone.
    pub machine_gone_grace: Duration,
    /// How long after its last shutdown attempt a spent streak is spent no longer.
    pub shutdown_attempt_reset_grace: Duration,
    /// How long a terminal claim is kept before it is collected.
    pub ttl_after_finished: Duration,
    /// How long an operation whose outcome was never reported may be waited on before it is
    /// abandoned (the seed's ForceCleanup: its claim fails StuckTransition, SPEC §5.4).
    pub stuck_threshold: Duration,
    /// How long after a slot's last failure its failure streak stops counting (SPEC §3.5): the
    /// way back for a slot that spent its attempts.
    #[serde(default = "default_failed_slot_cooldown")]
    pub failed_slot_cooldown: Duration,
}

/// The failed-slot cooldown of the timings a catalog written before it existed carries.
fn default_failed_slot_cooldown() -> Duration {
    Timings::default().failed_slot_cooldown
}

impl Default for Timings {
    fn default() -> Self {
        let mut t = Timings {
            job_timeout: Duration::from_secs(5 * 60),
            job_monitor_poll_interval: Duration::from_secs(30),
            uncordon_timeout: Duration::from_secs(90),
            readiness_gate_timeout: Duration::from_secs(4 * 60),
            max_uncordon_retry_interval: Duration::from_secs(10),
            budget_slack: Duration::from_secs(60),
            max_attempts: 3,
            machine_gone_grace: Duration::ZERO,
            shutdown_attempt_reset_grace: Duration::from_secs(30 * 60),
            ttl_after_finished: Duration::from_secs(60 * 60),
            stuck_threshold: Duration::from_secs(15 * 60),
            failed_slot_cooldown: Duration::from_secs(30 * 60),
        };
        // One boot window, the same horizon as the deadline.
        t.machine_gone_grace = t.attempt_budget();
        t
    }
}

impl Timings {
    /// The time one attempt may take from its request (SPEC §3.5): the operation's whole
    /// timeout, one monitor poll, both readiness budgets in series, one retry pause and the
    /// slack. With the defaults, 12m10s.
    pub fn attempt_budget(&self) -> Duration {
        self.job_timeout
            + self.job_monitor_poll_interval
            + self.uncordon_timeout
            + self.readiness_gate_timeout
            + self.max_uncordon_retry_interval
            + self.budget_slack
    }

    /// The deadline of a claim requested at `requested_at`: the budget, floored by the group's
    /// max node provision time (cluster-autoscaler's own scale-up deadline).
    pub fn deadline_at(
        &self,
        requested_at: DateTime<Utc>,
        max_node_provision_time: Option<Duration>,
    ) -> DateTime<Utc> {
        let window = self
            .attempt_budget()
            .max(max_node_provision_time.unwrap_or(Duration::ZERO));
        add(requested_at, window)
    }
}

/// `t + d`, saturating at the end of time rather than overflowing.
pub fn add(t: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    TimeDelta::from_std(d)
        .ok()
        .and_then(|d| t.checked_add_signed(d))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

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

/// How a request to cancel a claim is carried out (SPEC §3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cancellation {
    /// A pending claim: delete it; nothing is in flight.
    Delete,
    /// A booting or ready claim: mark it; the boot is reversed (cordon, shutdown, power off,
    /// then completed), never interrupted.
    Reverse,
    /// A terminal claim: nothing to do.
    Nothing,
}

pub fn cancellation(phase: Phase) -> Cancellation {
    match phase {
        Phase::Pending => Cancellation::Delete,
        Phase::Booting | Phase::Ready => Cancellation::Reverse,
        Phase::Failed | Phase::Completed => Cancellation::Nothing,
    }
}

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

/// The digest the slot keeps of its last claim; it outlives the claim's collection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastClaim {
    pub name: ClaimName,
    pub phase: Phase,
    pub attempt: u32,
    pub group: GroupName,
    pub reason: Option<Reason>,
    pub requested_at: DateTime<Utc>,
    pub deadline_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    /// Whether the claim ever reached ready (an episode that produced a machine).
    pub reached_ready: bool,
    /// When an operator reset the slot's failure streak (`fleet reset-attempts`); the next
    /// claim's digest replaces this one, so a reset is spent by the claim it lets through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streak_reset_at: Option<DateTime<Utc>>,
    /// The call that made the claim (the seed's `call`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<Call>,
}

impl LastClaim {
    /// The same digest with its failure streak reset by an operator at `now`.
    pub fn reset_streak(&self, now: DateTime<Utc>) -> Self {
        LastClaim {
            streak_reset_at: Some(now),
            ..self.clone()
        }
    }
}

/// The slot's failure streak at `now` (SPEC §3.5): how many consecutive attempts failed and still
/// count. It is 0 on a fresh slot, after an episode that produced a machine (the claim reached
/// ready, or ended completed), after an operator's reset, and once `failed_slot_cooldown` has
/// passed since the last failure; otherwise it is the last claim's attempt.
pub fn failure_streak(last: Option<&LastClaim>, now: DateTime<Utc>, timings: &Timings) -> u32 {
    match last {
        None => 0,
        Some(l) if l.reached_ready || l.phase == Phase::Completed => 0,
        Some(l) if l.streak_reset_at.is_some() => 0,
        Some(l)
            if l.phase == Phase::Failed
                && now
                    >= add(
                        l.finished_at.unwrap_or(l.requested_at),
                        timings.failed_slot_cooldown,
                    ) =>
        {
            0
        }
        Some(l) => l.attempt,
    }
}

/// Whether the slot spent its attempts (SPEC §3.5): its failure streak reached the bound, so it
/// is offered to no request until the streak is reset.
pub fn streak_spent(last: Option<&LastClaim>, now: DateTime<Utc>, timings: &Timings) -> bool {
    failure_streak(last, now, timings) >= timings.max_attempts
}

/// The attempt number of a new claim on a slot (SPEC §3.5): one more than the failure streak,
/// so 1 on a fresh slot, after a machine was produced, after a reset or a cooldown, and +1 while
/// the slot keeps failing.
pub fn seed_attempt(last: Option<&LastClaim>, now: DateTime<Utc>, timings: &Timings) -> u32 {
    failure_streak(last, now, timings).saturating_add(1)
}

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

#[cfg(test)]
mod tests;
