//! What a group's pass gathers of its slots' outcomes as it walks them, and tells once the group
//! is done: the claims' phases (a metric), each slot's power as seen (the energy ledger), the
//! statuses to write, and the pass's report.

use crate::config::Slot;
use crate::domain::name::BenchName;
use crate::store::claims::SlotStatus;

use super::act::SlotOutcome;
use super::energy::Sighting;
use super::{Map, PassReport};

/// What a group's pass gathers of its slots' outcomes, told once the group is done: the claims'
/// phases (the metric), what each slot's power was seen as (the energy ledger), the statuses to
/// report.
pub(super) struct Gathered {
    pub phases: Map<&'static str, i64>,
    pub sightings: Vec<Sighting>,
    pub statuses: Vec<(BenchName, SlotStatus)>,
}

impl Gathered {
    pub(super) fn with_capacity(slots: usize) -> Gathered {
        Gathered {
            phases: Map::default(),
            sightings: Vec::with_capacity(slots),
            statuses: Vec::new(),
        }
    }

    /// `slot`'s outcome, counted in the pass's `report` too.
    pub(super) fn add(&mut self, slot: &Slot, outcome: SlotOutcome, report: &mut PassReport) {
        report.slots += 1;
        report.writes += outcome.writes;
        self.sightings.push(Sighting {
            slot: slot.name.clone(),
            power: outcome.power,
            draw: slot.power,
        });
        if outcome.started {
            report.started.push(slot.name.clone());
        }
        if outcome.stopped {
            report.stopped.push(slot.name.clone());
        }
        for (_, phase) in &outcome.phases {
            *self.phases.entry(phase.as_str()).or_default() += 1;
        }
        if let Some(status) = outcome.status {
            self.statuses.push((slot.name.clone(), status));
        }
    }
}
