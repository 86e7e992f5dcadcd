//! The input law and the power operations it fires (SPEC §3.1, §3.6, §4.9).

use chrono::{DateTime, Utc};

use super::{
    Claim, ClaimInput, Event, Fires, Input, Move, OperationKind, Phase, Planner, Reason,
    ShutdownGate, SlotOp, Start, Step, Then, UnclaimedShutdown, Write, add, current, fsm, law,
    operation,
};

impl<'a> Planner<'a> {
    /// The input law (SPEC §3.1) over the current claim, the power and usability: what fires.
    /// An operation in flight, here or recorded by a controller that died, blocks every new one.
    pub(super) fn law(&mut self) {
        let Some(power) = self.power else { return };
        let current = current(&self.claims);
        let input = Input {
            claim: ClaimInput::of(current),
            power,
            usable: self.usable,
        };
        let decision = law::decide(input);
        let in_flight =
            self.in_flight() || self.claims.iter().any(|c| c.running_operation().is_some());
        // A shutdown the slot's old group fired may still be darkening the machine (SPEC §4.1):
        // no other shutdown of it meanwhile, as for the slot's own going down.
        if in_flight || self.v.unreadable || self.darkening_elsewhere() {
            return;
        }
        match decision.fires {
            Fires::StartNode => {
                if fsm::step(decision.state, fsm::Event::StartNode).is_err() {
                    return;
                }
                if let Some(c) = current.cloned() {
                    self.start(&c);
                }
            }
            Fires::ShutdownNode => {
                if fsm::step(decision.state, fsm::Event::ShutdownNode).is_err() {
                    return;
                }
                match current
                    .filter(|c| c.phase.is_live() && c.marked_for_deletion.is_some())
                    .cloned()
                {
                    Some(c) => self.shutdown_claimed(&c),
                    None => self.shutdown_unclaimed(),
                }
            }
            Fires::Nothing | Fires::CompleteClaim => {}
        }
    }

    pub(super) fn slot_op(
        &self,
        kind: OperationKind,
        c: Option<&Claim>,
        started_at: DateTime<Utc>,
    ) -> SlotOp {
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
    pub(super) fn start(&mut self, c: &Claim) {
        if self.op.as_ref().is_some_and(|o| o.started(c)) {
            self.steps.push(Step::Note(
                "startup already fired for this attempt; not again",
            ));
            return;
        }
        if !self.v.may_start {
            // Pending, in request order, its deadline still running (SPEC §4.11).
            self.budget_waits = true;
            self.steps
                .push(Step::Note("the start waits for the power-on budget"));
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
    pub(super) fn record(&mut self, c: &Claim, next: Claim, op: SlotOp) {
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
    pub(super) fn shutdown_claimed(&mut self, c: &Claim) {
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
    pub(super) fn shutdown_unclaimed(&mut self) {
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
}
