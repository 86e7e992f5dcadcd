//! PricingPodPrice and PricingNodePrice as cluster-autoscaler's price expander uses them (SPEC
//! §6.3): the pod's price over a real socket with the generated client, against a real
//! redis-server, and a cluster-autoscaler loop that scores two groups with the expander's own
//! formula from the provider's answers and scales the cheaper one.

use crate::support;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fleet::config::{self, Config};
use fleet::provider::k8s::{
    Container, Node, ObjectMeta, Pod, PodSpec, Quantity, ResourceRequirements,
};
use fleet::provider::service::Provider;
use fleet::provider::wire::cloud_provider_client::CloudProviderClient;
use fleet::provider::wire::*;
use fleet::store::claims::ClaimStore;
use fleet::store::keys::Keys;
use fleet_testing::fixture::{Group, Op, Power, Template};
use fleet_testing::{Fixture, RedisServer};
use prost::Message;
use support::*;
use tokio::sync::watch;
use tonic::Code;
use tonic::transport::{Channel, Endpoint};

/// cluster-autoscaler's default per-call deadline: it bounds every call of these tests.
const CA_TIMEOUT: Duration = Duration::from_secs(5);

/// Two groups of the same machine (8 cores, 32 GiB) that draw and cost differently, and a bigger
/// group with no power draw.
fn yaml(east: (f64, f64), west: (f64, f64)) -> String {
    fleet_of(Some(east), Some(west))
}

/// `yaml`, each of east and west with its draw (watts, price per kWh) or none.
fn fleet_of(east: Option<(f64, f64)>, west: Option<(f64, f64)>) -> String {
    let group = |name: &str, max: u32, template: Template| {
        Group::new(name)
            .min(0)
            .max(max)
            .startup(Op::command(["true"]))
            .shutdown(Op::command(["true"]))
            .template(template)
    };
    let machine = |draw: Option<(f64, f64)>| {
        let template = Template::new()
            .capacity("cpu", "8")
            .capacity("memory", "32Gi");
        match draw {
            Some((watts, price)) => template.power(Power::new(watts, price)),
            None => template,
        }
    };
    let big = Template::new()
        .capacity("cpu", "128")
        .capacity("memory", "1024Gi");
    Fixture::new()
        .group(group("east", 2, machine(east)))
        .group(group("west", 2, machine(west)))
        .group(group("unpriced", 1, big))
        .slots("east", ["e-01", "e-02"])
        .slots("west", ["w-01", "w-02"])
        .slots("unpriced", ["u-01"])
        .yaml()
}

fn parsed(text: &str) -> Arc<Config> {
    Arc::new(config::parse(text, Path::new("t.yaml")).expect("a valid test configuration"))
}

/// A provider over a real redis-server, served on a free port; the sender publishes a new
/// configuration as a reload does.
async fn provider(
    server: &RedisServer,
    text: &str,
) -> (CloudProviderClient<Channel>, watch::Sender<Arc<Config>>) {
    let (tx, rx) = watch::channel(parsed(text));
    let store = ClaimStore::new(conn(server).await, Keys::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    serve_provider(listener, Provider::new(rx, store));
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .timeout(CA_TIMEOUT)
        .connect_timeout(CA_TIMEOUT)
        .connect()
        .await
        .unwrap();
    (CloudProviderClient::new(channel), tx)
}

fn quantities(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, Quantity> {
    pairs
        .iter()
        .map(|(r, q)| {
            (
                (*r).to_owned(),
                Quantity {
                    string: Some((*q).to_owned()),
                },
            )
        })
        .collect()
}

/// A pending pod as cluster-autoscaler holds it: one container with these requests.
fn pod(name: &str, requests: &[(&str, &str)]) -> Pod {
    Pod {
        metadata: Some(ObjectMeta {
            namespace: Some("default".into()),
            name: Some(name.into()),
            ..Default::default()
        }),
        spec: Some(PodSpec {
            containers: vec![Container {
                name: Some("app".into()),
                resources: Some(ResourceRequirements {
                    requests: quantities(requests),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    }
}

/// The request cluster-autoscaler 1.35 and later sends: `pod.Marshal()` in pod_bytes, the new
/// times.
fn ask(p: &Pod, start: SystemTime, end: SystemTime) -> PricingPodPriceRequest {
    PricingPodPriceRequest {
        pod_bytes: p.encode_to_vec(),
        start_timestamp: Some(start.into()),
        end_timestamp: Some(end.into()),
        ..Default::default()
    }
}

async fn pod_price(
    c: &mut CloudProviderClient<Channel>,
    request: PricingPodPriceRequest,
) -> Result<f64, tonic::Status> {
    c.pricing_pod_price(request)
        .await
        .map(|r| r.into_inner().price)
}

fn close(got: f64, want: f64) -> bool {
    (got - want).abs() <= want.abs() * 1e-9 + 1e-15
}

#[tokio::test]
async fn a_pod_is_priced_at_its_dominant_share_of_the_cheapest_machine_that_holds_it() {
    let server = server();
    // east: 0.3 kW at 0.2 per kWh (0.06 an hour); west: 0.5 kW at 0.3 (0.15 an hour).
    let (mut c, tx) = provider(&server, &yaml((300.0, 0.2), (500.0, 0.3))).await;
    let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let hour = start + Duration::from_secs(3_600);

    // cpu 2 of 8 and memory 4 of 32 GiB: the dominant share is a quarter of an east machine.
    let web = pod("web-1", &[("cpu", "2"), ("memory", "4Gi")]);
    let price = pod_price(&mut c, ask(&web, start, hour)).await.unwrap();
    assert!(close(price, 0.25 * 0.06), "{price}");
    // Over two hours, twice that; the legacy shape (pod in field 1, times 2 and 3) alike.
    let legacy = PricingPodPriceRequest {
        pod: web.encode_to_vec(),
        start_time: Some(start.into()),
        end_time: Some((start + Duration::from_secs(7_200)).into()),
        ..Default::default()
    };
    let twice = pod_price(&mut c, legacy).await.unwrap();
    assert!(close(twice, 2.0 * 0.25 * 0.06), "{twice}");
    // cluster-autoscaler's stabilization pod (0.5 cpu, 500 MiB): cpu dominates, 1/16 of east.
    let stabilize = pod("stabilize", &[("cpu", "500m"), ("memory", "524288000")]);
    let s = pod_price(&mut c, ask(&stabilize, start, hour))
        .await
        .unwrap();
    assert!(close(s, 0.0625 * 0.06), "{s}");
    // A pod that asks nothing costs nothing.
    let bare = pod("bare", &[]);
    assert_eq!(
        pod_price(&mut c, ask(&bare, start, hour)).await.unwrap(),
        0.0
    );
    // The pod price is the same node price PricingNodePrice gives east, times the share.
    let node = c
        .pricing_node_price(PricingNodePriceRequest {
            node: Some(ExternalGrpcNode {
                provider_id: "fleet://e-01".into(),
                name: "e-01".into(),
                ..Default::default()
            }),
            start_timestamp: Some(start.into()),
            end_timestamp: Some(hour.into()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .price;
    assert!(close(price, 0.25 * node), "{price} vs node {node}");

    // Malformed requests: InvalidArgument, saying why.
    let refusals = [
        (
            PricingPodPriceRequest {
                start_timestamp: Some(start.into()),
                end_timestamp: Some(hour.into()),
                ..Default::default()
            },
            "the request carries no pod",
        ),
        (
            PricingPodPriceRequest {
                pod_bytes: vec![0x0a, 0xff],
                ..ask(&web, start, hour)
            },
            "the pod does not decode as a Kubernetes v1 Pod",
        ),
        (
            PricingPodPriceRequest {
                end_timestamp: None,
                ..ask(&web, start, hour)
            },
            "the request carries no start or no end time",
        ),
        (
            ask(&web, hour, start),
            "the end time is before the start time",
        ),
        (
            ask(&pod("neg", &[("cpu", "-1")]), start, hour),
            "pod default/neg: container \"app\" requests cpu \"-1\": a negative request",
        ),
        (
            ask(&pod("huge", &[("memory", "1e30")]), start, hour),
            "pod default/huge: container \"app\" requests memory \"1e30\": past 2^63 - 1",
        ),
        (
            ask(&pod("typo", &[("cpu", "2 cores")]), start, hour),
            "pod default/typo: container \"app\" requests cpu \"2 cores\": not a Kubernetes \
             quantity",
        ),
    ];
    for (request, message) in refusals {
        let status = pod_price(&mut c, request).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        assert!(status.message().starts_with(message), "{status:?}");
    }
    // A pod no priced machine can hold (the big unpriced group does not price it): NotFound.
    let big = pod("big", &[("cpu", "64")]);
    let status = pod_price(&mut c, ask(&big, start, hour)).await.unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    assert_eq!(
        status.message(),
        "pod default/big fits no group with a power draw: east: cpu 64 of 8; west: cpu 64 of 8"
    );

    // A fleet with no power draw prices nothing, as NodePrice does for such a group.
    let unpriced = fleet_of(None, None);
    tx.send_replace(parsed(&unpriced));
    let status = pod_price(&mut c, ask(&web, start, hour)).await.unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented, "{status:?}");
    assert!(
        status
            .message()
            .starts_with("no group declares a power draw (template.power)"),
        "{status:?}"
    );
    // Read first: a malformed request is still InvalidArgument there.
    let status = pod_price(&mut c, PricingPodPriceRequest::default())
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
}

// ---------------------------------------------------------------------------------------------
// cluster-autoscaler's price expander, transcribed for this test from kubernetes/autoscaler,
// cluster-autoscaler/expander/price/price.go (`priceBased.BestOptions`) and preferred.go
// (`SimplePreferredNodeProvider.Node`, `SimpleNodeUnfitness`), at commit
// 879c6a84a447a053e1bd34be72f1a82ec02b6fb0 (the files' last change before the core moved to
// sigs.k8s.io/cluster-autoscaler in 87d9c45c02b945988ef88dd5c20dcf95c9d16aff), with the GPU check
// of utils/gpu/gpu.go (`NodeHasGpu`) and the externalgrpc client's calls
// (cloudprovider/externalgrpc/externalgrpc_cloud_provider.go: `externalGrpcNode`, `PodPrice`
// marshals the pod into pod_bytes with the new timestamps).
// ---------------------------------------------------------------------------------------------

/// `priceStabilizationPod`: 0.5 cpu, 500 MiB.
fn stabilization_pod() -> Pod {
    pod("stabilize", &[("cpu", "500m"), ("memory", "524288000")])
}
/// `notExistCoeficient`: externalgrpc's node groups always exist, so it never applies; kept so
/// the transcription is whole.
const NOT_EXIST_COEFFICIENT: f64 = 2.0;
/// `gpuUnfitnessOverride`.
const GPU_UNFITNESS_OVERRIDE: f64 = 1000.0;
/// `GPUVendorResourceNames`.
const GPU_RESOURCES: [&str; 5] = [
    "nvidia.com/gpu",
    "habana.ai/gaudi",
    "gpu.intel.com/xe",
    "amd.com/gpu",
    "microsoft.com/directx",
];

/// `SimplePreferredNodeProvider.Node`: the preferred node's milli-cpu by the cluster's size.
fn preferred_millicpu(cluster_nodes: usize) -> f64 {
    let cpu = 1000.0;
    match cluster_nodes {
        0..=2 => cpu,
        3..=6 => 2.0 * cpu,
        7..=20 => 4.0 * cpu,
        21..=60 => 8.0 * cpu,
        61..=200 => 16.0 * cpu,
        _ => 32.0 * cpu,
    }
}

/// `SimpleNodeUnfitness`: by cpu capacity only.
fn unfitness(preferred: f64, evaluated: f64) -> f64 {
    (preferred / evaluated).max(evaluated / preferred)
}

/// An expansion option: a group, how many nodes, the pods they would take, and the node info
/// cluster-autoscaler simulates them with.
struct ExpansionOption {
    group: String,
    node_count: i64,
    pods: Vec<Pod>,
    node: Node,
    exists: bool,
}

/// The node's milli-cpu capacity, as `resource.Quantity.MilliValue` reads the template's.
fn millicpu(node: &Node) -> f64 {
    let q = node.status.as_ref().unwrap().capacity["cpu"]
        .string
        .clone()
        .unwrap();
    let cores: f64 = match q.strip_suffix('m') {
        Some(milli) => milli.parse::<f64>().unwrap() / 1000.0,
        None => q.parse().unwrap(),
    };
    cores * 1000.0
}

/// `gpu.NodeHasGpu`: the GPU label, or a known GPU resource allocatable and not zero.
fn node_has_gpu(gpu_label: &str, node: &Node) -> bool {
    let labels = &node.metadata.as_ref().unwrap().labels;
    let allocatable = &node.status.as_ref().unwrap().allocatable;
    labels.contains_key(gpu_label)
        || GPU_RESOURCES.iter().any(|r| {
            allocatable
                .get(*r)
                .and_then(|q| q.string.as_deref())
                .is_some_and(|q| q != "0")
        })
}

/// `externalGrpcNode`: what the client sends of a node.
fn external(node: &Node) -> ExternalGrpcNode {
    let meta = node.metadata.clone().unwrap();
    ExternalGrpcNode {
        provider_id: node
            .spec
            .as_ref()
            .and_then(|s| s.provider_id.clone())
            .unwrap_or_default(),
        name: meta.name.unwrap_or_default(),
        labels: meta.labels.into_iter().collect(),
        annotations: meta.annotations.into_iter().collect(),
    }
}

/// `priceBased.BestOptions`: every option's score, and the indices of the best (the lowest
/// score; equal scores are all kept). An option whose node or any pod has no price is skipped,
/// as the expander skips it; a stabilization price that fails is 0.
async fn best_options(
    c: &mut CloudProviderClient<Channel>,
    options: &[ExpansionOption],
    cluster_nodes: usize,
) -> (Vec<Option<f64>>, Vec<usize>) {
    let now = SystemTime::now();
    let then = now + Duration::from_secs(3_600);
    let preferred = preferred_millicpu(cluster_nodes);
    let gpu_label = c
        .gpu_label(GpuLabelRequest {})
        .await
        .unwrap()
        .into_inner()
        .label;
    let stabilization = pod_price(c, ask(&stabilization_pod(), now, then))
        .await
        .unwrap_or(0.0);
    let mut scores = Vec::new();
    let mut best: Vec<usize> = Vec::new();
    let mut best_score = 0.0;
    'next_option: for (i, option) in options.iter().enumerate() {
        let node_price = c
            .pricing_node_price(PricingNodePriceRequest {
                node: Some(external(&option.node)),
                start_timestamp: Some(now.into()),
                end_timestamp: Some(then.into()),
                ..Default::default()
            })
            .await;
        let Ok(node_price) = node_price.map(|r| r.into_inner().price) else {
            scores.push(None);
            continue;
        };
        let total_node_price = node_price * option.node_count as f64;
        let mut total_pod_price = 0.0;
        for p in &option.pods {
            let Ok(price) = pod_price(c, ask(p, now, then)).await else {
                scores.push(None);
                continue 'next_option;
            };
            total_pod_price += price;
        }
        let price_sub_score =
            (total_node_price + stabilization) / (total_pod_price + stabilization);
        let node_unfitness = unfitness(preferred, millicpu(&option.node));
        let mut suppressed_unfitness =
            (node_unfitness - 1.0) * (1.0 - ((option.node_count - 1) as f64 / 15.0).tanh()) + 1.0;
        if node_has_gpu(&gpu_label, &option.node) {
            suppressed_unfitness = GPU_UNFITNESS_OVERRIDE;
        }
        let mut score = suppressed_unfitness * price_sub_score;
        if !option.exists {
            score *= NOT_EXIST_COEFFICIENT;
        }
        scores.push(Some(score));
        if best.is_empty() || best_score == score {
            best.push(i);
            best_score = score;
        } else if best_score > score {
            best = vec![i];
            best_score = score;
        }
    }
    (scores, best)
}

// ---------------------------------------------------------------------------------------------

/// The node info cluster-autoscaler simulates a group from zero with: the provider's template,
/// renamed and without a provider ID (as its sanitizing does).
async fn template_node(c: &mut CloudProviderClient<Channel>, group: &str) -> Node {
    let bytes = c
        .node_group_template_node_info(NodeGroupTemplateNodeInfoRequest { id: group.into() })
        .await
        .unwrap()
        .into_inner()
        .node_bytes;
    let mut node = Node::decode(bytes.as_slice()).unwrap();
    let meta = node.metadata.as_mut().unwrap();
    meta.name = Some(format!("template-node-for-{group}-5577006791947779410"));
    node
}

/// The options of one loop for these pending pods: every group fleet lists, with the pods that
/// fit one of its machines (three pods of 2 cores and 4 GiB fit one 8-core machine).
async fn options(c: &mut CloudProviderClient<Channel>, pending: &[Pod]) -> Vec<ExpansionOption> {
    let groups = c
        .node_groups(NodeGroupsRequest {})
        .await
        .unwrap()
        .into_inner()
        .node_groups;
    let mut options = Vec::new();
    for g in groups {
        options.push(ExpansionOption {
            node: template_node(c, &g.id).await,
            group: g.id,
            node_count: 1,
            pods: pending.to_vec(),
            exists: true,
        });
    }
    options
}

async fn target(c: &mut CloudProviderClient<Channel>, group: &str) -> i32 {
    c.node_group_target_size(NodeGroupTargetSizeRequest { id: group.into() })
        .await
        .unwrap()
        .into_inner()
        .target_size
}

/// One loop: score the options, scale the one best option up by its node count, and return
/// its group with every option's score.
async fn loop_once(
    c: &mut CloudProviderClient<Channel>,
    pending: &[Pod],
) -> (String, Vec<(String, Option<f64>)>) {
    let options = options(c, pending).await;
    let (scores, best) = best_options(c, &options, 0).await;
    assert_eq!(best.len(), 1, "one best option: {scores:?}");
    let chosen = &options[best[0]];
    c.node_group_increase_size(NodeGroupIncreaseSizeRequest {
        id: chosen.group.clone(),
        delta: chosen.node_count as i32,
    })
    .await
    .unwrap();
    let named = options
        .iter()
        .map(|o| o.group.clone())
        .zip(scores)
        .collect();
    (chosen.group.clone(), named)
}

#[tokio::test]
async fn the_price_expander_scales_the_group_that_costs_least_to_power_and_follows_a_swap() {
    let server = server();
    // east: 0.3 kW at 0.2 per kWh; west: 0.5 kW at 0.3. Same machine, so the same unfitness.
    let (mut c, tx) = provider(&server, &yaml((300.0, 0.2), (500.0, 0.3))).await;
    let pending: Vec<Pod> = (1..=3)
        .map(|i| pod(&format!("web-{i}"), &[("cpu", "2"), ("memory", "4Gi")]))
        .collect();

    let (chosen, scores) = loop_once(&mut c, &pending).await;
    assert_eq!(chosen, "east", "{scores:?}");
    // The group without a power draw has no NodePrice: the expander skips it, as it would.
    let score = |group: &str| scores.iter().find(|(g, _)| g == group).unwrap().1;
    assert_eq!(score("unpriced"), None);
    // The scores are the expander's ratio: (node + s) / (pods + s), times the unfitness of an
    // 8-core machine against the preferred 1-core one (8, not suppressed for one node). The
    // pods are priced on east's machine, the cheapest: 3 × 2/8 of 0.06 an hour; s = 1/16 of it.
    let s = 0.0625 * 0.06;
    let pods = 3.0 * 0.25 * 0.06;
    let want_east = 8.0 * (0.06 + s) / (pods + s);
    let want_west = 8.0 * (0.15 + s) / (pods + s);
    let (east, west) = (score("east").unwrap(), score("west").unwrap());
    assert!(close(east, want_east), "east {east} ≠ {want_east}");
    assert!(close(west, want_west), "west {west} ≠ {want_west}");
    assert_eq!(
        (target(&mut c, "east").await, target(&mut c, "west").await),
        (1, 0)
    );

    // Swap the draws and prices (a reload): west is now the cheaper to power, and wins.
    tx.send_replace(parsed(&yaml((500.0, 0.3), (300.0, 0.2))));
    let (chosen, scores) = loop_once(&mut c, &pending).await;
    assert_eq!(chosen, "west", "{scores:?}");
    assert_eq!(
        (target(&mut c, "east").await, target(&mut c, "west").await),
        (1, 1)
    );

    // The same pods against groups that draw the same at different prices: the price decides.
    tx.send_replace(parsed(&yaml((400.0, 0.31), (400.0, 0.3))));
    let same_draw = options(&mut c, &pending).await;
    let (scores, best) = best_options(&mut c, &same_draw, 0).await;
    let winners: Vec<&str> = best.iter().map(|&i| same_draw[i].group.as_str()).collect();
    assert_eq!(winners, ["west"], "{scores:?}");
    // Pods of another size move nothing: the cheaper group still wins, and a pod that takes a
    // whole machine (share 1) still leaves the dearer group dearer.
    let whole = vec![pod("batch", &[("cpu", "8"), ("memory", "1Gi")])];
    let batch = options(&mut c, &whole).await;
    let (scores, best) = best_options(&mut c, &batch, 0).await;
    let winners: Vec<&str> = best.iter().map(|&i| batch[i].group.as_str()).collect();
    assert_eq!(winners, ["west"], "{scores:?}");
}
