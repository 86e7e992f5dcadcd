//! The lifecycle controller (SPEC §4.5): one pass over every slot, each second and whenever an
//! operation ends.
//!
//! A pass over a slot reads like the seed's reconcile: **observe** (the slot's claims, the bench's
//! presence), **decide** (the claim controller's judgment, the readiness gate, the input law, all
//! pure), **act** (claim writes through the store's compare-and-set, the cordon, operations), and
//! **report** (the slot's phase and history through `History::record`). Every action is a claim
//! write first and an effect second: an operation is recorded on its claim before it runs. A pass
//! that loses a compare-and-set stops acting on that slot; the next pass reads it again.

mod act;
pub mod metrics;
pub mod requests;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use redis::aio::ConnectionLike;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::config::{Config, Slot};
use crate::domain::claim::{self, Claim, Context, Judgment, Move, OperationKind, Phase};
use crate::domain::law::{self, Power};
use crate::domain::name::{BenchName, GroupName};
use crate::domain::node::{Binding, NodeView};
use crate::domain::operation::SlotOp;
use crate::domain::sight;
use crate::domain::slot::{Done, Recorded};

use crate::domain::state::{Bench, State};
use crate::lifecycle::{REPORT_SLACK, Runner};
use crate::store::catalog::{Blindness, Catalog, ControllerStatus, STATUS_TTL};
use crate::store::claims::{ClaimStore, ClaimStoreError, Event, SlotStatus};
use crate::store::lease::{Generation, Leadership, Lease};
use crate::store::presence::{Presence, Snapshot};
use act::Seen;

use metrics::{GroupPhase, Health, Metrics};

pub use crate::domain::slot::CORDON_PREFIX;

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
    finished: HashMap<BenchName, Done>,
    done_tx: mpsc::UnboundedSender<(BenchName, Done)>,
    done_rx: mpsc::UnboundedReceiver<(BenchName, Done)>,
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
    uncertain: HashMap<BenchName, Recorded>,
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
        let mut wiped: Option<sight::Wipe> = None;
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
                    wiped = record.map(|(blind_until_ms, adopt_until_ms)| sight::Wipe {
                        blind_until_ms,
                        adopt_until_ms,
                    });
                }
                Err(e) => warn!(
                    error = crate::store::connect::chain(&e),
                    "cannot read the generation marker"
                ),
            }
        }
        let now_ms = now_seen.timestamp_millis();
        self.adopting = wiped.is_some_and(|w| w.adopting(now_ms));
        if let Some(until) = wiped.and_then(|w| w.blind_until(now_ms)) {
            self.blind_for(
                until,
                "the store came back empty (or this is its first start): machines found on will be adopted",
            );
        }
        // Sight lost, then back: blind for the grace, so benches that beat through the outage
        // are heard again before anything is judged off.
        if snapshot.is_some() {
            let sight = match self.sight {
                Sight::Clear => sight::Sight::Clear,
                Sight::Lost => sight::Sight::Lost,
                Sight::Back(at) => sight::Sight::Back { ago: at.elapsed() },
            };
            let left = sight::grace_left(sight, self.faults.blind_grace);
            if !left.is_zero() {
                self.blind_for(
                    sight::grace_end(now_seen, left),
                    "Redis could not be read: benches are heard again before anything is judged",
                );
                warn!(grace = ?left, "presence readable again: blind for the grace");
            }
            self.sight = Sight::Clear;
        }
        if let Some(snap) = &snapshot
            && let Some(v) = self.mass_vanishing(&config, snap, &read)
        {
            warn!(
                vanished = v.vanished,
                on = v.on,
                "many wanted machines vanished in one pass: blind for the grace, no power action"
            );
            self.blind_for(
                sight::grace_end(now_seen, self.faults.blind_grace),
                &format!(
                    "{} machines that claims want vanished in one pass: more likely a fault \
                     of the observation than of the machines",
                    v.vanished
                ),
            );
        }
        let verdict = sight::verdict(snapshot.is_some(), self.blind_until.take(), now_seen);
        let blind = verdict.blind;
        self.blind_until = verdict.window;
        self.metrics.blind.set(i64::from(blind));
        let blindness = verdict.blindness;
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
                let labels = GroupPhase {
                    group: group.name.to_string(),
                    phase: phase.as_str().to_owned(),
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

    /// The mass-vanishing rule (SPEC §5.2, [`sight::mass_vanishing`]) over this pass's
    /// observation: "was on" is this controller's own observation at its last pass, never the
    /// report it publishes; "powering off" is a shutdown in flight or not yet seen to take effect.
    fn mass_vanishing(
        &self,
        config: &Config,
        snap: &Snapshot,
        read: &[crate::store::claims::GroupClaims],
    ) -> Option<sight::Vanished> {
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
        let seen = config.slots.values().map(|slot| {
            let key = (&slot.group, &slot.name);
            sight::Seen {
                was_on: self
                    .last_power
                    .get(&(slot.group.clone(), slot.name.clone()))
                    == Some(&Power::On),
                wanted: wanted.contains(&key),
                powering_off: powering_off.contains(&key),
                now_off: bench_of(snap, &slot.name)
                    .is_none_or(|b| b.verdict(snap.now).state == State::Down),
            }
        });
        sight::mass_vanishing(seen, self.faults.vanish_min, self.faults.vanish_ratio)
    }

    /// Blind until `until` at least, for `why` (the latest end, and its reason, win).
    fn blind_for(&mut self, until: DateTime<Utc>, why: &str) {
        self.blind_until = sight::later(self.blind_until.take(), until, why);
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
                let labels = GroupPhase {
                    group: group.to_string(),
                    phase: phase.as_str().to_owned(),
                };
                let n = counts
                    .get(&(group.clone(), phase.as_str()))
                    .copied()
                    .unwrap_or(0);
                self.metrics.slots.get_or_create(&labels).set(n);
            }
        }
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
}

fn bench_of<'a>(snapshot: &'a Snapshot, slot: &BenchName) -> Option<&'a Bench> {
    snapshot
        .benches
        .binary_search_by(|b| b.name.cmp(slot))
        .ok()
        .map(|i| &snapshot.benches[i])
}
