//! The metrics' labels (SPEC §4.8): every label set is a struct of typed values, so no label is
//! built from a string at a call site and the values a label can take are its type's. A domain
//! value (a phase, a reason, an operation and its outcome) is its own label value, named as it
//! names itself; the provider's methods and gRPC codes are closed enums deriving
//! `EncodeLabelValue`, spelled as the protocol spells them.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelSetEncoder};

use crate::domain::claim::{self, OperationKind, OperationOutcome};
use crate::domain::law::Report;
use crate::domain::name::GroupName;

/// How an operation ended, as /metrics has always spelled it (`timedout`).
fn outcome(o: OperationOutcome) -> &'static str {
    match o {
        OperationOutcome::Completed => "completed",
        OperationOutcome::Failed => "failed",
        OperationOutcome::TimedOut => "timedout",
        OperationOutcome::Abandoned => "abandoned",
    }
}

/// The label sets of domain values, each value as it names itself (`as_str`), so a label takes
/// exactly the values its domain type has and no mirror of it needs keeping; a group's and a
/// slot's name as they are (the configuration bounds both). Written by hand: prometheus-client's
/// derive needs each field to be a label value, and a type of the core crate cannot be made one
/// in this crate (the orphan rule).
macro_rules! domain_labels {
    ($($t:ident => |$this:ident| [$(($key:literal, $value:expr)),+ $(,)?];)*) => {$(
        impl EncodeLabelSet for $t {
            fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
                let $this = self;
                [$(($key, $value)),+].encode(encoder)
            }
        }
    )*};
}

domain_labels! {
    ClaimLabels => |l| [("group", l.group.as_str()), ("phase", l.phase.as_str())];
    SlotLabels => |l| [("group", l.group.as_str()), ("phase", l.phase.as_str())];
    MoveLabels => |l| [
        ("to", l.to.as_str()),
        ("reason", l.reason.as_ref().map_or("", |r| r.as_str())),
    ];
    OperationLabels => |l| [
        ("operation", l.operation.as_str()),
        ("outcome", outcome(l.outcome)),
    ];
    KindLabel => |l| [("operation", l.operation.as_str())];
    ReasonLabel => |l| [("reason", l.reason.as_str())];
}

/// A write fleet made to a Kubernetes Node (SPEC §3.12), and what became of it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeWriteLabels {
    pub action: NodeWriteKind,
    pub result: NodeWriteResult,
}

#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum NodeWriteKind {
    taints,
    provider_id,
    delete,
}

#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum NodeWriteResult {
    ok,
    /// The Node changed since the pass read it (409) or is gone (404): the next pass judges
    /// again.
    conflict,
    failed,
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
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct ClaimLabels {
    pub group: GroupName,
    pub phase: claim::Phase,
}

/// `fleet_slots`: slots by group and reported phase.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct SlotLabels {
    pub group: GroupName,
    pub phase: Report,
}

/// `fleet_claim_moves_total`: the phase moved to and the reason (empty when the move has none).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct MoveLabels {
    pub to: claim::Phase,
    pub reason: Option<claim::Reason>,
}

/// `fleet_operations_total`: the operation's kind and outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct OperationLabels {
    pub operation: OperationKind,
    pub outcome: OperationOutcome,
}

/// `fleet_operation_duration_seconds`: the operation's kind.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct KindLabel {
    pub operation: OperationKind,
}

/// `fleet_claim_warnings_total`: the warning's reason.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct ReasonLabel {
    pub reason: claim::Reason,
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
