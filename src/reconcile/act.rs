//! The controller's hands (SPEC §4.5): one slot's pass is planned by [`slot::plan`], and its
//! steps are taken here in order. The first compare-and-set the store refuses (or a write whose
//! outcome stays unknown) stops the slot for this pass: the plan assumed it landed, so nothing
//! after it may run, and the next pass reads the slot again. Nothing here decides what the plan
//! could.

use chrono::{DateTime, Utc};
use redis::aio::ConnectionLike;
use tracing::{debug, info, warn};

use crate::config::{Group, Slot};
use crate::domain::claim::{Claim, OperationKind, Phase, Reason};
use crate::domain::law::Power;
use crate::domain::name::{BenchName, ClaimName, GroupName, Reason as HoldReason};
use crate::domain::operation::{OpEnd, SlotOp};
use crate::domain::slot::{
    self, CORDON_PREFIX, Here, NodeAction, NodeWrite, Recorded, Start, Step, View, Write,
};
use crate::domain::state::Bench;
use crate::lifecycle::Runner;
use crate::store::claims::{ClaimStoreError, Created, Event, SlotStatus};
use crate::store::operations::Unclaimed;

use super::hands::{Detail, Hands, Written};
use super::memory::SeenClaim;
use super::{Controller, Nodes};
use super::{NodeWarning, NodeWriteError};
use crate::domain::node::Binding;
use crate::telemetry::{MoveLabels, NodeWriteKind, NodeWriteLabels, NodeWriteResult};

/// What a pass sees of one slot.
pub(super) struct Seen<'a> {
    pub bench: Option<&'a Bench>,
    /// The controller cannot see the machines: no power action.
    pub blind: bool,
    /// A claim of this slot cannot be read: no power action on the slot.
    pub unreadable: bool,
    /// The slot's operation record as the store holds it.
    pub op: Option<SlotOp>,
    /// The slot's last operation recorded under a group it is no longer in (SPEC §4.1, §5.3).
    pub elsewhere: Option<SlotOp>,
    /// The power-on budget lets its claim start this pass.
    pub may_start: bool,
}

/// What one slot's pass did.
#[derive(Default)]
pub(super) struct SlotOutcome {
    pub writes: usize,
    pub started: bool,
    pub stopped: bool,
    pub status: Option<SlotStatus>,
    /// The slot's claims, by name and phase, as the store holds them after the steps that
    /// landed (for the claims metric; the claims themselves went to the planner).
    pub phases: Vec<(ClaimName, Phase)>,
    /// The power observed (`None`: blind), for the energy ledger.
    pub power: Option<Power>,
}

/// One slot being acted on: where its steps are taken from, and what they did so far.
pub(super) struct Acting<'a> {
    pub(super) group: &'a Group,
    pub(super) slot: &'a Slot,
    pub(super) now: DateTime<Utc>,
    pub(super) out: SlotOutcome,
}

impl Acting<'_> {
    /// The slot's key in the controller's memory.
    fn key(&self) -> (GroupName, BenchName) {
        (self.group.name.clone(), self.slot.name.clone())
    }
}

impl<C, R, N> Controller<C, R, N>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
    R: Runner,
    N: Nodes,
{
    /// One slot: observe → plan → act → report.
    pub(super) async fn slot_pass(
        &mut self,
        group: &Group,
        slot: &Slot,
        claims: Vec<Claim>,
        seen: Seen<'_>,
        now: DateTime<Utc>,
        holder: &str,
    ) -> SlotOutcome {
        let phases = claims.iter().map(|c| (c.name.clone(), c.phase)).collect();
        let key = (group.name.clone(), slot.name.clone());
        let read = self.tell_others_moves(group, slot, &claims, now);
        let uncertain = self.memory.uncertain.remove(&slot.name);
        let unreported = SlotStatus::default();
        let view = View {
            group: &group.name,
            slot: &slot.name,
            timings: &group.timings,
            startup_timeout: group.startup.timeout,
            shutdown_timeout: group.shutdown.timeout,
            readiness_taints: &group.readiness_taints,
            node_taints: &group.node_taints,
            provider_id: &slot.provider_id,
            binding: self.bindings().of(slot),
            off_since: self.memory.off_since.get(&key).copied(),
            may_start: seen.may_start,
            bench: seen.bench,
            blind: seen.blind,
            unreadable: seen.unreadable,
            adopting: self.seeing.adopting,
            acting: self.leading.token.is_some() == self.leading.lease.is_some(),
            claims,
            stored_op: seen.op,
            remembered_op: self.memory.ops.get(&key).cloned(),
            elsewhere_op: seen.elsewhere,
            here: Here {
                running: self.flight.running.get(&slot.name).copied(),
                finished: self.flight.finished.get(&slot.name).cloned(),
                uncertain,
            },
            report_slack: self.faults.report_slack,
            holder,
            status: self.memory.statuses.get(&key).unwrap_or(&unreported),
        };
        let plan = slot::plan(view, now);
        self.memory.remember_sight(&key, &plan, now);
        self.memory.remember_plan(&key, plan.op, plan.uncertain);
        let mut a = Acting {
            group,
            slot,
            now,
            out: SlotOutcome {
                phases,
                power: plan.power,
                ..SlotOutcome::default()
            },
        };
        let stopped = !self.hands().act_all(&mut a, plan.steps).await;
        if let Some(read) = read {
            let left = SeenClaim::left(&read, &a.out.phases, now);
            self.memory.claims_seen.insert(key.clone(), left);
        }
        if stopped {
            return a.out;
        }
        if let Some(power) = plan.power {
            let (group, slot) = key;
            self.memory.last_power.insert(slot, (group, power));
        }
        a.out.status = plan.status;
        a.out
    }

    /// With Kubernetes on, tells the moves another writer made to the slot's claims since this
    /// controller's last pass of it (SPEC §3.12 8), and returns the claims as read, for the
    /// memory the next pass compares with; `None` without Kubernetes (nothing is kept).
    fn tell_others_moves(
        &mut self,
        group: &Group,
        slot: &Slot,
        claims: &[Claim],
        now: DateTime<Utc>,
    ) -> Option<Vec<SeenClaim>> {
        if !self.nodes.observed() {
            return None;
        }
        let key = (group.name.clone(), slot.name.clone());
        if let Some(before) = self.memory.claims_seen.remove(&key) {
            self.hands().tell_others(group, slot, &before, claims, now);
        }
        Some(claims.iter().map(SeenClaim::of).collect())
    }
}

impl<C, R, N> Hands<'_, C, R, N>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
    R: Runner,
    N: Nodes,
{
    /// Takes the plan's steps in order. Returns false when the slot stopped at one.
    async fn act_all(&mut self, a: &mut Acting<'_>, steps: Vec<Step>) -> bool {
        for step in steps {
            if !self.act(a, step).await {
                return false;
            }
        }
        true
    }

    /// Takes one step. Returns false when the slot stops here.
    async fn act(&mut self, a: &mut Acting<'_>, step: Step) -> bool {
        match step {
            Step::Node(w) => self.node_write(a, &w).await,
            Step::ProviderIdMismatch { node, found } => {
                self.provider_id_mismatch(a, node, found);
                true
            }
            Step::RestoreOp(op) => {
                self.restore_op(a, &op).await;
                true
            }
            Step::Write(w) => self.claim_write(a, *w).await,
            Step::Collect(c) => self.collect(a, &c).await,
            Step::RunRecorded(recorded) => self.run_recorded(a, *recorded).await,
            Step::Ended(done) => {
                self.count_operation(&a.slot.name, &done);
                true
            }
            // This process's own operation: its wrapper may have written the outcome first.
            Step::EndHere { started_at, end } => {
                self.end_op(a, started_at, &end).await;
                self.memory.remember_end(&a.key(), started_at, &end);
                true
            }
            Step::EndUnreported { started_at, end } => {
                let ended = self.end_op(a, started_at, &end).await;
                if ended {
                    self.memory.remember_end(&a.key(), started_at, &end);
                }
                ended
            }
            Step::Settled => {
                self.flight.finished.remove(&a.slot.name);
                a.out.writes += 1;
                true
            }
            Step::ObserveOff { started_at } => self.observe_off(a, started_at).await,
            Step::Uncordon => {
                if let Err(e) = self.presence.release(&a.slot.name).await {
                    warn!(slot = %a.slot.name, error = fleet_redis::connect::chain(&e), "uncordon failed");
                }
                true
            }
            Step::Cordon { why } => {
                self.cordon(&a.slot.name, &why).await;
                true
            }
            Step::Adopt(c) => self.adopt(a, *c).await,
            Step::Record(start) => {
                let Start { old, next, op } = *start;
                self.record(a, &old, &next, op).await
            }
            Step::RecordUnclaimed(op) => self.record_unclaimed(a, op).await,
            Step::Spawn {
                kind,
                claim,
                started_at,
            } => {
                self.spawn_recorded(a, kind, claim.map(|c| *c), started_at)
                    .await
            }
            Step::Note(what) => {
                debug!(slot = %a.slot.name, "{what}");
                true
            }
        }
    }

    /// Puts back an operation record the store lost (best effort).
    async fn restore_op(&mut self, a: &mut Acting<'_>, op: &SlotOp) {
        let slot = &a.slot.name;
        match self.store.restore_operation(&a.group.name, slot, op).await {
            Ok(true) => {
                warn!(slot = %slot, operation = op.kind.as_str(), started_at = %op.started_at, "the store did not hold the slot's last operation; put back from what this controller knows");
                a.out.writes += 1;
            }
            Ok(false) => {}
            Err(e) => self.write_failed(slot, "putting back the operation record", e),
        }
    }

    /// Deletes a terminal claim; anything but a deletion stops the slot.
    async fn collect(&mut self, a: &mut Acting<'_>, c: &Claim) -> bool {
        let ttl = a.group.timings.ttl_after_finished;
        match self.store.delete(c, None, ttl).await {
            Ok(true) => {
                debug!(claim = %c.name, "terminal claim collected");
                a.out.phases.retain(|(name, _)| name != &c.name);
                a.out.writes += 1;
                true
            }
            Ok(false) => false,
            Err(e) => {
                self.write_failed(&a.slot.name, "collecting a claim", e);
                false
            }
        }
    }

    /// An operation's outcome on the slot's record. Returns whether it was recorded (it is not
    /// when the record already has one, or is another operation's).
    async fn end_op(&mut self, a: &Acting<'_>, started_at: DateTime<Utc>, end: &OpEnd) -> bool {
        let slot = &a.slot.name;
        match self
            .store
            .end_operation(&a.group.name, slot, started_at, end)
            .await
        {
            Ok(recorded) => recorded,
            Err(e) => {
                warn!(slot = %slot, error = fleet_redis::connect::chain(&e), "recording the operation's outcome on the slot failed");
                false
            }
        }
    }

    /// The machine observed off after a shutdown: no longer on its way down.
    async fn observe_off(&mut self, a: &Acting<'_>, started_at: DateTime<Utc>) -> bool {
        let slot = &a.slot.name;
        match self
            .store
            .observe_off(&a.group.name, slot, started_at, a.now)
            .await
        {
            Ok(_) => {
                let key = (a.group.name.clone(), slot.clone());
                if let Some(o) = self
                    .memory
                    .ops
                    .get_mut(&key)
                    .filter(|o| o.started_at == started_at)
                {
                    o.off_at = Some(a.now);
                }
                true
            }
            Err(e) => {
                self.write_failed(slot, "recording the machine off", e);
                false
            }
        }
    }

    /// Cordon: ask the bench to hold, so it is not usable while it drains.
    async fn cordon(&self, slot: &BenchName, why: &str) {
        if let Ok(reason) = HoldReason::parse(&format!("{CORDON_PREFIX}{why}"))
            && let Err(e) = self.presence.request_hold(slot, &reason, None).await
        {
            warn!(slot = %slot, error = fleet_redis::connect::chain(&e), "cordon failed");
        }
    }

    /// A claim write of the plan, with what it means beyond the claim.
    async fn claim_write(&mut self, a: &mut Acting<'_>, w: Write) -> bool {
        let extra = Detail {
            operation: w.operation,
            duration_ms: w.duration_ms,
            detail: w.detail.clone(),
        };
        if self
            .write_checked(&w.old, &w.next, w.event, a.now, Some(extra), None)
            .await
            != Written::Yes
        {
            return false;
        }
        let slot = &a.slot.name;
        replace(&mut a.out.phases, &w.next);
        a.out.writes += 1;
        if w.old.phase != w.next.phase {
            self.tell_move(a.group, a.slot, Some(w.old.phase), &w.next, a.now);
        }
        if w.then.settles {
            self.flight.finished.remove(slot);
        }
        if w.then.restores {
            warn!(slot = %slot, claim = %w.old.name, attempt = w.old.attempt, "the claim lost the write that recorded its startup; restored, not fired again");
        }
        if let Some(reason) = w.then.warns {
            if reason == Reason::ShutdownAttemptLimitReached {
                warn!(slot = %slot, claim = %w.old.name, "shutdown attempts spent; paused");
            }
            self.count_warning(reason);
        }
        true
    }

    /// Adoption (SPEC §5.3): anything but a claim created stops the slot, so an adoption that
    /// failed never falls through to the law, which would power the machine off.
    async fn adopt(&mut self, a: &mut Acting<'_>, c: Claim) -> bool {
        let slot = &a.slot.name;
        let created = match self.store.seed(&a.group.name, slot).await {
            Ok(seed) => self.store.create(&c, &seed).await,
            Err(e) => Err(e),
        };
        match created {
            Ok(Created::Created) => {
                warn!(slot = %slot, claim = %c.name, "machine found on after the store lost its claims: adopted");
                self.metrics
                    .moves
                    .get_or_create(&MoveLabels {
                        to: Phase::Ready,
                        reason: Some(Reason::Adopted),
                    })
                    .inc();
                a.out.writes += 1;
                a.out.phases.push((c.name.clone(), c.phase));
                self.tell_move(a.group, a.slot, None, &c, a.now);
                true
            }
            Ok(other) => {
                debug!(slot = %slot, ?other, "adoption not written this pass; no power action");
                false
            }
            Err(e) => {
                if matches!(e, ClaimStoreError::Fenced { .. }) {
                    self.leading
                        .deposed
                        .store(true, std::sync::atomic::Ordering::Relaxed);
                }
                warn!(slot = %slot, error = fleet_redis::connect::chain(&e), "adoption failed; no power action");
                false
            }
        }
    }

    /// Records an operation's start on its claim and as the slot's operation record, in one
    /// write that must land before the operation runs. A write whose reply was lost (the server
    /// may have applied it) is read back before deciding (SPEC §5.4): applied, the operation
    /// runs; not applied, it does not; still unknown, the next pass runs it if the store shows it
    /// recorded.
    async fn record(&mut self, a: &mut Acting<'_>, c: &Claim, next: &Claim, op: SlotOp) -> bool {
        let slot = &a.slot.name;
        let event = match op.kind {
            OperationKind::Startup => Event::Booting,
            OperationKind::Shutdown => Event::Shutdown,
        };
        let extra = Some(Detail {
            operation: Some(op.kind),
            duration_ms: None,
            detail: None,
        });
        let written = match self
            .write_checked(c, next, event, a.now, extra, Some(&op))
            .await
        {
            Written::Yes => true,
            Written::No => false,
            Written::Unknown => match self.store.read_claim(&c.group, &c.name).await {
                Ok(stored) => stored.is_some_and(|s| {
                    s.version == next.version
                        && s.running_operation().map(|o| o.started_at) == Some(op.started_at)
                }),
                Err(e) => {
                    warn!(slot = %slot, claim = %c.name, error = fleet_redis::connect::chain(&e), "cannot read back an operation's record; the next pass decides");
                    self.memory.uncertain.insert(
                        slot.clone(),
                        Recorded {
                            op: op.clone(),
                            claim: Some(next.clone()),
                        },
                    );
                    false
                }
            },
        };
        if !written {
            return false;
        }
        if c.phase != next.phase {
            self.tell_move(a.group, a.slot, Some(c.phase), next, a.now);
        }
        match op.kind {
            OperationKind::Startup => {
                info!(slot = %slot, claim = %c.name, attempt = c.attempt, "starting machine")
            }
            OperationKind::Shutdown => {
                info!(slot = %slot, claim = %c.name, attempt = next.shutdown_attempts, "shutting machine down")
            }
        }
        self.memory
            .remember_op(&(a.group.name.clone(), slot.clone()), op);
        replace(&mut a.out.phases, next);
        true
    }

    /// Records the shutdown of a machine no claim wants (fenced, and atomic with the check that
    /// no claim took the slot since this pass read it) before it runs, like every operation.
    async fn record_unclaimed(&mut self, a: &mut Acting<'_>, op: SlotOp) -> bool {
        let slot = &a.slot.name;
        match self.store.record_unclaimed(&a.group.name, slot, &op).await {
            Ok(Unclaimed::Recorded) => {
                info!(slot = %slot, attempt = op.streak, "shutting down a machine no claim wants");
                self.memory
                    .remember_op(&(a.group.name.clone(), slot.clone()), op);
                true
            }
            Ok(Unclaimed::Claimed(holder)) => {
                info!(slot = %slot, claim = holder, "a claim took the slot since this pass read it; no shutdown");
                false
            }
            Err(e @ ClaimStoreError::Fenced { .. }) => {
                self.write_failed(slot, "recording the shutdown", e);
                false
            }
            Err(e) => {
                // The reply was lost: the next pass runs it if the store shows it.
                self.memory.uncertain.insert(
                    slot.clone(),
                    Recorded {
                        op: op.clone(),
                        claim: None,
                    },
                );
                self.write_failed(slot, "recording the shutdown (not fired)", e);
                false
            }
        }
    }

    /// Runs the slot's operation, noting what the pass did.
    pub(super) fn fire(
        &mut self,
        a: &mut Acting<'_>,
        c: Option<&Claim>,
        kind: OperationKind,
        started_at: DateTime<Utc>,
    ) {
        match kind {
            OperationKind::Startup => a.out.started = true,
            OperationKind::Shutdown => a.out.stopped = true,
        }
        self.spawn(a.group, a.slot, c, kind, started_at);
    }

    /// A write to the slot's Node. One that must land and did not stops the slot.
    async fn node_write(&mut self, a: &mut Acting<'_>, w: &NodeWrite) -> bool {
        let action = match &w.action {
            NodeAction::Taints(_) => NodeWriteKind::taints,
            NodeAction::ProviderId(_) => NodeWriteKind::provider_id,
            NodeAction::Delete => NodeWriteKind::delete,
        };
        let result = self.nodes.write(w).await;
        let label = match &result {
            Ok(()) => NodeWriteResult::ok,
            Err(NodeWriteError::Conflict(_)) => NodeWriteResult::conflict,
            Err(NodeWriteError::Failed(_)) => NodeWriteResult::failed,
        };
        self.metrics
            .node_writes
            .get_or_create(&NodeWriteLabels {
                action,
                result: label,
            })
            .inc();
        match result {
            Ok(()) => {
                info!(slot = %a.slot.name, node = w.node, action = ?w.action, "wrote the slot's Node");
                true
            }
            Err(e) => {
                warn!(slot = %a.slot.name, node = w.node, action = ?w.action, error = %e, "the Node write did not land: the next pass judges the Node again");
                !w.must_land
            }
        }
    }

    /// A Node that names another provider ID: said once per value, counted while it lasts.
    fn provider_id_mismatch(&mut self, a: &Acting<'_>, node: String, found: String) {
        let said = self.memory.mismatched.get(&a.slot.name) == Some(&found);
        if !said {
            warn!(slot = %a.slot.name, node, found, expected = a.slot.provider_id, "the slot's Node names another provider ID: cluster-autoscaler cannot match it; fleet leaves it alone");
            if let Binding::Bound(Some(n)) = self.bindings.of(a.slot) {
                self.nodes.warned(NodeWarning {
                    node: n.name.clone(),
                    uid: n.uid.clone(),
                    reason: "ProviderIDMismatch",
                    note: format!(
                        "spec.providerID is {found:?}, slot {} has {:?}: cluster-autoscaler \
                         cannot match this Node to its instance; fleet leaves it alone",
                        a.slot.name, a.slot.provider_id
                    ),
                });
            }
            self.memory.mismatched.insert(a.slot.name.clone(), found);
        }
        self.metrics
            .node_provider_id_mismatches
            .set(i64::try_from(self.memory.mismatched.len()).unwrap_or(i64::MAX));
    }
}

/// A claim's phase as a write made it.
fn replace(phases: &mut [(ClaimName, Phase)], next: &Claim) {
    if let Some((_, phase)) = phases.iter_mut().find(|(name, _)| name == &next.name) {
        *phase = next.phase;
    }
}
