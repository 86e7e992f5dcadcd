//! One slot's pass as a plan (SPEC §4.5): everything one pass knows about a slot goes in (its
//! claims, its bench, its operation record, what this process runs), the steps to take come out,
//! in order, with the slot's report. Every rule of the pass lives here once; the controller
//! (`reconcile::act`) executes the steps and stops the slot at the first compare-and-set the store
//! refuses, so a plan made assuming each write lands is never carried past one that did not.
//!
//! - `planner`: the planner's state and the middle of the pass (the claim controller's judgment,
//!   fleet's cordon, the readiness gate, adoption).
//! - `power`: the input law and the power operations it fires.
//! - `operations`: the slot's operation record and its operations' outcomes.
//! - `nodes`: the Kubernetes Node steps (cordon, readiness, provider ID, stale Node deletion).
//! - `report`: the slot's report.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::claim::{
    self, Claim, Context, Gate, Judgment, Move, OperationKind, OperationOutcome, Phase, Reason,
    ShutdownGate, Timings, add,
};
use super::fsm::{self, NodeState};
use super::history::History;
use super::law::{self, ClaimInput, Fires, Input, Power, Report};
use super::name::{BenchName, ClaimName, GroupName};
use super::node::{self, Binding, NodeView, Taint, TaintEdit};
use super::operation::{self, OpEnd, SlotOp, UnclaimedShutdown, Unreported};
use super::state::{Bench, State};
use super::timeline::Event;

/// Hold requests fleet writes as the cordon start with this, so fleet never lifts an operator's.
pub const CORDON_PREFIX: &str = "fleet: ";

/// A slot's status: the report of the last pass over it. Written only by the controller's report
/// step; read by the views. Nothing decides from it.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct SlotStatus {
    pub history: History,
    /// The observed power; `None` while the controller is blind.
    pub power: Option<Power>,
    pub usable: bool,
    pub claim: Option<ClaimName>,
    pub updated_at: Option<DateTime<Utc>>,
    /// The hold the bench carries while it is HELD: a ready machine that holds is shown ready and
    /// held, never as booting again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<String>,
    /// Why the slot's live claim waits, when it does (SPEC §4.7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<SlotWaiting>,
}

impl SlotStatus {
    pub fn phase(&self) -> Option<Report> {
        self.history.phase()
    }
}

/// Why a slot's live claim waits, as the controller's report says it (SPEC §4.7).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "for")]
pub enum SlotWaiting {
    /// The machine is on its way down: the claim starts it once it is off.
    PoweringOff,
    /// The bench holds (it is there and takes no work).
    Held { reason: String },
    /// Its startup runs.
    StartupRunning,
    /// It waits for the power-on budget: as many machines are powering on as the group or the
    /// fleet allows (SPEC §4.11).
    PowerBudget,
    /// It waits to be started (an operation of the slot is in flight first).
    Start,
    /// Its startup completed; its bench has not beaten since, until this deadline.
    FirstBeat { until: DateTime<Utc> },
    /// Its bench beats and is not usable yet, until this deadline.
    Usable { until: DateTime<Utc> },
    /// A ready claim whose machine is on and not usable (its Node is not Ready, say).
    NotUsable,
}

/// An operation this process ran, that ended, and whose outcome is not written yet.
#[derive(Clone, Debug, PartialEq)]
pub struct Done {
    pub kind: OperationKind,
    pub claim: Option<ClaimName>,
    /// When it was recorded as started: an outcome only closes that operation.
    pub started_at: Option<DateTime<Utc>>,
    pub outcome: OperationOutcome,
    pub duration: Duration,
    pub tail: String,
}

/// An operation recorded by a write whose reply was lost: it runs if the store shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct Recorded {
    pub op: SlotOp,
    pub claim: Option<Claim>,
}

/// What this process knows of the slot's operations.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Here {
    /// An operation of the slot runs in this process.
    pub running: Option<OperationKind>,
    pub finished: Option<Done>,
    pub uncertain: Option<Recorded>,
}

/// Everything one pass knows about one slot.
#[derive(Clone, Debug)]
pub struct View<'a> {
    pub group: &'a GroupName,
    pub slot: &'a BenchName,
    pub timings: &'a Timings,
    pub startup_timeout: Duration,
    pub shutdown_timeout: Duration,
    pub readiness_taints: &'a [Taint],
    /// The taints the gate's end stamps on the slot's Node (SPEC §3.12).
    pub node_taints: &'a [Taint],
    /// The slot's provider ID: what its Node's `spec.providerID` must say.
    pub provider_id: &'a str,
    pub binding: Binding<'a>,
    /// The power-on budget lets this slot's claim start this pass (SPEC §4.11).
    pub may_start: bool,
    /// Since when this controller has seen the machine off without a break (its own memory:
    /// after a restart the count starts again, which only delays a stale Node's deletion).
    pub off_since: Option<DateTime<Utc>>,
    pub bench: Option<&'a Bench>,
    /// The controller cannot see the machines: no power action.
    pub blind: bool,
    /// A claim or the operation record of this slot cannot be read: no power action on it.
    pub unreadable: bool,
    /// After the store came back without its claims: machines found on are adopted.
    pub adopting: bool,
    /// This controller writes fleet's hold requests (it leads, or runs alone).
    pub acting: bool,
    pub claims: Vec<Claim>,
    /// The slot's operation record as the store holds it, and as this controller remembers it.
    pub stored_op: Option<SlotOp>,
    pub remembered_op: Option<SlotOp>,
    /// The slot's last operation recorded under a group it is no longer in (a group renamed or
    /// removed, or the slot moved: SPEC §4.1), as the store holds it there or this controller
    /// remembers it: a shutdown the old group fired may still be darkening the machine, and no
    /// group of the slot may take the machine as it is meanwhile (SPEC §5.3).
    pub elsewhere_op: Option<SlotOp>,
    pub here: Here,
    /// How long past an operation's timeout its wrapper has to report it (SPEC §4.2).
    pub report_slack: Duration,
    /// The id operations fired now are recorded under.
    pub holder: &'a str,
    /// The slot's last report.
    pub status: &'a SlotStatus,
}

/// One claim write, with its timeline entry.
#[derive(Clone, Debug, PartialEq)]
pub struct Write {
    pub old: Claim,
    pub next: Claim,
    pub event: Event,
    pub operation: Option<OperationKind>,
    pub duration_ms: Option<u64>,
    pub detail: Option<String>,
    /// What the write means beyond the claim, for the controller to say and count.
    pub then: Then,
}

/// What a write means beyond the claim.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Then {
    /// It records the outcome of this process's operation: that operation is settled.
    pub settles: bool,
    /// It puts back a startup the store lost the record of (never fired again).
    pub restores: bool,
    /// It records a warning reason on a live claim.
    pub warns: Option<Reason>,
}

/// One effect, in the order the controller takes them.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Puts back an operation record the store lost (best effort).
    RestoreOp(SlotOp),
    /// A claim write through the store's compare-and-set.
    Write(Box<Write>),
    /// Deletes a terminal claim past its time to live.
    Collect(Box<Claim>),
    /// Runs an operation whose recording write lost its reply: the store shows it recorded.
    RunRecorded(Box<Recorded>),
    /// An operation ended: counted, and said when it served no claim.
    Ended(Done),
    /// This process's operation's outcome on the slot's record (its wrapper may have written
    /// it first: best effort).
    EndHere {
        started_at: DateTime<Utc>,
        end: OpEnd,
    },
    /// The outcome of an operation nobody reports any more, on the slot's record.
    EndUnreported {
        started_at: DateTime<Utc>,
        end: OpEnd,
    },
    /// This process's finished operation needs no claim write: it is settled.
    Settled,
    /// The machine was observed off after a shutdown.
    ObserveOff { started_at: DateTime<Utc> },
    /// Lifts fleet's own hold request from the bench (best effort).
    Uncordon,
    /// Asks the bench to hold while it drains (best effort).
    Cordon { why: String },
    /// Takes a machine found on under a ready claim.
    Adopt(Box<Claim>),
    /// Records an operation's start on its claim and as the slot's record in one write, which
    /// must land before it runs.
    Record(Box<Start>),
    /// Records the shutdown of a machine no claim wants, atomic with the check that no claim
    /// took the slot since this pass read it.
    RecordUnclaimed(SlotOp),
    /// Runs the operation just recorded.
    Spawn {
        kind: OperationKind,
        claim: Option<Box<Claim>>,
        started_at: DateTime<Utc>,
    },
    /// A write to the slot's Kubernetes Node (SPEC §3.12).
    Node(Box<NodeWrite>),
    /// The slot's Node names another provider ID: fleet leaves it alone and says so.
    ProviderIdMismatch { node: String, found: String },
    /// Something the controller says at DEBUG and does nothing about.
    Note(&'static str),
}

/// One write to a Node, with the identity and version the pass judged it at: it lands only on
/// that Node as it was then (a stale version is refused, and the next pass judges again).
#[derive(Clone, Debug, PartialEq)]
pub struct NodeWrite {
    pub node: String,
    pub uid: String,
    pub resource_version: String,
    pub action: NodeAction,
    /// The steps after it assume it landed (the gate's release before the ready write): if it
    /// does not, the slot stops. Otherwise it is best effort, retried by a later pass.
    pub must_land: bool,
}

/// What a Node write does.
#[derive(Clone, Debug, PartialEq)]
pub enum NodeAction {
    /// The whole new taint list, made from the Node's as read.
    Taints(TaintEdit),
    /// Fills an empty `spec.providerID`.
    ProviderId(String),
    /// Deletes a Node a powered-off machine left behind.
    Delete,
}

/// An operation's start: the claim before and after it, and the slot's record of it.
#[derive(Clone, Debug, PartialEq)]
pub struct Start {
    pub old: Claim,
    pub next: Claim,
    pub op: SlotOp,
}

/// The plan for one slot.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The slot's operation record as this pass knows it before any step: the controller's
    /// memory of it.
    pub op: Option<SlotOp>,
    /// A recorded operation of uncertain outcome that is still to be resolved.
    pub uncertain: Option<Recorded>,
    pub steps: Vec<Step>,
    /// The power observed (`None` while blind), for the controller's own memory.
    pub power: Option<Power>,
    /// The report, when it changed: written only when every step went through.
    pub status: Option<SlotStatus>,
}

/// The live claim of a slot (its newest), else its most recently ended one: the claim the law
/// and the report read.
pub fn current(claims: &[Claim]) -> Option<&Claim> {
    claims
        .iter()
        .filter(|c| c.phase.is_live())
        .max_by_key(|c| (c.requested_at, c.name.clone()))
        .or_else(|| {
            claims
                .iter()
                .max_by_key(|c| (c.finished_at, c.requested_at))
        })
}

/// The claims of a slot or group that left the configuration (SPEC §4.1): a live claim fails
/// SlotDeleted, a terminal one is collected `ttl_after_finished` after it ended. Each claim is
/// its own step: one refused does not hold back the others.
pub fn departed(claims: &[&Claim], now: DateTime<Utc>, timings: &Timings) -> Vec<Step> {
    let mut steps = Vec::new();
    for c in claims {
        let ctx = Context {
            now,
            power: None,
            slot_exists: false,
            superseded: false,
            timings,
        };
        match claim::judge(c, &ctx) {
            Judgment::Fail(reason) => {
                if let Ok(next) = c.apply(Move::because(Phase::Failed, reason), now) {
                    steps.push(Step::Write(Box::new(Write {
                        old: (*c).clone(),
                        next,
                        event: Event::Failed,
                        operation: None,
                        duration_ms: None,
                        detail: None,
                        then: Then::default(),
                    })));
                }
            }
            Judgment::Collect => steps.push(Step::Collect(Box::new((*c).clone()))),
            Judgment::Keep | Judgment::Complete(_) | Judgment::Watch(_) => {}
        }
    }
    steps
}

/// Plans one pass over a slot (SPEC §4.5): its operation record, outcomes, the claim controller,
/// fleet's cordon, the readiness gate, adoption, the input law, and the report.
pub fn plan(view: View<'_>, now: DateTime<Utc>) -> Plan {
    let mut p = Planner::new(view, now);
    p.operation_record();
    p.outcomes();
    p.observe_off();
    p.judge_claims();
    p.cordons();
    p.readiness_gate();
    p.adoption();
    p.law();
    p.node_upkeep();
    p.finish()
}

/// A pass over one slot in the making: the steps so far, and the slot as it is once they land.
struct Planner<'a> {
    v: View<'a>,
    now: DateTime<Utc>,
    state: Option<State>,
    power: Option<Power>,
    usable: bool,
    /// A start this pass would have made waits for the power-on budget.
    budget_waits: bool,
    /// Usability as the readiness gate judges it: of the Node as it will be once the gate's
    /// release lands (fleet's cordon and cluster-autoscaler's leftovers gone).
    gate_usable: bool,
    claims: Vec<Claim>,
    op: Option<SlotOp>,
    initial_op: Option<SlotOp>,
    uncertain: Option<Recorded>,
    finished: Option<Done>,
    steps: Vec<Step>,
}

mod nodes;
mod operations;
mod planner;
mod power;
mod report;
#[cfg(test)]
mod tests;
