//! One pass over every slot (SPEC §4.5): observe the store once, judge whether the controller
//! can see (SPEC §5.2, in `sight`), then each group's slots through the planner and their energy
//! ledgers, then the reports.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use chrono::{DateTime, Utc};
use redis::aio::ConnectionLike;
use tracing::{debug, info, warn};

use crate::config::{Config, Group, Slot};
use crate::domain::claim::{self, Claim, Phase};
use crate::domain::law;
use crate::domain::name::{BenchName, GroupName};
use crate::domain::operation::SlotOp;
use crate::domain::sight::NodeSight;
use crate::domain::slot::{self, Step};

use crate::lifecycle::Runner;
use crate::store::claims::{ClaimStoreError, GroupClaims, SlotStatus};
use crate::store::presence::{Named, PresenceError, Snapshot};

use super::act::Seen;
use super::budget;
use super::cursor::Benches;
use super::gathered::Gathered;
use super::nodes::NodeViews;
use super::{Controller, Map, Nodes, PassError, PassReport, Sight};
use crate::telemetry::{ClaimLabels, SlotLabels};

/// What a pass read of the store.
pub(super) struct Observed {
    /// Every group that may hold claims, with its timings.
    pub(super) known: Vec<(GroupName, claim::Timings)>,
    /// Presence; `None` when it cannot be read (blind).
    pub(super) snapshot: Option<Snapshot>,
    pub(super) read: Vec<GroupClaims>,
    pub(super) now: DateTime<Utc>,
}

/// The statuses a pass writes, by group.
type Reports = BTreeMap<GroupName, Vec<(BenchName, SlotStatus)>>;

/// What a pass sees across groups, for each group's slots.
struct PassSees<'a> {
    /// Presence, when it could be read.
    snapshot: Option<&'a Snapshot>,
    /// Whether the controller is blind (SPEC §5.2).
    blind: bool,
    /// The power-on budget's grants, when a budget is set (SPEC §4.11).
    grants: Option<&'a BTreeSet<BenchName>>,
    /// The slots' operations recorded under groups they left (taken as used).
    elsewhere: &'a mut Map<BenchName, SlotOp>,
}

/// One group's part of a pass: the group, its slots (in name order), its claims as read, and the
/// time they are judged at.
struct GroupPart<'a> {
    group: &'a Group,
    slots: &'a [&'a Slot],
    read: GroupClaims,
    now: DateTime<Utc>,
}

/// What a pass tallies as it goes: its report, and the statuses it writes at its end.
struct Tally<'a> {
    report: &'a mut PassReport,
    reports: &'a mut Reports,
}

impl<C, R, N> Controller<C, R, N>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
    R: Runner,
    N: Nodes,
{
    /// One pass over every slot.
    pub async fn pass(&mut self) -> Result<PassReport, PassError> {
        let started = Instant::now();
        self.take_ended();
        let config = self.config.borrow().clone();
        let Some(observed) = self.observe(&config).await? else {
            return Ok(PassReport::default());
        };
        let blind = self.judge_sight(&config, &observed).await;
        self.read_nodes(observed.now).await;
        let mut report = PassReport {
            blind,
            ..PassReport::default()
        };
        let mut reports = Reports::new();
        let Observed {
            known,
            snapshot,
            read,
            ..
        } = observed;
        let budget_now = snapshot
            .as_ref()
            .map(|s| s.now)
            .or_else(|| read.first().map(|g| g.now));
        let grants = budget_now.and_then(|now| budget::grants(&config, &read, now));
        // Each group's slots, in name order, from one walk over the configuration: a walk per
        // group would be the groups times the slots (100 groups of 1 000: ten million steps).
        let mut slots_of: Map<&GroupName, Vec<&Slot>> = Map::default();
        for slot in config.slots.values() {
            slots_of.entry(&slot.group).or_default().push(slot);
        }
        let mut elsewhere = self.elsewhere(&config, &read);
        for group_claims in read {
            let now = snapshot.as_ref().map_or(group_claims.now, |s| s.now);
            match config.groups.get(&group_claims.group) {
                Some(group) => {
                    let sees = PassSees {
                        snapshot: snapshot.as_ref(),
                        blind,
                        grants: grants.as_ref(),
                        elsewhere: &mut elsewhere,
                    };
                    let part = GroupPart {
                        group,
                        slots: slots_of.get(&group.name).map_or(&[][..], Vec::as_slice),
                        read: group_claims,
                        now,
                    };
                    let tally = Tally {
                        report: &mut report,
                        reports: &mut reports,
                    };
                    self.group_pass(&config, part, sees, tally).await;
                }
                None => report.writes += self.departed_group(&known, group_claims, now).await,
            }
        }
        self.write_reports(reports).await?;
        self.mark_written().await;
        self.count_slot_phases(&config);
        self.metrics
            .pass_seconds
            .observe(started.elapsed().as_secs_f64());
        self.health.passed(blind);
        Ok(report)
    }

    /// Reads what the pass needs, once: the groups that may hold claims (raising their fences
    /// while leading), presence, every group's claims, and the last reports when not loaded.
    /// `None` when this controller must not act (a fence it could not raise).
    async fn observe(&mut self, config: &Arc<Config>) -> Result<Option<Observed>, PassError> {
        let configured: Vec<(&GroupName, &claim::Timings)> = config
            .groups
            .values()
            .map(|g| (&g.name, &g.timings))
            .collect();
        // Every group that may hold claims: the configured ones, and those that left the
        // configuration with claims still in the store, with the timings they last ran with
        // (SPEC §4.1).
        let known = self.store.known_groups(&configured).await;
        let known = known.map_err(|e| self.lost(e))?;
        let groups: Vec<GroupName> = known.iter().map(|(g, _)| g.clone()).collect();
        if let Some(token) = self.leading.token.clone()
            && !self.raise_fences(&groups, &token).await
        {
            self.follow("a group's fence could not be raised");
            return Ok(None);
        }
        let read_started = Instant::now();
        // Presence and the claims are read at once: neither read waits for the other, and Redis
        // serves one while this process decodes the other (at 100 000 slots, presence is a
        // quarter of the time the two took one after the other). Each read is whole in itself,
        // as before; which one Redis answers first changes no decision, since every power action
        // is checked against the slot's live claim when it is recorded (SPEC §4.3).
        // The presence read runs as a task of its own, so that its decoding takes the other
        // core while this one decodes the claims.
        // The benches of the configured slots, by name: the pass never reads the registry, so
        // nothing a bench adds to it can make a pass longer (SPEC §4.5, §7).
        let named = self.slots_read(config);
        let presence = self.presence.clone();
        let presence = tokio::spawn(async move {
            let read = presence.read_named(&named).await;
            (read, Instant::now())
        });
        let read = self.store.read_groups(&groups).await;
        let (presence, read_at) = match presence.await {
            Ok(done) => done,
            // The task panicked (it never does: the read returns its errors) or was cancelled
            // with the runtime: the pass cannot see, as when the read fails.
            Err(e) => (
                Err(PresenceError::Read {
                    source: redis::RedisError::from(std::io::Error::other(e.to_string())),
                }),
                Instant::now(),
            ),
        };
        let snapshot = match presence {
            Ok(s) => Some(s),
            Err(e) => {
                warn!(
                    error = fleet_redis::connect::chain(&e),
                    "cannot read presence: blind, no power action this pass"
                );
                // Recorded now, not at the end of the pass: the claims read fails too when Redis
                // is down, and the grace must still follow the outage.
                self.seeing.sight = Sight::Lost;
                None
            }
        };
        self.waking.saw(snapshot.as_ref(), read_at);
        self.metrics
            .presence_read_seconds
            .observe((read_at - read_started).as_secs_f64());
        let read = read.map_err(|e| self.lost(e))?;
        if !self.memory.loaded
            && let Err(e) = self.load_statuses(config).await
        {
            return Err(self.lost(e));
        }
        let now = match &snapshot {
            Some(snap) => snap.now,
            None => read.first().map_or_else(Utc::now, |g| g.now),
        };
        Ok(Some(Observed {
            known,
            snapshot,
            read,
            now,
        }))
    }

    /// The configured slots' benches to read, built once per configuration.
    fn slots_read(&mut self, config: &Arc<Config>) -> Arc<Named> {
        if let Some((built, named)) = &self.memory.slots_read
            && Arc::ptr_eq(built, config)
        {
            return named.clone();
        }
        let names: Vec<BenchName> = config.slots.keys().cloned().collect();
        let named = Arc::new(self.presence.named(&names));
        self.memory.slots_read = Some((config.clone(), named.clone()));
        named
    }

    /// Each slot's last operation recorded under a group it is no longer in (renamed or
    /// removed, or the slot moved to another: SPEC §4.1), from the store's records of every group
    /// read and from this controller's own memory (which outlives a store that lost them, SPEC
    /// §5.3); the newest where there are several. The slot's group reads only its own records,
    /// so without these a rename inside the adoption window adopted a machine whose old group's
    /// shutdown was still darkening it. Only a record that may still run or be going
    /// down is kept: the planner judges it, and every other is cheaper left unlooked-up.
    fn elsewhere(&self, config: &Config, read: &[GroupClaims]) -> Map<BenchName, SlotOp> {
        let may_matter = |op: &SlotOp| {
            op.running() || (op.kind == claim::OperationKind::Shutdown && op.off_at.is_none())
        };
        let stored = read.iter().flat_map(|g| {
            g.operations
                .by_slot
                .iter()
                .map(move |(s, op)| (&g.group, s, op))
        });
        let remembered = self.memory.ops.iter().map(|((g, s), op)| (g, s, op));
        let mut found: Map<BenchName, SlotOp> = Map::default();
        for (group, slot, op) in stored.chain(remembered) {
            if !may_matter(op) || config.slots.get(slot).is_some_and(|s| s.group == *group) {
                continue;
            }
            // The newest operation; of two copies of one, the one that knows more of it.
            let rank = |o: &SlotOp| (o.started_at, o.end.is_some(), o.off_at.is_some());
            match found.get(slot) {
                Some(known) if rank(known) >= rank(op) => {}
                _ => {
                    found.insert(slot.clone(), op.clone());
                }
            }
        }
        found
    }

    /// A read that failed: sight is lost, and the grace follows when it returns.
    fn lost(&mut self, e: ClaimStoreError) -> PassError {
        self.seeing.sight = Sight::Lost;
        PassError::Claims(e)
    }

    /// The slots' Kubernetes Nodes, once per pass, when they are observed.
    /// A read that fails makes the bound slots blind, not unusable; sight that returns is
    /// followed by the grace (SPEC §5.2).
    async fn read_nodes(&mut self, now: DateTime<Utc>) {
        if !self.nodes.observed() {
            return;
        }
        let was = self.seeing.nodes_sight;
        self.node_views = match self.nodes.read().await {
            Ok(views) => Some(NodeViews::new(views)),
            Err(e) => {
                // Said once when sight is lost, not once a pass while it stays lost.
                if was != NodeSight::Lost {
                    warn!(
                        error = e,
                        "cannot read the Kubernetes Nodes: the slots bound to one are blind, no power action on them"
                    );
                }
                None
            }
        };
        let (sight, blind) = was.after(self.node_views.is_some(), now, self.faults.blind_grace);
        if was == NodeSight::Lost && sight != NodeSight::Lost {
            warn!(grace = ?self.faults.blind_grace, "the Kubernetes Nodes are readable again: bound slots blind for the grace");
        }
        self.seeing.nodes_sight = sight;
        self.seeing.nodes_blind = blind;
        self.metrics.kubernetes_blind.set(i64::from(blind));
    }

    /// A configured group: its claims of slots that left it end, then each slot's pass. A claim
    /// or operation record that cannot be read may be its slot's live one: no power action on
    /// that slot, or on the whole group when the claim does not even say its slot.
    async fn group_pass(
        &mut self,
        config: &Config,
        GroupPart {
            group,
            slots,
            read,
            now,
        }: GroupPart<'_>,
        PassSees {
            snapshot,
            blind,
            grants,
            elsewhere,
        }: PassSees<'_>,
        Tally { report, reports }: Tally<'_>,
    ) {
        let (unknown_unreadable, unreadable) = unreadable(&group.name, &read);
        let mut ops = read.operations.by_slot;
        let holder = self.leading.holder();
        // The claims by slot, each slot's in the order read, and the slots walked in name order
        // take theirs from the front. Not a map of a list a slot: each list began with room for
        // four claims, 46 MB of every pass at 100 000 slots with 50 000 claims.
        // By reference: the claims are shared with the copy the store holds of a large group.
        let mut claims: Vec<&Claim> = read.claims.iter().collect();
        claims.sort_by(|a, b| a.slot.cmp(&b.slot));
        report.writes += self.left_group(config, group, &claims, now).await;
        debug_assert!(
            slots.is_sorted_by(|a, b| a.name < b.name),
            "slots in name order"
        );
        let mut claims = claims.into_iter().peekable();
        let mut gathered = Gathered::with_capacity(slots.len());
        let mut benches = snapshot.map(Benches::new);
        for slot in slots.iter().copied() {
            if self.leading.deposed.load(Ordering::Relaxed) {
                break;
            }
            let seen = Seen {
                bench: benches.as_mut().and_then(|b| b.find(&slot.name)),
                blind,
                unreadable: unknown_unreadable || unreadable.contains(slot.name.as_str()),
                op: ops.remove(&slot.name),
                elsewhere: elsewhere.remove(&slot.name),
                may_start: grants.is_none_or(|g| g.contains(&slot.name)),
            };
            // Claims of slots before this one are of slots that left the group (`left_group`).
            while claims.next_if(|c| c.slot < slot.name).is_some() {}
            let claims = std::iter::from_fn(|| claims.next_if(|c| c.slot == slot.name))
                .cloned()
                .collect();
            let outcome = self
                .slot_pass(group, slot, claims, seen, now, &holder)
                .await;
            gathered.add(slot, outcome, report);
        }
        if !gathered.statuses.is_empty() {
            reports
                .entry(group.name.clone())
                .or_default()
                .extend(gathered.statuses);
        }
        if !self.leading.deposed.load(Ordering::Relaxed) {
            self.account_energy(&group.name, &gathered.sightings, now)
                .await;
        }
        self.count_claim_phases(&group.name, &gathered.phases);
    }

    /// The claims of slots that left `group` (removed, or moved to another group) end, each on
    /// its own. Returns the writes made.
    async fn left_group(
        &mut self,
        config: &Config,
        group: &Group,
        claims: &[&Claim],
        now: DateTime<Utc>,
    ) -> usize {
        // Claims of slots that left the group (removed, or moved to another group).
        let orphans: Vec<&Claim> = claims
            .iter()
            .copied()
            .filter(|c| {
                config
                    .slots
                    .get(&c.slot)
                    .is_none_or(|slot| slot.group != group.name)
            })
            .collect();
        let steps = slot::departed(&orphans, now, &group.timings);
        self.departed(&group.name, &group.timings, steps, now).await
    }

    /// The claims metric of a group, from its slots' claims as the pass left them.
    fn count_claim_phases(&self, group: &GroupName, phases: &Map<&'static str, i64>) {
        for phase in Phase::ALL {
            let labels = ClaimLabels {
                group: group.clone(),
                phase,
            };
            let n = phases.get(phase.as_str()).copied().unwrap_or(0);
            self.metrics.claims.get_or_create(&labels).set(n);
        }
    }

    /// A group that left the configuration (removed, or renamed: a removal plus an addition):
    /// its claims end SlotDeleted and are collected after the TTL; the group is forgotten once it
    /// holds none (SPEC §4.1). Its machines are no group's to power: a slot that moved to another
    /// group is that group's. Returns the writes made.
    async fn departed_group(
        &mut self,
        known: &[(GroupName, claim::Timings)],
        read: GroupClaims,
        now: DateTime<Utc>,
    ) -> usize {
        let gone = &read.group;
        let timings = known
            .iter()
            .find(|(g, _)| g == gone)
            .map(|(_, t)| t.clone())
            .unwrap_or_default();
        let claims: Vec<&Claim> = read.claims.iter().collect();
        let steps = slot::departed(&claims, now, &timings);
        let writes = self.departed(gone, &timings, steps, now).await;
        if read.claims.is_empty() && read.unreadable.is_empty() {
            match self.store.forget_group(gone, &timings).await {
                Ok(true) => {
                    info!(group = %gone, "a group that left the configuration holds no claim any more; forgotten")
                }
                Ok(false) => {}
                Err(e) => {
                    warn!(group = %gone, error = fleet_redis::connect::chain(&e), "forgetting a removed group failed")
                }
            }
        }
        writes
    }

    /// Takes the steps for claims whose slot left the configuration, each on its own. Returns the
    /// writes made.
    async fn departed(
        &mut self,
        group: &GroupName,
        timings: &claim::Timings,
        steps: Vec<Step>,
        now: DateTime<Utc>,
    ) -> usize {
        let mut writes = 0;
        for step in steps {
            match step {
                Step::Write(w)
                    if self
                        .hands()
                        .write(&w.old, &w.next, w.event, now, None)
                        .await =>
                {
                    writes += 1;
                    info!(%group, slot = %w.old.slot, claim = %w.old.name, "the slot left the configuration; claim failed SlotDeleted");
                }
                Step::Collect(c)
                    if self
                        .store
                        .delete(&c, None, timings.ttl_after_finished)
                        .await
                        .unwrap_or(false) =>
                {
                    writes += 1;
                    debug!(%group, claim = %c.name, "claim of a slot that left the configuration collected");
                }
                _ => {}
            }
        }
        writes
    }

    /// Writes the slots' reports, one round trip per group; this controller is their one writer.
    async fn write_reports(&mut self, reports: Reports) -> Result<(), PassError> {
        for (group, statuses) in reports {
            if let Err(e) = self.store.write_slots(&group, &statuses).await {
                if matches!(e, ClaimStoreError::Fenced { .. }) {
                    self.leading.deposed.store(true, Ordering::Relaxed);
                }
                return Err(PassError::Report(e));
            }
            for (slot, status) in statuses {
                self.memory.statuses.insert((group.clone(), slot), status);
            }
        }
        Ok(())
    }

    async fn load_statuses(&mut self, config: &Config) -> Result<(), ClaimStoreError> {
        for group in config.groups.keys() {
            let slots: Vec<&BenchName> = config.slots_of(group).map(|s| &s.name).collect();
            // Not sized ahead: reserving every slot's entry at once left the RSS at rest 20-35 MB
            // higher at 100 000 slots in every run that tried it (docs/measurements.md).
            let statuses = &mut self.memory.statuses;
            let into = |slot: &BenchName, status| {
                statuses.insert((group.clone(), slot.clone()), status);
            };
            self.store.read_statuses(group, &slots, into).await?;
        }
        self.memory.loaded = true;
        Ok(())
    }

    fn count_slot_phases(&self, config: &Config) {
        // Keyed by borrowed names: a key owned would clone a group name per slot, every pass.
        let mut counts: Map<(&GroupName, &'static str), i64> = Map::default();
        for ((group, _), status) in &self.memory.statuses {
            if let Some(phase) = status.phase() {
                *counts.entry((group, phase.as_str())).or_default() += 1;
            }
        }
        for group in config.groups.keys() {
            for phase in law::Report::ALL {
                let labels = SlotLabels {
                    group: group.clone(),
                    phase,
                };
                let n = counts.get(&(group, phase.as_str())).copied().unwrap_or(0);
                self.metrics.slots.get_or_create(&labels).set(n);
            }
        }
    }
}

/// The slots of `group` whose claims or operation records could not be read, named; and whether
/// a claim that does not even say its slot was among them (then no slot of the group is safe).
fn unreadable(group: &GroupName, read: &GroupClaims) -> (bool, HashSet<String>) {
    for (name, why) in &read.unreadable {
        warn!(group = %group, claim = name, error = why, "claim is unreadable; it is left alone");
    }
    let unknown = read.unreadable_slots.iter().any(Option::is_none);
    let mut named: HashSet<String> = read.unreadable_slots.iter().flatten().cloned().collect();
    for slot in &read.operations.unreadable {
        warn!(group = %group, %slot, "the slot's operation record is unreadable; no power action on it");
        named.insert(slot.to_string());
    }
    (unknown, named)
}
