//! The slot's report (SPEC §3.10, §4.7).

use super::{
    Claim, ClaimInput, Gate, Input, Phase, Planner, Power, SlotStatus, SlotWaiting, State, claim,
    current, law, node,
};

impl<'a> Planner<'a> {
    /// The report (SPEC §3.10): the phase the triple derives, through the one writer, with what
    /// was observed. A machine that would be usable but for its bench's hold is reported ready
    /// and held: a hold never sends a slot's phase backwards.
    pub(super) fn report(&self) -> Option<SlotStatus> {
        let now = self.now;
        let current = current(&self.claims);
        let before = self.v.status;
        let mut status = before.clone();
        let held = self
            .v
            .bench
            .filter(|_| self.state == Some(State::Held))
            .and_then(|b| b.verdict(now).hold)
            .map(|h| h.to_string());
        // The law reads a held machine as what it is but for its hold, so a hold never sends a
        // slot's phase backwards.
        let usable = match self.state {
            Some(State::Held) => node::usable(State::Up, self.v.binding, self.v.readiness_taints),
            _ => self.usable,
        };
        if let Some(power) = self.power {
            let input = Input {
                claim: ClaimInput::of(current),
                power,
                usable,
            };
            status.history.record(law::report(input), now);
        }
        status.history.expire(now);
        status.power = self.power;
        status.usable = self.usable;
        status.waiting = current
            .filter(|c| c.wants_machine() && !self.v.blind)
            .and_then(|c| self.waiting(c, held.as_deref()));
        status.held = held;
        status.claim = current
            .filter(|c| c.phase.is_live())
            .map(|c| c.name.clone());
        let changed = status != *before || status.updated_at.is_none();
        changed.then_some(SlotStatus {
            updated_at: Some(now),
            ..status
        })
    }

    /// Why a slot's live claim that wants its machine waits (SPEC §4.7).
    pub(super) fn waiting(&self, c: &Claim, held: Option<&str>) -> Option<SlotWaiting> {
        if self.going_down() || self.darkening_elsewhere() {
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
                Gate::Wait(claim::Waiting::Startup) if self.budget_waits => {
                    SlotWaiting::PowerBudget
                }
                Gate::Wait(claim::Waiting::Startup) => SlotWaiting::Start,
                Gate::Wait(claim::Waiting::FirstBeat { until }) => SlotWaiting::FirstBeat { until },
                Gate::Wait(claim::Waiting::Usable { until }) => SlotWaiting::Usable { until },
            },
        )
    }
}
