//! The controller's writes (SPEC §4.3, §4.5): claim writes through the store's compare-and-set,
//! each with its timeline entry, its move metric and its log line; and what the controller counts.

use chrono::{DateTime, Utc};
use redis::aio::ConnectionLike;
use tracing::{debug, info, warn};

use crate::domain::claim::{Claim, OperationKind, Reason};
use crate::domain::name::BenchName;
use crate::domain::operation::SlotOp;
use crate::domain::slot::Done;
use crate::lifecycle::Runner;
use crate::store::claims::{ClaimStoreError, Entry, Event};

use super::{Controller, Nodes};
use crate::telemetry::{KindLabel, MoveLabels, OperationLabels, ReasonLabel};

/// How a claim write ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Written {
    Yes,
    /// Refused: another writer won, or the fence.
    No,
    /// The reply was lost: the server may have applied it.
    Unknown,
}

impl<C, R, N> Controller<C, R, N>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
    R: Runner,
    N: Nodes,
{
    /// One claim write through the store's compare-and-set, with its timeline entry and metric.
    pub(super) async fn write(
        &self,
        old: &Claim,
        next: &Claim,
        event: Event,
        now: DateTime<Utc>,
        extra: Option<(Option<OperationKind>, Option<u64>, Option<String>)>,
    ) -> bool {
        self.write_checked(old, next, event, now, extra, None).await == Written::Yes
    }

    /// `write`, also recording `op` as the slot's operation record in the same step, and telling
    /// a refusal from a write whose reply was lost (the server may have applied it).
    pub(super) async fn write_checked(
        &self,
        old: &Claim,
        next: &Claim,
        event: Event,
        now: DateTime<Utc>,
        extra: Option<(Option<OperationKind>, Option<u64>, Option<String>)>,
        op: Option<&SlotOp>,
    ) -> Written {
        let mut entry = Entry::of(next, event, now);
        if let Some((operation, duration_ms, detail)) = extra {
            entry.operation = operation;
            entry.duration_ms = duration_ms;
            entry.detail = detail;
        }
        match self
            .store
            .write_recording(old, next, Some(&entry), op)
            .await
        {
            Ok(true) => {
                if next.phase != old.phase {
                    let labels = MoveLabels {
                        to: next.phase,
                        reason: next.reason,
                    };
                    self.metrics.moves.get_or_create(&labels).inc();
                    info!(claim = %next.name, slot = %next.slot, from = %old.phase, to = %next.phase, reason = next.reason.map(|r| r.as_str()), "claim moved");
                }
                Written::Yes
            }
            Ok(false) => {
                debug!(claim = %old.name, "claim changed under this pass; read again next pass");
                Written::No
            }
            Err(ClaimStoreError::Fenced { group }) => {
                warn!(claim = %old.name, %group, "write refused: a newer leader holds the fence");
                self.leading
                    .deposed
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                Written::No
            }
            Err(e) => {
                warn!(claim = %old.name, error = crate::store::connect::chain(&e), "claim write failed; it may have been applied");
                Written::Unknown
            }
        }
    }

    pub(super) fn count_warning(&self, reason: Reason) {
        self.metrics
            .warnings
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }

    /// The lease holder id of this controller, for the operations it fires.
    pub(super) fn holder(&self) -> String {
        self.leading
            .lease
            .as_ref()
            .map(|l| l.id().to_owned())
            .unwrap_or_default()
    }

    /// A controller write that failed: a fence refusal deposes this controller at once.
    pub(super) fn write_failed(&self, slot: &BenchName, what: &str, e: ClaimStoreError) {
        if matches!(e, ClaimStoreError::Fenced { .. }) {
            self.leading
                .deposed
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        warn!(slot = %slot, error = crate::store::connect::chain(&e), "{what} failed");
    }

    /// An operation's end, counted, and said when it served no claim (a claim's write says it
    /// otherwise).
    pub(super) fn count_operation(&self, slot: &BenchName, done: &Done) {
        let outcome = done.outcome;
        let labels = OperationLabels {
            operation: done.kind,
            outcome,
        };
        self.metrics.operations.get_or_create(&labels).inc();
        self.metrics
            .operation_seconds
            .get_or_create(&KindLabel {
                operation: done.kind,
            })
            .observe(done.duration.as_secs_f64());
        let ms = u64::try_from(done.duration.as_millis()).unwrap_or(u64::MAX);
        match &done.claim {
            None => {
                info!(slot = %slot, operation = done.kind.as_str(), outcome = ?outcome, output = done.tail, "operation ended")
            }
            Some(claim) => {
                info!(slot = %slot, claim = %claim, operation = done.kind.as_str(), outcome = ?outcome, duration_ms = ms, "operation ended")
            }
        }
    }
}
