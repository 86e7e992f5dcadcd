//! A slot's history and a group's status (SPEC §3.10): fields that exist to be read and are
//! inputs to nothing.
//!
//! `History::record` is the one writer of the slot's phase and history: the display ring (32
//! rows, 24 hours, in write order), the activations ledger (512 rows of one timestamp each, 24
//! hours), the activation counts, `previous_phase` and `last_transition_time`. The fields are
//! private, so nothing else can write them; `tests/pure/hygiene.rs` holds the same on the source.
//! `activations_last_24h` is the length of the ledger's window, never a count read through the
//! ring's cap: a slot that churns 40 times a day writes 160 ring rows, keeps 32, and reports 40.
//! The window's expiry is a scheduled write (`expire` at `next_expiry`), not a read-time guess.
//! Pure: no I/O, no clock.

use std::collections::VecDeque;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::claim::add;
use super::law::{Power, Report};

/// Rows the display ring keeps.
pub const RING_LEN: usize = 32;
/// Rows the activations ledger keeps.
pub const LEDGER_LEN: usize = 512;
/// The window of both the ring and the ledger.
pub const WINDOW: Duration = Duration::from_secs(24 * 3600);

/// One row of the display ring: a change of the slot's phase.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transition {
    pub at: DateTime<Utc>,
    pub from: Option<Report>,
    pub to: Report,
}

/// A slot's phase and history.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct History {
    phase: Option<Report>,
    last_transition_time: Option<DateTime<Utc>>,
    previous_phase: Option<Report>,
    recent_transitions: VecDeque<Transition>,
    recent_activations: VecDeque<DateTime<Utc>>,
    activations_total: u64,
    activations_last_24h: u32,
}

impl History {
    pub fn phase(&self) -> Option<Report> {
        self.phase
    }

    pub fn last_transition_time(&self) -> Option<DateTime<Utc>> {
        self.last_transition_time
    }

    pub fn previous_phase(&self) -> Option<Report> {
        self.previous_phase
    }

    /// The display ring, oldest first.
    pub fn recent_transitions(&self) -> impl Iterator<Item = &Transition> {
        self.recent_transitions.iter()
    }

    /// The ledger of the window's boots, oldest first.
    pub fn recent_activations(&self) -> impl Iterator<Item = &DateTime<Utc>> {
        self.recent_activations.iter()
    }

    pub fn activations_total(&self) -> u64 {
        self.activations_total
    }

    pub fn activations_last_24h(&self) -> u32 {
        self.activations_last_24h
    }

    /// Records the phase a pass derived, at `now`: the one writer. Re-recording the phase the
    /// slot already has changes nothing and returns false.
    pub fn record(&mut self, phase: Report, now: DateTime<Utc>) -> bool {
        if self.phase == Some(phase) {
            return false;
        }
        let from = self.phase;
        self.previous_phase = from;
        self.phase = Some(phase);
        self.last_transition_time = Some(now);
        self.recent_transitions.push_back(Transition {
            at: now,
            from,
            to: phase,
        });
        if is_activation(from, phase) {
            self.recent_activations.push_back(now);
            self.activations_total = self.activations_total.saturating_add(1);
        }
        self.trim(now);
        true
    }

    /// The scheduled write: drops what left the window by `now`. Returns whether it changed
    /// anything.
    pub fn expire(&mut self, now: DateTime<Utc>) -> bool {
        let before = (self.recent_transitions.len(), self.recent_activations.len());
        self.trim(now);
        before != (self.recent_transitions.len(), self.recent_activations.len())
    }

    /// When the next row leaves the window: the instant `expire` must be scheduled for.
    pub fn next_expiry(&self) -> Option<DateTime<Utc>> {
        let ring = self.recent_transitions.front().map(|t| add(t.at, WINDOW));
        let ledger = self.recent_activations.front().map(|at| add(*at, WINDOW));
        match (ring, ledger) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn trim(&mut self, now: DateTime<Utc>) {
        let in_window = |at: &DateTime<Utc>| add(*at, WINDOW) > now;
        while self.recent_transitions.len() > RING_LEN
            || self
                .recent_transitions
                .front()
                .is_some_and(|t| !in_window(&t.at))
        {
            self.recent_transitions.pop_front();
        }
        while self.recent_activations.len() > LEDGER_LEN
            || self
                .recent_activations
                .front()
                .is_some_and(|at| !in_window(at))
        {
            self.recent_activations.pop_front();
        }
        self.activations_last_24h =
            u32::try_from(self.recent_activations.len()).unwrap_or(u32::MAX);
    }
}

/// A boot: the slot's phase becomes booting from off or pending (a power-on was committed).
fn is_activation(from: Option<Report>, to: Report) -> bool {
    to == Report::Booting && matches!(from, None | Some(Report::Off) | Some(Report::Pending))
}

/// What one slot contributes to its group's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotSummary {
    /// The machine's power; `None` when the controller is blind.
    pub power: Option<Power>,
    /// Whether the slot's last claim failed.
    pub last_claim_failed: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Health {
    /// No slot's last claim failed and every machine is seen.
    Healthy,
    /// Some slot's last claim failed, or some machine cannot be seen.
    Degraded,
    /// Every slot's last claim failed: the group cannot produce a machine.
    Unhealthy,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScaleAction {
    Increase,
    Delete,
    Decrease,
}

/// A group's status, one level up from its slots.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupStatus {
    pub slots: u32,
    pub on: u32,
    pub off: u32,
    pub health: Health,
    pub last_scale_at: Option<DateTime<Utc>>,
    pub last_scale_action: Option<(ScaleAction, u32)>,
}

/// Derives a group's status from its slots and its last scaling call.
pub fn group_status(
    slots: &[SlotSummary],
    last_scale: Option<(DateTime<Utc>, ScaleAction, u32)>,
) -> GroupStatus {
    let count = |f: &dyn Fn(&SlotSummary) -> bool| {
        u32::try_from(slots.iter().filter(|s| f(s)).count()).unwrap_or(u32::MAX)
    };
    let failed = count(&|s| s.last_claim_failed);
    let blind = count(&|s| s.power.is_none());
    let total = u32::try_from(slots.len()).unwrap_or(u32::MAX);
    let health = if total > 0 && failed == total {
        Health::Unhealthy
    } else if failed > 0 || blind > 0 {
        Health::Degraded
    } else {
        Health::Healthy
    };
    GroupStatus {
        slots: total,
        on: count(&|s| s.power == Some(Power::On)),
        off: count(&|s| s.power == Some(Power::Off)),
        health,
        last_scale_at: last_scale.map(|(at, _, _)| at),
        last_scale_action: last_scale.map(|(_, action, n)| (action, n)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t(secs: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000 + secs, 0).unwrap()
    }

    #[test]
    fn record_writes_the_phase_its_previous_and_time_once() {
        let mut h = History::default();
        assert!(h.record(Report::Off, t(0)));
        assert!(h.record(Report::Pending, t(5)));
        assert!(
            !h.record(Report::Pending, t(9)),
            "re-recording changes nothing"
        );
        assert_eq!(h.phase(), Some(Report::Pending));
        assert_eq!(h.previous_phase(), Some(Report::Off));
        assert_eq!(h.last_transition_time(), Some(t(5)));
        let rows: Vec<_> = h.recent_transitions().map(|r| (r.from, r.to)).collect();
        assert_eq!(
            rows,
            [(None, Report::Off), (Some(Report::Off), Report::Pending)]
        );
    }

    // The seed's worked example: a slot that churns 40 times a day keeps 32 ring rows and
    // reports 40 activations, because the count is the ledger's window, not the ring.
    #[test]
    fn a_slot_that_churns_40_times_a_day_reports_40() {
        let mut h = History::default();
        let step = 24 * 3600 / 41;
        let mut now = 0;
        for _ in 0..40 {
            for phase in [
                Report::Off,
                Report::Pending,
                Report::Booting,
                Report::Ready,
                Report::Draining,
            ] {
                now += step / 5;
                h.record(phase, t(now));
            }
        }
        assert_eq!(h.recent_transitions().count(), RING_LEN);
        assert_eq!(h.activations_last_24h(), 40);
        assert_eq!(h.activations_total(), 40);
    }

    #[test]
    fn the_window_expires_by_a_scheduled_write() {
        let mut h = History::default();
        h.record(Report::Pending, t(0));
        h.record(Report::Booting, t(60));
        assert_eq!(h.activations_last_24h(), 1);
        assert_eq!(
            h.next_expiry(),
            Some(t(24 * 3600)),
            "the ring's first row leaves first"
        );
        assert!(!h.expire(t(24 * 3600 - 1)));
        assert!(h.expire(t(24 * 3600)));
        assert_eq!(h.next_expiry(), Some(t(60 + 24 * 3600)));
        assert_eq!(
            h.activations_last_24h(),
            1,
            "a read between expiries keeps the stored count"
        );
        assert!(h.expire(t(60 + 24 * 3600)));
        assert_eq!(h.activations_last_24h(), 0);
        assert_eq!(h.activations_total(), 1, "the total never expires");
        assert_eq!(h.next_expiry(), None);
        assert_eq!(
            h.phase(),
            Some(Report::Booting),
            "expiry is not a transition"
        );
    }

    #[test]
    fn the_ledger_is_bounded_at_512() {
        let mut h = History::default();
        for i in 0..600 {
            h.record(Report::Off, t(i * 10));
            h.record(Report::Booting, t(i * 10 + 5));
        }
        assert_eq!(h.recent_activations().count(), LEDGER_LEN);
        assert_eq!(h.activations_last_24h(), 512);
        assert_eq!(h.activations_total(), 600);
    }

    #[test]
    fn only_a_power_on_is_an_activation() {
        use Report::*;
        for from in [
            None,
            Some(Off),
            Some(Pending),
            Some(Booting),
            Some(Ready),
            Some(Draining),
        ] {
            for to in Report::ALL {
                let want = to == Booting && matches!(from, None | Some(Off) | Some(Pending));
                assert_eq!(is_activation(from, to), want, "{from:?} -> {to}");
            }
        }
    }

    #[test]
    fn group_status_counts_and_judges_health() {
        let on = SlotSummary {
            power: Some(Power::On),
            last_claim_failed: false,
        };
        let off = SlotSummary {
            power: Some(Power::Off),
            last_claim_failed: false,
        };
        let failed = SlotSummary {
            power: Some(Power::Off),
            last_claim_failed: true,
        };
        let blind = SlotSummary {
            power: None,
            last_claim_failed: false,
        };
        let s = group_status(&[on, off, off], Some((t(1), ScaleAction::Increase, 2)));
        assert_eq!((s.slots, s.on, s.off, s.health), (3, 1, 2, Health::Healthy));
        assert_eq!(s.last_scale_action, Some((ScaleAction::Increase, 2)));
        assert_eq!(group_status(&[on, failed], None).health, Health::Degraded);
        assert_eq!(group_status(&[on, blind], None).health, Health::Degraded);
        assert_eq!(
            group_status(&[failed, failed], None).health,
            Health::Unhealthy
        );
        assert_eq!(group_status(&[], None).health, Health::Healthy);
    }
}
