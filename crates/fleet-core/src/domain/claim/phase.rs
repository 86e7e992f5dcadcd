//! Claim phases, the reasons a claim ends, the legal-move table and cancellation (SPEC §3.2, §3.3).

use serde::{Deserialize, Serialize};

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
