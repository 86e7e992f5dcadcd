//! The lifecycle controller (SPEC §4.5): one pass over every slot, each second and whenever an
//! operation ends.
//!
//! A pass over a slot reads like the seed's reconcile: **observe** (the slot's claims, the bench's
//! presence), **decide** (the claim controller's judgment, the readiness gate, the input law, all
//! pure), **act** (claim writes through the store's compare-and-set, the cordon, operations), and
//! **report** (the slot's phase and history through `History::record`). Every action is a claim
//! write first and an effect second: an operation is recorded on its claim before it runs. A pass
//! that loses a compare-and-set stops acting on that slot; the next pass reads it again.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use redis::aio::ConnectionLike;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::config::{Config, Group, Slot};
use crate::domain::claim::{
    self, Claim, Context, Gate, Judgment, Move, OperationKind, OperationOutcome, Phase, Reason,
    ShutdownGate, add,
};
use crate::domain::law::{self, ClaimInput, Fires, Input, Power};
use crate::domain::name::{BenchName, ClaimName, GroupName, Reason as HoldReason};
use crate::domain::node::{self, Binding, NodeView};
use crate::domain::operation::{self, OpEnd, SlotOp, UnclaimedShutdown, Unreported};
use crate::domain::state::{Bench, State};
use crate::lifecycle::{REPORT_SLACK, Report, Request, Runner};
use crate::store::catalog::{Blindness, Catalog, ControllerStatus, STATUS_TTL};
use crate::store::claims::{ClaimStore, ClaimStoreError, Entry, Event, SlotStatus, SlotWaiting};
use crate::store::lease::{Generation, Leadership, Lease};
use crate::store::operations::Unclaimed;
use crate::store::presence::{Presence, Snapshot};

use crate::telemetry::{
    ClaimLabels, Health, KindLabel, Metrics, MoveLabels, OperationLabels, ReasonLabel, SlotLabels,
};

/// Hold requests fleet writes as the cordon start with this, so fleet never lifts an operator's.
pub const CORDON_PREFIX: &str = "fleet: ";

/// A pass that could not run.
#[derive(Debug, thiserror::Error)]
pub enum PassError {
    #[error("reading the claims")]
    Claims(#[source] ClaimStoreError),
    #[error("writing the slot statuses")]
    Report(#[source] ClaimStoreError),
}

/// What one pass did, for tests and logs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PassReport {
    pub blind: bool,
    pub slots: usize,
    pub writes: usize,
    pub started: Vec<BenchName>,
    pub stopped: Vec<BenchName>,
}

/// An operation that ended and whose outcome is not written yet.
#[derive(Clone, Debug)]
struct Finished {
    kind: OperationKind,
    claim: Option<ClaimName>,
    /// When the operation was recorded as started on its claim: an outcome only closes that one.
    started_at: Option<DateTime<Utc>>,
    report: Report,
}

/// The Kubernetes Nodes of the slots bound to one (SPEC §3.1 usability). The Kubernetes client
/// plugs in here; everything above it is tested through the same trait.
pub trait Nodes: Send + Sync + 'static {
    /// Reads the named Nodes once per pass; a Node that does not exist is absent from the map.
    fn read(
        &self,
        names: &[String],
    ) -> impl std::future::Future<Output = Result<HashMap<String, NodeView>, String>> + Send;

    /// Whether Nodes are observed at all. Without Kubernetes a bound slot is judged by its bench
    /// alone.
    fn observed(&self) -> bool;
}

/// No Kubernetes: usability is the bench's presence alone.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoNodes;

impl Nodes for NoNodes {
    async fn read(&self, _names: &[String]) -> Result<HashMap<String, NodeView>, String> {
        Ok(HashMap::new())
    }

    fn observed(&self) -> bool {
        false
    }
}

/// The controller.
pub struct Controller<C, R, N = NoNodes> {
    nodes: N,
    /// The Nodes read this pass; `None` when they could not be read (bound slots are then not
    /// usable, and nothing is powered on or off because of it).
    node_views: Option<HashMap<String, NodeView>>,
    config: watch::Receiver<Arc<Config>>,
    presence: Presence<C>,
    /// The store as this controller writes it: fenced with its token while it leads.
    store: ClaimStore<C>,
    /// The same store, unfenced (reads, and raising fences).
    base_store: ClaimStore<C>,
    runner: Arc<R>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    /// The slot statuses this controller wrote: it is their one writer.
    statuses: HashMap<(GroupName, BenchName), SlotStatus>,
    /// Slots whose status changed outside the report step (an unclaimed shutdown's count).
    dirty: std::collections::HashSet<(GroupName, BenchName)>,
    loaded: bool,
    running: HashMap<BenchName, OperationKind>,
    finished: HashMap<BenchName, Finished>,
    done_tx: mpsc::UnboundedSender<(BenchName, Finished)>,
    done_rx: mpsc::UnboundedReceiver<(BenchName, Finished)>,
    tasks: TaskTracker,
    faults: Faults,
    /// The lease, when this controller competes for leadership (`run_leading`).
    lease: Option<Lease<C>>,
    /// The fencing token of this controller's leadership, while it leads.
    token: Option<String>,
    /// Set when a write was refused by a newer leader's fence: stop acting at once.
    deposed: std::sync::atomic::AtomicBool,
    /// The store's generation marker as this controller last saw it.
    generation: Option<String>,
    /// Blind until this server time, and why: after sight returned, the store came back empty,
    /// or many wanted machines vanished at once.
    blind_until: Option<(DateTime<Utc>, String)>,
    /// The status last published for the views, and when (renewed well inside its TTL).
    published: Option<(ControllerStatus, Instant)>,
    /// Whether this controller has lost sight of the store since its last pass that read it.
    sight: Sight,
    /// The groups whose fence this leadership has raised (a group added on reload is raised on
    /// the next pass).
    fenced: std::collections::HashSet<GroupName>,
    /// The store came back without its claims: after the blind grace, machines found on with no
    /// claim are adopted rather than powered off.
    adopting: bool,
    /// This controller's memory of each slot's last operation (SPEC §5.4): it outlives a store
    /// that lost its last writes.
    ops: HashMap<(GroupName, BenchName), SlotOp>,
    /// Operations recorded by a write whose reply was lost.
    uncertain: HashMap<BenchName, Uncertain>,
    /// Each slot's power as this controller last observed it (for the mass-vanishing rule).
    last_power: HashMap<(GroupName, BenchName), Power>,
}

/// Whether the controller could see the store, for the grace after an outage (SPEC §5.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sight {
    /// Every read since the last pass that read presence succeeded.
    Clear,
    /// A read or a lease call failed; the grace starts at the next pass that reads presence.
    Lost,
    /// Sight returned at this instant while following; the grace runs from then.
    Back(Instant),
}

/// How the controller protects machines it cannot see (SPEC §5.2).
#[derive(Clone, Debug, PartialEq)]
pub struct Faults {
    /// How long the controller stays blind after sight returns: one TTL plus one beat interval.
    pub blind_grace: Duration,
    /// The share of the machines that were on whose vanishing in one pass makes it blind.
    pub vanish_ratio: f64,
    /// The fewest machines whose vanishing in one pass makes it blind.
    pub vanish_min: usize,
    /// How long past an operation's timeout its wrapper has to report it (SPEC §4.2).
    pub report_slack: Duration,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            blind_grace: Duration::from_secs(40),
            vanish_ratio: 0.5,
            vanish_min: 2,
            report_slack: REPORT_SLACK,
        }
    }
}

impl<C, R> Controller<C, R, NoNodes>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
    R: Runner,
{
    pub fn new(
        config: watch::Receiver<Arc<Config>>,
        presence: Presence<C>,
        store: ClaimStore<C>,
        runner: Arc<R>,
        metrics: Arc<Metrics>,
        health: Arc<Health>,
    ) -> Self {
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        Controller {
            nodes: NoNodes,
            node_views: None,
            base_store: store.clone(),
            config,
            presence,
            store,
            runner,
            metrics,
            health,
            statuses: HashMap::new(),
            dirty: std::collections::HashSet::new(),
            loaded: false,
            running: HashMap::new(),
            finished: HashMap::new(),
            done_tx,
            done_rx,
            tasks: TaskTracker::new(),
            faults: Faults::default(),
            lease: None,
            token: None,
            deposed: std::sync::atomic::AtomicBool::new(false),
            generation: None,
            blind_until: None,
            published: None,
            sight: Sight::Clear,
            fenced: std::collections::HashSet::new(),
            adopting: false,
            ops: HashMap::new(),
            uncertain: HashMap::new(),
            last_power: HashMap::new(),
        }
    }

    /// Observes the slots' Kubernetes Nodes through `nodes`.
    pub fn with_nodes<M: Nodes>(self, nodes: M) -> Controller<C, R, M> {
        Controller {
            nodes,
            node_views: None,
            config: self.config,
            presence: self.presence,
            store: self.store,
            base_store: self.base_store,
            runner: self.runner,
            metrics: self.metrics,
            health: self.health,
            statuses: self.statuses,
            dirty: self.dirty,
            loaded: self.loaded,
            running: self.running,
            finished: self.finished,
            done_tx: self.done_tx,
            done_rx: self.done_rx,
            tasks: self.tasks,
            faults: self.faults,
            lease: self.lease,
            token: self.token,
            deposed: self.deposed,
            generation: self.generation,
            blind_until: self.blind_until,
            published: self.published,
            sight: self.sight,
            fenced: self.fenced,
            adopting: self.adopting,
            ops: self.ops,
            uncertain: self.uncertain,
            last_power: self.last_power,
        }
    }
}

impl<C, R, N> Controller<C, R, N>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
    R: Runner,
    N: Nodes,
{
    /// Sets how the controller protects machines it cannot see.
    pub fn with_faults(mut self, faults: Faults) -> Self {
        self.faults = faults;
        self
    }

    /// Competes for leadership through `lease`: only the leader runs passes, and its writes
    /// carry its fencing token (SPEC §5.1).
    pub fn with_lease(mut self, lease: Lease<C>) -> Self {
        self.lease = Some(lease);
        self
    }

    /// The fencing token while this controller leads.
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// Takes or renews the lease; on a new leadership raises every group's fence. Returns whether
    /// this controller leads now.
    pub async fn lead(&mut self) -> bool {
        let Some(lease) = self.lease.clone() else {
            return true;
        };
        if self
            .deposed
            .swap(false, std::sync::atomic::Ordering::Relaxed)
        {
            self.follow("a write was refused by a newer leader's fence");
        }
        match lease.acquire(self.token.as_deref()).await {
            Ok(Leadership::Leader(token)) if self.token.as_deref() == Some(token.as_str()) => true,
            Ok(Leadership::Leader(token)) => {
                let groups: Vec<GroupName> = self.config.borrow().groups.keys().cloned().collect();
                self.fenced.clear();
                if !self.raise_fences(&groups, &token).await {
                    return false;
                }
                self.store = self.base_store.fenced(&token);
                self.token = Some(token.clone());
                // The previous leader wrote the statuses: read them again.
                self.loaded = false;
                self.statuses.clear();
                self.metrics.leader.set(1);
                self.health.following(false);
                self.health.lead(self.token.as_deref());
                // Said once everything that acts as the leader (the provider too) knows it.
                info!(holder = lease.id(), token, "became the leader");
                true
            }
            Ok(Leadership::Follower(holder)) => {
                self.health.following(true);
                // Sight returned while following: the grace runs from now, not from the first
                // pass this controller may run much later.
                if self.sight == Sight::Lost {
                    self.sight = Sight::Back(Instant::now());
                }
                if self.token.is_some() {
                    self.follow(&format!("the lease is held by {holder}"));
                }
                false
            }
            Err(e) => {
                warn!(
                    error = crate::store::connect::chain(&e),
                    "cannot reach the lease"
                );
                // The store is out of reach, so presence is too: when it returns, the grace.
                self.sight = Sight::Lost;
                // A leader that cannot renew stops acting: its lease may lapse unseen.
                if self.token.is_some() {
                    self.follow("the lease could not be renewed");
                }
                false
            }
        }
    }

    /// Raises the fence of every group not raised yet in this leadership. Returns false when a
    /// newer leader's fence is up (or Redis refused), so this controller must not act.
    async fn raise_fences(&mut self, groups: &[GroupName], token: &str) -> bool {
        for group in groups {
            if self.fenced.contains(group) {
                continue;
            }
            match self.base_store.raise_fence(group, token).await {
                Ok(true) => {
                    self.fenced.insert(group.clone());
                }
                Ok(false) => {
                    warn!(%group, token, "a newer leader's fence is up; not leading");
                    return false;
                }
                Err(e) => {
                    warn!(%group, error = crate::store::connect::chain(&e), "raising the fence failed; not leading yet");
                    return false;
                }
            }
        }
        true
    }

    fn follow(&mut self, why: &str) {
        warn!(why, "lost leadership; no longer acting");
        self.token = None;
        self.health.lead(None);
        self.store = self.base_store.clone();
        self.metrics.leader.set(0);
    }

    /// Leads when it can, until `shutdown`: a pass every `interval` (and at once when an
    /// operation ends) while this controller holds the lease. A clean stop releases the lease so
    /// a follower takes over at once.
    pub async fn run_leading(
        mut self,
        interval: Duration,
        grace: Duration,
        shutdown: CancellationToken,
    ) {
        // Without a lease there is no one else: this controller acts from the start.
        self.metrics.leader.set(i64::from(self.lease.is_none()));
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tick.tick() => {}
                Some((slot, done)) = self.done_rx.recv() => {
                    self.running.remove(&slot);
                    self.finished.insert(slot, done);
                }
            }
            if !self.lead().await {
                continue;
            }
            if let Err(e) = self.pass().await {
                warn!(
                    error = crate::store::connect::chain(&e),
                    "controller pass failed; retrying"
                );
            }
        }
        self.health.lead(None);
        if let (Some(lease), Some(token)) = (self.lease.clone(), self.token.clone()) {
            match lease.release(&token).await {
                Ok(_) => info!(token, "leadership released"),
                Err(e) => warn!(
                    error = crate::store::connect::chain(&e),
                    "releasing the lease failed; it lapses on its own"
                ),
            }
        }
        self.metrics.leader.set(0);
        self.finish(grace).await;
    }

    /// Runs passes every `interval`, and at once when an operation ends, until `shutdown`; then
    /// waits up to `grace` for the operations in flight. Without a lease this controller is the
    /// only one and always acts; with one, it acts while it leads (`run_leading`).
    pub async fn run(self, interval: Duration, grace: Duration, shutdown: CancellationToken) {
        self.run_leading(interval, grace, shutdown).await;
    }

    async fn finish(&mut self, grace: Duration) {
        self.tasks.close();
        if tokio::time::timeout(grace, self.tasks.wait())
            .await
            .is_err()
        {
            let running: Vec<String> = self
                .running
                .iter()
                .map(|(slot, kind)| format!("{slot} ({})", kind.as_str()))
                .collect();
            warn!(
                ?running,
                "operations still running at shutdown; they are recorded on their claims"
            );
        }
    }

    /// Whether an operation is running for `slot` in this process.
    pub fn running(&self, slot: &BenchName) -> bool {
        self.running.contains_key(slot)
    }

    /// Waits for the next operation to end (for callers that drive passes themselves).
    pub async fn operation_ended(&mut self) -> Option<BenchName> {
        let (slot, done) = self.done_rx.recv().await?;
        self.running.remove(&slot);
        self.finished.insert(slot.clone(), done);
        Some(slot)
    }

    /// One pass over every slot.
    pub async fn pass(&mut self) -> Result<PassReport, PassError> {
        let started = Instant::now();
        while let Ok((slot, done)) = self.done_rx.try_recv() {
            self.running.remove(&slot);
            self.finished.insert(slot, done);
        }
        let config = self.config.borrow().clone();
        let configured: Vec<(&GroupName, &claim::Timings)> = config
            .groups
            .values()
            .map(|g| (&g.name, &g.timings))
            .collect();
        // Every group that may hold claims: the configured ones, and those that left the
        // configuration with claims still in the store, with the timings they last ran with
        // (SPEC §4.1).
        let known = match self.store.known_groups(&configured).await {
            Ok(known) => known,
            Err(e) => {
                self.sight = Sight::Lost;
                return Err(PassError::Claims(e));
            }
        };
        let groups: Vec<GroupName> = known.iter().map(|(g, _)| g.clone()).collect();
        if let Some(token) = self.token.clone()
            && !self.raise_fences(&groups, &token).await
        {
            self.follow("a group's fence could not be raised");
            return Ok(PassReport::default());
        }

        // Observe: presence (blind when it cannot be read) and every group's claims.
        let read_started = Instant::now();
        let snapshot = match self.presence.read(&[]).await {
            Ok(s) => Some(s),
            Err(e) => {
                warn!(
                    error = crate::store::connect::chain(&e),
                    "cannot read presence: blind, no power action this pass"
                );
                // Recorded now, not at the end of the pass: the claims read below fails too when
                // Redis is down, and the grace must still follow the outage.
                self.sight = Sight::Lost;
                None
            }
        };
        self.metrics
            .presence_read_seconds
            .observe(read_started.elapsed().as_secs_f64());
        let read = match self.store.read_groups(&groups).await {
            Ok(read) => read,
            Err(e) => {
                self.sight = Sight::Lost;
                return Err(PassError::Claims(e));
            }
        };
        if !self.loaded
            && let Err(e) = self.load_statuses(&config).await
        {
            self.sight = Sight::Lost;
            return Err(PassError::Claims(e));
        }
        let now_seen = match &snapshot {
            Some(snap) => snap.now,
            None => read.first().map_or_else(Utc::now, |g| g.now),
        };
        // The store came back without its data: blind for the grace, then adopt (SPEC §5.3). The
        // wipe record is in the store, so a leader that takes over during the grace keeps it.
        let mut wiped: Option<(i64, i64)> = None;
        if let Some(lease) = self.lease.clone() {
            let fresh = format!("{}-{}", lease.id(), now_seen.timestamp_micros());
            let adopt_window = self.faults.blind_grace.max(Duration::from_secs(60));
            match lease
                .generation(&fresh, self.faults.blind_grace, adopt_window)
                .await
            {
                Ok(Generation {
                    marker,
                    wiped: record,
                    catalog,
                }) => {
                    if !catalog {
                        // The views need it: a wipe took it with everything else.
                        let mut conn = self.base_store.conn();
                        match Catalog::of(&config)
                            .publish(&mut conn, self.presence.keys())
                            .await
                        {
                            Ok(()) => {
                                info!("the catalog was missing from the store; published it again")
                            }
                            Err(e) => warn!(
                                error = crate::store::connect::chain(&e),
                                "publishing the catalog again failed"
                            ),
                        }
                    }
                    if self.generation.as_deref() != Some(marker.as_str()) {
                        if marker == fresh {
                            warn!(
                                generation = marker,
                                "the store has no generation marker (first start, or Redis came back empty): blind for the grace, then machines found on are adopted"
                            );
                        }
                        self.loaded = false;
                        self.statuses.clear();
                        self.generation = Some(marker);
                    }
                    wiped = record;
                }
                Err(e) => warn!(
                    error = crate::store::connect::chain(&e),
                    "cannot read the generation marker"
                ),
            }
        }
        let now_ms = now_seen.timestamp_millis();
        self.adopting = wiped.is_some_and(|(_, adopt_until)| now_ms < adopt_until);
        if let Some((blind_until, _)) = wiped
            && now_ms < blind_until
        {
            let until = DateTime::from_timestamp_millis(blind_until).unwrap_or(now_seen);
            self.blind_for(
                until,
                "the store came back empty (or this is its first start): machines found on will be adopted",
            );
        }
        // Sight lost, then back: blind for the grace, so benches that beat through the outage
        // are heard again before anything is judged off.
        if snapshot.is_some() {
            let left = match self.sight {
                Sight::Clear => Duration::ZERO,
                Sight::Lost => self.faults.blind_grace,
                Sight::Back(at) => self.faults.blind_grace.saturating_sub(at.elapsed()),
            };
            if !left.is_zero() {
                let until = claim::add(now_seen, left);
                self.blind_for(
                    until,
                    "Redis could not be read: benches are heard again before anything is judged",
                );
                warn!(grace = ?left, "presence readable again: blind for the grace");
            }
            self.sight = Sight::Clear;
        }
        if let Some(snap) = &snapshot
            && let Some(vanished) = self.mass_vanishing(&config, snap, &read)
        {
            self.blind_for(
                claim::add(now_seen, self.faults.blind_grace),
                &format!(
                    "{vanished} machines that claims want vanished in one pass: more likely a fault \
                     of the observation than of the machines"
                ),
            );
        }
        let grace_left = self
            .blind_until
            .as_ref()
            .is_some_and(|(until, _)| now_seen < *until);
        let blind = snapshot.is_none() || grace_left;
        if !grace_left {
            self.blind_until = None;
        }
        self.metrics.blind.set(i64::from(blind));
        let blindness = match (&snapshot, &self.blind_until) {
            (None, _) => Some(Blindness {
                until: None,
                why: "presence cannot be read: a grace follows once it can".to_owned(),
            }),
            (Some(_), Some((until, why))) => Some(Blindness {
                until: Some(*until),
                why: why.clone(),
            }),
            (Some(_), None) => None,
        };
        self.publish_status(blindness, now_seen).await;
        if self.nodes.observed() {
            let names: Vec<String> = config
                .slots
                .values()
                .filter_map(|s| s.kubernetes_node.clone())
                .collect();
            self.node_views = match self.nodes.read(&names).await {
                Ok(views) => Some(views),
                Err(e) => {
                    warn!(
                        error = e,
                        "cannot read the Kubernetes Nodes; bound slots are not usable this pass"
                    );
                    None
                }
            };
        }

        let mut report = PassReport {
            blind,
            ..PassReport::default()
        };
        let mut writes: BTreeMap<GroupName, Vec<(BenchName, SlotStatus)>> = BTreeMap::new();
        for group_claims in read {
            let now = snapshot.as_ref().map_or(group_claims.now, |s| s.now);
            let Some(group) = config.groups.get(&group_claims.group) else {
                // A group that left the configuration (removed, or renamed: a removal plus an
                // addition): its claims end SlotDeleted and are collected after the TTL; the group
                // is forgotten once it holds none (SPEC §4.1). Its machines are no group's to
                // power: a slot that moved to another group is that group's.
                let gone = &group_claims.group;
                let timings = known
                    .iter()
                    .find(|(g, _)| g == gone)
                    .map(|(_, t)| t.clone())
                    .unwrap_or_default();
                let claims: Vec<&Claim> = group_claims.claims.iter().collect();
                report.writes += self.orphans(gone, &timings, &claims, now).await;
                if group_claims.claims.is_empty() && group_claims.unreadable.is_empty() {
                    match self.store.forget_group(gone, &timings).await {
                        Ok(true) => {
                            info!(group = %gone, "a group that left the configuration holds no claim any more; forgotten")
                        }
                        Ok(false) => {}
                        Err(e) => {
                            warn!(group = %gone, error = crate::store::connect::chain(&e), "forgetting a removed group failed")
                        }
                    }
                }
                continue;
            };
            for (name, why) in &group_claims.unreadable {
                warn!(group = %group.name, claim = name, error = why, "claim is unreadable; it is left alone");
            }
            // A claim that cannot be read may be the live claim of its slot: no power action on
            // that slot, or on the whole group when the claim does not even say its slot. The
            // same for an operation record that cannot be read.
            let unknown_unreadable = group_claims.unreadable_slots.iter().any(Option::is_none);
            let mut unreadable_slots: Vec<String> = group_claims
                .unreadable_slots
                .iter()
                .flatten()
                .cloned()
                .collect();
            for slot in &group_claims.operations.unreadable {
                warn!(group = %group.name, %slot, "the slot's operation record is unreadable; no power action on it");
                unreadable_slots.push(slot.to_string());
            }
            let mut ops = group_claims.operations.by_slot;
            let mut by_slot: BTreeMap<BenchName, Vec<Claim>> = BTreeMap::new();
            for c in group_claims.claims {
                by_slot.entry(c.slot.clone()).or_default().push(c);
            }
            // Claims of slots that left the group (removed, or moved to another group) end
            // SlotDeleted, and are collected after the TTL.
            let orphans: Vec<&Claim> = by_slot
                .iter()
                .filter(|(s, _)| {
                    config
                        .slots
                        .get(*s)
                        .is_none_or(|slot| slot.group != group.name)
                })
                .flat_map(|(_, claims)| claims.iter())
                .collect();
            report.writes += self
                .orphans(&group.name, &group.timings, &orphans, now)
                .await;
            let mut phases: HashMap<&'static str, i64> = HashMap::new();
            for slot in config.slots_of(&group.name) {
                if self.deposed.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                let claims = by_slot.remove(&slot.name).unwrap_or_default();
                let bench = snapshot.as_ref().and_then(|s| bench_of(s, &slot.name));
                let unreadable =
                    unknown_unreadable || unreadable_slots.iter().any(|s| s == slot.name.as_str());
                let seen = Seen {
                    bench,
                    blind,
                    unreadable,
                    op: ops.remove(&slot.name),
                };
                let outcome = self.slot_pass(group, slot, claims, seen, now).await;
                report.slots += 1;
                report.writes += outcome.writes;
                if outcome.started {
                    report.started.push(slot.name.clone());
                }
                if outcome.stopped {
                    report.stopped.push(slot.name.clone());
                }
                for c in &outcome.claims {
                    *phases.entry(c.phase.as_str()).or_default() += 1;
                }
                if let Some(status) = outcome.status {
                    writes
                        .entry(group.name.clone())
                        .or_default()
                        .push((slot.name.clone(), status));
                }
            }
            for phase in Phase::ALL {
                let labels = ClaimLabels {
                    group: group.name.clone(),
                    phase: phase.into(),
                };
                self.metrics
                    .claims
                    .get_or_create(&labels)
                    .set(phases.get(phase.as_str()).copied().unwrap_or(0));
            }
        }
        for (group, statuses) in writes {
            if let Err(e) = self.store.write_slots(&group, &statuses).await {
                if matches!(e, ClaimStoreError::Fenced { .. }) {
                    self.deposed
                        .store(true, std::sync::atomic::Ordering::Relaxed);
                }
                return Err(PassError::Report(e));
            }
            for (slot, status) in statuses {
                self.statuses.insert((group.clone(), slot), status);
            }
        }
        self.count_slot_phases(&config);
        self.metrics
            .pass_seconds
            .observe(started.elapsed().as_secs_f64());
        self.health.passed(blind);
        Ok(report)
    }

    /// Ends the claims of slots or groups that left the configuration (SPEC §4.1): a live claim
    /// fails SlotDeleted, a terminal one is collected `ttl_after_finished` after it ended. Returns
    /// the writes made.
    async fn orphans(
        &self,
        group: &GroupName,
        timings: &claim::Timings,
        claims: &[&Claim],
        now: DateTime<Utc>,
    ) -> usize {
        let mut writes = 0;
        for c in claims {
            let ctx = Context {
                now,
                power: None,
                slot_exists: false,
                superseded: false,
                timings,
            };
            match claim::judge(c, &ctx) {
                Judgment::Fail(reason) => {
                    let Ok(next) = c.apply(Move::because(Phase::Failed, reason), now) else {
                        continue;
                    };
                    if self.write(c, &next, Event::Failed, now, None).await {
                        writes += 1;
                        info!(%group, slot = %c.slot, claim = %c.name, "the slot left the configuration; claim failed SlotDeleted");
                    }
                }
                Judgment::Collect => {
                    if self
                        .store
                        .delete(c, None, timings.ttl_after_finished)
                        .await
                        .unwrap_or(false)
                    {
                        writes += 1;
                        debug!(%group, claim = %c.name, "claim of a slot that left the configuration collected");
                    }
                }
                Judgment::Keep | Judgment::Complete(_) | Judgment::Watch(_) => {}
            }
        }
        writes
    }

    /// Whether a large share of the machines that were on vanished in one pass (SPEC §5.2): at
    /// least `vanish_min`, and at least `vanish_ratio` of those on. A whole fleet going dark at
    /// once is far more likely a fault of the observation than of the machines. Only machines
    /// some claim wants on count: one fleet is powering off itself (a scale-down's marked claim,
    /// a shutdown in flight or not yet seen to take effect) is expected to go dark, and a
    /// scale-down of the whole group must not blind the controller. "Was on" is this controller's
    /// own observation at its last pass, never the report it publishes.
    fn mass_vanishing(
        &self,
        config: &Config,
        snap: &Snapshot,
        read: &[crate::store::claims::GroupClaims],
    ) -> Option<usize> {
        let wanted: std::collections::HashSet<(&GroupName, &BenchName)> = read
            .iter()
            .flat_map(|g| g.claims.iter())
            .filter(|c| c.wants_machine())
            .map(|c| (&c.group, &c.slot))
            .collect();
        let powering_off: std::collections::HashSet<(&GroupName, &BenchName)> = read
            .iter()
            .flat_map(|g| {
                g.operations
                    .by_slot
                    .iter()
                    .filter(move |(_, op)| {
                        let settle = config
                            .group(&g.group)
                            .map_or(Duration::ZERO, |g| g.timings.job_monitor_poll_interval);
                        op.kind == OperationKind::Shutdown
                            && (op.running() || op.going_down(snap.now, settle))
                    })
                    .map(move |(slot, _)| (&g.group, slot))
            })
            .collect();
        let mut on = 0usize;
        let mut vanished = 0usize;
        for slot in config.slots.values() {
            let key = (&slot.group, &slot.name);
            let was_on = self
                .last_power
                .get(&(slot.group.clone(), slot.name.clone()))
                == Some(&Power::On);
            if !was_on || !wanted.contains(&key) || powering_off.contains(&key) {
                continue;
            }
            on += 1;
            let now_off =
                bench_of(snap, &slot.name).is_none_or(|b| b.verdict(snap.now).state == State::Down);
            if now_off {
                vanished += 1;
            }
        }
        let mass = vanished >= self.faults.vanish_min
            && (vanished as f64) >= self.faults.vanish_ratio * on as f64;
        if mass {
            warn!(
                vanished,
                on,
                "many wanted machines vanished in one pass: blind for the grace, no power action"
            );
        }
        mass.then_some(vanished)
    }

    /// Blind until `until` at least, for `why` (the latest end, and its reason, win).
    fn blind_for(&mut self, until: DateTime<Utc>, why: &str) {
        match &self.blind_until {
            Some((u, _)) if *u >= until => {}
            _ => self.blind_until = Some((until, why.to_owned())),
        }
    }

    /// Publishes the controller's status for the views when it changed, and well inside its TTL
    /// otherwise (SPEC §4.7). A report: nothing reads it to decide.
    async fn publish_status(&mut self, blind: Option<Blindness>, now: DateTime<Utc>) {
        let holder = self
            .lease
            .as_ref()
            .map_or_else(|| "fleet serve".to_owned(), |l| l.id().to_owned());
        let fresh = self.published.as_ref().is_some_and(|(s, at)| {
            s.holder == holder && s.blind == blind && at.elapsed() < STATUS_TTL / 3
        });
        if fresh {
            return;
        }
        let status = ControllerStatus {
            holder,
            updated_at: now,
            blind,
        };
        let mut conn = self.base_store.conn();
        match status.publish(&mut conn, self.presence.keys()).await {
            Ok(()) => self.published = Some((status, Instant::now())),
            Err(e) => debug!(
                error = crate::store::connect::chain(&e),
                "publishing the controller's status failed"
            ),
        }
    }

    async fn load_statuses(&mut self, config: &Config) -> Result<(), ClaimStoreError> {
        for group in config.groups.keys() {
            let slots: Vec<BenchName> = config.slots_of(group).map(|s| s.name.clone()).collect();
            let read = self.store.read_slots(group, &slots).await?;
            for (slot, (status, _)) in slots.into_iter().zip(read) {
                if let Some(status) = status {
                    self.statuses.insert((group.clone(), slot), status);
                }
            }
        }
        self.loaded = true;
        Ok(())
    }

    fn count_slot_phases(&self, config: &Config) {
        let mut counts: HashMap<(GroupName, &'static str), i64> = HashMap::new();
        for ((group, _), status) in &self.statuses {
            if let Some(phase) = status.phase() {
                *counts.entry((group.clone(), phase.as_str())).or_default() += 1;
            }
        }
        for group in config.groups.keys() {
            for phase in law::Report::ALL {
                let labels = SlotLabels {
                    group: group.clone(),
                    phase: phase.into(),
                };
                let n = counts
                    .get(&(group.clone(), phase.as_str()))
                    .copied()
                    .unwrap_or(0);
                self.metrics.slots.get_or_create(&labels).set(n);
            }
        }
    }

    /// One slot: observe → decide → act → report.
    async fn slot_pass(
        &mut self,
        group: &Group,
        slot: &Slot,
        mut claims: Vec<Claim>,
        seen: Seen<'_>,
        now: DateTime<Utc>,
    ) -> SlotOutcome {
        let Seen {
            bench,
            blind,
            unreadable,
            op: stored,
        } = seen;
        let t = &group.timings;
        let mut out = SlotOutcome::default();
        // Observe.
        let state: Option<State> = if blind {
            None
        } else {
            Some(bench.map_or(State::Down, |b| b.verdict(now).state))
        };
        let power = state.map(Power::of);
        let usable =
            state.is_some_and(|s| node::usable(s, self.binding(slot), &group.readiness_taints));
        claims.sort_by(|a, b| (a.requested_at, &a.name).cmp(&(b.requested_at, &b.name)));

        // The slot's operation record: the newest of the store's, this controller's memory and the
        // claims' own records, put back where the store lost it (SPEC §5.4).
        let mut op = self
            .operation_record(group, slot, stored, &mut claims, now, &mut out)
            .await;
        // An operation this controller recorded without learning whether the write landed runs
        // now, if the store shows it recorded and nobody runs it.
        if let Some(o) = &op
            && let Some(u) = self.uncertain.remove(&slot.name)
            && u.op.started_at == o.started_at
            && o.running()
            && !self.running.contains_key(&slot.name)
        {
            warn!(slot = %slot.name, operation = o.kind.as_str(), "the write that recorded the operation did land: running it now");
            match o.kind {
                OperationKind::Startup => out.started = true,
                OperationKind::Shutdown => out.stopped = true,
            }
            self.spawn(group, slot, u.claim.as_ref(), o.kind, o.started_at);
        }

        // Act on an operation that ended here: its outcome is written to its claim and to the
        // slot's record before anything else.
        if let Some(done) = self.finished.get(&slot.name).cloned() {
            let settled = self
                .record_outcome(&slot.name, &done, &mut claims, now)
                .await;
            if let Some(started_at) = done.started_at {
                self.end_recorded(group, slot, &mut op, started_at, &done.report, now)
                    .await;
            }
            if settled {
                self.finished.remove(&slot.name);
                out.writes += 1;
            }
        }
        // Outcomes reported to the store by an operation's wrapper (one that a controller that
        // stopped or died started), and operations whose outcome can no longer come.
        if !self.running.contains_key(&slot.name) && !self.finished.contains_key(&slot.name) {
            let seen = (power, blind);
            self.settle_reported(group, slot, &mut op, &mut claims, seen, now, &mut out)
                .await;
        }
        // A machine observed off after a shutdown is no longer on its way down.
        let settle = t.job_monitor_poll_interval;
        if power == Some(Power::Off)
            && let Some(o) = op.as_mut().filter(|o| o.going_down(now, settle))
        {
            match self
                .store
                .observe_off(&group.name, &slot.name, o.started_at, now)
                .await
            {
                Ok(_) => {
                    o.off_at = Some(now);
                    self.remember(group, slot, o);
                }
                Err(e) => self.write_failed(&slot.name, "recording the machine off", e),
            }
        }
        let going_down = op.as_ref().is_some_and(|o| o.going_down(now, settle));

        // Decide and act: the claim controller.
        let live: Vec<&Claim> = claims.iter().filter(|c| c.phase.is_live()).collect();
        let losers: Vec<ClaimName> = claim::superseded(&live)
            .iter()
            .map(|c| c.name.clone())
            .collect();
        let mut collected: Vec<ClaimName> = Vec::new();
        for i in 0..claims.len() {
            let c = claims[i].clone();
            let ctx = Context {
                now,
                power,
                slot_exists: true,
                superseded: losers.contains(&c.name),
                timings: t,
            };
            let (next, event) = match claim::judge(&c, &ctx) {
                Judgment::Keep => continue,
                Judgment::Collect => {
                    if self
                        .store
                        .delete(&c, None, t.ttl_after_finished)
                        .await
                        .unwrap_or(false)
                    {
                        debug!(claim = %c.name, "terminal claim collected");
                        collected.push(c.name.clone());
                    }
                    continue;
                }
                Judgment::Fail(reason) => {
                    let event = if reason == Reason::Superseded {
                        Event::Superseded
                    } else {
                        Event::Failed
                    };
                    (c.apply(Move::because(Phase::Failed, reason), now), event)
                }
                Judgment::Complete(reason) => (
                    c.apply(Move::because(Phase::Completed, reason), now),
                    Event::Completed,
                ),
                Judgment::Watch(w) => (c.watched(w, now), Event::Observed),
            };
            let Ok(next) = next else { continue };
            if self.write(&c, &next, event, now, None).await {
                out.writes += 1;
                claims[i] = next;
            } else {
                return out.with_claims(claims);
            }
        }
        claims.retain(|c| !collected.contains(&c.name));

        // A claim that wants the machine lifts fleet's own cordon, wherever a crash left it; not
        // while the machine is on its way down (its claim starts it once it is off).
        if !blind
            && !going_down
            && self.token.is_some() == self.lease.is_some()
            && claims.iter().any(|c| c.wants_machine())
        {
            self.uncordon(&slot.name, bench).await;
        }
        // Fleet's cordon ends with what set it: once the machine is observed off with no
        // operation in flight (the scale-down's claim completed, or a shutdown of a machine no
        // claim wanted took effect), its request is lifted, so it never outlives the claim.
        let in_flight_here = self.running.contains_key(&slot.name)
            || self.finished.contains_key(&slot.name)
            || op.as_ref().is_some_and(SlotOp::running);
        if !blind
            && power == Some(Power::Off)
            && !going_down
            && !in_flight_here
            && self.token.is_some() == self.lease.is_some()
            && !claims.iter().any(|c| c.phase.is_live())
        {
            self.uncordon(&slot.name, bench).await;
        }

        // The readiness gate. Not while a shutdown of the slot is in flight or settling, nor while
        // the machine has not been observed off since the last shutdown: a machine on its way off
        // is not capacity, whatever it reports this instant, and a claim that arrives then waits
        // for it to go dark and starts it again (SPEC §4.5).
        let shutting_down = going_down
            || self.running.get(&slot.name) == Some(&OperationKind::Shutdown)
            || self
                .finished
                .get(&slot.name)
                .is_some_and(|f| f.kind == OperationKind::Shutdown)
            || claims.iter().any(|c| {
                c.running_operation()
                    .is_some_and(|op| op.kind == OperationKind::Shutdown)
            });
        if !blind
            && !shutting_down
            && let Some(i) = claims
                .iter()
                .position(|c| c.wants_machine() && c.phase.in_boot_window())
        {
            let c = claims[i].clone();
            let gate = match claim::readiness_gate(&c, power == Some(Power::On), usable, now, t) {
                Gate::Ready => Some((c.apply(Move::to(Phase::Ready), now), Event::Ready)),
                Gate::Heard => Some((Ok(c.heard(now)), Event::Observed)),
                Gate::Fail => Some((
                    c.apply(
                        Move::because(Phase::Failed, Reason::ReadinessGateTimeout),
                        now,
                    ),
                    Event::Failed,
                )),
                Gate::Wait(_) => None,
            };
            if let Some((Ok(next), event)) = gate {
                let took = (now - c.requested_at).num_milliseconds().max(0) as u64;
                if self
                    .write(&c, &next, event, now, Some((None, Some(took), None)))
                    .await
                {
                    out.writes += 1;
                    claims[i] = next;
                } else {
                    return out.with_claims(claims);
                }
            }
        }

        // Adoption: after the store came back without its claims, a machine found on with no
        // claim is taken under a ready claim (reason Adopted) instead of being powered off.
        let mut hold_power = false;
        if self.adopting
            && !blind
            && !unreadable
            && !going_down
            && power == Some(Power::On)
            && claims.is_empty()
        {
            // Until the adoption is written, no power action on this slot: an adoption that
            // failed must not fall through to the law, which would power the machine off.
            hold_power = true;
            let name =
                ClaimName::for_slot(&slot.name, &format!("adopted{:x}", now.timestamp_millis()));
            let c = Claim::adopted(name, slot.name.clone(), group.name.clone(), now, t);
            let created = match self.store.seed(&group.name, &slot.name).await {
                Ok(seed) => self.store.create(&c, &seed).await,
                Err(e) => Err(e),
            };
            match created {
                Ok(crate::store::claims::Created::Created) => {
                    warn!(slot = %slot.name, claim = %c.name, "machine found on after the store lost its claims: adopted");
                    self.metrics
                        .moves
                        .get_or_create(&MoveLabels {
                            to: Phase::Ready.into(),
                            reason: Some(Reason::Adopted.into()),
                        })
                        .inc();
                    out.writes += 1;
                    claims.push(c);
                    hold_power = false;
                }
                Ok(other) => {
                    debug!(slot = %slot.name, ?other, "adoption not written this pass; no power action")
                }
                Err(e) => {
                    if matches!(e, ClaimStoreError::Fenced { .. }) {
                        self.deposed
                            .store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                    warn!(slot = %slot.name, error = crate::store::connect::chain(&e), "adoption failed; no power action");
                }
            }
        }

        // The input law.
        let current = claims
            .iter()
            .filter(|c| c.phase.is_live())
            .max_by_key(|c| (c.requested_at, c.name.clone()))
            .or_else(|| {
                claims
                    .iter()
                    .max_by_key(|c| (c.finished_at, c.requested_at))
            })
            .cloned();
        if let Some(power) = power {
            let input = Input {
                claim: ClaimInput::of(current.as_ref()),
                power,
                usable,
            };
            let decision = law::decide(input);
            // An operation in flight, here or recorded on any of the slot's claims by a controller
            // that died, blocks every new one: the seed's "an operation owns this slot".
            let in_flight = self.running.contains_key(&slot.name)
                || self.finished.contains_key(&slot.name)
                || op.as_ref().is_some_and(SlotOp::running)
                || claims.iter().any(|c| c.running_operation().is_some());
            if !in_flight && !hold_power && !unreadable {
                match decision.fires {
                    Fires::StartNode => match current.as_ref() {
                        // A startup is fired once per claim attempt, whatever the claim's own
                        // record says now (its write may have been lost).
                        Some(c) if op.as_ref().is_some_and(|o| o.started(c)) => {
                            debug!(slot = %slot.name, claim = %c.name, "startup already fired for this attempt; not again");
                        }
                        Some(c) => {
                            out.started |= self
                                .start_node(group, slot, c, bench, &mut claims, now)
                                .await;
                        }
                        None => {}
                    },
                    Fires::ShutdownNode => {
                        let (current, op) = (current.as_ref(), op.as_ref());
                        out.stopped |= self
                            .shutdown_node(group, slot, current, bench, op, &mut claims, now)
                            .await;
                    }
                    Fires::Nothing | Fires::CompleteClaim => {}
                }
            }
        }

        // Report: the phase the triple derives, through the one writer, with what was observed.
        let current = claims
            .iter()
            .filter(|c| c.phase.is_live())
            .max_by_key(|c| (c.requested_at, c.name.clone()))
            .or_else(|| {
                claims
                    .iter()
                    .max_by_key(|c| (c.finished_at, c.requested_at))
            })
            .cloned();
        let key = (group.name.clone(), slot.name.clone());
        if let Some(power) = power {
            self.last_power.insert(key.clone(), power);
        }
        let mut status = self.statuses.get(&key).cloned().unwrap_or_default();
        let before = status.clone();
        // A machine that would be usable but for its bench's hold is reported as it is (ready, and
        // held): a hold never sends a slot's phase backwards to booting.
        let held = bench
            .filter(|_| state == Some(State::Held))
            .and_then(|b| b.verdict(now).hold)
            .map(|h| h.to_string());
        let usable_but_held =
            held.is_some() && node::usable(State::Up, self.binding(slot), &group.readiness_taints);
        if let Some(power) = power {
            let input = Input {
                claim: ClaimInput::of(current.as_ref()),
                power,
                usable: usable || usable_but_held,
            };
            status.history.record(law::report(input), now);
        }
        status.history.expire(now);
        status.power = power;
        status.usable = usable;
        status.waiting = current
            .as_ref()
            .filter(|c| c.wants_machine() && !blind)
            .and_then(|c| {
                waiting(
                    c,
                    going_down,
                    held.as_deref(),
                    power == Some(Power::On),
                    usable,
                    now,
                    t,
                )
            });
        status.held = held;
        status.claim = current.filter(|c| c.phase.is_live()).map(|c| c.name);
        if status != before || status.updated_at.is_none() || self.dirty.remove(&key) {
            status.updated_at = Some(now);
            out.status = Some(status);
        }
        out.with_claims(claims)
    }

    /// How a slot is bound to Kubernetes this pass.
    fn binding(&self, slot: &Slot) -> Binding<'_> {
        match (&slot.kubernetes_node, self.nodes.observed()) {
            (Some(name), true) => {
                Binding::Bound(self.node_views.as_ref().and_then(|v| v.get(name)))
            }
            (Some(_), false) | (None, _) => Binding::Unbound,
        }
    }

    fn count_warning(&self, reason: Reason) {
        self.metrics
            .warnings
            .get_or_create(&ReasonLabel {
                reason: reason.into(),
            })
            .inc();
    }

    /// The lease holder id of this controller, for the operations it fires.
    fn holder(&self) -> String {
        self.lease
            .as_ref()
            .map(|l| l.id().to_owned())
            .unwrap_or_default()
    }

    /// Keeps `op` as this controller's memory of the slot's last operation.
    fn remember(&mut self, group: &Group, slot: &Slot, op: &SlotOp) {
        self.ops
            .insert((group.name.clone(), slot.name.clone()), op.clone());
    }

    /// A controller write that failed: a fence refusal deposes this controller at once.
    fn write_failed(&self, slot: &BenchName, what: &str, e: ClaimStoreError) {
        if matches!(e, ClaimStoreError::Fenced { .. }) {
            self.deposed
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        warn!(slot = %slot, error = crate::store::connect::chain(&e), "{what} failed");
    }

    /// The slot's operation record (SPEC §5.4): the newest of the store's record, this
    /// controller's memory and the claims' own records. Where the store lacks it (a restart that
    /// lost its last writes, or a store written before slot records existed) it is put back, and
    /// a pending claim whose startup it records goes back to booting with it: a startup fires
    /// once per claim attempt, and a lost write must not make it fire twice.
    async fn operation_record(
        &mut self,
        group: &Group,
        slot: &Slot,
        stored: Option<SlotOp>,
        claims: &mut [Claim],
        now: DateTime<Utc>,
        out: &mut SlotOutcome,
    ) -> Option<SlotOp> {
        let key = (group.name.clone(), slot.name.clone());
        let from_claims: Vec<SlotOp> = claims.iter().filter_map(SlotOp::of_claim).collect();
        let memory = self.ops.get(&key).cloned();
        let op = operation::merge(stored.iter().chain(memory.iter()).chain(from_claims.iter()))?;
        if stored.as_ref().is_none_or(|s| s.started_at < op.started_at) {
            match self
                .store
                .restore_operation(&group.name, &slot.name, &op)
                .await
            {
                Ok(true) => {
                    warn!(slot = %slot.name, operation = op.kind.as_str(), started_at = %op.started_at, "the store did not hold the slot's last operation; put back from what this controller knows");
                    out.writes += 1;
                }
                Ok(false) => {}
                Err(e) => self.write_failed(&slot.name, "putting back the operation record", e),
            }
        }
        if op.kind == OperationKind::Startup
            && let Some(i) = claims.iter().position(|c| {
                c.phase == Phase::Pending
                    && op.started(c)
                    && c.operation
                        .as_ref()
                        .is_none_or(|o| o.started_at != op.started_at)
            })
            && let Ok(booting) = claims[i].apply(Move::to(Phase::Booting), now)
        {
            let c = claims[i].clone();
            let next = booting.start_operation(OperationKind::Startup, op.timeout, op.started_at);
            let detail = format!(
                "restored: the store lost the write that recorded this attempt's startup, which \
                 was fired once, at {}",
                op.started_at.to_rfc3339()
            );
            if self
                .write(
                    &c,
                    &next,
                    Event::Booting,
                    now,
                    Some((Some(OperationKind::Startup), None, Some(detail))),
                )
                .await
            {
                warn!(slot = %slot.name, claim = %c.name, attempt = c.attempt, "the claim lost the write that recorded its startup; restored, not fired again");
                claims[i] = next;
                out.writes += 1;
            }
        }
        self.ops.insert(key, op.clone());
        Some(op)
    }

    /// Writes the outcome of an operation this process ran to the slot's record (its wrapper
    /// may have written it first: an outcome is recorded once).
    async fn end_recorded(
        &mut self,
        group: &Group,
        slot: &Slot,
        op: &mut Option<SlotOp>,
        started_at: DateTime<Utc>,
        report: &Report,
        now: DateTime<Utc>,
    ) {
        let end = OpEnd {
            outcome: report.outcome,
            finished_at: now,
            duration_ms: u64::try_from(report.duration.as_millis()).unwrap_or(u64::MAX),
            tail: report.tail.clone(),
        };
        if let Err(e) = self
            .store
            .end_operation(&group.name, &slot.name, started_at, &end)
            .await
        {
            warn!(slot = %slot.name, error = crate::store::connect::chain(&e), "recording the operation's outcome on the slot failed");
        }
        if let Some(o) = op.as_mut().filter(|o| o.started_at == started_at)
            && o.end.is_none()
        {
            o.end = Some(end);
            let o = o.clone();
            self.remember(group, slot, &o);
        }
    }

    /// Settles the slot's recorded operation when this process is not running it (SPEC §5.4): an
    /// outcome its wrapper reported to the store is written to its claim; one that can no longer
    /// be reported (past its timeout and the report slack: its wrapper is gone) is judged by the
    /// observation. A startup is then recorded completed and the readiness gate judges the
    /// machine with its usual budgets; a shutdown is completed when the machine is off, else
    /// timed out. Until then it is in flight, whatever the machine reads. Never fired again.
    #[allow(clippy::too_many_arguments)]
    async fn settle_reported(
        &mut self,
        group: &Group,
        slot: &Slot,
        op: &mut Option<SlotOp>,
        claims: &mut [Claim],
        (power, blind): (Option<Power>, bool),
        now: DateTime<Utc>,
        out: &mut SlotOutcome,
    ) {
        let Some(o) = op.as_mut() else { return };
        if o.end.is_none() {
            if blind {
                return;
            }
            // Its wrapper may still be running it (a power-off that polls, a startup that
            // retries): it stays in flight, whatever the machine reads now, until its outcome is
            // reported or can no longer come.
            let on = power.map(|p| p == Power::On);
            let (outcome, tail) = match operation::unreported(
                o,
                on,
                now,
                self.faults.report_slack,
                group.timings.stuck_threshold,
            ) {
                Unreported::InFlight | Unreported::Late => return,
                Unreported::Done(why) => (OperationOutcome::Completed, why),
                Unreported::Abandoned => (
                    OperationOutcome::Abandoned,
                    "stuck: no outcome was reported by stuck_threshold; abandoned",
                ),
            };
            let end = OpEnd {
                outcome,
                finished_at: now,
                duration_ms: (now - o.started_at)
                    .num_milliseconds()
                    .max(0)
                    .unsigned_abs(),
                tail: tail.to_owned(),
            };
            match self
                .store
                .end_operation(&group.name, &slot.name, o.started_at, &end)
                .await
            {
                Ok(true) => {
                    o.end = Some(end);
                    let o = o.clone();
                    self.remember(group, slot, &o);
                }
                // Reported meanwhile: the next pass reads it.
                Ok(false) => return,
                Err(e) => {
                    warn!(slot = %slot.name, error = crate::store::connect::chain(&e), "recording the operation's outcome on the slot failed");
                    return;
                }
            }
        }
        let Some(o) = op.as_ref() else { return };
        let (Some(end), Some(name)) = (&o.end, &o.claim) else {
            return;
        };
        let waiting = claims.iter().any(|c| {
            &c.name == name
                && c.running_operation()
                    .is_some_and(|r| r.started_at == o.started_at)
        });
        if waiting {
            let done = Finished {
                kind: o.kind,
                claim: Some(name.clone()),
                started_at: Some(o.started_at),
                report: Report {
                    outcome: end.outcome,
                    duration: Duration::from_millis(end.duration_ms),
                    tail: end.tail.clone(),
                },
            };
            if self.record_outcome(&slot.name, &done, claims, now).await {
                out.writes += 1;
            }
        }
    }

    /// StartNode: the claim moves pending → booting with the operation recorded (on the claim
    /// and as the slot's operation record), in one write; then the cordon is lifted and the
    /// operation runs.
    async fn start_node(
        &mut self,
        group: &Group,
        slot: &Slot,
        c: &Claim,
        bench: Option<&Bench>,
        claims: &mut [Claim],
        now: DateTime<Utc>,
    ) -> bool {
        let Ok(booting) = c.apply(Move::to(Phase::Booting), now) else {
            return false;
        };
        let started_at = operation::stamp(now);
        let next =
            booting.start_operation(OperationKind::Startup, group.startup.timeout, started_at);
        let op = SlotOp {
            kind: OperationKind::Startup,
            claim: Some(c.name.clone()),
            attempt: c.attempt,
            started_at,
            timeout: group.startup.timeout,
            controller: self.holder(),
            streak: 0,
            end: None,
            off_at: None,
        };
        // The cordon is lifted before the boot is recorded: a controller that dies between the
        // two leaves a pending claim with no cordon, which the next pass boots; the other order
        // could leave a booted bench carrying a cordon no pass lifts.
        self.uncordon(&slot.name, bench).await;
        if !self
            .record_start(group, slot, c, &next, Event::Booting, &op, now, claims)
            .await
        {
            return false;
        }
        info!(slot = %slot.name, claim = %c.name, attempt = c.attempt, "starting machine");
        self.spawn(group, slot, Some(&next), OperationKind::Startup, started_at);
        true
    }

    /// Records an operation's start on its claim and as the slot's operation record, in one
    /// write that must land before the operation runs, and keeps the pass's copy of the claim
    /// current. A write whose reply was lost (the server may have applied it) is read back
    /// before deciding (SPEC §5.4): applied, the operation runs; not applied, it does not; still
    /// unknown, the next pass runs it if the store shows it recorded.
    #[allow(clippy::too_many_arguments)]
    async fn record_start(
        &mut self,
        group: &Group,
        slot: &Slot,
        c: &Claim,
        next: &Claim,
        event: Event,
        op: &SlotOp,
        now: DateTime<Utc>,
        claims: &mut [Claim],
    ) -> bool {
        let extra = Some((Some(op.kind), None, None));
        let written = match self
            .write_checked(c, next, event, now, extra, Some(op))
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
                    warn!(slot = %slot.name, claim = %c.name, error = crate::store::connect::chain(&e), "cannot read back an operation's record; the next pass decides");
                    self.uncertain.insert(
                        slot.name.clone(),
                        Uncertain {
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
        self.remember(group, slot, op);
        if let Some(i) = claims.iter().position(|x| x.name == c.name) {
            claims[i] = next.clone();
        }
        true
    }

    /// ShutdownNode: cordon, then the shutdown operation, counted on the claim that asked for it
    /// (or on the slot's operation record when no claim wants the machine) and bounded by the
    /// attempt streak.
    #[allow(clippy::too_many_arguments)]
    async fn shutdown_node(
        &mut self,
        group: &Group,
        slot: &Slot,
        current: Option<&Claim>,
        bench: Option<&Bench>,
        last: Option<&SlotOp>,
        claims: &mut [Claim],
        now: DateTime<Utc>,
    ) -> bool {
        let t = &group.timings;
        let settle = t.job_monitor_poll_interval;
        let started_at = operation::stamp(now);
        match current.filter(|c| c.phase.is_live() && c.marked_for_deletion.is_some()) {
            Some(c) => {
                // A shutdown that completed while the bench still beats is not a machine that is
                // off: wait one poll interval for the observation before firing again.
                if let Some(op) = c
                    .operation
                    .as_ref()
                    .filter(|op| op.kind == OperationKind::Shutdown)
                    && op.finished_at.is_some_and(|f| now < add(f, settle))
                {
                    return false;
                }
                if let ShutdownGate::Paused { until } = c.shutdown_gate(now, t) {
                    // Recorded on the claim once per pause, as the seed says: visible in describe
                    // and counted.
                    if c.reason != Some(Reason::ShutdownAttemptLimitReached) {
                        let next = c.warn(Reason::ShutdownAttemptLimitReached);
                        let detail = format!(
                            "{} shutdowns fired and the machine is still on: no more until {}",
                            c.shutdown_attempts,
                            until.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                        );
                        if self
                            .write(
                                c,
                                &next,
                                Event::Warned,
                                now,
                                Some((None, None, Some(detail))),
                            )
                            .await
                        {
                            warn!(slot = %slot.name, claim = %c.name, until = %until, "shutdown attempts spent; paused");
                            self.count_warning(Reason::ShutdownAttemptLimitReached);
                            if let Some(i) = claims.iter().position(|x| x.name == c.name) {
                                claims[i] = next;
                            }
                        }
                    }
                    return false;
                }
                let next = c.record_shutdown_attempt(now, t).start_operation(
                    OperationKind::Shutdown,
                    group.shutdown.timeout,
                    started_at,
                );
                let op = SlotOp {
                    kind: OperationKind::Shutdown,
                    claim: Some(c.name.clone()),
                    attempt: c.attempt,
                    started_at,
                    timeout: group.shutdown.timeout,
                    controller: self.holder(),
                    streak: 0,
                    end: None,
                    off_at: None,
                };
                if !self
                    .record_start(group, slot, c, &next, Event::Shutdown, &op, now, claims)
                    .await
                {
                    return false;
                }
                self.cordon(&slot.name, bench, &format!("draining for claim {}", c.name))
                    .await;
                info!(slot = %slot.name, claim = %c.name, attempt = next.shutdown_attempts, "shutting machine down");
                self.spawn(
                    group,
                    slot,
                    Some(&next),
                    OperationKind::Shutdown,
                    started_at,
                );
                true
            }
            None => {
                let streak = match operation::unclaimed_shutdown(
                    last,
                    now,
                    t,
                    group.shutdown.timeout,
                ) {
                    UnclaimedShutdown::Fire { streak } => streak,
                    UnclaimedShutdown::Settling => return false,
                    UnclaimedShutdown::Paused { until } => {
                        debug!(slot = %slot.name, until = %until, "shutdowns of this unclaimed machine spent; paused");
                        return false;
                    }
                };
                let op = SlotOp {
                    kind: OperationKind::Shutdown,
                    claim: None,
                    attempt: 0,
                    started_at,
                    timeout: group.shutdown.timeout,
                    controller: self.holder(),
                    streak,
                    end: None,
                    off_at: None,
                };
                // Recorded (fenced, and atomic with the check that no claim took the slot since
                // this pass read it) before it runs, like every operation.
                match self
                    .store
                    .record_unclaimed(&group.name, &slot.name, &op)
                    .await
                {
                    Ok(Unclaimed::Recorded) => self.remember(group, slot, &op),
                    Ok(Unclaimed::Claimed(holder)) => {
                        info!(slot = %slot.name, claim = holder, "a claim took the slot since this pass read it; no shutdown");
                        return false;
                    }
                    Err(e @ ClaimStoreError::Fenced { .. }) => {
                        self.write_failed(&slot.name, "recording the shutdown", e);
                        return false;
                    }
                    Err(e) => {
                        // The reply was lost: the next pass runs it if the store shows it.
                        self.uncertain.insert(
                            slot.name.clone(),
                            Uncertain {
                                op: op.clone(),
                                claim: None,
                            },
                        );
                        self.write_failed(&slot.name, "recording the shutdown (not fired)", e);
                        return false;
                    }
                }
                self.cordon(&slot.name, bench, "draining: no claim wants this machine")
                    .await;
                info!(slot = %slot.name, attempt = streak, "shutting down a machine no claim wants");
                self.spawn(group, slot, None, OperationKind::Shutdown, started_at);
                true
            }
        }
    }

    fn spawn(
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
        let request = Request {
            kind,
            slot: slot.name.clone(),
            group: group.name.clone(),
            claim: c.map(|c| c.name.clone()),
            attempt: c.map_or(0, |c| c.attempt),
            provider_id: slot.provider_id.clone(),
            command: op.command.clone(),
            env: op.env.clone(),
            dir: op.dir.clone(),
            timeout: op.timeout,
            controller: self.holder(),
            started_at,
        };
        self.running.insert(slot.name.clone(), kind);
        let (runner, done, slot_name) =
            (self.runner.clone(), self.done_tx.clone(), slot.name.clone());
        let claim = request.claim.clone();
        self.tasks.spawn(async move {
            let report = runner.run(request).await;
            let _ = done.send((
                slot_name,
                Finished {
                    kind,
                    claim,
                    started_at: Some(started_at),
                    report,
                },
            ));
        });
    }

    /// Writes an operation's outcome to its claim (and what it means for the claim). Returns
    /// whether the outcome is settled (written, or there is no claim left to write it on).
    async fn record_outcome(
        &mut self,
        slot: &BenchName,
        done: &Finished,
        claims: &mut [Claim],
        now: DateTime<Utc>,
    ) -> bool {
        let outcome = done.report.outcome;
        let labels = OperationLabels {
            operation: done.kind.into(),
            outcome: outcome.into(),
        };
        self.metrics.operations.get_or_create(&labels).inc();
        self.metrics
            .operation_seconds
            .get_or_create(&KindLabel {
                operation: done.kind.into(),
            })
            .observe(done.report.duration.as_secs_f64());
        let Some(name) = &done.claim else {
            info!(slot = %slot, operation = done.kind.as_str(), outcome = ?outcome, output = done.report.tail, "operation ended");
            return true;
        };
        let Some(i) = claims.iter().position(|c| &c.name == name) else {
            return true;
        };
        let c = claims[i].clone();
        if c.running_operation().map(|op| op.started_at) != done.started_at {
            // An outcome of an older operation than the one recorded: nothing to write.
            return true;
        }
        let Some(mut next) = c.finish_operation(outcome, now) else {
            return true;
        };
        let mut event = Event::Operation;
        match (done.kind, outcome) {
            (OperationKind::Startup, OperationOutcome::Failed | OperationOutcome::TimedOut)
                if c.phase == Phase::Booting =>
            {
                let reason = if outcome == OperationOutcome::Failed {
                    Reason::StartupJobFailed
                } else {
                    Reason::StartupJobTimeout
                };
                if let Ok(failed) = next.apply(Move::because(Phase::Failed, reason), now) {
                    next = failed;
                    event = Event::Failed;
                }
            }
            (OperationKind::Shutdown, OperationOutcome::TimedOut) => {
                next = next.warn(Reason::ShutdownJobTimeout);
                self.count_warning(Reason::ShutdownJobTimeout);
            }
            (_, OperationOutcome::Abandoned) if c.phase.is_live() => {
                if let Ok(failed) =
                    next.apply(Move::because(Phase::Failed, Reason::StuckTransition), now)
                {
                    next = failed;
                    event = Event::Failed;
                }
            }
            _ => {}
        }
        let ms = u64::try_from(done.report.duration.as_millis()).unwrap_or(u64::MAX);
        let tail = (!done.report.tail.is_empty()).then(|| done.report.tail.clone());
        info!(slot = %slot, claim = %c.name, operation = done.kind.as_str(), outcome = ?outcome, duration_ms = ms, "operation ended");
        if self
            .write(
                &c,
                &next,
                event,
                now,
                Some((Some(done.kind), Some(ms), tail)),
            )
            .await
        {
            claims[i] = next;
            true
        } else {
            false
        }
    }

    /// One claim write through the store's compare-and-set, with its timeline entry and metric.
    async fn write(
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
    async fn write_checked(
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
                        to: next.phase.into(),
                        reason: next.reason.map(Into::into),
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
                self.deposed
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                Written::No
            }
            Err(e) => {
                warn!(claim = %old.name, error = crate::store::connect::chain(&e), "claim write failed; it may have been applied");
                Written::Unknown
            }
        }
    }

    /// Cordon: ask the bench to hold, so it is not usable while it drains.
    async fn cordon(&self, slot: &BenchName, bench: Option<&Bench>, why: &str) {
        let carried = bench.and_then(|b| b.requested_hold.as_ref()).is_some();
        if carried {
            return;
        }
        if let Ok(reason) = HoldReason::parse(&format!("{CORDON_PREFIX}{why}"))
            && let Err(e) = self.presence.request_hold(slot, &reason, None).await
        {
            warn!(slot = %slot, error = crate::store::connect::chain(&e), "cordon failed");
        }
    }

    /// Uncordon: lift fleet's own hold request (never an operator's).
    async fn uncordon(&self, slot: &BenchName, bench: Option<&Bench>) {
        let ours = bench
            .and_then(|b| b.requested_hold.as_ref())
            .is_some_and(|r| r.reason.as_str().starts_with(CORDON_PREFIX));
        if ours && let Err(e) = self.presence.release(slot).await {
            warn!(slot = %slot, error = crate::store::connect::chain(&e), "uncordon failed");
        }
    }
}

/// What a pass sees of one slot.
struct Seen<'a> {
    bench: Option<&'a Bench>,
    /// The controller cannot see the machines: no power action.
    blind: bool,
    /// A claim of this slot cannot be read: no power action on the slot.
    unreadable: bool,
    /// The slot's operation record as the store holds it.
    op: Option<SlotOp>,
}

/// An operation whose recording write lost its reply: it runs at the next pass if the store
/// shows it recorded (SPEC §5.4).
struct Uncertain {
    op: SlotOp,
    claim: Option<Claim>,
}

/// How a claim write ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Written {
    Yes,
    /// Refused: another writer won, or the fence.
    No,
    /// The reply was lost: the server may have applied it.
    Unknown,
}

#[derive(Default)]
struct SlotOutcome {
    writes: usize,
    started: bool,
    stopped: bool,
    status: Option<SlotStatus>,
    claims: Vec<Claim>,
}

impl SlotOutcome {
    fn with_claims(mut self, claims: Vec<Claim>) -> Self {
        self.claims = claims;
        self
    }
}

/// Why a slot's live claim that wants its machine waits, for the report (SPEC §4.7).
fn waiting(
    c: &Claim,
    going_down: bool,
    held: Option<&str>,
    on: bool,
    usable: bool,
    now: DateTime<Utc>,
    t: &claim::Timings,
) -> Option<SlotWaiting> {
    if going_down {
        return Some(SlotWaiting::PoweringOff);
    }
    if let Some(reason) = held {
        return Some(SlotWaiting::Held {
            reason: reason.to_owned(),
        });
    }
    if c.phase == Phase::Ready {
        return (on && !usable).then_some(SlotWaiting::NotUsable);
    }
    Some(match claim::readiness_gate(c, on, usable, now, t) {
        Gate::Ready | Gate::Heard | Gate::Fail => return None,
        Gate::Wait(claim::Waiting::Startup) if c.running_operation().is_some() => {
            SlotWaiting::StartupRunning
        }
        Gate::Wait(claim::Waiting::Startup) => SlotWaiting::Start,
        Gate::Wait(claim::Waiting::FirstBeat { until }) => SlotWaiting::FirstBeat { until },
        Gate::Wait(claim::Waiting::Usable { until }) => SlotWaiting::Usable { until },
    })
}

fn bench_of<'a>(snapshot: &'a Snapshot, slot: &BenchName) -> Option<&'a Bench> {
    snapshot
        .benches
        .binary_search_by(|b| b.name.cmp(slot))
        .ok()
        .map(|i| &snapshot.benches[i])
}
