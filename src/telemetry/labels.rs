//! The metrics' labels (SPEC §4.8): every label set is a struct of typed values, and every value
//! but a group's name is a closed enum deriving `EncodeLabelValue`, so no label is built from a
//! string at a call site and the set of values a label can take is the enum's.
//!
//! The derive writes a variant's identifier as its value, so the variants are spelled as the
//! values /metrics has always shown (lowercase phases, `timedout`, CamelCase reasons and gRPC
//! codes); each enum is made from its domain or wire counterpart by one exhaustive `match`, so a
//! new variant there does not compile until its label is named here.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};

use crate::domain::claim::{self, OperationKind, OperationOutcome};
use crate::domain::law::Report;
use crate::domain::name::GroupName;

/// A group's name is a label value as it is: the configuration bounds the groups.
impl EncodeLabelValue for GroupName {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        EncodeLabelValue::encode(&self.as_str(), encoder)
    }
}

/// A claim's phase.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum ClaimPhase {
    pending,
    booting,
    ready,
    failed,
    completed,
}

impl From<claim::Phase> for ClaimPhase {
    fn from(phase: claim::Phase) -> Self {
        match phase {
            claim::Phase::Pending => ClaimPhase::pending,
            claim::Phase::Booting => ClaimPhase::booting,
            claim::Phase::Ready => ClaimPhase::ready,
            claim::Phase::Failed => ClaimPhase::failed,
            claim::Phase::Completed => ClaimPhase::completed,
        }
    }
}

/// A slot's reported phase (the input law's report).
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum SlotPhase {
    off,
    pending,
    booting,
    ready,
    draining,
}

impl From<Report> for SlotPhase {
    fn from(report: Report) -> Self {
        match report {
            Report::Off => SlotPhase::off,
            Report::Pending => SlotPhase::pending,
            Report::Booting => SlotPhase::booting,
            Report::Ready => SlotPhase::ready,
            Report::Draining => SlotPhase::draining,
        }
    }
}

/// Why a claim ended, was marked or was warned.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Reason {
    DeadlineExceeded,
    AttemptLimitExceeded,
    Superseded,
    SlotDeleted,
    StartupJobFailed,
    StartupJobTimeout,
    ShutdownJobTimeout,
    ShutdownAttemptLimitReached,
    ReadinessGateTimeout,
    MachineGone,
    StuckTransition,
    NodeDeleted,
    CancelledByDecreaseTargetSize,
    DeletedByHand,
    Adopted,
}

impl From<claim::Reason> for Reason {
    fn from(reason: claim::Reason) -> Self {
        match reason {
            claim::Reason::DeadlineExceeded => Reason::DeadlineExceeded,
            claim::Reason::AttemptLimitExceeded => Reason::AttemptLimitExceeded,
            claim::Reason::Superseded => Reason::Superseded,
            claim::Reason::SlotDeleted => Reason::SlotDeleted,
            claim::Reason::StartupJobFailed => Reason::StartupJobFailed,
            claim::Reason::StartupJobTimeout => Reason::StartupJobTimeout,
            claim::Reason::ShutdownJobTimeout => Reason::ShutdownJobTimeout,
            claim::Reason::ShutdownAttemptLimitReached => Reason::ShutdownAttemptLimitReached,
            claim::Reason::ReadinessGateTimeout => Reason::ReadinessGateTimeout,
            claim::Reason::MachineGone => Reason::MachineGone,
            claim::Reason::StuckTransition => Reason::StuckTransition,
            claim::Reason::NodeDeleted => Reason::NodeDeleted,
            claim::Reason::CancelledByDecreaseTargetSize => Reason::CancelledByDecreaseTargetSize,
            claim::Reason::DeletedByHand => Reason::DeletedByHand,
            claim::Reason::Adopted => Reason::Adopted,
        }
    }
}

/// A lifecycle operation's kind.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Operation {
    startup,
    shutdown,
}

impl From<OperationKind> for Operation {
    fn from(kind: OperationKind) -> Self {
        match kind {
            OperationKind::Startup => Operation::startup,
            OperationKind::Shutdown => Operation::shutdown,
        }
    }
}

/// How a lifecycle operation ended.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Outcome {
    completed,
    failed,
    timedout,
    abandoned,
}

impl From<OperationOutcome> for Outcome {
    fn from(outcome: OperationOutcome) -> Self {
        match outcome {
            OperationOutcome::Completed => Outcome::completed,
            OperationOutcome::Failed => Outcome::failed,
            OperationOutcome::TimedOut => Outcome::timedout,
            OperationOutcome::Abandoned => Outcome::abandoned,
        }
    }
}

/// What became of a configuration reload.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Reload {
    applied,
    refused,
}

/// A cluster-autoscaler call, by its method's name in the externalgrpc protocol.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Method {
    NodeGroups,
    NodeGroupForNode,
    PricingNodePrice,
    PricingPodPrice,
    GPULabel,
    GetAvailableGPUTypes,
    Cleanup,
    Refresh,
    NodeGroupTargetSize,
    NodeGroupIncreaseSize,
    NodeGroupDeleteNodes,
    NodeGroupDecreaseTargetSize,
    NodeGroupNodes,
    NodeGroupTemplateNodeInfo,
    NodeGroupGetOptions,
}

/// A gRPC status code, named as the gRPC specification (and tonic) names it. The provider makes
/// it from `tonic::Code`.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Code {
    Ok,
    Cancelled,
    Unknown,
    InvalidArgument,
    DeadlineExceeded,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    ResourceExhausted,
    FailedPrecondition,
    Aborted,
    OutOfRange,
    Unimplemented,
    Internal,
    Unavailable,
    DataLoss,
    Unauthenticated,
}

/// `fleet_claims`: claims by group and phase.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClaimLabels {
    pub group: GroupName,
    pub phase: ClaimPhase,
}

/// `fleet_slots`: slots by group and reported phase.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SlotLabels {
    pub group: GroupName,
    pub phase: SlotPhase,
}

/// `fleet_claim_moves_total`: the phase moved to and the reason (empty when the move has none).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MoveLabels {
    pub to: ClaimPhase,
    pub reason: Option<Reason>,
}

/// `fleet_operations_total`: the operation's kind and outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    pub operation: Operation,
    pub outcome: Outcome,
}

/// `fleet_operation_duration_seconds`: the operation's kind.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub operation: Operation,
}

/// `fleet_claim_warnings_total`: the warning's reason.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: Reason,
}

/// `fleet_config_reloads_total`: applied or refused.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: Reload,
}

/// `fleet_provider_calls_total` and `fleet_provider_call_seconds`: the method and the status code.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    pub method: Method,
    pub code: Code,
}
