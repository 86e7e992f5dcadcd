//! The energy ledger's accounting (SPEC §4.12): after each group's slots, the power each slot
//! was observed at goes to its ledger. `domain::energy` decides when a step is due and what it
//! credits; this module keeps the leader's copy of each ledger, reads the missing ones in one
//! round trip, and writes the due steps of a group, each its own fenced compare-and-set, in one
//! more: up to [`LEDGERS_AT_ONCE`] ledgers a round trip, so a new leader of 100 000 slots reads
//! and writes them in ten parts of each.
//!
//! A step the store refuses because the mark moved (a predecessor or a successor wrote) drops
//! the copy, and the next due step reads the ledger again, so no interval is counted twice. A
//! write that fails is logged and retried at the next due step; the interval is not lost, since
//! the mark did not move. The ledger never decides anything for the claim model.

use chrono::{DateTime, Utc};
use redis::aio::ConnectionLike;
use tracing::{debug, warn};

use crate::config::PowerDraw;
use crate::domain::energy::{self, Advance, Figures, Ledger, Mark};
use crate::domain::law::Power;
use crate::domain::name::{BenchName, GroupName};
use crate::lifecycle::Runner;
use crate::store::energy::{Accounted, EnergyError, Step};
use crate::telemetry::{EnergyStep, Metrics};

use super::{Controller, Map, Nodes};

/// The most ledgers a group's accounting reads, or steps and writes, in one round trip. A new
/// leader's first pass reads and steps every ledger of its groups: at 100 000 slots in one
/// group, all at once, its steps, their commands and their answers were 80 MB of the process's
/// peak, 1.6 times what it holds at rest. In parts, a few megabytes at a time; a pass
/// at rest steps about a sixtieth of the ledgers (`energy::due`), one part up to 600 000 slots.
pub const LEDGERS_AT_ONCE: usize = 10_000;

/// What a group's pass observed of one slot, for its ledger.
pub(super) struct Sighting {
    pub slot: BenchName,
    pub power: Option<Power>,
    pub draw: Option<PowerDraw>,
}

/// The leader's copies of the ledgers, by group and slot; a slot absent is read before its next
/// step. By group, then slot: a pass looks each slot up by its name, with no key to build (a key
/// of both names cost two clones a slot each pass, 7% of a 100 000-slot pass).
#[derive(Default)]
pub(super) struct Ledgers {
    kept: Map<GroupName, Map<BenchName, Ledger>>,
}

impl<C, R, N> Controller<C, R, N>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
    R: Runner,
    N: Nodes,
{
    /// Takes the due steps of a group's ledgers at `now` (the server's time), in parts of at
    /// most [`LEDGERS_AT_ONCE`].
    pub(super) async fn account_energy(
        &mut self,
        group: &GroupName,
        seen: &[Sighting],
        now: DateTime<Utc>,
    ) {
        if !self.load_ledgers(group, seen).await {
            return;
        }
        let due: Vec<&Sighting> = match self.memory.energy.kept.get(group) {
            Some(ledgers) => (seen.iter())
                .filter(|x| {
                    ledgers.get(&x.slot).is_some_and(|l| {
                        energy::due(l.mark(), x.power, now, energy::phase_of(x.slot.as_str()))
                    })
                })
                .collect(),
            None => return,
        };
        for part in due.chunks(LEDGERS_AT_ONCE) {
            if !self.step_ledgers(group, part, now).await {
                return;
            }
        }
    }

    /// Takes the steps of `due` (each has a copy, and is due) on their copies and writes them in
    /// one round trip; the copies go back once written. Returns false when the write failed or
    /// this controller was fenced: the rest wait for the next pass, still due.
    async fn step_ledgers(
        &mut self,
        group: &GroupName,
        due: &[&Sighting],
        now: DateTime<Utc>,
    ) -> bool {
        let ledgers = self.memory.energy.kept.entry(group.clone()).or_default();
        let store = match &self.leading.token {
            Some(token) => self.energy.fenced(token),
            None => self.energy.clone(),
        };
        // Each due slot's step, taken on its copy; the copies go back once written.
        let mut stepped: Vec<(&Sighting, Option<Mark>, Ledger, Advance)> = Vec::new();
        for &x in due {
            let Some(mut ledger) = ledgers.remove(&x.slot) else {
                continue;
            };
            let before = ledger.mark();
            let advance = ledger.observe(x.power, now);
            stepped.push((x, before, ledger, advance));
        }
        let steps: Vec<Step> = stepped
            .iter()
            .map(|(x, before, after, advance)| Step {
                slot: &x.slot,
                before: *before,
                after,
                advance,
            })
            .collect();
        let answers = match store.account_all(group, &steps).await {
            Ok(answers) => answers,
            Err(e) => {
                warn!(%group, error = fleet_redis::connect::chain(&e), "writing the energy ledgers failed; the intervals are accounted at the next step");
                return false;
            }
        };
        let mut fenced = false;
        for ((x, _, ledger, advance), answer) in stepped.into_iter().zip(answers) {
            match answer {
                Ok(Accounted::Written) => {
                    count(&self.metrics, group, x, &advance);
                    // The copy keeps only the buckets a step can still change; one
                    // whose mark a clock moved back onto let-go days is read again instead.
                    let mut ledger = ledger;
                    ledger.shed();
                    if ledger.holds_the_open_days() {
                        ledgers.insert(x.slot.clone(), ledger);
                    }
                }
                Ok(Accounted::Moved) => {
                    debug!(%group, slot = %x.slot, "energy ledger: another writer moved the mark; reading it again");
                }
                Err(e) => {
                    if matches!(e, EnergyError::Fenced { .. }) {
                        fenced = true;
                        self.leading
                            .deposed
                            .store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                    warn!(%group, slot = %x.slot, error = fleet_redis::connect::chain(&e), "writing the energy ledger failed; the interval is accounted at the next step");
                }
            }
        }
        !fenced
    }

    /// Reads the ledgers of the due slots this leader has no copy of, [`LEDGERS_AT_ONCE`] a round
    /// trip; drops the copies of slots that left the group. Returns false when a read failed
    /// (the copies read before it stay).
    async fn load_ledgers(&mut self, group: &GroupName, seen: &[Sighting]) -> bool {
        let ledgers = self.memory.energy.kept.entry(group.clone()).or_default();
        // A slot without a copy is due, whatever its power: its ledger is read first.
        let missing: Vec<BenchName> = seen
            .iter()
            .filter(|x| !ledgers.contains_key(&x.slot))
            .map(|x| x.slot.clone())
            .collect();
        // Slots that left the group are no longer accounted: their copies go. There are such
        // copies only when the copies outnumber the slots that have one (the slots of `seen` are
        // distinct), so a group whose slots stayed pays nothing. A set, not a scan of `seen` per
        // copy: that was quadratic, 20 s a pass at 100 000 slots.
        if ledgers.len() + missing.len() > seen.len() {
            let present: super::Set<&BenchName> = seen.iter().map(|x| &x.slot).collect();
            ledgers.retain(|s, _| present.contains(s));
        }
        for part in missing.chunks(LEDGERS_AT_ONCE) {
            match self.energy.read_all(group, part).await {
                Ok(stored) => {
                    for (slot, stored) in part.iter().zip(stored) {
                        for why in &stored.skipped {
                            warn!(%group, %slot, problem = why, "energy ledger: a field is unreadable and is left out");
                        }
                        let mut ledger = stored.ledger;
                        ledger.shed();
                        ledgers.insert(slot.clone(), ledger);
                    }
                }
                Err(e) => {
                    warn!(%group, error = fleet_redis::connect::chain(&e), "reading the energy ledgers failed; accounting waits for the next pass");
                    return false;
                }
            }
        }
        true
    }
}

/// The counters of one written step.
fn count(metrics: &Metrics, group: &GroupName, x: &Sighting, advance: &Advance) {
    let total = advance.total();
    if total == energy::Bucket::default() {
        return;
    }
    // Milliseconds below 2^53 convert to f64 exactly.
    let step = EnergyStep {
        on_seconds: total.on_ms as f64 / 1000.0,
        off_seconds: total.off_ms as f64 / 1000.0,
        activations: total.activations,
        drawn: x.draw.map(|d| {
            let f = Figures::of(total, d);
            [f.kwh, f.kwh_saved, f.cost_saved]
        }),
    };
    metrics.energy.count(group, &x.slot, step);
}
