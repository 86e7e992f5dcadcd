//! The executor's hands (SPEC §1.2, §4.5): what `act.rs` and `gate.rs` take a slot's steps
//! through. A borrow of the controller's ports (the store, presence, the Nodes port, the runner,
//! the replication gate, the metrics) and of the two records a step changes (its memory, its
//! operations in flight), made for one slot's steps: a step reaches nothing else. Here too are the
//! hands' own moves: a claim written with its timeline entry, an operation spawned, a move told
//! to the Nodes port.

use chrono::{DateTime, Utc};
use redis::aio::ConnectionLike;
use tracing::{debug, info, warn};

use crate::domain::claim::{Claim, OperationKind, Phase, Reason};
use crate::domain::name::{BenchName, ClaimName};
use crate::domain::operation::SlotOp;
use crate::domain::slot::Done;
use crate::lifecycle::Runner;
use crate::store::claims::{ClaimStoreError, Entry, Event};

use std::sync::Arc;

use tokio::sync::watch;

use crate::config::{Config, Group, Run, Slot};
use crate::domain::node::Binding;
use crate::lifecycle::Request;
use crate::store::claims::ClaimStore;
use crate::store::presence::Presence;
use crate::store::replicas::Replicas;
use crate::telemetry::{KindLabel, Metrics, MoveLabels, OperationLabels, ReasonLabel};

use super::leadership::Leading;
use super::memory::{Memory, SeenClaim};
use super::nodes::{Bindings, ClaimMove};
use super::operations::Flight;
use super::{Controller, Nodes};

/// What a claim's timeline entry tells beyond the move itself.
pub(super) struct Detail {
    /// The operation the move is about.
    pub operation: Option<OperationKind>,
    /// How long that operation took.
    pub duration_ms: Option<u64>,
    /// The operation's last output, or another word on the move.
    pub detail: Option<String>,
}

/// How a claim write ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Written {
    Yes,
    /// Refused: another writer won, or the fence.
    No,
    /// The reply was lost: the server may have applied it.
    Unknown,
}

/// What the executor acts through: the controller's ports and the records a step changes,
/// borrowed for one slot's steps. A step reaches nothing else of the controller: not its sight,
/// its waking, its lease's renewal or its energy ledgers, which the pass around it owns.
pub(super) struct Hands<'c, C, R, N> {
    /// The store as this controller writes it: fenced with its token while it leads.
    pub(super) store: &'c ClaimStore<C>,
    pub(super) presence: &'c Presence<C>,
    pub(super) nodes: &'c N,
    /// How the slots are bound to Nodes this pass.
    pub(super) bindings: Bindings<'c>,
    pub(super) runner: &'c Arc<R>,
    /// The replication gate before every power action (SPEC §5.5).
    pub(super) replicas: Option<&'c Replicas<C>>,
    pub(super) metrics: &'c Metrics,
    pub(super) config: &'c watch::Receiver<Arc<Config>>,
    /// The token an operation carries, the holder it names, and the flag a fence refusal sets.
    pub(super) leading: &'c Leading<C>,
    pub(super) memory: &'c mut Memory,
    pub(super) flight: &'c mut Flight,
}

impl<C, R, N> Controller<C, R, N>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
    R: Runner,
    N: Nodes,
{
    /// The executor's hands for one slot's steps, from the controller's own fields.
    pub(super) fn hands(&mut self) -> Hands<'_, C, R, N> {
        let bindings = Bindings::new(
            &self.nodes,
            self.node_views.as_ref(),
            self.seeing.nodes_blind,
        );
        Hands {
            store: &self.store,
            presence: &self.presence,
            nodes: &self.nodes,
            bindings,
            runner: &self.runner,
            replicas: self.replicas.as_ref(),
            metrics: &self.metrics,
            config: &self.config,
            leading: &self.leading,
            memory: &mut self.memory,
            flight: &mut self.flight,
        }
    }
}

impl<C, R, N> Hands<'_, C, R, N>
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
        extra: Option<Detail>,
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
        extra: Option<Detail>,
        op: Option<&SlotOp>,
    ) -> Written {
        let mut entry = Entry::of(next, event, now);
        if let Some(Detail {
            operation,
            duration_ms,
            detail,
        }) = extra
        {
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
                warn!(claim = %old.name, error = fleet_redis::connect::chain(&e), "claim write failed; it may have been applied");
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

    /// A controller write that failed: a fence refusal deposes this controller at once.
    pub(super) fn write_failed(&self, slot: &BenchName, what: &str, e: ClaimStoreError) {
        if matches!(e, ClaimStoreError::Fenced { .. }) {
            self.leading
                .deposed
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        warn!(slot = %slot, error = fleet_redis::connect::chain(&e), "{what} failed");
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

    /// Runs an operation in its wrapper; its outcome comes back through `done_rx`, and the next
    /// pass takes it (`take_ended`).
    pub(super) fn spawn(
        &mut self,
        group: &Group,
        slot: &Slot,
        c: Option<&Claim>,
        kind: OperationKind,
        started_at: DateTime<Utc>,
    ) {
        let op = match kind {
            OperationKind::Startup => &group.startup,
            OperationKind::Shutdown => &group.shutdown,
        };
        // A slot's driver runs both of its operations, whatever its group names (SPEC §4.10);
        // a group that names none has a driver on every slot (the configuration holds it).
        let (command, job) = match (&slot.driver, &op.run) {
            (Some(_), _) | (None, Run::Driver) => (Vec::new(), None),
            (None, Run::Command(command)) => (command.clone(), None),
            (None, Run::Job(job)) => (Vec::new(), Some(job.clone())),
        };
        let request = Request {
            kind,
            slot: slot.name.clone(),
            group: group.name.clone(),
            claim: c.map(|c| c.name.clone()),
            attempt: c.map_or(0, |c| c.attempt),
            provider_id: slot.provider_id.clone(),
            command,
            env: op.env.clone(),
            dir: op.dir.clone(),
            timeout: op.timeout,
            controller: self.leading.holder(),
            started_at,
            job,
            fence: self.leading.token.clone(),
            driver: slot.driver.as_deref().cloned(),
            secret_env: self.flight.secret_env(&self.config.borrow()),
        };
        self.flight.running.insert(slot.name.clone(), kind);
        let (runner, done, slot_name) = (
            self.runner.clone(),
            self.flight.done_tx.clone(),
            slot.name.clone(),
        );
        let claim = request.claim.clone();
        self.flight.tasks.spawn(async move {
            let report = runner.run(request).await;
            let _ = done.send((
                slot_name,
                Done {
                    kind,
                    claim,
                    started_at: Some(started_at),
                    outcome: report.outcome,
                    duration: report.duration,
                    tail: report.tail,
                },
            ));
        });
    }

    /// Tells the Nodes port of a claim move that landed: `from` the phase before (`None`: a
    /// claim new to this controller), to `next`, at the pass's time `now`.
    pub(super) fn tell_move(
        &self,
        group: &crate::config::Group,
        slot: &Slot,
        from: Option<Phase>,
        next: &Claim,
        now: DateTime<Utc>,
    ) {
        if !self.nodes.observed() {
            return;
        }
        let operation = next.operation.as_ref();
        self.nodes.moved(ClaimMove {
            group: next.group.clone(),
            from,
            deleted: false,
            at: now,
            requested_at: next.requested_at,
            deadline_at: next.deadline_at,
            operation_took: operation.and_then(|o| (o.finished_at? - o.started_at).to_std().ok()),
            reason: next.reason,
            operation: operation.map(|o| (o.kind, o.started_at)),
            job: operation.is_some_and(|o| {
                let op = match o.kind {
                    OperationKind::Startup => &group.startup,
                    OperationKind::Shutdown => &group.shutdown,
                };
                // A slot's driver runs its operations, never its group's Job (SPEC §4.10).
                slot.driver.is_none() && matches!(op.run, crate::config::Run::Job(_))
            }),
            ..self.claim_move(slot, &next.name, next.attempt, next.phase, now)
        });
    }

    /// Tells the moves another writer made to the slot's claims since this controller left them
    /// (`before`), as the pass reads them now: a claim made (`fleet claim`, the provider), one
    /// moved, and a pending one deleted (cancelled). Only moves that landed are seen, so a
    /// refused one is never told (SPEC §3.12 8).
    pub(super) fn tell_others(
        &self,
        group: &crate::config::Group,
        slot: &Slot,
        before: &[SeenClaim],
        claims: &[Claim],
        now: DateTime<Utc>,
    ) {
        if !self.nodes.observed() {
            return;
        }
        for c in claims {
            match before.iter().find(|b| b.name == c.name) {
                None => self.tell_move(group, slot, None, c, now),
                Some(b) if b.phase != c.phase => self.tell_move(group, slot, Some(b.phase), c, now),
                Some(_) => {}
            }
        }
        for gone in before {
            if gone.phase == Phase::Pending && !claims.iter().any(|c| c.name == gone.name) {
                self.nodes.moved(ClaimMove {
                    from: Some(Phase::Pending),
                    deleted: true,
                    requested_at: gone.requested_at,
                    ..self.claim_move(slot, &gone.name, gone.attempt, Phase::Pending, now)
                });
            }
        }
    }

    /// A move of claim `name` of `slot` to `to`, with the slot's Node when it is bound to one.
    fn claim_move(
        &self,
        slot: &Slot,
        name: &ClaimName,
        attempt: u32,
        to: Phase,
        now: DateTime<Utc>,
    ) -> ClaimMove {
        let node = match self.bindings.of(slot) {
            Binding::Bound(Some(n)) => Some((n.name.clone(), n.uid.clone())),
            _ => None,
        };
        ClaimMove {
            group: slot.group.clone(),
            slot: slot.name.clone(),
            claim: name.clone(),
            attempt,
            to,
            reason: None,
            operation: None,
            node,
            job: false,
            from: Some(to),
            deleted: false,
            at: now,
            requested_at: now,
            deadline_at: None,
            operation_took: None,
        }
    }
}
