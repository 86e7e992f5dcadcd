//! The provider's service: cluster-autoscaler's calls answered from the claims (SPEC §6.3).
//!
//! Every answer is computed from the store's claims and the configuration, read fresh for each
//! call, so `Refresh` has nothing to do. Changes to a group are serialized by a lock per group
//! (cluster-autoscaler calls concurrently), and each change is a claim request through the
//! store's atomic scripts, so min, max and one live claim per slot hold under any concurrency.
//!
//! Only the leader changes anything: a follower answers reads and refuses changes with
//! UNAVAILABLE, and the leader's writes carry its fencing token, so a deposed leader's provider
//! is refused by the store like its controller. When Redis cannot be read, reads are answered
//! from the last snapshot (marked stale in the `fleet-stale-ms` response header) and changes are
//! refused with UNAVAILABLE. cluster-autoscaler does not retry a call: a refused scale-up is a
//! failed one (the group backs off), so the server closes its connections when this process
//! stops leading, and the deployment routes cluster-autoscaler to the leader (SPEC §6.4).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use redis::aio::ConnectionLike;
use tokio::sync::watch;
use tonic::{Request, Response, Status};
use tracing::{info, warn};

use crate::config::{Config, Group};
use crate::domain::claim::{self, Call, Claim, LastClaim, Phase, Reason};
use crate::domain::history::ScaleAction;
use crate::domain::name::{BenchName, GroupName};
use crate::requests::{self, RequestError};
use crate::store::catalog::Catalog;
use crate::store::claims::{ClaimStore, ClaimStoreError};
use crate::store::operations::Operations;
use crate::telemetry::{Method, Metrics};

use super::convert;
use super::template;
use super::wire::cloud_provider_server::CloudProvider;
use super::wire::*;

/// The annotation cluster-autoscaler puts on the fake nodes it makes for instances that never
/// registered or failed to be created.
pub const FAKE_NODE_REASON: &str = "k8s.io/cluster-autoscaler/fake-node-reason";
/// The response header that marks an answer read from the last snapshot: its age in ms.
pub const STALE_HEADER: &str = "fleet-stale-ms";
/// The GPU label when no group's template names one.
pub const DEFAULT_GPU_LABEL: &str = "fleet.dev/gpu-type";
/// cluster-autoscaler's error classes (InstanceErrorInfo.instanceErrorClass).
pub const OUT_OF_RESOURCES: i32 = 1;
pub const OTHER_ERROR: i32 = 99;

/// What was last read of a group, for reads while Redis cannot be.
#[derive(Default)]
struct Snapshot {
    claims: Option<(Arc<Vec<Claim>>, Instant)>,
    target: Option<(usize, Instant)>,
}

/// The provider over one claim store.
pub struct Provider<C> {
    config: watch::Receiver<Arc<Config>>,
    store: ClaimStore<C>,
    /// The leader's fencing token while this process leads; `None` when the provider acts alone
    /// (no lease: it always leads, unfenced).
    leadership: Option<watch::Receiver<Option<String>>>,
    metrics: Option<Arc<Metrics>>,
    locks: Mutex<HashMap<GroupName, Arc<tokio::sync::Mutex<()>>>>,
    snapshots: Mutex<HashMap<GroupName, Snapshot>>,
    /// The max sizes the last NodeGroups answered, for NodeGroupForNode in the same loop.
    max_sizes: Mutex<HashMap<GroupName, u32>>,
}

/// A group as one fresh read saw it.
struct Fresh {
    claims: Arc<Vec<Claim>>,
    ops: Arc<Operations>,
    now: DateTime<Utc>,
}

/// What a group has room for.
struct Room {
    free: Vec<BenchName>,
    /// Slots whose machine is being powered off (a live claim marked for deletion, or a machine
    /// fleet told to power off that is not observed off yet).
    busy: usize,
    /// Slots that spent their attempts.
    spent: usize,
}

/// How much longer than a claim's own deadline horizon cluster-autoscaler is told to wait for a
/// machine (GetOptions): time for a pass to report the failure.
const PROVISION_SLACK: Duration = Duration::from_secs(60);

/// How often a change re-reads and retries when a concurrent write (the controller's) moved a
/// claim between the read and the write.
const RACE_RETRIES: usize = 8;

/// What DeleteNodes did to a slot whose failed claim it ended: no machine was given back.
const DISMISSED: &str = "failed claim dismissed";

/// Whether a node DeleteNodes names is one cluster-autoscaler made up, and why; ordered from
/// the realest, so a node named twice counts as its realest naming.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Fake {
    /// A registered node: the minimum holds.
    No,
    /// An instance that never registered (or any other reason): removed even at the minimum.
    Unregistered,
    /// An instance that failed to be created: only its failed claim is dismissed.
    CreateError,
}

impl Fake {
    fn of(node: &ExternalGrpcNode) -> Fake {
        match node.annotations.get(FAKE_NODE_REASON).map(String::as_str) {
            None => Fake::No,
            Some("create-error") => Fake::CreateError,
            Some(_) => Fake::Unregistered,
        }
    }
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Provider<C> {
    pub fn new(config: watch::Receiver<Arc<Config>>, store: ClaimStore<C>) -> Self {
        Self {
            config,
            store,
            leadership: None,
            metrics: None,
            locks: Mutex::new(HashMap::new()),
            snapshots: Mutex::new(HashMap::new()),
            max_sizes: Mutex::new(HashMap::new()),
        }
    }

    /// Changes only while `leadership` holds a token, and with it (SPEC §5.1).
    pub fn with_leadership(mut self, leadership: watch::Receiver<Option<String>>) -> Self {
        self.leadership = Some(leadership);
        self
    }

    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The group a request names: an empty id is invalid, an unknown one not found.
    fn group(&self, id: &str) -> Result<(Arc<Config>, Group), Status> {
        if id.is_empty() {
            return Err(Status::invalid_argument(
                "the node group id is empty: name one of the groups NodeGroups lists",
            ));
        }
        let config = self.config.borrow().clone();
        let name = GroupName::parse(id).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let group = config.group(&name).cloned().ok_or_else(|| {
            Status::not_found(format!(
                "no node group {id}: the groups are {}",
                config
                    .groups
                    .keys()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        Ok((config, group))
    }

    fn lock(&self, group: &GroupName) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        locks.entry(group.clone()).or_default().clone()
    }

    /// The store a change writes through: the leader's, fenced with its token. A follower
    /// refuses: its answer would be a guess, and a fenced write would be refused anyway.
    fn writer(&self) -> Result<ClaimStore<C>, Status> {
        let Some(leadership) = &self.leadership else {
            return Ok(self.store.clone());
        };
        match leadership.borrow().as_deref() {
            Some(token) => Ok(self.store.fenced(token)),
            None => Err(Status::unavailable(
                "this fleet serve is not the leader: only the leader changes node groups; route \
                 cluster-autoscaler to the leader (a Service whose readiness probe is /readyz, \
                 which only the leader passes)",
            )),
        }
    }

    /// The group's claims and operation records read now, with the server's time of the read; a
    /// change needs them fresh.
    async fn fresh_claims(&self, group: &GroupName) -> Result<Fresh, Status> {
        let read = self
            .store
            .read_groups(std::slice::from_ref(group))
            .await
            .map_err(store_status)?
            .pop()
            .ok_or_else(|| Status::internal("a group read returned no group"))?;
        let claims = Arc::new(read.claims);
        let mut snapshots = self.snapshots.lock().unwrap_or_else(|e| e.into_inner());
        let snapshot = snapshots.entry(group.clone()).or_default();
        let now = Instant::now();
        snapshot.target = Some((target(&claims), now));
        snapshot.claims = Some((claims.clone(), now));
        Ok(Fresh {
            claims,
            ops: Arc::new(read.operations),
            now: read.now,
        })
    }

    /// Counts a stale answer.
    fn stale(&self, group: &GroupName, age: Duration, status: &Status) {
        warn!(%group, age_ms = age.as_millis() as u64, error = status.message(), "Redis cannot be read; answering from the last snapshot");
        if let Some(m) = &self.metrics {
            m.provider_stale_answers.inc();
        }
    }

    /// The group's target size: fresh in one round trip when Redis answers, else the last one
    /// read and its age.
    async fn read_target(&self, group: &GroupName) -> Result<(usize, Option<Duration>), Status> {
        match self.store.target(group).await {
            Ok(n) => {
                let mut snapshots = self.snapshots.lock().unwrap_or_else(|e| e.into_inner());
                snapshots.entry(group.clone()).or_default().target = Some((n, Instant::now()));
                Ok((n, None))
            }
            Err(e) => {
                let status = store_status(e);
                let snapshots = self.snapshots.lock().unwrap_or_else(|e| e.into_inner());
                let Some((n, at)) = snapshots.get(group).and_then(|s| s.target) else {
                    return Err(status);
                };
                self.stale(group, at.elapsed(), &status);
                Ok((n, Some(at.elapsed())))
            }
        }
    }

    /// The group's claims for a read: fresh (with the operation records and the server's time)
    /// when Redis answers, else the last snapshot and its age (SPEC §5.5).
    #[allow(clippy::type_complexity)]
    async fn read_claims(
        &self,
        group: &GroupName,
    ) -> Result<
        (
            Arc<Vec<Claim>>,
            Result<(Arc<Operations>, DateTime<Utc>), Duration>,
        ),
        Status,
    > {
        match self.fresh_claims(group).await {
            Ok(Fresh { claims, ops, now }) => Ok((claims, Ok((ops, now)))),
            Err(status) => {
                let snapshots = self.snapshots.lock().unwrap_or_else(|e| e.into_inner());
                let Some((claims, at)) = snapshots.get(group).and_then(|s| s.claims.clone()) else {
                    return Err(status);
                };
                self.stale(group, at.elapsed(), &status);
                Ok((claims, Err(at.elapsed())))
            }
        }
    }

    /// What `group` has room for (SPEC §6.3): the slots a new claim may take, best first (no
    /// live claim, no machine on its way down, and a failure streak short of the bound; the
    /// fewest counted failures first, then slot order), and why the others are not free.
    async fn room(
        &self,
        config: &Config,
        group: &Group,
        claims: &[Claim],
        ops: &Operations,
        now: DateTime<Utc>,
    ) -> Result<Room, Status> {
        let mut busy = 0;
        let slots: Vec<BenchName> = config
            .slots_of(&group.name)
            .map(|s| s.name.clone())
            .filter(|s| {
                let live = claims.iter().find(|c| &c.slot == s && c.phase.is_live());
                // A machine a scale-down is powering off, or one fleet told to power off that
                // has not been observed off yet: a claim on it would wait for it to go dark.
                let powering_off = live.is_some_and(|c| !c.wants_machine())
                    || (live.is_none()
                        && ops.by_slot.get(s).is_some_and(|o| {
                            o.going_down(now, group.timings.job_monitor_poll_interval)
                        }));
                busy += usize::from(powering_off);
                live.is_none() && !powering_off
            })
            .collect();
        let digests = self
            .store
            .read_slots(&group.name, &slots)
            .await
            .map_err(store_status)?;
        let mut spent = 0;
        let mut free: Vec<(u32, BenchName)> = slots
            .into_iter()
            .zip(digests)
            .filter_map(|(slot, (_, last))| {
                let last: Option<&LastClaim> = last.as_ref();
                if claim::streak_spent(last, now, &group.timings) {
                    spent += 1;
                    return None;
                }
                Some((claim::failure_streak(last, now, &group.timings), slot))
            })
            .collect();
        free.sort();
        Ok(Room {
            free: free.into_iter().map(|(_, slot)| slot).collect(),
            busy,
            spent,
        })
    }

    /// Each group's max size as cluster-autoscaler should see it this loop (SPEC §6.3): the
    /// configured one, lowered to what the group can reach now (its target plus its free usable
    /// slots), never below its min. One read of every group's claims, one read of each group's
    /// slots. When the store cannot be read, the configured max.
    async fn effective_max(&self, config: &Config) -> HashMap<GroupName, u32> {
        let names: Vec<GroupName> = config.groups.keys().cloned().collect();
        let mut out: HashMap<GroupName, u32> = config
            .groups
            .values()
            .map(|g| (g.name.clone(), g.max_size))
            .collect();
        let read = match self.store.read_groups(&names).await {
            Ok(read) => read,
            Err(e) => {
                warn!(
                    error = crate::store::connect::chain(&e),
                    "NodeGroups: the claims cannot be read; answering the configured max sizes"
                );
                return out;
            }
        };
        for g in read {
            let Some(group) = config.group(&g.group) else {
                continue;
            };
            match self
                .room(config, group, &g.claims, &g.operations, g.now)
                .await
            {
                Ok(room) => {
                    let reachable =
                        u32::try_from(target(&g.claims) + room.free.len()).unwrap_or(u32::MAX);
                    out.insert(
                        group.name.clone(),
                        group.max_size.min(reachable).max(group.min_size),
                    );
                }
                Err(status) => {
                    warn!(group = %group.name, error = status.message(), "NodeGroups: the slots cannot be read; answering the configured max size")
                }
            }
        }
        let mut cached = self.max_sizes.lock().unwrap_or_else(|e| e.into_inner());
        cached.clone_from(&out);
        out
    }

    fn wire_group(group: &Group, max_size: u32) -> NodeGroup {
        NodeGroup {
            id: group.name.to_string(),
            min_size: i32::try_from(group.min_size).unwrap_or(i32::MAX),
            max_size: i32::try_from(max_size).unwrap_or(i32::MAX),
            debug: format!(
                "fleet group {} (min {}, max {} configured, {max_size} reachable now)",
                group.name, group.min_size, group.max_size
            ),
        }
    }

    fn observed<T>(
        &self,
        method: Method,
        started: Instant,
        result: Result<Response<T>, Status>,
    ) -> Result<Response<T>, Status> {
        super::calls::observed(self.metrics.as_deref(), method, started, result)
    }

    async fn do_increase(
        &self,
        request: NodeGroupIncreaseSizeRequest,
    ) -> Result<Response<NodeGroupIncreaseSizeResponse>, Status> {
        let (config, group) = self.group(&request.id)?;
        if request.delta <= 0 {
            return Err(Status::invalid_argument(format!(
                "delta {} must be positive: IncreaseSize adds machines",
                request.delta
            )));
        }
        let writer = self.writer()?;
        let lock = self.lock(&group.name);
        let _held = lock.lock().await;
        let Fresh { claims, ops, now } = self.fresh_claims(&group.name).await?;
        let delta = usize::try_from(request.delta).unwrap_or(usize::MAX);
        let now_target = target(&claims);
        if now_target.saturating_add(delta) > group.max_size as usize {
            return Err(Status::out_of_range(format!(
                "target {now_target} + {delta} is over max size {} of group {}",
                group.max_size, group.name
            )));
        }
        let Room { free, busy, spent } = self.room(&config, &group, &claims, &ops, now).await?;
        if free.len() < delta {
            let mut why = Vec::new();
            if busy > 0 {
                why.push(format!("{busy} still powering off"));
            }
            if spent > 0 {
                why.push(format!(
                    "{spent} spent their attempts (they rest for {} or until `fleet \
                     reset-attempts SLOT`)",
                    humantime::format_duration(group.timings.failed_slot_cooldown)
                ));
            }
            let configured = config.slots_of(&group.name).count();
            if (group.max_size as usize) > configured {
                why.push(format!(
                    "max size {} is above the group's {configured} slots",
                    group.max_size
                ));
            }
            return Err(Status::resource_exhausted(format!(
                "group {} has {} free usable slots, {delta} asked{}",
                group.name,
                free.len(),
                if why.is_empty() {
                    String::new()
                } else {
                    format!(": {}", why.join("; "))
                }
            )));
        }
        let catalog = Catalog::of(&config);
        let catalog_group = catalog
            .group(&group.name)
            .ok_or_else(|| Status::internal("the group is missing from its own catalog"))?;
        // All or nothing, in one step: a refused call leaves the target where it was.
        let chosen: Vec<BenchName> = free.into_iter().take(delta).collect();
        let made = requests::claim_slots(&writer, catalog_group, &chosen, now, Call::IncreaseSize)
            .await
            .map_err(request_status)?;
        // The snapshot a stale read would answer from follows the change.
        let _ = self.fresh_claims(&group.name).await;
        info!(
            group = %group.name,
            delta,
            target = now_target + delta,
            slots = ?made.iter().map(|c| c.slot.to_string()).collect::<Vec<_>>(),
            "IncreaseSize: claims created"
        );
        Ok(Response::new(NodeGroupIncreaseSizeResponse {}))
    }

    async fn do_delete(
        &self,
        request: NodeGroupDeleteNodesRequest,
    ) -> Result<Response<NodeGroupDeleteNodesResponse>, Status> {
        let (config, group) = self.group(&request.id)?;
        if request.nodes.is_empty() {
            return Err(Status::invalid_argument(
                "no nodes to delete: name at least one",
            ));
        }
        // Every node must be one of the group's slots; the whole call is refused otherwise.
        let mut named: Vec<(BenchName, Fake)> = Vec::new();
        for node in &request.nodes {
            let Some(slot) = config.slot_for_node(&node.provider_id, &node.name) else {
                return Err(Status::not_found(format!(
                    "node {:?} (provider ID {:?}) is not a fleet slot",
                    node.name, node.provider_id
                )));
            };
            if slot.group != group.name {
                return Err(Status::invalid_argument(format!(
                    "node {:?} (provider ID {:?}) is slot {} of group {}, not of group {}",
                    node.name, node.provider_id, slot.name, slot.group, group.name
                )));
            }
            let fake = Fake::of(node);
            match named.iter_mut().find(|(s, _)| s == &slot.name) {
                // A node named twice is one removal, as real as its realest naming.
                Some(seen) => seen.1 = seen.1.min(fake),
                None => named.push((slot.name.clone(), fake)),
            }
        }
        let writer = self.writer()?;
        let lock = self.lock(&group.name);
        let _held = lock.lock().await;
        let Fresh { claims, now, .. } = self.fresh_claims(&group.name).await?;
        let real = named
            .iter()
            .filter(|(slot, fake)| {
                *fake == Fake::No && claims.iter().any(|c| &c.slot == slot && c.wants_machine())
            })
            .count();
        let now_target = target(&claims);
        if real > 0 && now_target.saturating_sub(real) < group.min_size as usize {
            return Err(Status::failed_precondition(format!(
                "deleting {real} nodes would take group {} from {now_target} below its min size {}",
                group.name, group.min_size
            )));
        }
        let mut removed = Vec::new();
        let mut given_back = 0;
        for (slot, fake) in &named {
            let done = self
                .remove(&writer, &group, slot, *fake, claims.clone(), now)
                .await;
            let what = match done {
                Ok(what) => what,
                Err(status) => {
                    // What was given back before the failure is still a scaling call.
                    if given_back > 0 {
                        requests::scaled(
                            &writer,
                            &group.name,
                            now,
                            ScaleAction::Delete,
                            given_back,
                        )
                        .await;
                    }
                    return Err(status);
                }
            };
            if let Some(what) = what {
                if what != DISMISSED {
                    given_back += 1;
                }
                removed.push(format!("{slot} ({what})"));
            }
        }
        if given_back > 0 {
            requests::scaled(&writer, &group.name, now, ScaleAction::Delete, given_back).await;
        }
        // The snapshot a stale read would answer from follows the change.
        let after = self
            .fresh_claims(&group.name)
            .await
            .map(|f| target(&f.claims))
            .ok();
        info!(group = %group.name, removed = ?removed, target = ?after, "DeleteNodes");
        Ok(Response::new(NodeGroupDeleteNodesResponse {}))
    }

    /// Removes one slot's machine for DeleteNodes (SPEC §6.3), judging from `claims` and again
    /// from a fresh read each time a concurrent write (the controller's) moved the claim first.
    /// Returns what it did, `None` when there was nothing to remove.
    async fn remove(
        &self,
        writer: &ClaimStore<C>,
        group: &Group,
        slot: &BenchName,
        fake: Fake,
        mut claims: Arc<Vec<Claim>>,
        now: DateTime<Utc>,
    ) -> Result<Option<&'static str>, Status> {
        let ttl = group.timings.ttl_after_finished;
        for _ in 0..RACE_RETRIES {
            let wanting = claims.iter().find(|c| &c.slot == slot && c.wants_machine());
            let result = match (wanting, fake) {
                // A create error names the failed attempt, never a newer claim made since
                // (cluster-autoscaler may act on an instance list read before it).
                (Some(_), Fake::CreateError) => return Ok(None),
                (Some(c), _) => requests::cancel(writer, c, Reason::NodeDeleted, now, ttl)
                    .await
                    .map(|done| match done {
                        requests::Cancelled::Deleted => "cancelled",
                        requests::Cancelled::Marked => "powering off",
                    }),
                (None, _) => match speaking(&claims)
                    .get(slot)
                    .filter(|c| c.phase == Phase::Failed)
                {
                    Some(c) => requests::dismiss_failed(writer, c, now, ttl)
                        .await
                        .map(|()| DISMISSED),
                    // Nothing wants the slot's machine any more: already removed.
                    None => return Ok(None),
                },
            };
            match result {
                Ok(what) => return Ok(Some(what)),
                Err(RequestError::Raced(_)) => {
                    claims = self.fresh_claims(&group.name).await?.claims;
                }
                Err(e) => return Err(request_status(e)),
            }
        }
        Err(Status::aborted(format!(
            "the claim on {slot} kept changing under DeleteNodes; call again"
        )))
    }

    async fn do_decrease(
        &self,
        request: NodeGroupDecreaseTargetSizeRequest,
    ) -> Result<Response<NodeGroupDecreaseTargetSizeResponse>, Status> {
        let (_, group) = self.group(&request.id)?;
        if request.delta >= 0 {
            return Err(Status::invalid_argument(format!(
                "delta {} must be negative: DecreaseTargetSize only takes back requests",
                request.delta
            )));
        }
        let writer = self.writer()?;
        let lock = self.lock(&group.name);
        let _held = lock.lock().await;
        let Fresh {
            mut claims, now, ..
        } = self.fresh_claims(&group.name).await?;
        let wanted = usize::try_from(request.delta.unsigned_abs()).unwrap_or(usize::MAX);
        let now_target = target(&claims);
        let pending = |claims: &[Claim]| -> Vec<Claim> {
            // Only capacity that does not exist yet: pending claims, newest first.
            let mut p: Vec<Claim> = claims
                .iter()
                .filter(|c| c.phase == Phase::Pending && c.wants_machine())
                .cloned()
                .collect();
            p.sort_by_key(|c| std::cmp::Reverse(c.requested_at));
            p
        };
        let available = pending(&claims).len();
        if available < wanted {
            return Err(Status::failed_precondition(format!(
                "decreasing group {} by {wanted} would remove machines that exist: only \
                 {available} requests are pending; remove machines with DeleteNodes",
                group.name,
            )));
        }
        if now_target - wanted < group.min_size as usize {
            return Err(Status::failed_precondition(format!(
                "decreasing group {} by {wanted} would take it from {now_target} below its min \
                 size {}",
                group.name, group.min_size
            )));
        }
        let mut taken = 0;
        let mut races = 0;
        while taken < wanted {
            let Some(c) = pending(&claims).into_iter().next() else {
                // The controller started booting the rest meanwhile: those exist now.
                if taken > 0 {
                    requests::scaled(&writer, &group.name, now, ScaleAction::Decrease, taken).await;
                }
                let _ = self.fresh_claims(&group.name).await;
                return Err(Status::failed_precondition(format!(
                    "took back {taken} of {wanted} requests of group {}: the others started \
                     booting meanwhile; remove machines with DeleteNodes",
                    group.name
                )));
            };
            match requests::cancel(
                &writer,
                &c,
                Reason::CancelledByDecreaseTargetSize,
                now,
                group.timings.ttl_after_finished,
            )
            .await
            {
                Ok(_) => {
                    taken += 1;
                    claims = Arc::new(
                        claims
                            .iter()
                            .filter(|k| k.name != c.name)
                            .cloned()
                            .collect(),
                    );
                }
                Err(RequestError::Raced(_)) if races < RACE_RETRIES => {
                    races += 1;
                    claims = self.fresh_claims(&group.name).await?.claims;
                }
                Err(e) => {
                    if taken > 0 {
                        requests::scaled(&writer, &group.name, now, ScaleAction::Decrease, taken)
                            .await;
                    }
                    return Err(request_status(e));
                }
            }
        }
        requests::scaled(&writer, &group.name, now, ScaleAction::Decrease, taken).await;
        // The snapshot a stale read would answer from follows the change.
        let _ = self.fresh_claims(&group.name).await;
        info!(group = %group.name, delta = request.delta, target = now_target - wanted, "DecreaseTargetSize: pending claims cancelled");
        Ok(Response::new(NodeGroupDecreaseTargetSizeResponse {}))
    }

    async fn do_nodes(
        &self,
        request: NodeGroupNodesRequest,
    ) -> Result<Response<NodeGroupNodesResponse>, Status> {
        use instance_status::InstanceState;
        let (config, group) = self.group(&request.id)?;
        let (claims, read) = self.read_claims(&group.name).await?;
        let by_slot = speaking(&claims);
        let mut instances = Vec::new();
        let mut failed = Vec::new();
        for slot in config.slots_of(&group.name) {
            let Some(&c) = by_slot.get(&slot.name) else {
                continue;
            };
            let state = match (c.phase, c.marked_for_deletion.is_some()) {
                (Phase::Pending | Phase::Booting | Phase::Ready, true) => {
                    InstanceState::InstanceDeleting
                }
                (Phase::Ready, false) => InstanceState::InstanceRunning,
                (Phase::Pending | Phase::Booting, false) => InstanceState::InstanceCreating,
                (Phase::Failed, _) => {
                    failed.push((instances.len(), c));
                    InstanceState::InstanceCreating
                }
                (Phase::Completed, _) => continue,
            };
            instances.push(Instance {
                id: slot.provider_id.clone(),
                status: Some(InstanceStatus {
                    instance_state: state as i32,
                    error_info: None,
                }),
            });
        }
        if !failed.is_empty() {
            // OutOfResources when nothing is left to try: cluster-autoscaler may then prefer
            // another group. Without Redis, the class cannot be known: Other.
            let exhausted = match &read {
                Ok((ops, now)) => self
                    .room(&config, &group, &claims, ops, *now)
                    .await?
                    .free
                    .is_empty(),
                Err(_) => false,
            };
            for (i, c) in failed {
                let reason = c.reason.unwrap_or(Reason::DeadlineExceeded);
                if let Some(status) = instances[i].status.as_mut() {
                    status.error_info = Some(InstanceErrorInfo {
                        error_code: reason.as_str().to_owned(),
                        error_message: format!(
                            "claim {} on slot {} failed: {reason} (attempt {} of {}){}",
                            c.name,
                            c.slot,
                            c.attempt,
                            group.timings.max_attempts,
                            if exhausted {
                                "; the group has no free usable slot left"
                            } else {
                                ""
                            }
                        ),
                        instance_error_class: if exhausted {
                            OUT_OF_RESOURCES
                        } else {
                            OTHER_ERROR
                        },
                    });
                }
            }
        }
        Ok(answer(NodeGroupNodesResponse { instances }, read.err()))
    }
}

/// The target size: live claims a scale-down has not marked.
fn target(claims: &[Claim]) -> usize {
    claims.iter().filter(|c| c.wants_machine()).count()
}

/// The claim that speaks for each slot (its live one, else its newest), in one pass over the
/// claims.
fn speaking(claims: &[Claim]) -> HashMap<&BenchName, &Claim> {
    let mut by_slot: HashMap<&BenchName, &Claim> = HashMap::with_capacity(claims.len());
    for c in claims {
        by_slot
            .entry(&c.slot)
            .and_modify(|held| {
                if (c.phase.is_live(), c.requested_at) > (held.phase.is_live(), held.requested_at) {
                    *held = c;
                }
            })
            .or_insert(c);
    }
    by_slot
}

/// A response, marked stale with the snapshot's age when it was read from one.
fn answer<T>(message: T, stale: Option<Duration>) -> Response<T> {
    let mut response = Response::new(message);
    if let Some(age) = stale
        && let Ok(value) = age.as_millis().to_string().parse()
    {
        response.metadata_mut().insert(STALE_HEADER, value);
    }
    response
}

/// The one mapping of the store's errors to gRPC statuses: Redis out of reach and a newer
/// leader's fence are both "not now, retry".
fn store_status(e: ClaimStoreError) -> Status {
    Status::unavailable(crate::store::connect::chain(&e))
}

fn request_status(e: RequestError) -> Status {
    match e {
        RequestError::Store(e) => store_status(e),
        RequestError::SlotTaken { .. } | RequestError::Raced(_) => Status::aborted(e.to_string()),
        RequestError::NoSuchClaim(_) => Status::not_found(e.to_string()),
        RequestError::Ended { .. }
        | RequestError::NotMarkable(..)
        | RequestError::PoweringOff { .. }
        | RequestError::Spent { .. } => Status::failed_precondition(e.to_string()),
    }
}

#[tonic::async_trait]
impl<C: ConnectionLike + Clone + Send + Sync + 'static> CloudProvider for Provider<C> {
    async fn node_groups(
        &self,
        _: Request<NodeGroupsRequest>,
    ) -> Result<Response<NodeGroupsResponse>, Status> {
        let started = Instant::now();
        let config = self.config.borrow().clone();
        let max = self.effective_max(&config).await;
        let answer = Response::new(NodeGroupsResponse {
            node_groups: config
                .groups
                .values()
                .map(|g| Self::wire_group(g, max.get(&g.name).copied().unwrap_or(g.max_size)))
                .collect(),
        });
        self.observed(Method::NodeGroups, started, Ok(answer))
    }

    async fn node_group_for_node(
        &self,
        request: Request<NodeGroupForNodeRequest>,
    ) -> Result<Response<NodeGroupForNodeResponse>, Status> {
        let started = Instant::now();
        let node = request.into_inner().node.unwrap_or_default();
        let config = self.config.borrow().clone();
        // A node fleet does not manage is an empty group, never an error.
        let max = self
            .max_sizes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let group = config
            .slot_for_node(&node.provider_id, &node.name)
            .and_then(|s| config.group(&s.group))
            .map(|g| Self::wire_group(g, max.get(&g.name).copied().unwrap_or(g.max_size)))
            .unwrap_or_default();
        let answer = Response::new(NodeGroupForNodeResponse {
            node_group: Some(group),
        });
        self.observed(Method::NodeGroupForNode, started, Ok(answer))
    }

    async fn pricing_node_price(
        &self,
        request: Request<PricingNodePriceRequest>,
    ) -> Result<Response<PricingNodePriceResponse>, Status> {
        let started = Instant::now();
        let request = request.into_inner();
        let config = self.config.borrow().clone();
        let result = (|| {
            let node = request.node.unwrap_or_default();
            // A slot, or a node cluster-autoscaler made from a group's template (renamed, no
            // provider ID, but carrying the group's label).
            let group = config
                .slot_for_node(&node.provider_id, &node.name)
                .and_then(|slot| config.group(&slot.group))
                .or_else(|| {
                    node.labels
                        .get(template::GROUP_LABEL)
                        .and_then(|g| GroupName::parse(g).ok())
                        .and_then(|g| config.group(&g))
                })
                .ok_or_else(|| {
                    Status::not_found(format!(
                        "node {:?} (provider ID {:?}) is not a fleet slot and carries no {} label \
                         of a fleet group",
                        node.name,
                        node.provider_id,
                        template::GROUP_LABEL
                    ))
                })?;
            let power = group
                .template
                .as_ref()
                .and_then(|t| t.power)
                .ok_or_else(|| {
                    Status::unimplemented(format!(
                        "group {} declares no power draw (template.power), so it has no price",
                        group.name
                    ))
                })?;
            let start = request
                .start_timestamp
                .as_ref()
                .or(request.start_time.as_ref());
            let end = request.end_timestamp.as_ref().or(request.end_time.as_ref());
            let price = convert::energy_price(&power, start, end)
                .map_err(|e| Status::invalid_argument(e.to_string()))?;
            Ok(Response::new(PricingNodePriceResponse { price }))
        })();
        self.observed(Method::PricingNodePrice, started, result)
    }

    async fn pricing_pod_price(
        &self,
        _: Request<PricingPodPriceRequest>,
    ) -> Result<Response<PricingPodPriceResponse>, Status> {
        self.observed(
            Method::PricingPodPrice,
            Instant::now(),
            Err(Status::unimplemented(
                "fleet prices machines (PricingNodePrice), not pods",
            )),
        )
    }

    async fn gpu_label(
        &self,
        _: Request<GpuLabelRequest>,
    ) -> Result<Response<GpuLabelResponse>, Status> {
        let started = Instant::now();
        let config = self.config.borrow().clone();
        let label = config
            .groups
            .values()
            .filter_map(|g| g.template.as_ref().and_then(|t| t.gpu.as_ref()))
            .map(|gpu| gpu.label.clone())
            .next()
            .unwrap_or_else(|| DEFAULT_GPU_LABEL.to_owned());
        self.observed(
            Method::GPULabel,
            started,
            Ok(Response::new(GpuLabelResponse { label })),
        )
    }

    async fn get_available_gpu_types(
        &self,
        _: Request<GetAvailableGpuTypesRequest>,
    ) -> Result<Response<GetAvailableGpuTypesResponse>, Status> {
        let started = Instant::now();
        let config = self.config.borrow().clone();
        let types: BTreeSet<String> = config
            .groups
            .values()
            .filter_map(|g| g.template.as_ref().and_then(|t| t.gpu.as_ref()))
            .flat_map(|gpu| gpu.types.iter().cloned())
            .collect();
        let gpu_types = types
            .into_iter()
            .map(|t| (t, prost_types::Any::default()))
            .collect();
        self.observed(
            Method::GetAvailableGPUTypes,
            started,
            Ok(Response::new(GetAvailableGpuTypesResponse { gpu_types })),
        )
    }

    async fn cleanup(
        &self,
        _: Request<CleanupRequest>,
    ) -> Result<Response<CleanupResponse>, Status> {
        self.observed(
            Method::Cleanup,
            Instant::now(),
            Ok(Response::new(CleanupResponse {})),
        )
    }

    async fn refresh(
        &self,
        _: Request<RefreshRequest>,
    ) -> Result<Response<RefreshResponse>, Status> {
        // Every answer is read fresh from the store: nothing to refresh, and nothing slow here
        // (an error would abort cluster-autoscaler's whole loop).
        self.observed(
            Method::Refresh,
            Instant::now(),
            Ok(Response::new(RefreshResponse {})),
        )
    }

    async fn node_group_target_size(
        &self,
        request: Request<NodeGroupTargetSizeRequest>,
    ) -> Result<Response<NodeGroupTargetSizeResponse>, Status> {
        let started = Instant::now();
        let result = async {
            let (_, group) = self.group(&request.into_inner().id)?;
            let (n, stale) = self.read_target(&group.name).await?;
            Ok(answer(
                NodeGroupTargetSizeResponse {
                    target_size: i32::try_from(n).unwrap_or(i32::MAX),
                },
                stale,
            ))
        }
        .await;
        self.observed(Method::NodeGroupTargetSize, started, result)
    }

    async fn node_group_increase_size(
        &self,
        request: Request<NodeGroupIncreaseSizeRequest>,
    ) -> Result<Response<NodeGroupIncreaseSizeResponse>, Status> {
        let started = Instant::now();
        let result = self.do_increase(request.into_inner()).await;
        self.observed(Method::NodeGroupIncreaseSize, started, result)
    }

    async fn node_group_delete_nodes(
        &self,
        request: Request<NodeGroupDeleteNodesRequest>,
    ) -> Result<Response<NodeGroupDeleteNodesResponse>, Status> {
        let started = Instant::now();
        let result = self.do_delete(request.into_inner()).await;
        self.observed(Method::NodeGroupDeleteNodes, started, result)
    }

    async fn node_group_decrease_target_size(
        &self,
        request: Request<NodeGroupDecreaseTargetSizeRequest>,
    ) -> Result<Response<NodeGroupDecreaseTargetSizeResponse>, Status> {
        let started = Instant::now();
        let result = self.do_decrease(request.into_inner()).await;
        self.observed(Method::NodeGroupDecreaseTargetSize, started, result)
    }

    async fn node_group_nodes(
        &self,
        request: Request<NodeGroupNodesRequest>,
    ) -> Result<Response<NodeGroupNodesResponse>, Status> {
        let started = Instant::now();
        let result = self.do_nodes(request.into_inner()).await;
        self.observed(Method::NodeGroupNodes, started, result)
    }

    async fn node_group_template_node_info(
        &self,
        request: Request<NodeGroupTemplateNodeInfoRequest>,
    ) -> Result<Response<NodeGroupTemplateNodeInfoResponse>, Status> {
        let started = Instant::now();
        let result = self.group(&request.into_inner().id).and_then(|(_, group)| {
            // Never OK without node bytes: cluster-autoscaler dereferences the node it decodes.
            let bytes = template::node_bytes(&group).ok_or_else(|| {
                Status::unimplemented(format!(
                    "group {} declares no template, so it cannot scale from zero; add one to \
                     its configuration",
                    group.name
                ))
            })?;
            Ok(Response::new(NodeGroupTemplateNodeInfoResponse {
                // The same bytes in the legacy field: a Node message and bytes share a wire type.
                node_info: bytes.clone(),
                node_bytes: bytes,
                resource_slice_bytes: Vec::new(),
            }))
        });
        self.observed(Method::NodeGroupTemplateNodeInfo, started, result)
    }

    async fn node_group_get_options(
        &self,
        request: Request<NodeGroupAutoscalingOptionsRequest>,
    ) -> Result<Response<NodeGroupAutoscalingOptionsResponse>, Status> {
        let started = Instant::now();
        let request = request.into_inner();
        let result = self.group(&request.id).and_then(|(_, group)| {
            let overrides = group.autoscaling_options.as_ref().ok_or_else(|| {
                Status::unimplemented(format!(
                    "group {} does not opt in to autoscaling options: cluster-autoscaler's flags \
                     apply (set autoscaling_options in its configuration to override them)",
                    group.name
                ))
            })?;
            // cluster-autoscaler must give up on a boot after fleet does, so that fleet's failure
            // (a create error) reaches it first: the claim's own horizon and one minute for a
            // pass to report it.
            let provision = Some(
                group
                    .max_node_provision_time
                    .unwrap_or_default()
                    .max(group.timings.attempt_budget())
                    + PROVISION_SLACK,
            );
            Ok(Response::new(NodeGroupAutoscalingOptionsResponse {
                node_group_autoscaling_options: Some(convert::options(
                    request.defaults.as_ref(),
                    overrides,
                    provision,
                )),
            }))
        });
        self.observed(Method::NodeGroupGetOptions, started, result)
    }
}
