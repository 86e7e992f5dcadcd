//! The cluster-autoscaler provider's service over a real socket with the generated client
//! (SPEC §6.3), against a real redis-server: sizes, bounds, failed instances, the template,
//! options and pricing, leadership, stale reads, and 200 concurrent changes.

use crate::support;

use std::path::Path;
use std::sync::Arc;

use fleet::config;
use fleet::domain::claim::{Claim, Move, Phase, Reason};
use fleet::domain::name::{BenchName, GroupName};
use fleet::provider::service::{
    FAKE_NODE_REASON, OTHER_ERROR, OUT_OF_RESOURCES, Provider, STALE_HEADER,
};
use fleet::provider::wire::cloud_provider_client::CloudProviderClient;
use fleet::provider::wire::instance_status::InstanceState;
use fleet::provider::wire::*;
use fleet::requests::{self, StreakReset};
use fleet::store::catalog::Catalog;
use fleet::store::claims::ClaimStore;
use fleet::store::keys::Keys;
use fleet_testing::fixture::{Group, Op, Power, Slot, Template};
use fleet_testing::{Fixture, RedisServer};
use prost::Message;
use redis::aio::MultiplexedConnection;
use support::*;
use tonic::Code;
use tonic::transport::Channel;

/// Two groups, pool-a plain and pool-b of GPU machines with a template, a price and overrides.
fn yaml() -> String {
    let noop = || Op::command(["true"]);
    Fixture::new()
        .group(
            Group::new("pool-a")
                .min(1)
                .max(2)
                .startup(noop())
                .shutdown(noop()),
        )
        .group(
            Group::new("pool-b")
                .min(0)
                .max(2)
                .provision_time("40m")
                .startup(noop())
                .shutdown(noop())
                .timing("max_attempts", 2)
                .timing("failed_slot_cooldown", "30m")
                .template(
                    Template::new()
                        .label("fleet.dev/pool", "b")
                        .taint("fleet.dev/gpu=true:NoSchedule")
                        .capacity("cpu", "64")
                        .capacity("memory", "512Gi")
                        .capacity("nvidia.com/gpu", "8")
                        .gpu("fleet.dev/gpu-type", ["nvidia-a100"])
                        .power(Power::new(3500.0, 0.25)),
                )
                .autoscaling_option("scale_down_unneeded_time", "3m"),
        )
        .slots("pool-a", ["bench-01", "bench-02"])
        .slot(Slot::new("bench-03", "pool-a").provider_id("ipmi://10.0.0.3"))
        .slot(Slot::new("gpu-01", "pool-b").kubernetes_node("rack1.gpu-01"))
        .slots("pool-b", ["gpu-02"])
        .yaml()
}

async fn provider(server: &RedisServer) -> CloudProviderClient<Channel> {
    let store = ClaimStore::new(conn(server).await, Keys::default());
    serve(Provider::new(config_rx(), store)).await
}

fn config_rx() -> tokio::sync::watch::Receiver<Arc<config::Config>> {
    let cfg = Arc::new(config::parse(&yaml(), Path::new("t.yaml")).unwrap());
    let (tx, rx) = tokio::sync::watch::channel(cfg);
    std::mem::drop(tx);
    rx
}

async fn serve<C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static>(
    service: Provider<C>,
) -> CloudProviderClient<Channel> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    serve_provider(listener, service);
    CloudProviderClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
}

/// A node as cluster-autoscaler sends it; `fake` makes it one CA made up for an instance that
/// never registered.
fn node(provider_id: &str, name: &str, fake: bool) -> ExternalGrpcNode {
    let mut n = ExternalGrpcNode {
        provider_id: provider_id.into(),
        name: name.into(),
        ..Default::default()
    };
    if fake {
        n.annotations
            .insert(FAKE_NODE_REASON.into(), "unregistered".into());
    }
    n
}

/// NodeGroupForNode's group for `node`.
async fn group_for(
    c: &mut CloudProviderClient<Channel>,
    node: Option<ExternalGrpcNode>,
) -> NodeGroup {
    c.node_group_for_node(NodeGroupForNodeRequest { node })
        .await
        .unwrap()
        .into_inner()
        .node_group
        .unwrap()
}

async fn target(c: &mut CloudProviderClient<Channel>) -> i32 {
    c.node_group_target_size(NodeGroupTargetSizeRequest {
        id: "pool-a".into(),
    })
    .await
    .unwrap()
    .into_inner()
    .target_size
}

#[tokio::test]
async fn the_groups_and_node_lookups_answer_from_the_configuration() {
    let server = server();
    let mut c = provider(&server).await;
    c.refresh(RefreshRequest {}).await.unwrap();
    let groups = c
        .node_groups(NodeGroupsRequest {})
        .await
        .unwrap()
        .into_inner()
        .node_groups;
    assert_eq!(
        groups
            .iter()
            .map(|g| (g.id.as_str(), g.min_size, g.max_size))
            .collect::<Vec<_>>(),
        [("pool-a", 1, 2), ("pool-b", 0, 2)]
    );
    // A slot's Kubernetes node name is its name when the provider ID is empty.
    let by_node_name = group_for(&mut c, Some(node("", "rack1.gpu-01", false))).await;
    assert_eq!(by_node_name.id, "pool-b");
    // The provider ID wins: a known name under a foreign provider ID is not ours.
    let foreign_id = group_for(&mut c, Some(node("aws:///i-1", "bench-01", false))).await;
    assert_eq!(foreign_id.id, "");
    assert_eq!(group_for(&mut c, None).await.id, "");
    let by_id = group_for(&mut c, Some(node("ipmi://10.0.0.3", "whatever", false))).await;
    assert_eq!(by_id.id, "pool-a");
    let by_name = group_for(&mut c, Some(node("", "bench-01", false))).await;
    assert_eq!(by_name.max_size, 2);
    let foreign = group_for(&mut c, Some(node("aws:///x", "control-plane", false))).await;
    assert_eq!(
        foreign.id, "",
        "a node fleet does not manage is an empty group"
    );
}

#[tokio::test]
async fn increase_decrease_and_delete_keep_the_bounds_and_reflect_at_once() {
    let server = server();
    let mut c = provider(&server).await;
    assert_eq!(target(&mut c).await, 0);
    let over = c
        .node_group_increase_size(NodeGroupIncreaseSizeRequest {
            delta: 3,
            id: "pool-a".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(over.code(), Code::OutOfRange);
    c.node_group_increase_size(NodeGroupIncreaseSizeRequest {
        delta: 2,
        id: "pool-a".into(),
    })
    .await
    .unwrap();
    assert_eq!(
        target(&mut c).await,
        2,
        "the target reflects the call as soon as it returns"
    );
    let nodes = c
        .node_group_nodes(NodeGroupNodesRequest {
            id: "pool-a".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .instances;
    assert_eq!(nodes.len(), 2);
    assert!(nodes.iter().all(
        |i| i.status.as_ref().unwrap().instance_state == InstanceState::InstanceCreating as i32
    ));
    // Decrease cancels pending claims only.
    c.node_group_decrease_target_size(NodeGroupDecreaseTargetSizeRequest {
        delta: -1,
        id: "pool-a".into(),
    })
    .await
    .unwrap();
    assert_eq!(target(&mut c).await, 1);
    let too_far = c
        .node_group_decrease_target_size(NodeGroupDecreaseTargetSizeRequest {
            delta: -2,
            id: "pool-a".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(too_far.code(), Code::FailedPrecondition);
    // Deleting the last node would break the minimum; a fake node may always go.
    let id = c
        .node_group_nodes(NodeGroupNodesRequest {
            id: "pool-a".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .instances[0]
        .id
        .clone();
    let at_min = c
        .node_group_delete_nodes(NodeGroupDeleteNodesRequest {
            nodes: vec![node(&id, "", false)],
            id: "pool-a".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(at_min.code(), Code::FailedPrecondition);
    c.node_group_delete_nodes(NodeGroupDeleteNodesRequest {
        nodes: vec![node(&id, &id, true)],
        id: "pool-a".into(),
    })
    .await
    .unwrap();
    assert_eq!(target(&mut c).await, 0);
}

#[tokio::test]
async fn malformed_requests_are_refused_and_change_nothing() {
    let server = server();
    let mut c = provider(&server).await;
    let cases = [
        c.node_group_target_size(NodeGroupTargetSizeRequest { id: "".into() })
            .await
            .unwrap_err()
            .code(),
        c.node_group_target_size(NodeGroupTargetSizeRequest { id: "nope".into() })
            .await
            .unwrap_err()
            .code(),
        c.node_group_target_size(NodeGroupTargetSizeRequest {
            id: "Bad Id".into(),
        })
        .await
        .unwrap_err()
        .code(),
        c.node_group_increase_size(NodeGroupIncreaseSizeRequest {
            delta: 0,
            id: "pool-a".into(),
        })
        .await
        .unwrap_err()
        .code(),
        c.node_group_increase_size(NodeGroupIncreaseSizeRequest {
            delta: -5,
            id: "pool-a".into(),
        })
        .await
        .unwrap_err()
        .code(),
        c.node_group_decrease_target_size(NodeGroupDecreaseTargetSizeRequest {
            delta: 1,
            id: "pool-a".into(),
        })
        .await
        .unwrap_err()
        .code(),
        c.node_group_delete_nodes(NodeGroupDeleteNodesRequest {
            nodes: vec![node("ipmi://elsewhere", "x", false)],
            id: "pool-a".into(),
        })
        .await
        .unwrap_err()
        .code(),
        c.node_group_delete_nodes(NodeGroupDeleteNodesRequest {
            nodes: vec![
                node("fleet://bench-01", "", false),
                node("fleet://gpu-01", "", false),
            ],
            id: "pool-a".into(),
        })
        .await
        .unwrap_err()
        .code(),
        c.node_group_delete_nodes(NodeGroupDeleteNodesRequest {
            nodes: vec![],
            id: "pool-a".into(),
        })
        .await
        .unwrap_err()
        .code(),
        c.node_group_increase_size(NodeGroupIncreaseSizeRequest {
            delta: i32::MAX,
            id: "pool-a".into(),
        })
        .await
        .unwrap_err()
        .code(),
    ];
    assert_eq!(
        cases,
        [
            Code::InvalidArgument,
            Code::NotFound,
            Code::InvalidArgument,
            Code::InvalidArgument,
            Code::InvalidArgument,
            Code::InvalidArgument,
            Code::NotFound,
            Code::InvalidArgument,
            Code::InvalidArgument,
            Code::OutOfRange
        ]
    );
    assert_eq!(target(&mut c).await, 0);
    // A PodPrice without a pod is malformed (tests/redis/pricing.rs prices pods).
    let no_pod = c
        .pricing_pod_price(PricingPodPriceRequest::default())
        .await
        .unwrap_err();
    assert_eq!(no_pod.code(), Code::InvalidArgument);
}

// cluster-autoscaler calls concurrently: many racing IncreaseSize calls never pass max.
#[tokio::test]
async fn concurrent_increases_never_pass_max_or_share_a_slot() {
    let server = server();
    let c = provider(&server).await;
    let mut tasks = Vec::new();
    for _ in 0..40 {
        let mut c = c.clone();
        tasks.push(tokio::spawn(async move {
            c.node_group_increase_size(NodeGroupIncreaseSizeRequest {
                delta: 1,
                id: "pool-a".into(),
            })
            .await
            .is_ok()
        }));
    }
    let mut ok = 0;
    for t in tasks {
        if bounded("increase", t).await.unwrap() {
            ok += 1;
        }
    }
    assert_eq!(ok, 2);
    let mut c = c;
    assert_eq!(target(&mut c).await, 2);
}

fn group(name: &str) -> GroupName {
    GroupName::parse(name).unwrap()
}

async fn nodes(c: &mut CloudProviderClient<Channel>, id: &str) -> Vec<Instance> {
    c.node_group_nodes(NodeGroupNodesRequest { id: id.into() })
        .await
        .unwrap()
        .into_inner()
        .instances
}

async fn increase(c: &mut CloudProviderClient<Channel>, id: &str, delta: i32) -> Result<(), Code> {
    c.node_group_increase_size(NodeGroupIncreaseSizeRequest {
        delta,
        id: id.into(),
    })
    .await
    .map(|_| ())
    .map_err(|s| s.code())
}

/// Claims `slot` of pool-b as a request would and fails it at its deadline, as the controller
/// would: the slot's digest then counts one more failure.
async fn claim_and_fail(store: &ClaimStore<MultiplexedConnection>, slot: &str) -> Claim {
    let config = config::parse(&yaml(), Path::new("t.yaml")).unwrap();
    let catalog = Catalog::of(&config);
    let g = catalog.group(&group("pool-b")).unwrap();
    let now = store.now().await.unwrap();
    let c = requests::claim_slot(store, g, &name(slot), now)
        .await
        .unwrap();
    let failed = c
        .apply(Move::because(Phase::Failed, Reason::DeadlineExceeded), now)
        .unwrap();
    assert!(store.write(&c, &failed, None).await.unwrap());
    failed
}

fn state_and_error(i: &Instance) -> (i32, Option<(String, i32)>) {
    let s = i.status.clone().unwrap();
    (
        s.instance_state,
        s.error_info.map(|e| (e.error_code, e.instance_error_class)),
    )
}

#[tokio::test]
async fn failed_claims_are_creating_with_an_error_until_deleted_and_spent_slots_wait_for_a_reset() {
    let server = server();
    let mut c = provider(&server).await;
    let store = ClaimStore::new(conn(&server).await, Keys::default());
    let creating = InstanceState::InstanceCreating as i32;

    // gpu-01 fails once: reported as a creation error of class Other (gpu-02 is still free).
    let first = claim_and_fail(&store, "gpu-01").await;
    assert_eq!(first.attempt, 1);
    let listed = nodes(&mut c, "pool-b").await;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, "fleet://gpu-01");
    assert_eq!(
        state_and_error(&listed[0]),
        (creating, Some(("DeadlineExceeded".into(), OTHER_ERROR)))
    );
    let message = listed[0]
        .status
        .clone()
        .unwrap()
        .error_info
        .unwrap()
        .error_message;
    assert!(message.contains("attempt 1 of 2"), "{message}");
    assert_eq!(
        target_of(&mut c, "pool-b").await,
        0,
        "a failed claim is not in the target"
    );

    // IncreaseSize prefers the slot that has not just failed.
    increase(&mut c, "pool-b", 1).await.unwrap();
    let listed = nodes(&mut c, "pool-b").await;
    let gpu02 = listed.iter().find(|i| i.id == "fleet://gpu-02").unwrap();
    assert_eq!(state_and_error(gpu02), (creating, None));

    // cluster-autoscaler deletes the failed instance as a fake create-error node: it is gone,
    // and the target is unchanged.
    c.node_group_delete_nodes(NodeGroupDeleteNodesRequest {
        nodes: vec![create_error("fleet://gpu-01")],
        id: "pool-b".into(),
    })
    .await
    .unwrap();
    let ids: Vec<String> = nodes(&mut c, "pool-b")
        .await
        .into_iter()
        .map(|i| i.id)
        .collect();
    assert_eq!(ids, ["fleet://gpu-02"]);
    assert_eq!(target_of(&mut c, "pool-b").await, 1);

    // gpu-01 fails its second attempt: its streak reached the bound (2), and with gpu-02 taken
    // nothing is left to try, so the error is OutOfResources.
    let second = claim_and_fail(&store, "gpu-01").await;
    assert_eq!(second.attempt, 2, "the streak survives the dismissal");
    let listed = nodes(&mut c, "pool-b").await;
    let gpu01 = listed.iter().find(|i| i.id == "fleet://gpu-01").unwrap();
    assert_eq!(
        state_and_error(gpu01),
        (
            creating,
            Some(("DeadlineExceeded".into(), OUT_OF_RESOURCES))
        )
    );
    // A spent slot is not free: under max, but nothing to offer.
    assert_eq!(
        increase(&mut c, "pool-b", 1).await,
        Err(Code::ResourceExhausted)
    );
    assert_eq!(target_of(&mut c, "pool-b").await, 1);

    // The operator's reset: the slot is offered again, and its next claim is attempt 1.
    let catalog = Catalog::of(&config::parse(&yaml(), Path::new("t.yaml")).unwrap());
    let now = store.now().await.unwrap();
    assert_eq!(
        requests::reset_failure_streak(
            &store,
            catalog.group(&group("pool-b")).unwrap(),
            &name("gpu-01"),
            now
        )
        .await
        .unwrap(),
        StreakReset::Reset {
            was: 2,
            spent: true
        }
    );
    assert_eq!(
        requests::reset_failure_streak(
            &store,
            catalog.group(&group("pool-b")).unwrap(),
            &name("gpu-01"),
            now
        )
        .await
        .unwrap(),
        StreakReset::NoStreak,
        "a reset streak has nothing left to reset"
    );
    increase(&mut c, "pool-b", 1).await.unwrap();
    let claims = store
        .read_groups(&[group("pool-b")])
        .await
        .unwrap()
        .remove(0)
        .claims;
    let live = claims
        .iter()
        .find(|c| c.slot == name("gpu-01") && c.phase.is_live())
        .unwrap();
    assert_eq!(live.attempt, 1);
    assert_eq!(target_of(&mut c, "pool-b").await, 2);
    // A create error read before that claim existed names the failed attempt, not the new
    // claim: deleting it again changes nothing.
    c.node_group_delete_nodes(NodeGroupDeleteNodesRequest {
        nodes: vec![create_error("fleet://gpu-01")],
        id: "pool-b".into(),
    })
    .await
    .unwrap();
    assert_eq!(target_of(&mut c, "pool-b").await, 2);
}

fn create_error(provider_id: &str) -> ExternalGrpcNode {
    let mut n = node(provider_id, provider_id, false);
    n.annotations
        .insert(FAKE_NODE_REASON.into(), "create-error".into());
    n
}

async fn target_of(c: &mut CloudProviderClient<Channel>, id: &str) -> i32 {
    c.node_group_target_size(NodeGroupTargetSizeRequest { id: id.into() })
        .await
        .unwrap()
        .into_inner()
        .target_size
}

#[tokio::test]
async fn the_template_options_price_and_gpus_answer_from_the_configuration() {
    let server = server();
    let mut c = provider(&server).await;

    // No template: UNIMPLEMENTED, never OK without bytes.
    let none = c
        .node_group_template_node_info(NodeGroupTemplateNodeInfoRequest {
            id: "pool-a".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(none.code(), Code::Unimplemented);
    let t = c
        .node_group_template_node_info(NodeGroupTemplateNodeInfoRequest {
            id: "pool-b".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!t.node_bytes.is_empty());
    assert_eq!(
        t.node_info, t.node_bytes,
        "the same bytes in the legacy field"
    );
    let n = fleet::provider::k8s::Node::decode(t.node_bytes.as_slice()).unwrap();
    let labels = n.metadata.unwrap().labels;
    assert_eq!(labels["fleet.dev/pool"], "b");
    assert_eq!(labels["fleet.dev/gpu-type"], "nvidia-a100");
    assert_eq!(labels["kubernetes.io/os"], "linux");
    let status = n.status.unwrap();
    assert_eq!(
        status.allocatable["nvidia.com/gpu"].string.as_deref(),
        Some("8")
    );

    // Options: not opted in is UNIMPLEMENTED; opted in echoes the defaults in both forms.
    let off = c
        .node_group_get_options(NodeGroupAutoscalingOptionsRequest {
            id: "pool-a".into(),
            defaults: None,
        })
        .await
        .unwrap_err();
    assert_eq!(off.code(), Code::Unimplemented);
    let legacy = |secs: i64| {
        Some(LegacyDuration {
            duration: secs * 1_000_000_000,
        })
    };
    let o = c
        .node_group_get_options(NodeGroupAutoscalingOptionsRequest {
            id: "pool-b".into(),
            defaults: Some(NodeGroupAutoscalingOptions {
                scale_down_utilization_threshold: 0.5,
                scale_down_unneeded_time: legacy(600),
                scale_down_unready_time: legacy(1200),
                max_node_provision_time: legacy(900),
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .into_inner()
        .node_group_autoscaling_options
        .unwrap();
    assert_eq!(o.scale_down_utilization_threshold, 0.5);
    assert_eq!(
        o.scale_down_unneeded_time.unwrap().duration,
        180_000_000_000,
        "the group's 3m"
    );
    assert_eq!(o.scale_down_unneeded_duration.unwrap().seconds, 180);
    assert_eq!(
        o.scale_down_unready_time.unwrap().duration,
        1_200_000_000_000,
        "echoed"
    );
    assert_eq!(o.scale_down_unready_duration.unwrap().seconds, 1200);
    assert_eq!(
        o.max_node_provision_time.unwrap().duration,
        2_460_000_000_000,
        "the group's 40m and a minute"
    );
    assert_eq!(o.max_node_provision_duration.unwrap().seconds, 2460);

    // Pricing: the energy a pool-b machine draws; no power draw is UNIMPLEMENTED.
    let at = |seconds| Some(prost_types::Timestamp { seconds, nanos: 0 });
    let price = c
        .pricing_node_price(PricingNodePriceRequest {
            node: Some(node("fleet://gpu-02", "gpu-02", false)),
            start_timestamp: at(1_000),
            end_timestamp: at(1_000 + 7_200),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .price;
    assert!(
        (price - 1.75).abs() < 1e-9,
        "3.5 kW for 2 h at 0.25: {price}"
    );
    let legacy_times = c
        .pricing_node_price(PricingNodePriceRequest {
            node: Some(node("fleet://gpu-02", "gpu-02", false)),
            start_time: at(0),
            end_time: at(3_600),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .price;
    assert!((legacy_times - 0.875).abs() < 1e-9, "{legacy_times}");
    // A node cluster-autoscaler made from the template: renamed, no provider ID, the labels.
    let mut template_node = node("", "template-node-for-pool-b-5577", false);
    template_node
        .labels
        .insert("fleet.dev/group".into(), "pool-b".into());
    let from_template = c
        .pricing_node_price(PricingNodePriceRequest {
            node: Some(template_node),
            start_timestamp: at(0),
            end_timestamp: at(3_600),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .price;
    assert!((from_template - 0.875).abs() < 1e-9, "{from_template}");
    let codes = [
        c.pricing_node_price(PricingNodePriceRequest {
            node: Some(node("fleet://bench-01", "", false)),
            start_timestamp: at(0),
            end_timestamp: at(1),
            ..Default::default()
        })
        .await
        .unwrap_err()
        .code(),
        c.pricing_node_price(PricingNodePriceRequest {
            node: Some(node("aws:///x", "", false)),
            ..Default::default()
        })
        .await
        .unwrap_err()
        .code(),
        c.pricing_node_price(PricingNodePriceRequest {
            node: Some(node("fleet://gpu-01", "", false)),
            start_timestamp: at(10),
            end_timestamp: at(5),
            ..Default::default()
        })
        .await
        .unwrap_err()
        .code(),
    ];
    assert_eq!(
        codes,
        [Code::Unimplemented, Code::NotFound, Code::InvalidArgument]
    );

    let label = c
        .gpu_label(GpuLabelRequest {})
        .await
        .unwrap()
        .into_inner()
        .label;
    assert_eq!(label, "fleet.dev/gpu-type");
    let types: Vec<String> = c
        .get_available_gpu_types(GetAvailableGpuTypesRequest {})
        .await
        .unwrap()
        .into_inner()
        .gpu_types
        .into_keys()
        .collect();
    assert_eq!(types, ["nvidia-a100"]);
    c.cleanup(CleanupRequest {}).await.unwrap();
}

#[tokio::test]
async fn a_follower_answers_reads_and_refuses_changes_and_a_deposed_leader_is_fenced() {
    let server = server();
    let store = ClaimStore::new(conn(&server).await, Keys::default());
    let (lead, leadership) = tokio::sync::watch::channel(None::<String>);
    let mut c = serve(Provider::new(config_rx(), store.clone()).with_leadership(leadership)).await;

    // A follower: reads answer, changes are UNAVAILABLE so cluster-autoscaler retries.
    assert_eq!(target(&mut c).await, 0);
    assert_eq!(nodes(&mut c, "pool-a").await.len(), 0);
    let refused = c
        .node_group_increase_size(NodeGroupIncreaseSizeRequest {
            delta: 1,
            id: "pool-a".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::Unavailable);
    assert!(
        refused.message().contains("not the leader"),
        "{}",
        refused.message()
    );

    // The leader (token 1, its fence raised) changes the group.
    assert!(store.raise_fence(&group("pool-a"), "1").await.unwrap());
    lead.send_replace(Some("1".into()));
    increase(&mut c, "pool-a", 1).await.unwrap();
    assert_eq!(target(&mut c).await, 1);

    // A newer leader raised the fence: this process still believes it leads, and is refused.
    assert!(store.raise_fence(&group("pool-a"), "2").await.unwrap());
    assert_eq!(increase(&mut c, "pool-a", 1).await, Err(Code::Unavailable));
    assert_eq!(
        c.node_group_delete_nodes(NodeGroupDeleteNodesRequest {
            nodes: vec![node("fleet://bench-01", "", true)],
            id: "pool-a".into(),
        })
        .await
        .unwrap_err()
        .code(),
        Code::Unavailable
    );
    assert_eq!(target(&mut c).await, 1, "nothing changed");
}

#[tokio::test]
async fn reads_come_from_the_last_snapshot_marked_stale_while_redis_is_down() {
    let mut server = server();
    let manager = server.endpoint().open_lasting().await.unwrap();
    let mut c = serve(Provider::new(
        config_rx(),
        ClaimStore::new(manager, Keys::default()),
    ))
    .await;
    increase(&mut c, "pool-a", 2).await.unwrap();
    let fresh = c
        .node_group_target_size(NodeGroupTargetSizeRequest {
            id: "pool-a".into(),
        })
        .await
        .unwrap();
    assert!(fresh.metadata().get(STALE_HEADER).is_none());

    server.kill();
    let stale = c
        .node_group_target_size(NodeGroupTargetSizeRequest {
            id: "pool-a".into(),
        })
        .await
        .unwrap();
    assert!(stale.metadata().get(STALE_HEADER).is_some(), "marked stale");
    assert_eq!(stale.into_inner().target_size, 2);
    let stale_nodes = c
        .node_group_nodes(NodeGroupNodesRequest {
            id: "pool-a".into(),
        })
        .await
        .unwrap();
    assert!(stale_nodes.metadata().get(STALE_HEADER).is_some());
    assert_eq!(stale_nodes.into_inner().instances.len(), 2);
    // Changes need the store: UNAVAILABLE, and cluster-autoscaler retries.
    assert_eq!(increase(&mut c, "pool-b", 1).await, Err(Code::Unavailable));
    // A group never read has no snapshot: UNAVAILABLE rather than a guess.
    let never = c
        .node_group_target_size(NodeGroupTargetSizeRequest {
            id: "pool-b".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(never.code(), Code::Unavailable);

    // Redis returns (empty: no AOF here): the provider recovers by itself and reads fresh.
    server.restart().unwrap();
    let recovered = bounded("fresh reads after Redis returns", async {
        loop {
            if let Ok(r) = c
                .node_group_target_size(NodeGroupTargetSizeRequest {
                    id: "pool-a".into(),
                })
                .await
                && r.metadata().get(STALE_HEADER).is_none()
            {
                return r.into_inner().target_size;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert_eq!(recovered, 0);
    increase(&mut c, "pool-a", 1).await.unwrap();
}

/// One group of eight slots, of which at least two and at most six are wanted.
fn crowd() -> String {
    Fixture::new()
        .group(
            Group::new("crowd")
                .min(2)
                .max(6)
                .startup(Op::command(["true"]))
                .shutdown(Op::command(["true"])),
        )
        .slots("crowd", (1..=8).map(|i| format!("s-{i:02}")))
        .yaml()
}

// cluster-autoscaler calls concurrently: 200 racing IncreaseSize, DeleteNodes and
// DecreaseTargetSize calls on one group, while a stand-in for the controller boots the pending
// claims (its writes race the provider's), never break min, max or one live claim per slot,
// and no call fails for the race.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_concurrent_changes_keep_min_max_and_one_live_claim_per_slot() {
    use rand::{Rng, SeedableRng};
    let server = server();
    let cfg = Arc::new(config::parse(&crowd(), Path::new("t.yaml")).unwrap());
    let (_tx, rx) = tokio::sync::watch::channel(cfg);
    let store = ClaimStore::new(conn(&server).await, Keys::default());
    let mut c = serve(Provider::new(rx, store.clone())).await;
    increase(&mut c, "crowd", 2).await.unwrap();

    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let mut c = c.clone();
        let done = done.clone();
        tokio::spawn(async move {
            let mut seen = Vec::new();
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                seen.push(target_of(&mut c, "crowd").await);
            }
            seen
        })
    };
    // The controller's writes, unserialized with the provider's: pending -> booting -> ready.
    let mover = {
        let store = store.clone();
        let done = done.clone();
        tokio::spawn(async move {
            let mut moves = 0u32;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let claims = store
                    .read_groups(&[group("crowd")])
                    .await
                    .unwrap()
                    .remove(0)
                    .claims;
                let now = store.now().await.unwrap();
                let next = claims.iter().find_map(|c| match c.phase {
                    Phase::Pending => Some((c, Phase::Booting)),
                    Phase::Booting if c.marked_for_deletion.is_none() => Some((c, Phase::Ready)),
                    _ => None,
                });
                if let Some((c, to)) = next
                    && store
                        .write(c, &c.apply(Move::to(to), now).unwrap(), None)
                        .await
                        .unwrap()
                {
                    moves += 1;
                }
                tokio::task::yield_now().await;
            }
            moves
        })
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(6);
    let mut calls = Vec::new();
    for _ in 0..200 {
        let mut c = c.clone();
        let kind = rng.random_range(0..3);
        let delta = rng.random_range(1..=3);
        let slots: Vec<String> = (0..rng.random_range(1..=2))
            .map(|_| format!("fleet://s-0{}", rng.random_range(1..=8)))
            .collect();
        calls.push(tokio::spawn(async move {
            match kind {
                0 => increase(&mut c, "crowd", delta).await,
                1 => c
                    .node_group_delete_nodes(NodeGroupDeleteNodesRequest {
                        nodes: slots.iter().map(|s| node(s, "", false)).collect(),
                        id: "crowd".into(),
                    })
                    .await
                    .map(|_| ())
                    .map_err(|s| s.code()),
                _ => c
                    .node_group_decrease_target_size(NodeGroupDecreaseTargetSizeRequest {
                        delta: -delta,
                        id: "crowd".into(),
                    })
                    .await
                    .map(|_| ())
                    .map_err(|s| s.code()),
            }
        }));
    }
    let mut outcomes = std::collections::BTreeMap::<String, u32>::new();
    for call in calls {
        let outcome = bounded("a concurrent call", call).await.unwrap();
        *outcomes.entry(format!("{outcome:?}")).or_default() += 1;
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let seen = watcher.await.unwrap();
    assert!(
        mover.await.unwrap() > 0,
        "the controller's writes raced the calls"
    );
    assert!(!seen.is_empty());
    assert!(
        seen.iter().all(|t| (2..=6).contains(t)),
        "every target seen within [min 2, max 6]: {seen:?}"
    );
    // Some of each happened, and the refusals are the bounds' own codes.
    assert!(
        outcomes.get("Ok(())").copied().unwrap_or(0) >= 20,
        "{outcomes:?}"
    );
    for refusal in outcomes.keys().filter(|k| *k != "Ok(())") {
        assert!(
            [
                "Err(OutOfRange)",
                "Err(FailedPrecondition)",
                "Err(ResourceExhausted)"
            ]
            .contains(&refusal.as_str()),
            "{outcomes:?}"
        );
    }
    // The store agrees: one live claim per slot, each the slot's live pointer, and the target
    // is what they add up to.
    let claims = store
        .read_groups(&[group("crowd")])
        .await
        .unwrap()
        .remove(0)
        .claims;
    let live: Vec<&Claim> = claims.iter().filter(|c| c.phase.is_live()).collect();
    let mut slots: Vec<&BenchName> = live.iter().map(|c| &c.slot).collect();
    slots.sort();
    let before = slots.len();
    slots.dedup();
    assert_eq!(slots.len(), before, "one live claim per slot");
    let mut raw = conn(&server).await;
    for c in &live {
        let pointer: Option<String> = redis::cmd("GET")
            .arg(Keys::default().group(&group("crowd")).live(&c.slot))
            .query_async(&mut raw)
            .await
            .unwrap();
        assert_eq!(pointer.as_deref(), Some(c.name.as_str()));
    }
    let t = target_of(&mut c, "crowd").await;
    assert_eq!(
        t as usize,
        live.iter().filter(|c| c.wants_machine()).count()
    );
    assert!((2..=6).contains(&t));
}

// CA caps a scale-up at the max NodeGroups gave: a slot still powering off (or spent) is not
// offered, so the max is lowered to what the group can reach now, and a refusal names why.
#[tokio::test]
async fn the_max_size_is_what_the_group_can_reach_now() {
    let server = server();
    let mut c = provider(&server).await;
    let store = ClaimStore::new(conn(&server).await, Keys::default());
    let max_of = |groups: Vec<NodeGroup>, id: &str| {
        groups.into_iter().find(|g| g.id == id).unwrap().max_size
    };
    let groups = c
        .node_groups(NodeGroupsRequest {})
        .await
        .unwrap()
        .into_inner()
        .node_groups;
    assert_eq!(max_of(groups, "pool-b"), 2);

    increase(&mut c, "pool-b", 2).await.unwrap();
    // gpu-01 boots and is ready; then a scale-down marks it: powering off.
    let claims = store
        .read_groups(&[group("pool-b")])
        .await
        .unwrap()
        .remove(0)
        .claims;
    let gpu01 = claims.iter().find(|c| c.slot == name("gpu-01")).unwrap();
    let now = store.now().await.unwrap();
    let booting = gpu01.apply(Move::to(Phase::Booting), now).unwrap();
    assert!(store.write(gpu01, &booting, None).await.unwrap());
    let ready = booting.apply(Move::to(Phase::Ready), now).unwrap();
    assert!(store.write(&booting, &ready, None).await.unwrap());
    c.node_group_delete_nodes(NodeGroupDeleteNodesRequest {
        nodes: vec![node("fleet://gpu-01", "", false)],
        id: "pool-b".into(),
    })
    .await
    .unwrap();
    assert_eq!(target_of(&mut c, "pool-b").await, 1);
    assert_eq!(
        state_and_error(&nodes(&mut c, "pool-b").await[0]).0,
        InstanceState::InstanceDeleting as i32
    );

    // One claim wanted, nothing free: the group can reach 1 this loop, not its configured 2.
    let groups = c
        .node_groups(NodeGroupsRequest {})
        .await
        .unwrap()
        .into_inner()
        .node_groups;
    assert_eq!(max_of(groups, "pool-b"), 1);
    let for_node = group_for(&mut c, Some(node("fleet://gpu-02", "", false))).await;
    assert_eq!((for_node.min_size, for_node.max_size), (0, 1));
    let refused = c
        .node_group_increase_size(NodeGroupIncreaseSizeRequest {
            delta: 1,
            id: "pool-b".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert!(
        refused
            .message()
            .contains("0 free usable slots, 1 asked: 1 still powering off"),
        "{}",
        refused.message()
    );
    // The other group is untouched: pool-a can reach its configured 2 (three slots free).
    let groups = c
        .node_groups(NodeGroupsRequest {})
        .await
        .unwrap()
        .into_inner()
        .node_groups;
    assert_eq!(max_of(groups, "pool-a"), 2);
}

// cluster-autoscaler keeps one connection and does not retry a refused change: when this
// process stops leading, its connections are closed (GOAWAY) so the client dials again (through
// a Service, to the new leader). The listener stays: the redial reaches a follower that reads.
#[tokio::test]
async fn losing_the_leadership_closes_the_connections_so_the_client_dials_again() {
    let server = server();
    let store = ClaimStore::new(conn(&server).await, Keys::default());
    assert!(store.raise_fence(&group("pool-a"), "1").await.unwrap());
    let (lead, leadership) = tokio::sync::watch::channel(Some("1".to_owned()));
    let provider = Arc::new(Provider::new(config_rx(), store).with_leadership(leadership.clone()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let serving = tokio::spawn(fleet::provider::server::serve(
        listener,
        None,
        provider,
        (
            Some(leadership),
            fleet::provider::server::Bounds::of(1_024, &Default::default()),
        ),
        stop.clone(),
    ));
    // A connector that counts the connections the client makes.
    let dials = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = dials.clone();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move {
                tokio::net::TcpStream::connect(addr)
                    .await
                    .map(hyper_util::rt::TokioIo::new)
            }
        }))
        .await
        .unwrap();
    let mut c = CloudProviderClient::new(channel);
    increase(&mut c, "pool-a", 1).await.unwrap();
    assert_eq!(target(&mut c).await, 1);
    assert_eq!(dials.load(std::sync::atomic::Ordering::SeqCst), 1);

    lead.send_replace(None);
    // The connection goes away; the client dials again and keeps reading.
    bounded("the client dials again after the GOAWAY", async {
        while dials.load(std::sync::atomic::Ordering::SeqCst) < 2 {
            let _ = c
                .node_group_target_size(NodeGroupTargetSizeRequest {
                    id: "pool-a".into(),
                })
                .await;
            tokio::task::yield_now().await;
        }
    })
    .await;
    // Over the new connection, to a process that now only reads.
    assert_eq!(target(&mut c).await, 1);
    let refused = c
        .node_group_increase_size(NodeGroupIncreaseSizeRequest {
            delta: 1,
            id: "pool-a".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::Unavailable);
    assert!(refused.message().contains("not the leader"));
    stop.cancel();
    bounded("the provider stops", serving)
        .await
        .unwrap()
        .unwrap();
}

// The provider's side of the race: a slot whose machine fleet told to power off and has not
// seen off yet is not free. NodeGroups does not count it, IncreaseSize says why it cannot have
// it (the old code offered it, and the new claim went ready on the dying machine), and the slot
// is offered again once the machine is observed off.
#[tokio::test]
async fn a_slot_fleet_is_powering_off_is_not_offered_until_it_is_observed_off() {
    let server = server();
    let mut c = provider(&server).await;
    let store = ClaimStore::new(conn(&server).await, Keys::default());
    let group = GroupName::parse("pool-a").unwrap();
    let now = store.now().await.unwrap();
    for slot in ["bench-01", "bench-02"] {
        let op = fleet::domain::operation::SlotOp {
            kind: fleet::domain::claim::OperationKind::Shutdown,
            claim: None,
            attempt: 0,
            started_at: fleet::domain::operation::stamp(now),
            timeout: std::time::Duration::from_secs(300),
            controller: "ctl".into(),
            streak: 1,
            end: None,
            off_at: None,
        };
        store
            .record_unclaimed(&group, &name(slot), &op)
            .await
            .unwrap();
    }
    let max = |groups: Vec<NodeGroup>| groups.iter().find(|g| g.id == "pool-a").unwrap().max_size;
    let groups = c
        .node_groups(NodeGroupsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(max(groups.node_groups), 1, "only bench-03 is free");
    let refused = c
        .node_group_increase_size(NodeGroupIncreaseSizeRequest {
            id: "pool-a".into(),
            delta: 2,
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert!(
        refused.message().contains("2 still powering off"),
        "{}",
        refused.message()
    );
    c.node_group_increase_size(NodeGroupIncreaseSizeRequest {
        id: "pool-a".into(),
        delta: 1,
    })
    .await
    .unwrap();
    let claims = store
        .read_groups(std::slice::from_ref(&group))
        .await
        .unwrap()
        .remove(0)
        .claims;
    assert_eq!(
        claims
            .iter()
            .map(|c| c.slot.to_string())
            .collect::<Vec<_>>(),
        ["bench-03"]
    );
    // The claim says which call made it, and its digest keeps it (the seed's call).
    assert_eq!(
        claims[0].call,
        Some(fleet::domain::claim::Call::IncreaseSize)
    );
    assert_eq!(
        claims[0].digest().call,
        Some(fleet::domain::claim::Call::IncreaseSize)
    );
    // bench-01 observed off: offered again.
    let ops = store
        .read_groups(std::slice::from_ref(&group))
        .await
        .unwrap()
        .remove(0)
        .operations;
    let started = ops.by_slot[&name("bench-01")].started_at;
    store
        .observe_off(&group, &name("bench-01"), started, now)
        .await
        .unwrap();
    let groups = c
        .node_groups(NodeGroupsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(max(groups.node_groups), 2);
}

// SPEC §7.1: a peer of the provider cannot make it read a request past `MAX_REQUEST` (4 MiB): a
// larger message is refused before it is decoded, and the provider answers the next call.
#[tokio::test]
async fn a_request_past_the_size_bound_is_refused_and_the_provider_goes_on() {
    let server = server();
    let store = ClaimStore::new(conn(&server).await, Keys::default());
    let provider = Arc::new(Provider::new(config_rx(), store));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let serving = tokio::spawn(fleet::provider::server::serve(
        listener,
        None,
        provider,
        (
            None,
            fleet::provider::server::Bounds::of(1_024, &Default::default()),
        ),
        stop.clone(),
    ));
    let mut c = CloudProviderClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
        .max_encoding_message_size(64 << 20);
    let huge = c
        .node_group_target_size(NodeGroupTargetSizeRequest {
            id: "x".repeat(fleet::provider::server::MAX_REQUEST + 1),
        })
        .await
        .unwrap_err();
    assert_eq!(huge.code(), Code::OutOfRange, "{huge}");
    assert_eq!(target(&mut c).await, 0);
    stop.cancel();
    bounded("the provider to stop", serving)
        .await
        .unwrap()
        .unwrap();
}
