//! What a controller remembers across passes (SPEC §4.5), and how the executor changes it: the
//! memory owns its own updates, so the executor says what happened rather than reaching into
//! its maps.

use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::config::Config;
use crate::domain::claim::Phase;
use crate::domain::law::Power;
use crate::domain::name::{BenchName, ClaimName, GroupName};
use crate::domain::operation::{OpEnd, SlotOp};
use crate::domain::slot::{self, Step};
use crate::store::claims::SlotStatus;

use super::{Map, Recorded, energy};

/// What a controller remembers across passes (SPEC §4.5): its own record, apart from the status
/// it publishes, which is never read back as an input.
#[derive(Default)]
pub(super) struct Memory {
    /// The slot statuses this controller wrote: it is their one writer.
    pub(super) statuses: Map<(GroupName, BenchName), SlotStatus>,
    /// Whether `statuses` holds what the store holds (read again after a new leadership or a
    /// new generation).
    pub(super) loaded: bool,
    /// This controller's memory of each slot's last operation (SPEC §5.4): it outlives a store
    /// that lost its last writes.
    pub(super) ops: Map<(GroupName, BenchName), SlotOp>,
    /// The operation each slot's `ops` entry replaced in this pass, put back when the new one is
    /// recorded but not fired (`reconcile::gate`): the memory is of the last operation that ran,
    /// with the outcome this controller saw.
    pub(super) displaced: Map<(GroupName, BenchName), SlotOp>,
    /// Operations recorded by a write whose reply was lost.
    pub(super) uncertain: Map<BenchName, Recorded>,
    /// Each slot's power as this controller last observed it, with the group it was in then
    /// (for the mass-vanishing rule). Keyed by the slot alone, which the rule looks up without
    /// building a key: a slot is in one group at a time, and the group it was observed in says
    /// whether the entry is still its own.
    pub(super) last_power: Map<BenchName, (GroupName, Power)>,
    /// Since when each slot's machine has been observed off without a break (for a stale
    /// Node's deletion, SPEC §3.12).
    pub(super) off_since: Map<(GroupName, BenchName), DateTime<Utc>>,
    /// The Nodes whose provider ID is not their slot's, said once each.
    pub(super) mismatched: Map<BenchName, String>,
    /// The leader's copies of the slots' energy ledgers (SPEC §4.12).
    pub(super) energy: energy::Ledgers,
    /// Each slot's claims as this controller left them after its last pass of the slot, kept
    /// only with Kubernetes on: the next pass tells the moves others made in between (a claim
    /// made by `fleet claim` or the provider, a pending one cancelled) as Events (SPEC §3.12 8).
    pub(super) claims_seen: Map<(GroupName, BenchName), Vec<SeenClaim>>,
    /// The configured slots' benches, as the presence read takes them, with the configuration
    /// they were built from: built again only when the configuration changes (SPEC §4.5).
    pub(super) slots_read: Option<(Arc<Config>, Arc<crate::store::presence::Named>)>,
}

/// A claim as a pass left it: enough to tell a move of it that another writer makes.
#[derive(Clone, Debug)]
pub(super) struct SeenClaim {
    pub(super) name: ClaimName,
    pub(super) phase: Phase,
    pub(super) attempt: u32,
    pub(super) requested_at: DateTime<Utc>,
}

impl SeenClaim {
    pub(super) fn of(c: &crate::domain::claim::Claim) -> Self {
        SeenClaim {
            name: c.name.clone(),
            phase: c.phase,
            attempt: c.attempt,
            requested_at: c.requested_at,
        }
    }

    /// The slot's claims as a pass left them: the phases after its steps, of the claims it read
    /// (a claim it made, by adoption, counts from `now`).
    pub(super) fn left(
        read: &[SeenClaim],
        phases: &[(ClaimName, Phase)],
        now: DateTime<Utc>,
    ) -> Vec<SeenClaim> {
        phases
            .iter()
            .map(|(name, phase)| {
                let was = read.iter().find(|r| &r.name == name);
                SeenClaim {
                    name: name.clone(),
                    phase: *phase,
                    attempt: was.map_or(0, |r| r.attempt),
                    requested_at: was.map_or(now, |r| r.requested_at),
                }
            })
            .collect()
    }
}

impl Memory {
    /// What a slot's plan leaves for the next pass: the operation it records (the one before
    /// kept aside, `displaced`) and one whose record's reply was lost.
    pub(super) fn remember_plan(
        &mut self,
        key: &(GroupName, BenchName),
        op: Option<SlotOp>,
        uncertain: Option<Recorded>,
    ) {
        self.displaced.remove(key);
        if let Some(op) = op {
            self.remember_op(key, op);
        }
        if let Some(u) = uncertain {
            self.uncertain.insert(key.1.clone(), u);
        }
    }

    /// The store is not what this controller last wrote (a new leadership, a store that lost
    /// writes, a new generation): what it remembers of the store's records is read again, and
    /// no difference from them is told as a move.
    pub(super) fn forget_store(&mut self) {
        self.loaded = false;
        self.statuses.clear();
        self.claims_seen.clear();
    }

    /// The controller's memory of the slot's operation becomes `op`; another operation it
    /// replaces is kept aside for this pass (`Memory::displaced`), for the gate to put back if
    /// `op` is not fired.
    pub(super) fn remember_op(&mut self, key: &(GroupName, BenchName), op: SlotOp) {
        let started_at = op.started_at;
        if let Some(old) = self.ops.insert(key.clone(), op)
            && old.started_at != started_at
        {
            self.displaced.insert(key.clone(), old);
        }
    }

    /// The controller's memory of the slot's operation takes its outcome.
    pub(super) fn remember_end(
        &mut self,
        key: &(GroupName, BenchName),
        started_at: DateTime<Utc>,
        end: &OpEnd,
    ) {
        if let Some(o) = self
            .ops
            .get_mut(key)
            .filter(|o| o.started_at == started_at && o.end.is_none())
        {
            o.end = Some(end.clone());
        }
    }

    /// What the pass observed of the slot, kept whether or not its steps land: since when the
    /// machine is off, and whether its Node names another provider ID.
    pub(super) fn remember_sight(
        &mut self,
        key: &(GroupName, BenchName),
        plan: &slot::Plan,
        now: DateTime<Utc>,
    ) {
        match plan.power {
            // Looked up before it is inserted: the entry API would clone the key of every slot
            // that is off, every pass.
            Some(Power::Off) => {
                if !self.off_since.contains_key(key) {
                    self.off_since.insert(key.clone(), now);
                }
            }
            Some(Power::On) | None => {
                self.off_since.remove(key);
            }
        }
        if !plan
            .steps
            .iter()
            .any(|s| matches!(s, Step::ProviderIdMismatch { .. }))
        {
            self.mismatched.remove(&key.1);
        }
    }
}
