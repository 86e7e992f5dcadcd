//! The lifecycle controller (SPEC §4.5): one pass over every slot, each second and whenever an
//! operation ends, and, when it wakes on beats, as soon as a beat announces a change of state or
//! a key's deadline comes. A thin executor around the pure core: every rule is in `domain`.
//!
//! - `mod.rs`: the controller's state and its loop.
//! - `leadership`: the lease, the fences, stepping down (SPEC §5.1).
//! - `pass`: one pass: observe the store once, each group's slots, write the reports;
//!   `gathered`: what a group's pass gathers of its slots' outcomes; `cursor`: how a pass finds
//!   each slot's bench in the snapshot.
//! - `sight`: whether the controller can see, judged once per pass (`domain::sight`), and the
//!   status it publishes.
//! - `energy`: each slot's observed power to its energy ledger (`domain::energy`).
//! - `budget`: the power-on budget's grants for the pass (`domain::budget`).
//! - `gate`: the replication gate before every power action (`store::replicas`).
//! - `act`: one slot: `domain::slot::plan` decides the steps, and they are taken in order; the
//!   first compare-and-set the store refuses stops the slot until the next pass, which reads it
//!   again. Every operation is recorded on its claim before it runs. `hands`: the borrow of the
//!   controller's ports and records a step acts through.
//! - `memory`: what the controller remembers across passes, and how a step changes it.
//! - `operations`: spawning an operation in its wrapper, taking its outcome, the shutdown wait.
//! - `nodes`: the Nodes port, where the Kubernetes client plugs in.
//! - `wake`: when to pass before the tick: announced beats (a subscription of its own) and the
//!   earliest deadline of the last read (`domain::wake`).
//! - [`bmc`]: the leader's periodic reading of each Redfish and IPMI slot's BMC.

mod act;
pub mod bmc;
mod budget;
mod cursor;
mod energy;
mod gate;
mod gathered;
mod hands;
mod leadership;
mod memory;
mod nodes;
mod operations;
mod pass;
mod sight;
mod wake;

pub use energy::LEDGERS_AT_ONCE;
use leadership::Leading;
pub use nodes::{ClaimMove, NoNodes, NodeWarning, NodeWriteError, Nodes};
use operations::Flight;
use wake::Waking;
pub use wake::{EARLY_GAP, Wake, WakeError};

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use redis::aio::ConnectionLike;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::config::Config;
use crate::domain::name::BenchName;
use crate::domain::sight::NodeSight;
use crate::domain::slot::Recorded;

use crate::lifecycle::{REPORT_SLACK, Runner};
use crate::store::catalog::ControllerStatus;
use crate::store::claims::{ClaimStore, ClaimStoreError};
use crate::store::energy::EnergyStore;
use crate::store::lease::{Lease, Signal};
use crate::store::presence::Presence;
use crate::store::replicas::Replicas;

use crate::telemetry::{Health, Metrics};

use memory::Memory;

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

/// The controller.
pub struct Controller<C, R, N = NoNodes> {
    nodes: N,
    /// The Nodes read this pass; `None` when they could not be read (bound slots are then not
    /// usable, and nothing is powered on or off because of it).
    node_views: Option<nodes::NodeViews>,
    config: watch::Receiver<Arc<Config>>,
    presence: Presence<C>,
    /// The store as this controller writes it: fenced with its token while it leads.
    store: ClaimStore<C>,
    /// The same store, unfenced (reads, and raising fences).
    base_store: ClaimStore<C>,
    /// The energy ledgers, unfenced; fenced with the token for each write.
    energy: EnergyStore<C>,
    /// The replication gate before every power action (SPEC §5.5); none: act on the primary's
    /// acknowledgement alone.
    replicas: Option<Replicas<C>>,
    runner: Arc<R>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    /// What this controller remembers across passes: its own record, never its reports.
    memory: Memory,
    /// The operations this process runs, and their outcomes not yet taken.
    flight: Flight,
    faults: Faults,
    /// The lease, the token and the fences of this controller's leadership.
    leading: Leading<C>,
    /// What this controller knows of its own sight (SPEC §5.2).
    seeing: Seeing,
    /// When it passes before its tick (SPEC §4.5): off unless `waking_on`.
    waking: Waking,
}

/// The maps a pass looks every slot up in, hashed by foldhash rather than SipHash: at 100 000
/// slots SipHash was a tenth of a pass. The keys are names from the configuration and the
/// store, which the operator controls, so there is no flooding to resist.
pub(super) type Map<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
/// A set of [`Map`]'s kind.
pub(super) type Set<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

/// What a controller knows of its own sight, across passes (SPEC §5.2, §5.3).
struct Seeing {
    /// Whether this controller has lost sight of the store since its last pass that read it.
    sight: Sight,
    /// Blind until this server time, and why: after sight returned, the store came back empty,
    /// or many wanted machines vanished at once.
    blind_until: Option<(DateTime<Utc>, String)>,
    /// The store's generation marker as this controller last saw it.
    generation: Option<String>,
    /// The store came back without its claims: after the blind grace, machines found on with no
    /// claim are adopted rather than powered off.
    adopting: bool,
    /// The status last published for the views, and when (renewed well inside its TTL).
    published: Option<(ControllerStatus, Instant)>,
    /// How the Kubernetes Nodes were seen, and whether the bound slots are blind this pass.
    nodes_sight: NodeSight,
    nodes_blind: bool,
    /// The written mark this leader set after its last pass, for the next pass to check, and
    /// how many it set (SPEC §5.3).
    written: Option<String>,
    passes_written: u64,
}

impl Default for Seeing {
    fn default() -> Self {
        Seeing {
            sight: Sight::Clear,
            blind_until: None,
            generation: None,
            adopting: false,
            published: None,
            nodes_sight: NodeSight::Clear,
            nodes_blind: false,
            written: None,
            passes_written: 0,
        }
    }
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
        Controller {
            nodes: NoNodes,
            node_views: None,
            base_store: store.clone(),
            energy: EnergyStore::new(store.conn(), store.keys().clone()),
            replicas: None,
            config,
            presence,
            store,
            runner,
            metrics,
            health,
            flight: Flight::new(),
            memory: Memory::default(),
            seeing: Seeing::default(),
            faults: Faults::default(),
            leading: Leading::new(),
            waking: Waking::off(),
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
            energy: self.energy,
            replicas: self.replicas,
            runner: self.runner,
            metrics: self.metrics,
            health: self.health,
            flight: self.flight,
            memory: self.memory,
            seeing: self.seeing,
            faults: self.faults,
            leading: self.leading,
            waking: self.waking,
        }
    }
}

impl<C, R, N> Controller<C, R, N>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
    R: Runner,
    N: Nodes,
{
    /// Waits for replicas through `replicas` before every power action (SPEC §5.5).
    pub fn with_replicas(mut self, replicas: Replicas<C>) -> Self {
        self.replicas = Some(replicas);
        self
    }

    /// Sets how the controller protects machines it cannot see.
    pub fn with_faults(mut self, faults: Faults) -> Self {
        self.faults = faults;
        self
    }

    /// Competes for leadership through `lease`: only the leader runs passes, and its writes
    /// carry its fencing token (SPEC §5.1).
    pub fn with_lease(mut self, lease: Lease<C>) -> Self {
        self.leading.lease = Some(lease);
        self
    }

    /// Announces this controller's leadership through `signal`, which the provider follows.
    pub fn announcing(mut self, signal: Signal) -> Self {
        self.leading.signal = signal;
        self
    }

    /// Passes as soon as a beat announces a change of state on the wake channel, heard through
    /// `wake`'s own connection, and as soon as the earliest deadline of the last read comes,
    /// besides every tick (SPEC §4.5, the wake path).
    /// `None` leaves the tick alone (`Wake::of_endpoint` of a Sentinel URL).
    pub fn waking_on(mut self, wake: impl Into<Option<Wake>>) -> Self {
        if let Some(wake) = wake.into() {
            self.waking = Waking::on(wake);
        }
        self
    }

    /// The fencing token while this controller leads.
    pub fn token(&self) -> Option<&str> {
        self.leading.token.as_deref()
    }

    /// Leads when it can, until `shutdown`: a pass every `interval` (and at once when an
    /// operation ends, a beat announces a change or a deadline comes, when waking) while this
    /// controller holds the lease. A clean stop releases the lease so a follower takes over at
    /// once.
    pub async fn run_leading(
        mut self,
        interval: Duration,
        grace: Duration,
        shutdown: CancellationToken,
    ) {
        // Without a lease there is no one else: this controller acts from the start.
        self.metrics
            .leader
            .set(i64::from(self.leading.lease.is_none()));
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let listening = shutdown.child_token();
        let listener = self.waking.listen(listening.clone());
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tick.tick() => {}
                () = self.waking.due() => {}
                Some((slot, done)) = self.flight.done_rx.recv() => {
                    self.flight.running.remove(&slot);
                    self.flight.finished.insert(slot, done);
                }
            }
            if !self.lead().await {
                continue;
            }
            if let Err(e) = self.pass().await {
                warn!(
                    error = fleet_redis::connect::chain(&e),
                    "controller pass failed; retrying"
                );
            }
        }
        listening.cancel();
        if let Some(listener) = listener {
            let _ = listener.await;
        }
        self.leading.signal.announce(None);
        if let (Some(lease), Some(token)) = (self.leading.lease.clone(), self.leading.token.clone())
        {
            match lease.release(&token).await {
                Ok(_) => info!(token, "leadership released"),
                Err(e) => warn!(
                    error = fleet_redis::connect::chain(&e),
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
}
