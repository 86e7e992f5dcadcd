//! The planner's state and the middle of the pass: the claim controller's judgment, fleet's
//! cordon, the readiness gate and adoption.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{
    Binding, CORDON_PREFIX, Claim, ClaimName, Context, Event, Gate, Judgment, Move, OperationKind,
    Phase, Plan, Planner, Power, Reason, SlotOp, State, Step, Then, View, Write, claim, node,
};

impl<'a> Planner<'a> {
    pub(super) fn new(mut v: View<'a>, now: DateTime<Utc>) -> Self {
        // A bound slot whose Node cannot be seen is blind, like a slot whose bench cannot be: an
        // unknown usability must not read as unusable, or the readiness gate would run out and
        // power the machine off (SPEC §5.2).
        v.blind |= v.binding == Binding::Unseen;
        let state = (!v.blind).then(|| v.bench.map_or(State::Down, |b| b.verdict(now).state));
        let power = state.map(Power::of);
        let usable = state.is_some_and(|s| node::usable(s, v.binding, v.readiness_taints));
        let gate_usable = state.is_some_and(|s| match v.binding {
            Binding::Bound(Some(n)) => node::usable(
                s,
                Binding::Bound(Some(&node::released(n))),
                v.readiness_taints,
            ),
            other => node::usable(s, other, v.readiness_taints),
        });
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
            budget_waits: false,
            gate_usable,
            claims,
            op: None,
            initial_op: None,
            uncertain,
            finished,
            steps: Vec::new(),
        }
    }

    pub(super) fn settle(&self) -> Duration {
        self.v.timings.job_monitor_poll_interval
    }

    pub(super) fn going_down(&self) -> bool {
        self.op
            .as_ref()
            .is_some_and(|o| o.going_down(self.now, self.settle()))
    }

    /// Replaces the pass's copy of a claim with what a write made of it.
    pub(super) fn replace(&mut self, next: &Claim) {
        if let Some(i) = self.claims.iter().position(|c| c.name == next.name) {
            self.claims[i] = next.clone();
        }
    }

    pub(super) fn write(&mut self, w: Write) {
        self.replace(&w.next);
        self.steps.push(Step::Write(Box::new(w)));
    }

    /// The claim controller's judgment of every claim (SPEC §3.8).
    pub(super) fn judge_claims(&mut self) {
        let live: Vec<&Claim> = self.claims.iter().filter(|c| c.phase.is_live()).collect();
        let losers: Vec<ClaimName> = claim::superseded(&live)
            .iter()
            .map(|c| c.name.clone())
            .collect();
        let t = self.v.timings;
        let mut collected = Vec::new();
        // Every claim is judged as the pass read it; the writes land after (no claim's judgment
        // reads another's), and only a claim that changes is copied.
        let mut steps = Vec::new();
        for c in &self.claims {
            let ctx = Context {
                now: self.now,
                power: self.power,
                slot_exists: true,
                superseded: losers.contains(&c.name),
                timings: t,
            };
            let (next, event) = match claim::judge(c, &ctx) {
                Judgment::Keep => continue,
                Judgment::Collect => {
                    collected.push(c.name.clone());
                    steps.push(Step::Collect(Box::new(c.clone())));
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
            steps.push(Step::Write(Box::new(Write {
                old: c.clone(),
                next,
                event,
                operation: None,
                duration_ms: None,
                detail: None,
                then: Then::default(),
            })));
        }
        for step in steps {
            match step {
                Step::Write(w) => self.write(*w),
                other => self.steps.push(other),
            }
        }
        self.claims.retain(|c| !collected.contains(&c.name));
    }

    /// Whether the bench carries fleet's own hold request.
    pub(super) fn cordoned_by_fleet(&self) -> bool {
        self.v
            .bench
            .and_then(|b| b.requested_hold.as_ref())
            .is_some_and(|r| r.reason.as_str().starts_with(CORDON_PREFIX))
    }

    pub(super) fn uncordon(&mut self) {
        if self.cordoned_by_fleet() && !self.steps.contains(&Step::Uncordon) {
            self.steps.push(Step::Uncordon);
        }
    }

    pub(super) fn cordon(&mut self, why: String) {
        let carried = self
            .v
            .bench
            .and_then(|b| b.requested_hold.as_ref())
            .is_some();
        if !carried {
            self.steps.push(Step::Cordon { why });
        }
        // After the write that recorded the shutdown, as every Kubernetes write of fleet is.
        self.node_taints_best_effort(node::cordon_edit);
    }

    /// An operation of the slot is in flight: here, or recorded. (An outcome that came back here
    /// is taken first in the pass, so by now it is the record's end.)
    pub(super) fn in_flight(&self) -> bool {
        self.v.here.running.is_some()
            || self.op.as_ref().is_some_and(SlotOp::running)
            || self.running_elsewhere()
    }

    /// The slot's last operation, recorded under a group it left (SPEC §4.1), still runs: its
    /// wrapper has not reported it, and still may (it is not past its timeout and the report
    /// slack, where its wrapper has killed it). Nobody else ends such a record, so one whose
    /// wrapper died blocks the slot no longer than that.
    pub(super) fn running_elsewhere(&self) -> bool {
        self.elsewhere()
            .is_some_and(|o| o.running() && !o.report_overdue(self.now, self.v.report_slack))
    }

    /// The slot's operation recorded under a group it left, unless one of its own was fired
    /// since: that one is the slot's last, and what the old group did is over.
    fn elsewhere(&self) -> Option<&SlotOp> {
        self.v.elsewhere_op.as_ref().filter(|o| {
            self.op
                .as_ref()
                .is_none_or(|own| own.started_at < o.started_at)
        })
    }

    /// A shutdown recorded under a group the slot left may still be darkening its machine: it
    /// runs, or it is going down as the slot's own shutdown would be (SPEC §4.5), and this pass
    /// has not seen the machine off. (Nobody writes that record's observed-off time: the group
    /// it is in has no pass over the slot, so this pass's own observation stands for it.)
    pub(super) fn darkening_elsewhere(&self) -> bool {
        self.elsewhere().is_some_and(|o| {
            o.kind == OperationKind::Shutdown
                && (self.running_elsewhere()
                    || (o.going_down(self.now, self.settle()) && self.power != Some(Power::Off)))
        })
    }

    /// Fleet's cordon: a claim that wants the machine lifts it, wherever a crash left it (not
    /// while the machine is on its way down: its claim starts it once it is off); and it ends
    /// with what set it, once the machine is observed off with nothing in flight and no live
    /// claim, so it never outlives the claim.
    pub(super) fn cordons(&mut self) {
        if self.v.blind || !self.v.acting {
            return;
        }
        if self.going_down() {
            // The bench's hold stays; the Node's taint is retried if a write refused it.
            self.node_cordons(false);
            return;
        }
        let wanted = self.claims.iter().any(Claim::wants_machine);
        let over = self.power == Some(Power::Off)
            && !self.in_flight()
            && !self.claims.iter().any(|c| c.phase.is_live());
        if wanted || over {
            self.uncordon();
        }
        self.node_cordons(wanted);
    }

    /// A shutdown of the slot is in flight or settling, or the machine has not been observed off
    /// since the last one: a machine on its way off is not capacity, whatever it reports.
    pub(super) fn shutting_down(&self) -> bool {
        self.going_down()
            || self.darkening_elsewhere()
            || self.v.here.running == Some(OperationKind::Shutdown)
            || self.claims.iter().any(|c| {
                c.running_operation()
                    .is_some_and(|op| op.kind == OperationKind::Shutdown)
            })
    }

    /// The readiness gate (SPEC §4.5 step 6) of the claim in its boot window.
    pub(super) fn readiness_gate(&mut self) {
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
        let gate = claim::readiness_gate(&c, on, self.gate_usable, now, self.v.timings);
        let (next, event) = match gate {
            Gate::Ready => {
                // The Node is released before the claim says ready: a claim never reads ready
                // over a Node that still carries fleet's cordon.
                if !self.release_node() {
                    return;
                }
                (c.apply(Move::to(Phase::Ready), now), Event::Ready)
            }
            Gate::Heard => (Ok(c.heard(now)), Event::Observed),
            Gate::Fail => {
                // A cordoned Node is invisible to cluster-autoscaler's scale-down: fleet's
                // cordon goes whatever the claim's fate.
                self.node_taints_best_effort(node::uncordon_edit);
                (
                    c.apply(
                        Move::because(Phase::Failed, Reason::ReadinessGateTimeout),
                        now,
                    ),
                    Event::Failed,
                )
            }
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
    ///
    /// Never while an operation of the slot is in flight, or a shutdown may still be darkening
    /// the machine: the slot's own, or one its old group fired before a rename (a
    /// group renamed inside the adoption window adopted a machine whose old group's shutdown was
    /// still running, whose record the new group's pass does not read as its own).
    pub(super) fn adoption(&mut self) {
        if !self.v.adopting
            || self.v.blind
            || self.v.unreadable
            || self.shutting_down()
            || self.in_flight()
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

    pub(super) fn finish(self) -> Plan {
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
