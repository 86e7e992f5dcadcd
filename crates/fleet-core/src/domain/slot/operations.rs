//! The slot's operation record and the outcomes of its operations (SPEC §5.4).

use std::time::Duration;

use super::{
    Done, Event, Move, NodeState, OpEnd, OperationKind, OperationOutcome, Phase, Planner, Power,
    Reason, SlotOp, Step, Then, Unreported, Write, fsm, operation,
};

impl<'a> Planner<'a> {
    /// The slot's operation record (SPEC §5.4): the newest of the store's record, this
    /// controller's memory and the claims' own records. Where the store lacks it, it is put back,
    /// and a pending claim whose startup it records goes back to booting with it: a startup fires
    /// once per claim attempt. An operation recorded by a write whose reply was lost runs now if
    /// the record shows it and nobody runs it.
    pub(super) fn operation_record(&mut self) {
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
    pub(super) fn restore_booting(&mut self, op: &SlotOp) {
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
    pub(super) fn outcomes(&mut self) {
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
    pub(super) fn settle_unreported(&mut self) {
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
    pub(super) fn outcome_write(&self, done: &Done, settles: bool) -> Option<Write> {
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
                // A claim that already ended keeps its end: the move below is refused.
                OperationOutcome::Abandoned => Some(Reason::StuckTransition),
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
    pub(super) fn observe_off(&mut self) {
        if self.power != Some(Power::Off) || !self.going_down() {
            return;
        }
        if let Some(o) = self.op.as_mut() {
            o.off_at = Some(self.now);
            let started_at = o.started_at;
            self.steps.push(Step::ObserveOff { started_at });
        }
    }
}
