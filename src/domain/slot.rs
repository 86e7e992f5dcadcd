//! One slot's pass as a plan (SPEC §4.5): everything one pass knows about a slot goes in (its
//! claims, its bench, its operation record, what this process runs), the steps to take come out,
//! in order, with the slot's report. Every rule of the pass lives here once; the controller
//! (`reconcile::act`) executes the steps and stops the slot at the first compare-and-set the store
//! refuses, so a plan made assuming each write lands is never carried past one that did not.

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
use super::node::{self, Binding, Taint};
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
    pub binding: Binding<'a>,
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
    pub here: Here,
    /// How long past an operation's timeout its wrapper has to report it (SPEC §4.2).
    pub report_slack: Duration,
    /// The id operations fired now are recorded under.
    pub holder: &'a str,
    /// The slot's last report.
    pub status: SlotStatus,
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
    /// Something the controller says at DEBUG and does nothing about.
    Note(&'static str),
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
    p.finish()
}

/// A pass over one slot in the making: the steps so far, and the slot as it is once they land.
struct Planner<'a> {
    v: View<'a>,
    now: DateTime<Utc>,
    state: Option<State>,
    power: Option<Power>,
    usable: bool,
    claims: Vec<Claim>,
    op: Option<SlotOp>,
    initial_op: Option<SlotOp>,
    uncertain: Option<Recorded>,
    finished: Option<Done>,
    steps: Vec<Step>,
}

impl<'a> Planner<'a> {
    fn new(mut v: View<'a>, now: DateTime<Utc>) -> Self {
        let state = (!v.blind).then(|| v.bench.map_or(State::Down, |b| b.verdict(now).state));
        let power = state.map(Power::of);
        let usable = state.is_some_and(|s| node::usable(s, v.binding, v.readiness_taints));
        let mut claims = std::mem::take(&mut v.claims);
        claims.sort_by(|a, b| (a.requested_at, &a.name).cmp(&(b.requested_at, &b.name)));
        let uncertain = v.here.uncertain.take();
        let finished = v.here.finished.take();
        Planner {
            v,
            now,
            state,
            power,
            usable,
            claims,
            op: None,
            initial_op: None,
            uncertain,
            finished,
            steps: Vec::new(),
        }
    }

    fn settle(&self) -> Duration {
        self.v.timings.job_monitor_poll_interval
    }

    fn going_down(&self) -> bool {
        self.op
            .as_ref()
            .is_some_and(|o| o.going_down(self.now, self.settle()))
    }

    /// Replaces the pass's copy of a claim with what a write made of it.
    fn replace(&mut self, next: &Claim) {
        if let Some(i) = self.claims.iter().position(|c| c.name == next.name) {
            self.claims[i] = next.clone();
        }
    }

    fn write(&mut self, w: Write) {
        self.replace(&w.next);
        self.steps.push(Step::Write(Box::new(w)));
    }

    /// The slot's operation record (SPEC §5.4): the newest of the store's record, this
    /// controller's memory and the claims' own records. Where the store lacks it, it is put back,
    /// and a pending claim whose startup it records goes back to booting with it: a startup fires
    /// once per claim attempt. An operation recorded by a write whose reply was lost runs now if
    /// the record shows it and nobody runs it.
    fn operation_record(&mut self) {
        let from_claims: Vec<SlotOp> = self.claims.iter().filter_map(SlotOp::of_claim).collect();
        let witnesses = self.v.stored_op.iter().chain(self.v.remembered_op.iter());
        let Some(op) = operation::merge(witnesses.chain(from_claims.iter())) else {
            return;
        };
        if self
            .v
            .stored_op
            .as_ref()
            .is_none_or(|s| s.started_at < op.started_at)
        {
            self.steps.push(Step::RestoreOp(op.clone()));
        }
        self.restore_booting(&op);
        self.op = Some(op.clone());
        self.initial_op = Some(op);
        if let (Some(o), Some(u)) = (&self.op, self.uncertain.take())
            && u.op.started_at == o.started_at
            && o.running()
            && self.v.here.running.is_none()
        {
            self.steps.push(Step::RunRecorded(Box::new(u)));
        }
    }

    /// A pending claim whose startup the record shows fired goes back to booting with it.
    fn restore_booting(&mut self, op: &SlotOp) {
        if op.kind != OperationKind::Startup {
            return;
        }
        let Some(c) = self.claims.iter().find(|c| {
            c.phase == Phase::Pending
                && op.started(c)
                && c.operation
                    .as_ref()
                    .is_none_or(|o| o.started_at != op.started_at)
        }) else {
            return;
        };
        let Ok(booting) = c.apply(Move::to(Phase::Booting), self.now) else {
            return;
        };
        let next = booting.start_operation(OperationKind::Startup, op.timeout, op.started_at);
        let detail = format!(
            "restored: the store lost the write that recorded this attempt's startup, which was \
             fired once, at {}",
            op.started_at.to_rfc3339()
        );
        let w = Write {
            old: c.clone(),
            next,
            event: Event::Booting,
            operation: Some(OperationKind::Startup),
            duration_ms: None,
            detail: Some(detail),
            then: Then {
                restores: true,
                ..Then::default()
            },
        };
        self.write(w);
    }

    /// Outcomes: of an operation that ended here (to its claim and the slot's record before
    /// anything else), else of one its wrapper reported to the store, else of one whose outcome
    /// can no longer come.
    fn outcomes(&mut self) {
        if let Some(done) = self.finished.clone() {
            if let Some(started_at) = done.started_at {
                let end = OpEnd {
                    outcome: done.outcome,
                    finished_at: self.now,
                    duration_ms: u64::try_from(done.duration.as_millis()).unwrap_or(u64::MAX),
                    tail: done.tail.clone(),
                };
                if let Some(o) = self.op.as_mut().filter(|o| o.started_at == started_at)
                    && o.end.is_none()
                {
                    o.end = Some(end.clone());
                }
                self.steps.push(Step::EndHere { started_at, end });
            }
            self.steps.push(Step::Ended(done.clone()));
            match self.outcome_write(&done, true) {
                Some(w) => self.write(w),
                None => self.steps.push(Step::Settled),
            }
            // Settled once the steps land (the controller stops the slot otherwise).
            self.finished = None;
            return;
        }
        if self.v.here.running.is_some() {
            return;
        }
        self.settle_unreported();
        let Some(o) = self.op.clone() else { return };
        let (Some(end), Some(name)) = (&o.end, &o.claim) else {
            return;
        };
        let waiting = self.claims.iter().any(|c| {
            &c.name == name
                && c.running_operation()
                    .is_some_and(|r| r.started_at == o.started_at)
        });
        if waiting {
            let done = Done {
                kind: o.kind,
                claim: Some(name.clone()),
                started_at: Some(o.started_at),
                outcome: end.outcome,
                duration: Duration::from_millis(end.duration_ms),
                tail: end.tail.clone(),
            };
            self.steps.push(Step::Ended(done.clone()));
            if let Some(w) = self.outcome_write(&done, false) {
                self.write(w);
            }
        }
    }

    /// An operation this process does not run and whose outcome nobody reported (SPEC §5.4): in
    /// flight until its timeout and the report slack, then done when the machine shows it, else
    /// late, then abandoned at `stuck_threshold`. Not judged while blind.
    fn settle_unreported(&mut self) {
        let Some(o) = self.op.as_mut().filter(|o| o.end.is_none()) else {
            return;
        };
        if self.v.blind {
            return;
        }
        let on = self.power.map(|p| p == Power::On);
        let t = self.v.timings;
        let (outcome, tail) =
            match operation::unreported(o, on, self.now, self.v.report_slack, t.stuck_threshold) {
                Unreported::InFlight | Unreported::Late => return,
                Unreported::Done(why) => (OperationOutcome::Completed, why),
                Unreported::Abandoned => (
                    OperationOutcome::Abandoned,
                    "stuck: no outcome was reported by stuck_threshold; abandoned",
                ),
            };
        let end = OpEnd {
            outcome,
            finished_at: self.now,
            duration_ms: (self.now - o.started_at)
                .num_milliseconds()
                .max(0)
                .unsigned_abs(),
            tail: tail.to_owned(),
        };
        o.end = Some(end.clone());
        let started_at = o.started_at;
        self.steps.push(Step::EndUnreported { started_at, end });
    }

    /// What an operation's outcome means for its claim (SPEC §3.4): the node state machine steps
    /// from the operation's state with the outcome's event, and the claim follows where it lands.
    /// `None` when there is nothing to write (no claim, an older operation's outcome, one
    /// recorded already).
    fn outcome_write(&self, done: &Done, settles: bool) -> Option<Write> {
        let name = done.claim.as_ref()?;
        let c = self.claims.iter().find(|c| &c.name == name)?;
        if c.running_operation().map(|op| op.started_at) != done.started_at {
            return None;
        }
        let mut next = c.finish_operation(done.outcome, self.now)?;
        let mut event = Event::Operation;
        let mut then = Then {
            settles,
            ..Then::default()
        };
        let from = match done.kind {
            OperationKind::Startup => NodeState::StartingUp,
            OperationKind::Shutdown => NodeState::ShuttingDown,
        };
        let failed = match (done.kind, fsm::step(from, done.outcome.event())) {
            // The machine did not come up: the claim fails, unless it already left booting.
            (OperationKind::Startup, Ok(NodeState::Shutdown)) => match done.outcome {
                OperationOutcome::Failed if c.phase == Phase::Booting => {
                    Some(Reason::StartupJobFailed)
                }
                OperationOutcome::TimedOut if c.phase == Phase::Booting => {
                    Some(Reason::StartupJobTimeout)
                }
                OperationOutcome::Abandoned if c.phase.is_live() => Some(Reason::StuckTransition),
                _ => None,
            },
            // The machine is still up after a shutdown that did not complete: the claim stays;
            // a timeout is recorded on it.
            (OperationKind::Shutdown, Ok(NodeState::Ready)) => {
                if done.outcome == OperationOutcome::TimedOut {
                    next = next.warn(Reason::ShutdownJobTimeout);
                    then.warns = Some(Reason::ShutdownJobTimeout);
                }
                None
            }
            (OperationKind::Shutdown, Ok(NodeState::Shutdown))
                if done.outcome == OperationOutcome::Abandoned && c.phase.is_live() =>
            {
                Some(Reason::StuckTransition)
            }
            _ => None,
        };
        if let Some(reason) = failed
            && let Ok(f) = next.apply(Move::because(Phase::Failed, reason), self.now)
        {
            next = f;
            event = Event::Failed;
        }
        let ms = u64::try_from(done.duration.as_millis()).unwrap_or(u64::MAX);
        Some(Write {
            old: c.clone(),
            next,
            event,
            operation: Some(done.kind),
            duration_ms: Some(ms),
            detail: (!done.tail.is_empty()).then(|| done.tail.clone()),
            then,
        })
    }

    /// A machine observed off after a shutdown is no longer on its way down.
    fn observe_off(&mut self) {
        if self.power != Some(Power::Off) || !self.going_down() {
            return;
        }
        if let Some(o) = self.op.as_mut() {
            o.off_at = Some(self.now);
            let started_at = o.started_at;
            self.steps.push(Step::ObserveOff { started_at });
        }
    }

    /// The claim controller's judgment of every claim (SPEC §3.8).
    fn judge_claims(&mut self) {
        let live: Vec<&Claim> = self.claims.iter().filter(|c| c.phase.is_live()).collect();
        let losers: Vec<ClaimName> = claim::superseded(&live)
            .iter()
            .map(|c| c.name.clone())
            .collect();
        let t = self.v.timings;
        let mut collected = Vec::new();
        for c in self.claims.clone() {
            let ctx = Context {
                now: self.now,
                power: self.power,
                slot_exists: true,
                superseded: losers.contains(&c.name),
                timings: t,
            };
            let (next, event) = match claim::judge(&c, &ctx) {
                Judgment::Keep => continue,
                Judgment::Collect => {
                    collected.push(c.name.clone());
                    self.steps.push(Step::Collect(Box::new(c)));
                    continue;
                }
                Judgment::Fail(reason) => {
                    let event = if reason == Reason::Superseded {
                        Event::Superseded
                    } else {
                        Event::Failed
                    };
                    (
                        c.apply(Move::because(Phase::Failed, reason), self.now),
                        event,
                    )
                }
                Judgment::Complete(reason) => (
                    c.apply(Move::because(Phase::Completed, reason), self.now),
                    Event::Completed,
                ),
                Judgment::Watch(w) => (c.watched(w, self.now), Event::Observed),
            };
            let Ok(next) = next else { continue };
            self.write(Write {
                old: c,
                next,
                event,
                operation: None,
                duration_ms: None,
                detail: None,
                then: Then::default(),
            });
        }
        self.claims.retain(|c| !collected.contains(&c.name));
    }

    /// Whether the bench carries fleet's own hold request.
    fn cordoned_by_fleet(&self) -> bool {
        self.v
            .bench
            .and_then(|b| b.requested_hold.as_ref())
            .is_some_and(|r| r.reason.as_str().starts_with(CORDON_PREFIX))
    }

    fn uncordon(&mut self) {
        if self.cordoned_by_fleet() && !self.steps.contains(&Step::Uncordon) {
            self.steps.push(Step::Uncordon);
        }
    }

    fn cordon(&mut self, why: String) {
        let carried = self
            .v
            .bench
            .and_then(|b| b.requested_hold.as_ref())
            .is_some();
        if !carried {
            self.steps.push(Step::Cordon { why });
        }
    }

    /// An operation of the slot is in flight: here, finished here and not settled, or recorded.
    fn in_flight(&self) -> bool {
        self.v.here.running.is_some()
            || self.finished.is_some()
            || self.op.as_ref().is_some_and(SlotOp::running)
    }

    /// Fleet's cordon: a claim that wants the machine lifts it, wherever a crash left it (not
    /// while the machine is on its way down: its claim starts it once it is off); and it ends
    /// with what set it, once the machine is observed off with nothing in flight and no live
    /// claim, so it never outlives the claim.
    fn cordons(&mut self) {
        if self.v.blind || self.going_down() || !self.v.acting {
            return;
        }
        let wanted = self.claims.iter().any(Claim::wants_machine);
        let over = self.power == Some(Power::Off)
            && !self.in_flight()
            && !self.claims.iter().any(|c| c.phase.is_live());
        if wanted || over {
            self.uncordon();
        }
    }

    /// A shutdown of the slot is in flight or settling, or the machine has not been observed off
    /// since the last one: a machine on its way off is not capacity, whatever it reports.
    fn shutting_down(&self) -> bool {
        self.going_down()
            || self.v.here.running == Some(OperationKind::Shutdown)
            || self
                .finished
                .as_ref()
                .is_some_and(|f| f.kind == OperationKind::Shutdown)
            || self.claims.iter().any(|c| {
                c.running_operation()
                    .is_some_and(|op| op.kind == OperationKind::Shutdown)
            })
    }

    /// The readiness gate (SPEC §4.5 step 6) of the claim in its boot window.
    fn readiness_gate(&mut self) {
        if self.v.blind || self.shutting_down() {
            return;
        }
        let Some(c) = self
            .claims
            .iter()
            .find(|c| c.wants_machine() && c.phase.in_boot_window())
            .cloned()
        else {
            return;
        };
        let on = self.power == Some(Power::On);
        let now = self.now;
        let (next, event) = match claim::readiness_gate(&c, on, self.usable, now, self.v.timings) {
            Gate::Ready => (c.apply(Move::to(Phase::Ready), now), Event::Ready),
            Gate::Heard => (Ok(c.heard(now)), Event::Observed),
            Gate::Fail => (
                c.apply(
                    Move::because(Phase::Failed, Reason::ReadinessGateTimeout),
                    now,
                ),
                Event::Failed,
            ),
            Gate::Wait(_) => return,
        };
        let Ok(next) = next else { return };
        let took = (now - c.requested_at)
            .num_milliseconds()
            .max(0)
            .unsigned_abs();
        self.write(Write {
            old: c,
            next,
            event,
            operation: None,
            duration_ms: Some(took),
            detail: None,
            then: Then::default(),
        });
    }

    /// Adoption (SPEC §5.3): after the store came back without its claims, a machine found on
    /// with no claim is taken under a ready claim instead of being powered off. An adoption that
    /// is not written stops the slot, so it never falls through to the law.
    fn adoption(&mut self) {
        if !self.v.adopting
            || self.v.blind
            || self.v.unreadable
            || self.going_down()
            || self.power != Some(Power::On)
            || !self.claims.is_empty()
        {
            return;
        }
        let name = ClaimName::for_slot(
            self.v.slot,
            &format!("adopted{:x}", self.now.timestamp_millis()),
        );
        let c = Claim::adopted(
            name,
            self.v.slot.clone(),
            self.v.group.clone(),
            self.now,
            self.v.timings,
        );
        self.claims.push(c.clone());
        self.steps.push(Step::Adopt(Box::new(c)));
    }

    /// The input law (SPEC §3.1) over the current claim, the power and usability: what fires.
    /// An operation in flight, here or recorded by a controller that died, blocks every new one.
    fn law(&mut self) {
        let Some(power) = self.power else { return };
        let current = current(&self.claims).cloned();
        let input = Input {
            claim: ClaimInput::of(current.as_ref()),
            power,
            usable: self.usable,
        };
        let decision = law::decide(input);
        let in_flight =
            self.in_flight() || self.claims.iter().any(|c| c.running_operation().is_some());
        if in_flight || self.v.unreadable {
            return;
        }
        match decision.fires {
            Fires::StartNode => {
                if fsm::step(decision.state, fsm::Event::StartNode).is_err() {
                    return;
                }
                if let Some(c) = current {
                    self.start(&c);
                }
            }
            Fires::ShutdownNode => {
                if fsm::step(decision.state, fsm::Event::ShutdownNode).is_err() {
                    return;
                }
                match current.filter(|c| c.phase.is_live() && c.marked_for_deletion.is_some()) {
                    Some(c) => self.shutdown_claimed(&c),
                    None => self.shutdown_unclaimed(),
                }
            }
            Fires::Nothing | Fires::CompleteClaim => {}
        }
    }

    fn slot_op(&self, kind: OperationKind, c: Option<&Claim>, started_at: DateTime<Utc>) -> SlotOp {
        SlotOp {
            kind,
            claim: c.map(|c| c.name.clone()),
            attempt: c.map_or(0, |c| c.attempt),
            started_at,
            timeout: match kind {
                OperationKind::Startup => self.v.startup_timeout,
                OperationKind::Shutdown => self.v.shutdown_timeout,
            },
            controller: self.v.holder.to_owned(),
            streak: 0,
            end: None,
            off_at: None,
        }
    }

    /// StartNode: the claim moves pending → booting with the operation recorded, in one write;
    /// the cordon is lifted first (a controller that dies between the two leaves a pending claim
    /// with no cordon, which the next pass boots; the other order could leave a booted bench
    /// carrying a cordon no pass lifts). A startup fires once per claim attempt, whatever the
    /// claim's own record says now (its write may have been lost).
    fn start(&mut self, c: &Claim) {
        if self.op.as_ref().is_some_and(|o| o.started(c)) {
            self.steps.push(Step::Note(
                "startup already fired for this attempt; not again",
            ));
            return;
        }
        let Ok(booting) = c.apply(Move::to(Phase::Booting), self.now) else {
            return;
        };
        let started_at = operation::stamp(self.now);
        let next =
            booting.start_operation(OperationKind::Startup, self.v.startup_timeout, started_at);
        let op = self.slot_op(OperationKind::Startup, Some(c), started_at);
        self.uncordon();
        self.record(c, next, op);
    }

    /// Records an operation's start and runs it.
    fn record(&mut self, c: &Claim, next: Claim, op: SlotOp) {
        let (kind, started_at) = (op.kind, op.started_at);
        self.replace(&next);
        self.op = Some(op.clone());
        self.steps.push(Step::Record(Box::new(Start {
            old: c.clone(),
            next: next.clone(),
            op,
        })));
        if kind == OperationKind::Shutdown {
            self.cordon(format!("draining for claim {}", c.name));
        }
        self.steps.push(Step::Spawn {
            kind,
            claim: Some(Box::new(next)),
            started_at,
        });
    }

    /// ShutdownNode for a marked claim: counted on the claim and bounded by its attempt streak;
    /// a pause is recorded on the claim once (SPEC §3.6).
    fn shutdown_claimed(&mut self, c: &Claim) {
        let t = self.v.timings;
        // A shutdown that completed while the bench still beats is not a machine that is off:
        // wait one poll interval for the observation before firing again.
        if c.operation
            .as_ref()
            .filter(|op| op.kind == OperationKind::Shutdown)
            .is_some_and(|op| {
                op.finished_at
                    .is_some_and(|f| self.now < add(f, self.settle()))
            })
        {
            return;
        }
        if let ShutdownGate::Paused { until } = c.shutdown_gate(self.now, t) {
            if c.reason != Some(Reason::ShutdownAttemptLimitReached) {
                let detail = format!(
                    "{} shutdowns fired and the machine is still on: no more until {}",
                    c.shutdown_attempts,
                    until.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                );
                self.write(Write {
                    old: c.clone(),
                    next: c.warn(Reason::ShutdownAttemptLimitReached),
                    event: Event::Warned,
                    operation: None,
                    duration_ms: None,
                    detail: Some(detail),
                    then: Then {
                        warns: Some(Reason::ShutdownAttemptLimitReached),
                        ..Then::default()
                    },
                });
            }
            return;
        }
        let started_at = operation::stamp(self.now);
        let next = c.record_shutdown_attempt(self.now, t).start_operation(
            OperationKind::Shutdown,
            self.v.shutdown_timeout,
            started_at,
        );
        let op = self.slot_op(OperationKind::Shutdown, Some(c), started_at);
        self.record(c, next, op);
    }

    /// ShutdownNode for a machine no claim wants: counted on the slot's record and bounded by
    /// its streak (SPEC §4.9 3).
    fn shutdown_unclaimed(&mut self) {
        let now = self.now;
        let streak = match operation::unclaimed_shutdown(
            self.op.as_ref(),
            now,
            self.v.timings,
            self.v.shutdown_timeout,
        ) {
            UnclaimedShutdown::Fire { streak } => streak,
            UnclaimedShutdown::Settling => return,
            UnclaimedShutdown::Paused { .. } => {
                self.steps.push(Step::Note(
                    "shutdowns of this unclaimed machine spent; paused",
                ));
                return;
            }
        };
        let started_at = operation::stamp(now);
        let op = SlotOp {
            streak,
            ..self.slot_op(OperationKind::Shutdown, None, started_at)
        };
        self.op = Some(op.clone());
        self.steps.push(Step::RecordUnclaimed(op));
        self.cordon("draining: no claim wants this machine".to_owned());
        self.steps.push(Step::Spawn {
            kind: OperationKind::Shutdown,
            claim: None,
            started_at,
        });
    }

    /// The report (SPEC §3.10): the phase the triple derives, through the one writer, with what
    /// was observed. A machine that would be usable but for its bench's hold is reported ready
    /// and held: a hold never sends a slot's phase backwards.
    fn report(&self) -> Option<SlotStatus> {
        let now = self.now;
        let current = current(&self.claims).cloned();
        let mut status = self.v.status.clone();
        let before = status.clone();
        let held = self
            .v
            .bench
            .filter(|_| self.state == Some(State::Held))
            .and_then(|b| b.verdict(now).hold)
            .map(|h| h.to_string());
        let usable_but_held =
            held.is_some() && node::usable(State::Up, self.v.binding, self.v.readiness_taints);
        if let Some(power) = self.power {
            let input = Input {
                claim: ClaimInput::of(current.as_ref()),
                power,
                usable: self.usable || usable_but_held,
            };
            status.history.record(law::report(input), now);
        }
        status.history.expire(now);
        status.power = self.power;
        status.usable = self.usable;
        status.waiting = current
            .as_ref()
            .filter(|c| c.wants_machine() && !self.v.blind)
            .and_then(|c| self.waiting(c, held.as_deref()));
        status.held = held;
        status.claim = current.filter(|c| c.phase.is_live()).map(|c| c.name);
        let changed = status != before || status.updated_at.is_none();
        changed.then_some(SlotStatus {
            updated_at: Some(now),
            ..status
        })
    }

    /// Why a slot's live claim that wants its machine waits (SPEC §4.7).
    fn waiting(&self, c: &Claim, held: Option<&str>) -> Option<SlotWaiting> {
        if self.going_down() {
            return Some(SlotWaiting::PoweringOff);
        }
        if let Some(reason) = held {
            return Some(SlotWaiting::Held {
                reason: reason.to_owned(),
            });
        }
        let on = self.power == Some(Power::On);
        if c.phase == Phase::Ready {
            return (on && !self.usable).then_some(SlotWaiting::NotUsable);
        }
        Some(
            match claim::readiness_gate(c, on, self.usable, self.now, self.v.timings) {
                Gate::Ready | Gate::Heard | Gate::Fail => return None,
                Gate::Wait(claim::Waiting::Startup) if c.running_operation().is_some() => {
                    SlotWaiting::StartupRunning
                }
                Gate::Wait(claim::Waiting::Startup) => SlotWaiting::Start,
                Gate::Wait(claim::Waiting::FirstBeat { until }) => SlotWaiting::FirstBeat { until },
                Gate::Wait(claim::Waiting::Usable { until }) => SlotWaiting::Usable { until },
            },
        )
    }

    fn finish(self) -> Plan {
        let status = self.report();
        Plan {
            op: self.initial_op,
            uncertain: self.uncertain,
            steps: self.steps,
            power: self.power,
            status,
        }
    }
}

#[cfg(test)]
mod tests;
