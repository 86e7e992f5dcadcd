//! The provider's service: cluster-autoscaler's calls answered from the claims (SPEC §6.3).
//!
//! Each call reads as validate (`validate`) → call (the executor, `groups`, over the store and
//! the command layer) → convert (`convert`) → the one mapping of its failure to a gRPC status
//! (`error`), counted by method and code (`calls`). Every rule is `domain::sizing`'s.
//!
//! Every answer is computed from the store's claims and the configuration, read fresh for each
//! call, so `Refresh` has nothing to do. Only the leader changes anything: a follower answers
//! reads and refuses changes with UNAVAILABLE, and the leader's writes carry its fencing token,
//! so a deposed leader's provider is refused by the store like its controller. When Redis cannot
//! be read, reads are answered from the last snapshot (marked stale in the `fleet-stale-ms`
//! response header) and changes are refused with UNAVAILABLE. cluster-autoscaler does not retry
//! a call: a refused scale-up is a failed one (the group backs off), so the server closes its
//! connections when this process stops leading, and the deployment routes cluster-autoscaler to
//! the leader (SPEC §6.4).

use std::sync::Arc;
use std::time::Instant;

use redis::aio::ConnectionLike;
use tokio::sync::watch;
use tonic::{Request, Response, Status};
use tracing::warn;

use crate::config::Config;
use crate::domain::name::GroupName;
use crate::domain::sizing;
use crate::store::claims::ClaimStore;
use crate::telemetry::{Method, Metrics};

use super::current::Current;
use super::error::ProviderError;
use super::groups::{Groups, Seen, Stale};
use super::leader::Leader;
use super::wire::cloud_provider_server::CloudProvider;
use super::wire::*;
use super::{calls, convert, pricing, template, validate};

pub use super::convert::{DEFAULT_GPU_LABEL, FAKE_NODE_REASON, OTHER_ERROR, OUT_OF_RESOURCES};

/// The response header that marks an answer read from the last snapshot: its age in ms.
pub const STALE_HEADER: &str = "fleet-stale-ms";

/// What a call answers: a response, or the failure the one mapping turns into a status.
type Answer<T> = Result<Response<T>, ProviderError>;

/// The provider over one claim store.
pub struct Provider<C> {
    current: Current,
    groups: Groups<C>,
    metrics: Option<Arc<Metrics>>,
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Provider<C> {
    pub fn new(config: watch::Receiver<Arc<Config>>, store: ClaimStore<C>) -> Self {
        Self {
            current: Current::new(config),
            groups: Groups::new(store),
            metrics: None,
        }
    }

    /// Changes only while `leadership` holds a token, and with it (SPEC §5.1).
    pub fn with_leadership(mut self, leadership: watch::Receiver<Option<String>>) -> Self {
        self.groups = self.groups.led_by(Leader::following(leadership));
        self
    }

    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Maps a failure to its status, and counts the call by method and code.
    fn observed<T>(
        &self,
        method: Method,
        started: Instant,
        answer: Answer<T>,
    ) -> Result<Response<T>, Status> {
        calls::observed(
            self.metrics.as_deref(),
            method,
            started,
            answer.map_err(Status::from),
        )
    }

    /// Says and counts an answer read from the last snapshot, and returns its age for the header.
    fn stale(&self, group: &GroupName, stale: Option<Stale>) -> Option<std::time::Duration> {
        let Stale { age, cause } = stale?;
        warn!(%group, age_ms = age.as_millis() as u64, error = fleet_redis::connect::chain(&cause), "Redis cannot be read; answering from the last snapshot");
        if let Some(m) = &self.metrics {
            m.provider_stale_answers.inc();
        }
        Some(age)
    }

    async fn target_size(
        &self,
        request: NodeGroupTargetSizeRequest,
    ) -> Answer<NodeGroupTargetSizeResponse> {
        let settings = self.current.get();
        let group = validate::group(&settings.config, &request.id)?;
        let (n, stale) = self.groups.target(&group.name).await?;
        let message = NodeGroupTargetSizeResponse {
            target_size: i32::try_from(n).unwrap_or(i32::MAX),
        };
        Ok(answer(message, self.stale(&group.name, stale)))
    }

    async fn increase(
        &self,
        request: NodeGroupIncreaseSizeRequest,
    ) -> Answer<NodeGroupIncreaseSizeResponse> {
        let settings = self.current.get();
        let group = validate::group(&settings.config, &request.id)?;
        let delta = validate::increase(request.delta)?;
        self.groups.increase(&settings, group, delta).await?;
        Ok(Response::new(NodeGroupIncreaseSizeResponse {}))
    }

    async fn delete(
        &self,
        request: NodeGroupDeleteNodesRequest,
    ) -> Answer<NodeGroupDeleteNodesResponse> {
        let settings = self.current.get();
        let group = validate::group(&settings.config, &request.id)?;
        let named = validate::deletion(&settings.config, group, &request.nodes)?;
        self.groups.delete(group, &named).await?;
        Ok(Response::new(NodeGroupDeleteNodesResponse {}))
    }

    async fn decrease(
        &self,
        request: NodeGroupDecreaseTargetSizeRequest,
    ) -> Answer<NodeGroupDecreaseTargetSizeResponse> {
        let settings = self.current.get();
        let group = validate::group(&settings.config, &request.id)?;
        let wanted = validate::decrease(request.delta)?;
        self.groups.decrease(group, wanted).await?;
        Ok(Response::new(NodeGroupDecreaseTargetSizeResponse {}))
    }

    /// The group's instances: each slot's speaking claim as its phase and mark show it
    /// (`sizing::instance`), a failed one with its error, in slot order.
    async fn nodes(&self, request: NodeGroupNodesRequest) -> Answer<NodeGroupNodesResponse> {
        let settings = self.current.get();
        let config = &settings.config;
        let group = validate::group(config, &request.id)?;
        let seen = self.groups.claims(&group.name).await?;
        let by_slot = sizing::speaking(seen.claims());
        let shown: Vec<_> = config
            .slots_of(&group.name)
            .filter_map(|slot| {
                let c = *by_slot.get(&slot.name)?;
                Some((slot, c, sizing::instance(c)?))
            })
            .collect();
        // OutOfResources when nothing is left to try: cluster-autoscaler may then prefer another
        // group. Without Redis, the class cannot be known: Other.
        let exhausted = match &seen {
            Seen::Fresh(f) if shown.iter().any(|(_, _, s)| *s == sizing::Instance::Failed) => {
                let room = self
                    .groups
                    .room(config, group, &f.claims, &f.ops, f.now)
                    .await?;
                room.free.is_empty()
            }
            Seen::Fresh(_) | Seen::Stale { .. } => false,
        };
        let max_attempts = group.timings.max_attempts;
        let instances = shown
            .into_iter()
            .map(|(slot, c, s)| convert::instance(&slot.provider_id, c, s, max_attempts, exhausted))
            .collect();
        let stale = match seen {
            Seen::Fresh(_) => None,
            Seen::Stale { stale, .. } => Some(stale),
        };
        Ok(answer(
            NodeGroupNodesResponse { instances },
            self.stale(&group.name, stale),
        ))
    }

    fn price(&self, request: PricingNodePriceRequest) -> Answer<PricingNodePriceResponse> {
        let settings = self.current.get();
        let node = request.node.unwrap_or_default();
        let group = validate::priced(&settings.config, &node)?;
        let power = group
            .template
            .as_ref()
            .and_then(|t| t.power)
            .ok_or_else(|| ProviderError::NoPowerDraw(group.name.clone()))?;
        let start = request
            .start_timestamp
            .as_ref()
            .or(request.start_time.as_ref());
        let end = request.end_timestamp.as_ref().or(request.end_time.as_ref());
        let price = pricing::energy_price(&power, start, end).map_err(ProviderError::Price)?;
        Ok(Response::new(PricingNodePriceResponse { price }))
    }

    /// A pod's price: its dominant share of the fleet's cheapest machine that can hold it
    /// (`pricing::pod_price`, which says why). The request is read first (a malformed one is
    /// InvalidArgument whatever the configuration); UNIMPLEMENTED when no group declares a power
    /// draw, as NodePrice is for such a group; NotFound when no priced machine can hold the pod.
    fn pod_price(&self, request: PricingPodPriceRequest) -> Answer<PricingPodPriceResponse> {
        let settings = self.current.get();
        let ask = pricing::PodAsk::try_from(&request).map_err(ProviderError::PodPrice)?;
        let offers = pricing::offers(&settings.config, ask.span);
        let priced = pricing::pod_price(&ask, &offers).map_err(ProviderError::PodPrice)?;
        Ok(Response::new(PricingPodPriceResponse {
            price: priced.price,
        }))
    }

    fn template(
        &self,
        request: NodeGroupTemplateNodeInfoRequest,
    ) -> Answer<NodeGroupTemplateNodeInfoResponse> {
        let settings = self.current.get();
        let group = validate::group(&settings.config, &request.id)?;
        // Never OK without node bytes: cluster-autoscaler dereferences the node it decodes.
        let bytes = template::node_bytes(group)
            .ok_or_else(|| ProviderError::NoTemplate(group.name.clone()))?;
        Ok(Response::new(NodeGroupTemplateNodeInfoResponse {
            // The same bytes in the legacy field: a Node message and bytes share a wire type.
            node_info: bytes.clone(),
            node_bytes: bytes,
            resource_slice_bytes: template::resource_slice_bytes(group),
        }))
    }

    fn options(
        &self,
        request: NodeGroupAutoscalingOptionsRequest,
    ) -> Answer<NodeGroupAutoscalingOptionsResponse> {
        let settings = self.current.get();
        let group = validate::group(&settings.config, &request.id)?;
        let overrides = group
            .autoscaling_options
            .as_ref()
            .ok_or_else(|| ProviderError::NoOptions(group.name.clone()))?;
        let provision = sizing::provision_time(group.max_node_provision_time, &group.timings);
        Ok(Response::new(NodeGroupAutoscalingOptionsResponse {
            node_group_autoscaling_options: Some(convert::options(
                request.defaults.as_ref(),
                overrides,
                Some(provision),
            )),
        }))
    }
}

/// A response, marked stale with the snapshot's age when it was read from one.
fn answer<T>(message: T, stale: Option<std::time::Duration>) -> Response<T> {
    let mut response = Response::new(message);
    if let Some(age) = stale
        && let Ok(value) = age.as_millis().to_string().parse()
    {
        response.metadata_mut().insert(STALE_HEADER, value);
    }
    response
}

#[tonic::async_trait]
impl<C: ConnectionLike + Clone + Send + Sync + 'static> CloudProvider for Provider<C> {
    async fn node_groups(
        &self,
        _: Request<NodeGroupsRequest>,
    ) -> Result<Response<NodeGroupsResponse>, Status> {
        let started = Instant::now();
        let settings = self.current.get();
        let max = self.groups.max_sizes(&settings.config).await;
        let node_groups = settings
            .config
            .groups
            .values()
            .map(|g| convert::node_group(g, max.get(&g.name).copied().unwrap_or(g.max_size)))
            .collect();
        let answer = Response::new(NodeGroupsResponse { node_groups });
        self.observed(Method::NodeGroups, started, Ok(answer))
    }

    async fn node_group_for_node(
        &self,
        request: Request<NodeGroupForNodeRequest>,
    ) -> Result<Response<NodeGroupForNodeResponse>, Status> {
        let started = Instant::now();
        let node = request.into_inner().node.unwrap_or_default();
        let settings = self.current.get();
        let config = &settings.config;
        // A node fleet does not manage is an empty group, never an error.
        let group = config
            .slot_for_node(&node.provider_id, &node.name)
            .and_then(|s| config.group(&s.group))
            .map(|g| {
                let max = self.groups.last_max_size(&g.name).unwrap_or(g.max_size);
                convert::node_group(g, max)
            })
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
        let answer = self.price(request.into_inner());
        self.observed(Method::PricingNodePrice, started, answer)
    }

    async fn pricing_pod_price(
        &self,
        request: Request<PricingPodPriceRequest>,
    ) -> Result<Response<PricingPodPriceResponse>, Status> {
        let started = Instant::now();
        let answer = self.pod_price(request.into_inner());
        self.observed(Method::PricingPodPrice, started, answer)
    }

    async fn gpu_label(
        &self,
        _: Request<GpuLabelRequest>,
    ) -> Result<Response<GpuLabelResponse>, Status> {
        let started = Instant::now();
        let label = convert::gpu_label(&self.current.get().config);
        let answer = Response::new(GpuLabelResponse { label });
        self.observed(Method::GPULabel, started, Ok(answer))
    }

    async fn get_available_gpu_types(
        &self,
        _: Request<GetAvailableGpuTypesRequest>,
    ) -> Result<Response<GetAvailableGpuTypesResponse>, Status> {
        let started = Instant::now();
        let gpu_types = convert::gpu_types(&self.current.get().config);
        let answer = Response::new(GetAvailableGpuTypesResponse { gpu_types });
        self.observed(Method::GetAvailableGPUTypes, started, Ok(answer))
    }

    async fn cleanup(
        &self,
        _: Request<CleanupRequest>,
    ) -> Result<Response<CleanupResponse>, Status> {
        let started = Instant::now();
        self.observed(
            Method::Cleanup,
            started,
            Ok(Response::new(CleanupResponse {})),
        )
    }

    async fn refresh(
        &self,
        _: Request<RefreshRequest>,
    ) -> Result<Response<RefreshResponse>, Status> {
        // Every answer is read fresh from the store: nothing to refresh, and nothing slow here
        // (an error would abort cluster-autoscaler's whole loop).
        let started = Instant::now();
        self.observed(
            Method::Refresh,
            started,
            Ok(Response::new(RefreshResponse {})),
        )
    }

    async fn node_group_target_size(
        &self,
        request: Request<NodeGroupTargetSizeRequest>,
    ) -> Result<Response<NodeGroupTargetSizeResponse>, Status> {
        let started = Instant::now();
        let answer = self.target_size(request.into_inner()).await;
        self.observed(Method::NodeGroupTargetSize, started, answer)
    }

    async fn node_group_increase_size(
        &self,
        request: Request<NodeGroupIncreaseSizeRequest>,
    ) -> Result<Response<NodeGroupIncreaseSizeResponse>, Status> {
        let started = Instant::now();
        let answer = self.increase(request.into_inner()).await;
        self.observed(Method::NodeGroupIncreaseSize, started, answer)
    }

    async fn node_group_delete_nodes(
        &self,
        request: Request<NodeGroupDeleteNodesRequest>,
    ) -> Result<Response<NodeGroupDeleteNodesResponse>, Status> {
        let started = Instant::now();
        let answer = self.delete(request.into_inner()).await;
        self.observed(Method::NodeGroupDeleteNodes, started, answer)
    }

    async fn node_group_decrease_target_size(
        &self,
        request: Request<NodeGroupDecreaseTargetSizeRequest>,
    ) -> Result<Response<NodeGroupDecreaseTargetSizeResponse>, Status> {
        let started = Instant::now();
        let answer = self.decrease(request.into_inner()).await;
        self.observed(Method::NodeGroupDecreaseTargetSize, started, answer)
    }

    async fn node_group_nodes(
        &self,
        request: Request<NodeGroupNodesRequest>,
    ) -> Result<Response<NodeGroupNodesResponse>, Status> {
        let started = Instant::now();
        let answer = self.nodes(request.into_inner()).await;
        self.observed(Method::NodeGroupNodes, started, answer)
    }

    async fn node_group_template_node_info(
        &self,
        request: Request<NodeGroupTemplateNodeInfoRequest>,
    ) -> Result<Response<NodeGroupTemplateNodeInfoResponse>, Status> {
        let started = Instant::now();
        let answer = self.template(request.into_inner());
        self.observed(Method::NodeGroupTemplateNodeInfo, started, answer)
    }

    async fn node_group_get_options(
        &self,
        request: Request<NodeGroupAutoscalingOptionsRequest>,
    ) -> Result<Response<NodeGroupAutoscalingOptionsResponse>, Status> {
        let started = Instant::now();
        let answer = self.options(request.into_inner());
        self.observed(Method::NodeGroupGetOptions, started, answer)
    }
}
