//! The replication gate before every power action (SPEC §5.6): an operation just recorded, or
//! one whose record is found again, is fired only once the replicas acknowledged the writes
//! before it (`store::replicas`). One held back stays recorded, and the next pass runs it
//! (`Step::RunRecorded`) once they have: it is never fired twice, and never on a record a
//! failover could still lose.

use chrono::{DateTime, Utc};
use redis::aio::ConnectionLike;
use tracing::warn;

use crate::domain::claim::{Claim, OperationKind};
use crate::domain::name::{BenchName, GroupName};
use crate::domain::slot::Recorded;
use crate::lifecycle::Runner;
use crate::store::replicas::Acks;

use super::Nodes;
use super::act::Acting;
use super::hands::Hands;

impl<C, R, N> Hands<'_, C, R, N>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
    R: Runner,
    N: Nodes,
{
    /// Runs an operation whose record landed though its reply was lost, or that the replicas
    /// had not acknowledged (SPEC §5.6), once they have.
    pub(super) async fn run_recorded(&mut self, a: &mut Acting<'_>, recorded: Recorded) -> bool {
        if !self.replicated(&a.group.name, &a.slot.name).await {
            // The next pass finds the record again and asks again.
            self.memory.uncertain.insert(a.slot.name.clone(), recorded);
            return false;
        }
        let Recorded { op, claim } = recorded;
        warn!(slot = %a.slot.name, operation = op.kind.as_str(), "the write that recorded the operation did land: running it now");
        self.fire(a, claim.as_ref(), op.kind, op.started_at);
        true
    }

    /// Runs the operation just recorded, once the replicas have its record (SPEC §5.6).
    pub(super) async fn spawn_recorded(
        &mut self,
        a: &mut Acting<'_>,
        kind: OperationKind,
        claim: Option<Claim>,
        started_at: DateTime<Utc>,
    ) -> bool {
        if !self.replicated(&a.group.name, &a.slot.name).await {
            // Recorded but not fired: the next pass runs it once the store still holds its
            // record and the replicas have it (RunRecorded).
            // Not in this controller's memory of fired operations either: that memory outlives
            // a store that lost its writes and would put the record back (`RestoreOp`), and then
            // run it, after a failover that lost the claim itself (found by the lossy failover
            // chaos test, seed 15). Only the store's own record, or the claim's, may bring it
            // back now.
            // What it remembers instead is the operation before, which did run, with the outcome
            // this controller saw: when the same failover loses that outcome too, the store's
            // record alone would show it running until it is judged, `timeout` +
            // `report_slack` after its start, and hold the slot that long (the lossy chaos test
            // waited 31 s so, seed 15).
            let key = (a.group.name.clone(), a.slot.name.clone());
            if let Some(op) = self.memory.ops.remove(&key) {
                self.memory
                    .uncertain
                    .insert(a.slot.name.clone(), Recorded { op, claim });
            }
            if let Some(before) = self.memory.displaced.remove(&key) {
                self.memory.ops.insert(key, before);
            }
            return false;
        }
        self.fire(a, claim.as_ref(), kind, started_at);
        true
    }

    /// Whether the writes so far reached the replicas (SPEC §5.6), before a power action on
    /// `slot`: always without a gate; never when the acknowledgements fall short or the gate
    /// cannot be asked (the operation waits for the next pass, recorded).
    async fn replicated(&self, group: &GroupName, slot: &BenchName) -> bool {
        let Some(replicas) = self.replicas else {
            return true;
        };
        match replicas.confirm(group).await {
            Ok(Acks::NotWanted | Acks::Confirmed { .. }) => true,
            Ok(Acks::Short { acked, wanted }) => {
                warn!(%slot, acked, wanted, "the replicas did not acknowledge the operation's record in time; not firing it (the next pass asks again)");
                self.metrics.replica_waits_short.inc();
                false
            }
            Err(e) => {
                warn!(%slot, error = fleet_redis::connect::chain(&e), "cannot wait for the replicas; not firing the operation (the next pass asks again)");
                self.metrics.replica_waits_short.inc();
                false
            }
        }
    }
}
