//! The provider's service: cluster-autoscaler's calls answered from the claims (SPEC §6.2).
//!
//! Every answer is computed from the store's claims and the configuration; nothing is cached
//! across calls, so `Refresh` has nothing to do. Changes to a group are serialized by a lock per
//! group (cluster-autoscaler calls concurrently), and each change is a claim request through the
//! store's atomic scripts, so min, max and one live claim per slot hold under any concurrency.
//! Not served by `fleet serve` yet (issue 6 is in progress).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use redis::aio::ConnectionLike;
use tokio::sync::watch;
use tonic::{Request, Response, Status};

use crate::config::{Config, Group};
use crate::domain::claim::{Claim, Phase, Reason};
use crate::domain::name::{BenchName, GroupName};
use crate::reconcile::requests::{self, RequestError};
use crate::store::catalog::Catalog;
use crate::store::claims::{ClaimStore, ClaimStoreError};

use super::wire::cloud_provider_server::CloudProvider;
use super::wire::*;

/// The annotation cluster-autoscaler puts on the fake nodes it makes for instances that never
/// registered or failed to be created.
pub const FAKE_NODE_REASON: &str = "k8s.io/cluster-autoscaler/fake-node-reason";

/// The provider over one claim store.
pub struct Provider<C> {
    config: watch::Receiver<Arc<Config>>,
    store: ClaimStore<C>,
    locks: Mutex<HashMap<GroupName, Arc<tokio::sync::Mutex<()>>>>,
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Provider<C> {
    pub fn new(config: watch::Receiver<Arc<Config>>, store: ClaimStore<C>) -> Self {
        Self {
            config,
            store,
            locks: Mutex::new(HashMap::new()),
        }
    }

    /// The group a request names: an empty id is invalid, an unknown one not found.
    fn group(&self, id: &str) -> Result<(Arc<Config>, Group), Status> {
        if id.is_empty() {
            return Err(Status::invalid_argument("the node group id is empty"));
        }
        let config = self.config.borrow().clone();
        let name = GroupName::parse(id).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let group = config
            .group(&name)
            .cloned()
            .ok_or_else(|| Status::not_found(format!("no node group {id}")))?;
        Ok((config, group))
    }

    fn lock(&self, group: &GroupName) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().expect("provider locks");
        locks.entry(group.clone()).or_default().clone()
    }

    async fn claims(&self, group: &GroupName) -> Result<Vec<Claim>, Status> {
        Ok(self
            .store
            .read_groups(std::slice::from_ref(group))
            .await
            .map_err(store_status)?
            .into_iter()
            .flat_map(|g| g.claims)
            .collect())
    }

    fn wire_group(group: &Group) -> NodeGroup {
        NodeGroup {
            id: group.name.to_string(),
            min_size: i32::try_from(group.min_size).unwrap_or(i32::MAX),
            max_size: i32::try_from(group.max_size).unwrap_or(i32::MAX),
            debug: format!("fleet group {}", group.name),
        }
    }
}

/// The target size: live claims a scale-down has not marked.
fn target(claims: &[Claim]) -> usize {
    claims.iter().filter(|c| c.wants_machine()).count()
}

/// The one mapping of fleet's errors to gRPC statuses.
fn store_status(e: ClaimStoreError) -> Status {
    Status::unavailable(format!("{:#}", anyhow::Error::new(e)))
}

fn request_status(e: RequestError) -> Status {
    match e {
        RequestError::Store(e) => store_status(e),
        RequestError::SlotTaken { .. } | RequestError::Raced(_) => Status::aborted(e.to_string()),
        RequestError::NoSuchClaim(_) => Status::not_found(e.to_string()),
        RequestError::Ended { .. } | RequestError::NotMarkable(..) => {
            Status::failed_precondition(e.to_string())
        }
    }
}

#[tonic::async_trait]
impl<C: ConnectionLike + Clone + Send + Sync + 'static> CloudProvider for Provider<C> {
    async fn node_groups(
        &self,
        _: Request<NodeGroupsRequest>,
    ) -> Result<Response<NodeGroupsResponse>, Status> {
        let config = self.config.borrow().clone();
        Ok(Response::new(NodeGroupsResponse {
            node_groups: config.groups.values().map(Self::wire_group).collect(),
        }))
    }

    async fn node_group_for_node(
        &self,
        request: Request<NodeGroupForNodeRequest>,
    ) -> Result<Response<NodeGroupForNodeResponse>, Status> {
        let node = request.into_inner().node.unwrap_or_default();
        let config = self.config.borrow().clone();
        // Match on the provider ID; the name only when the provider ID is empty.
        let slot = if node.provider_id.is_empty() {
            BenchName::parse(&node.name)
                .ok()
                .and_then(|n| config.slots.get(&n))
        } else {
            config.slot_by_provider_id(&node.provider_id)
        };
        // A node fleet does not manage is an empty group, never an error.
        let group = slot
            .and_then(|s| config.group(&s.group))
            .map(Self::wire_group)
            .unwrap_or_default();
        Ok(Response::new(NodeGroupForNodeResponse {
            node_group: Some(group),
        }))
    }

    async fn gpu_label(
        &self,
        _: Request<GpuLabelRequest>,
    ) -> Result<Response<GpuLabelResponse>, Status> {
        let config = self.config.borrow().clone();
        let label = config
            .groups
            .values()
            .filter_map(|g| g.template.as_ref().and_then(|t| t.gpu.as_ref()))
            .map(|gpu| gpu.label.clone())
            .next()
            .unwrap_or_else(|| "fleet.dev/gpu".to_owned());
        Ok(Response::new(GpuLabelResponse { label }))
    }

    async fn get_available_gpu_types(
        &self,
        _: Request<GetAvailableGpuTypesRequest>,
    ) -> Result<Response<GetAvailableGpuTypesResponse>, Status> {
        let config = self.config.borrow().clone();
        let gpu_types = config
            .groups
            .values()
            .filter_map(|g| g.template.as_ref().and_then(|t| t.gpu.as_ref()))
            .flat_map(|gpu| gpu.types.iter().cloned())
            .map(|t| (t, prost_types::Any::default()))
            .collect();
        Ok(Response::new(GetAvailableGpuTypesResponse { gpu_types }))
    }

    async fn cleanup(
        &self,
        _: Request<CleanupRequest>,
    ) -> Result<Response<CleanupResponse>, Status> {
        Ok(Response::new(CleanupResponse {}))
    }

    async fn refresh(
        &self,
        _: Request<RefreshRequest>,
    ) -> Result<Response<RefreshResponse>, Status> {
        // Every answer is read fresh from the store: nothing to refresh, and nothing slow here.
        Ok(Response::new(RefreshResponse {}))
    }

    async fn node_group_target_size(
        &self,
        request: Request<NodeGroupTargetSizeRequest>,
    ) -> Result<Response<NodeGroupTargetSizeResponse>, Status> {
        let (_, group) = self.group(&request.into_inner().id)?;
        let claims = self.claims(&group.name).await?;
        Ok(Response::new(NodeGroupTargetSizeResponse {
            target_size: i32::try_from(target(&claims)).unwrap_or(i32::MAX),
        }))
    }

    async fn node_group_increase_size(
        &self,
        request: Request<NodeGroupIncreaseSizeRequest>,
    ) -> Result<Response<NodeGroupIncreaseSizeResponse>, Status> {
        let request = request.into_inner();
        let (config, group) = self.group(&request.id)?;
        if request.delta <= 0 {
            return Err(Status::invalid_argument(format!(
                "delta {} must be positive",
                request.delta
            )));
        }
        let lock = self.lock(&group.name);
        let _held = lock.lock().await;
        let claims = self.claims(&group.name).await?;
        let delta = usize::try_from(request.delta).unwrap_or(usize::MAX);
        let now_target = target(&claims);
        if now_target.saturating_add(delta) > group.max_size as usize {
            return Err(Status::out_of_range(format!(
                "target {now_target} + {delta} is over max size {} of group {}",
                group.max_size, group.name
            )));
        }
        // Free slots: no live claim. Slots whose last claim did not fail come first.
        let mut free = Vec::new();
        for slot in config.slots_of(&group.name) {
            if claims
                .iter()
                .any(|c| c.slot == slot.name && c.phase.is_live())
            {
                continue;
            }
            let seed = self
                .store
                .seed(&group.name, &slot.name)
                .await
                .map_err(store_status)?;
            let failing = seed
                .last
                .as_ref()
                .filter(|l| l.phase == Phase::Failed && !l.reached_ready);
            if failing.is_some_and(|l| l.attempt >= group.timings.max_attempts) {
                continue; // its failure streak is spent
            }
            free.push((failing.map_or(0, |l| l.attempt), slot.name.clone()));
        }
        free.sort();
        if free.len() < delta {
            return Err(Status::resource_exhausted(format!(
                "group {} has {} free usable slots, {delta} asked",
                group.name,
                free.len()
            )));
        }
        let catalog = Catalog::of(&config);
        let catalog_group = catalog
            .group(&group.name)
            .ok_or_else(|| Status::internal("catalog"))?;
        let now = self.store.now().await.map_err(store_status)?;
        for (_, slot) in free.into_iter().take(delta) {
            requests::claim_slot(&self.store, catalog_group, &slot, now)
                .await
                .map_err(request_status)?;
        }
        Ok(Response::new(NodeGroupIncreaseSizeResponse {}))
    }

    async fn node_group_delete_nodes(
        &self,
        request: Request<NodeGroupDeleteNodesRequest>,
    ) -> Result<Response<NodeGroupDeleteNodesResponse>, Status> {
        let request = request.into_inner();
        let (config, group) = self.group(&request.id)?;
        let lock = self.lock(&group.name);
        let _held = lock.lock().await;
        let claims = self.claims(&group.name).await?;
        // Every node must be one of the group's slots.
        let mut doomed = Vec::new();
        for node in &request.nodes {
            let slot = config
                .slot_by_provider_id(&node.provider_id)
                .or_else(|| {
                    BenchName::parse(&node.name)
                        .ok()
                        .and_then(|n| config.slots.get(&n))
                })
                .filter(|s| s.group == group.name)
                .ok_or_else(|| {
                    Status::invalid_argument(format!(
                        "node {} ({}) is not in node group {}",
                        node.name, node.provider_id, group.name
                    ))
                })?;
            let fake = node.annotations.contains_key(FAKE_NODE_REASON);
            doomed.push((slot.name.clone(), fake));
        }
        let real = doomed.iter().filter(|(_, fake)| !fake).count();
        let now_target = target(&claims);
        if real > 0 && now_target.saturating_sub(real) < group.min_size as usize {
            return Err(Status::failed_precondition(format!(
                "deleting {real} nodes would take group {} below its min size {}",
                group.name, group.min_size
            )));
        }
        let now = self.store.now().await.map_err(store_status)?;
        for (slot, _) in doomed {
            let Some(c) = claims.iter().find(|c| c.slot == slot && c.wants_machine()) else {
                continue; // nothing live to remove: already gone or being removed
            };
            requests::cancel(
                &self.store,
                c,
                Reason::NodeDeleted,
                now,
                group.timings.ttl_after_finished,
            )
            .await
            .map_err(request_status)?;
        }
        Ok(Response::new(NodeGroupDeleteNodesResponse {}))
    }

    async fn node_group_decrease_target_size(
        &self,
        request: Request<NodeGroupDecreaseTargetSizeRequest>,
    ) -> Result<Response<NodeGroupDecreaseTargetSizeResponse>, Status> {
        let request = request.into_inner();
        let (_, group) = self.group(&request.id)?;
        if request.delta >= 0 {
            return Err(Status::invalid_argument(format!(
                "delta {} must be negative",
                request.delta
            )));
        }
        let lock = self.lock(&group.name);
        let _held = lock.lock().await;
        let claims = self.claims(&group.name).await?;
        let wanted = usize::try_from(request.delta.unsigned_abs()).unwrap_or(usize::MAX);
        // Only capacity that does not exist yet: pending claims, newest first.
        let mut pending: Vec<&Claim> = claims
            .iter()
            .filter(|c| c.phase == Phase::Pending && c.wants_machine())
            .collect();
        if pending.len() < wanted {
            return Err(Status::failed_precondition(format!(
                "decreasing group {} by {wanted} would remove machines that exist: only {} requests are pending",
                group.name,
                pending.len()
            )));
        }
        pending.sort_by_key(|c| std::cmp::Reverse(c.requested_at));
        let now = self.store.now().await.map_err(store_status)?;
        for c in pending.into_iter().take(wanted) {
            requests::cancel(
                &self.store,
                c,
                Reason::CancelledByDecreaseTargetSize,
                now,
                group.timings.ttl_after_finished,
            )
            .await
            .map_err(request_status)?;
        }
        Ok(Response::new(NodeGroupDecreaseTargetSizeResponse {}))
    }

    async fn node_group_nodes(
        &self,
        request: Request<NodeGroupNodesRequest>,
    ) -> Result<Response<NodeGroupNodesResponse>, Status> {
        use instance_status::InstanceState;
        let (config, group) = self.group(&request.into_inner().id)?;
        let claims = self.claims(&group.name).await?;
        let mut instances = Vec::new();
        for slot in config.slots_of(&group.name) {
            let Some(c) = claims
                .iter()
                .filter(|c| c.slot == slot.name && c.phase.is_live())
                .max_by_key(|c| c.requested_at)
            else {
                continue;
            };
            let state = match (c.phase, c.marked_for_deletion.is_some()) {
                (_, true) => InstanceState::InstanceDeleting,
                (Phase::Ready, false) => InstanceState::InstanceRunning,
                (Phase::Pending | Phase::Booting, false) => InstanceState::InstanceCreating,
                (Phase::Failed | Phase::Completed, false) => continue,
            };
            instances.push(Instance {
                id: slot.provider_id.clone(),
                status: Some(InstanceStatus {
                    instance_state: state as i32,
                    error_info: None,
                }),
            });
        }
        Ok(Response::new(NodeGroupNodesResponse { instances }))
    }
}
