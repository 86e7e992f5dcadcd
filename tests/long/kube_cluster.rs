//! fleet against a real Kubernetes control plane (SPEC §3.12, §6.9): etcd, kube-apiserver with
//! RBAC on, kube-controller-manager (its node-lifecycle and Job controllers), kube-scheduler and
//! kwok playing the kubelets, built from their Go modules (`peers/`, `scripts/peers.sh`) and
//! started on loopback for each test (`fleet_testing::kube`).
//!
//! What these prove that the scripted API server of `tests/process/kube_scenario.rs` cannot: the
//! real server's validation, admission and RBAC accept fleet's calls made under `deploy/base`'s
//! identity (and refuse none: its audit log is read); a merge patch of the taints at a stale
//! resourceVersion and a delete under a stale precondition are refused with 409 by the server
//! itself; a real scheduler leaves a Pod Pending until fleet's claim brings a Node, then places it;
//! the real Job controller runs a Job operation; Events land where `kubectl get events` shows
//! them; the node-lifecycle controller marks a powered-off machine's Node NotReady and fleet then
//! deletes it; an API server that goes away leaves fleet blind, acting on nothing.
//!
//! cluster-autoscaler itself is not here: the Go module proxy refuses every version of
//! `k8s.io/autoscaler/cluster-autoscaler` (SPEC §6.9). Its calls (`IncreaseSize`, `DeleteNodes`,
//! `TargetSize`) are made over fleet's real provider socket by the test, as CA makes them once
//! its loop has seen the Pending Pod or the unneeded Node.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fleet::domain::node;
use fleet::domain::slot::{NodeAction, NodeWrite};
use fleet::kubernetes::client::{self, Settings};
use fleet::kubernetes::nodes::KubeNodes;
use fleet::provider::wire::cloud_provider_client::CloudProviderClient;
use fleet::provider::wire::*;
use fleet::reconcile::{NodeWriteError, Nodes};
use fleet_testing::fixture::{BOOTS, Group, JobPod, Map, Op, POWERS_OFF, Slot, Template};
use fleet_testing::kube::{KWOK_LABEL, KubeStack};
use fleet_testing::{Fixture, RedisServer};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::support::Serve;

/// fleet's ServiceAccount as `deploy/base` makes it, and the user the API server knows it as.
const NAMESPACE: &str = "fleet";
const FLEET_USER: &str = "system:serviceaccount:fleet:fleet";
/// How long a step that waits on the cluster's own programs may take (a Node registered and made
/// Ready by kwok, a Job's pod scheduled and completed): seconds alone, much longer when CI runs
/// four control planes beside the rest of the tests on two cores.
const CLUSTER_BOUND: Duration = Duration::from_secs(90);
/// The taint another controller owns; fleet's patches must keep it field for field.
const FOREIGN: &str = "example.com/owned-by-someone-else";

/// A real control plane with `deploy/base` applied as an operator applies it (`kubectl apply -k`),
/// a Node that plays a worker for Job pods, and a kubeconfig of fleet's own identity.
struct Cluster {
    stack: KubeStack,
    fleet: PathBuf,
    _one_at_a_time: std::sync::MutexGuard<'static, ()>,
}

/// One control plane at a time in this process: `cargo test` runs this tier's tests on eight
/// threads, and four control planes starting beside the chaos tests on two cores slowed those past
/// their bounds (nextest, a process a test, limits them by its `kube` test group instead).
static CLUSTERS: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl Cluster {
    fn start() -> Cluster {
        // A test that failed holding it poisons nothing another needs.
        let one_at_a_time = CLUSTERS.lock().unwrap_or_else(|e| e.into_inner());
        let stack = KubeStack::start().expect("the real control plane (scripts/peers.sh)");
        let base = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/base");
        stack.kubectl_ok(&["apply", "-k", base]);
        // The workloads deploy/base runs in a real cluster are not this test's: fleet runs here as
        // a process, under the same identity.
        stack.kubectl_ok(&["-n", NAMESPACE, "scale", "deployment/fleet", "--replicas=0"]);
        stack.kubectl_ok(&[
            "-n",
            NAMESPACE,
            "scale",
            "statefulset",
            "--all",
            "--replicas=0",
        ]);
        stack.apply(&node_yaml("worker-0", "fleet.dev/role: worker", "", ""));
        let fleet = stack.identity(NAMESPACE, "fleet");
        Cluster {
            stack,
            fleet,
            _one_at_a_time: one_at_a_time,
        }
    }

    /// `kubectl get` of one object as JSON, `None` when it does not exist.
    fn get(&self, args: &[&str]) -> Option<Value> {
        let mut all = vec!["get", "-o", "json"];
        all.extend_from_slice(args);
        let o = self.stack.kubectl(&all);
        if !o.status.success() {
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(err.contains("NotFound"), "kubectl {args:?}: {err}");
            return None;
        }
        Some(serde_json::from_slice(&o.stdout).expect("kubectl's JSON"))
    }

    /// Every request fleet's identity made, from the API server's audit log: (API group and
    /// resource, verb, response code).
    fn fleet_requests(&self) -> Vec<(String, String, u16)> {
        let text = std::fs::read_to_string(&self.stack.audit).expect("the audit log");
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| e["user"]["username"] == FLEET_USER)
            .map(|e| {
                let object = &e["objectRef"];
                let group = object["apiGroup"].as_str().unwrap_or("");
                let resource = object["resource"].as_str().unwrap_or("");
                (
                    format!("{group}/{resource}"),
                    e["verb"].as_str().unwrap_or("").to_owned(),
                    e["responseStatus"]["code"].as_u64().unwrap_or(0) as u16,
                )
            })
            .collect()
    }
}

/// A Node as a kubelet registers it (with kwok's label, so kwok plays its kubelet): its
/// labels (a flow mapping's fields), provider ID and taints (a YAML list, or empty).
fn node_yaml(name: &str, labels: &str, provider_id: &str, taints: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n  labels: {{kubernetes.io/hostname: \
         {name}, {k}: {v}, {labels}}}\nspec:\n  providerID: \"{provider_id}\"\n  \
         taints: [{taints}]\nstatus:\n  capacity: {{cpu: \"16\", memory: 64Gi, pods: \"110\"}}\n  \
         allocatable: {{cpu: \"16\", memory: 64Gi, pods: \"110\"}}\n",
        k = KWOK_LABEL.0,
        v = KWOK_LABEL.1,
    )
}

/// Polls `f` until it answers, at most `bound`: the cluster's controllers move on their own
/// clocks (the node-lifecycle controller's grace, the Job controller's sync), so the test waits
/// on what it can observe, never on a guess of their timing.
async fn until<T>(what: &str, bound: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + bound;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "not within {bound:?}: {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// fleet's Node reflector under its own identity, once it has listed.
async fn nodes(c: &Cluster) -> (KubeNodes, CancellationToken) {
    let connected = client::connect(&Settings {
        kubeconfig: Some(c.fleet.clone()),
        context: None,
        namespace: Some(NAMESPACE.into()),
    })
    .await
    .expect("fleet's kubeconfig");
    let stop = CancellationToken::new();
    let nodes = KubeNodes::start(connected.client, stop.clone());
    let deadline = Instant::now() + CLUSTER_BOUND;
    while nodes.read().await.is_err() {
        assert!(
            Instant::now() < deadline,
            "the Nodes were not listed within {CLUSTER_BOUND:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    (nodes, stop)
}

async fn view(nodes: &KubeNodes, name: &str) -> node::NodeView {
    nodes
        .read()
        .await
        .expect("the Nodes are seen")
        .into_iter()
        .find(|n| n.name == name)
        .expect("the test Node")
}

/// Writes what `judge` makes of the Node as the watch last saw it, judged again after a 409 as
/// fleet's next pass would: kwok's kubelet writes the Node's status on its own clock, so a
/// judgment can be stale the moment it is made. Returns the write that landed.
async fn judged(
    nodes: &KubeNodes,
    name: &str,
    judge: impl Fn(&node::NodeView) -> NodeWrite,
) -> NodeWrite {
    for _ in 0..20 {
        let seen = view(nodes, name).await;
        let write = judge(&seen);
        match nodes.write(&write).await {
            Ok(()) => return write,
            Err(NodeWriteError::Conflict(_)) => {
                // Refused only because the Node moved on: the watch shows a newer version.
                let deadline = Instant::now() + CLUSTER_BOUND;
                while view(nodes, name).await.resource_version == seen.resource_version {
                    assert!(
                        Instant::now() < deadline,
                        "a 409 on a Node that did not change"
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
            Err(e) => panic!("writing {name}: {e}"),
        }
    }
    panic!("{name} changed under every one of 20 judgments");
}

fn write(seen: &node::NodeView, action: NodeAction) -> NodeWrite {
    NodeWrite {
        node: seen.name.clone(),
        uid: seen.uid.clone(),
        resource_version: seen.resource_version.clone(),
        action,
        must_land: false,
    }
}

/// The power actions the benches ran, in order (`on NAME`, `off NAME`).
fn power(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn taint_keys(node: &Value) -> Vec<String> {
    node["spec"]["taints"]
        .as_array()
        .map(|t| {
            t.iter()
                .map(|t| t["key"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn the_cordon_taint_round_trips_and_a_stale_version_is_refused() {
    let c = Cluster::start();
    let foreign = format!("{{key: {FOREIGN}, value: kept, effect: PreferNoSchedule}}");
    c.stack.apply(&node_yaml(
        "bench-t",
        "fleet.dev/group: sim",
        "fleet://bench-t",
        &foreign,
    ));
    let (nodes, stop) = nodes(&c).await;
    let cordon = judged(&nodes, "bench-t", |seen| {
        let edit = node::cordon_edit(seen).expect("the Node is not cordoned");
        write(seen, NodeAction::Taints(edit))
    })
    .await;
    // The same judgment again is stale now: the server refuses it, it is never applied twice.
    assert!(matches!(
        nodes.write(&cordon).await,
        Err(NodeWriteError::Conflict(_))
    ));
    let written = c.get(&["node", "bench-t"]).unwrap();
    let taints = written["spec"]["taints"].as_array().unwrap();
    assert!(
        taint_keys(&written).contains(&"fleet.dev/draining".to_owned()),
        "{taints:?}"
    );
    let kept = taints.iter().find(|t| t["key"] == FOREIGN).expect("kept");
    assert_eq!(
        (&kept["value"], &kept["effect"]),
        (&Value::from("kept"), &Value::from("PreferNoSchedule")),
        "another's taint kept field for field"
    );
    assert_eq!(
        written["spec"]["unschedulable"],
        Value::Null,
        "never spec.unschedulable"
    );

    let deadline = Instant::now() + CLUSTER_BOUND;
    while !view(&nodes, "bench-t").await.cordoned_by_fleet() {
        assert!(
            Instant::now() < deadline,
            "the watch did not see the cordon within {CLUSTER_BOUND:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    judged(&nodes, "bench-t", |seen| {
        let edit = node::uncordon_edit(seen).expect("fleet's taint to lift");
        write(seen, NodeAction::Taints(edit))
    })
    .await;
    let released = c.get(&["node", "bench-t"]).unwrap();
    assert!(!taint_keys(&released).contains(&"fleet.dev/draining".to_owned()));
    assert!(taint_keys(&released).contains(&FOREIGN.to_owned()));
    stop.cancel();
    let refused: Vec<_> = c
        .fleet_requests()
        .into_iter()
        .filter(|r| r.2 == 403)
        .collect();
    assert_eq!(refused, [], "deploy/base grants every call fleet made");
}

#[tokio::test]
async fn a_delete_with_a_stale_resource_version_is_refused() {
    let c = Cluster::start();
    c.stack.apply(&node_yaml(
        "bench-t",
        "fleet.dev/group: sim",
        "fleet://bench-t",
        "",
    ));
    let (nodes, stop) = nodes(&c).await;
    let seen = view(&nodes, "bench-t").await;
    let stale = NodeWrite {
        resource_version: "1".into(),
        ..write(&seen, NodeAction::Delete)
    };
    assert!(matches!(
        nodes.write(&stale).await,
        Err(NodeWriteError::Conflict(_))
    ));
    assert!(c.get(&["node", "bench-t"]).is_some(), "the Node stands");
    judged(&nodes, "bench-t", |seen| write(seen, NodeAction::Delete)).await;
    until("the Node deleted", CLUSTER_BOUND, || {
        c.get(&["node", "bench-t"]).is_none().then_some(())
    })
    .await;
    stop.cancel();
    let codes: Vec<_> = c
        .fleet_requests()
        .into_iter()
        .filter(|r| r.0 == "/nodes" && r.1 == "delete")
        .map(|r| r.2)
        .collect();
    assert_eq!(
        (codes.first(), codes.last()),
        (Some(&409), Some(&200)),
        "the server itself refused the stale precondition: {codes:?}"
    );
}

/// The simulated bench's power-on, as its BMC and kubelet would do it: the kubelet registers the
/// Node (the provider ID as fleet reports the instance, the template's labels and capacity) and
/// the machine beats UP. `$KUBECONFIG_ADMIN` stands for the kubelet's own credentials. Each
/// power action that runs is a line of `$POWER_LOG`: what the machines were actually asked.
const BENCH_UP: &str = r#"set -e
echo "on $FLEET_SLOT" >> "$POWER_LOG"
sleep "${BOOT_DELAY:-0}"
"$KUBECTL" --kubeconfig "$KUBECONFIG_ADMIN" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $FLEET_SLOT
  labels: {kubernetes.io/hostname: $FLEET_SLOT, fleet.dev/group: sim, kwok.x-k8s.io/node: fake}
spec:
  providerID: fleet://$FLEET_SLOT
status:
  capacity: {cpu: "4", memory: 8Gi, pods: "110"}
  allocatable: {cpu: "4", memory: 8Gi, pods: "110"}
EOF
"#;

/// The power-off: the kubelet stops (kwok lets the Node go) and the machine reads DOWN.
const BENCH_DOWN: &str = r#"echo "off $FLEET_SLOT" >> "$POWER_LOG"
"$KUBECTL" --kubeconfig "$KUBECONFIG_ADMIN" label node "$FLEET_SLOT" kwok.x-k8s.io/node- >/dev/null
"#;

/// Groups `sim` (benches whose power-on takes `boot_delay` seconds, their power actions written
/// to `power_log`) and `jobbed` (Job operations).
fn config(c: &Cluster, server: &RedisServer, boot_delay: u32, power_log: &Path) -> Fixture {
    let template = Template::new()
        .label("fleet.dev/group", "sim")
        .capacity("cpu", "4")
        .capacity("memory", "8Gi");
    let job = |arg: &str| {
        Op::job(
            JobPod::new("registry.invalid/power:1")
                .args([arg])
                .node_selector(Map::new().set("fleet.dev/role", "worker")),
        )
        .timeout("60s")
    };
    Fixture::new()
        .group(
            Group::new("sim")
                .min(0)
                .max(2)
                .env("BIN", env!("CARGO_BIN_EXE_fleet"))
                .env("REDIS", server.url())
                .env("BOOT_DELAY", boot_delay.to_string())
                .env("POWER_LOG", power_log.display().to_string())
                .env("KUBECONFIG_ADMIN", c.stack.admin.display().to_string())
                .env("KUBECTL", c.stack.kubectl_path().display().to_string())
                .startup(Op::sh(&format!("{BENCH_UP}{BOOTS}")).timeout("60s"))
                .shutdown(Op::sh(&format!("{BENCH_DOWN}{POWERS_OFF}")).timeout("60s"))
                .timing("job_monitor_poll_interval", "100ms")
                .timing("delete_stale_node_after", "2s")
                .template(template),
        )
        .slot(Slot::new("bench-a", "sim").kubernetes_node("bench-a"))
        .slot(Slot::new("bench-b", "sim").kubernetes_node("bench-b"))
        .group(
            Group::new("jobbed")
                .min(0)
                .max(1)
                .startup(job("on"))
                .shutdown(job("off"))
                .timing("job_monitor_poll_interval", "100ms"),
        )
        .slot(Slot::new("bench-j", "jobbed"))
}

/// The provider's address, from `fleet serve`'s start line.
async fn grpc_addr(serve: &mut Serve) -> String {
    let line = serve.log(&["fleet serve started"]).await;
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("grpc="))
        .expect("the start line names the provider's address")
        .to_owned()
}

async fn connect(addr: &str) -> CloudProviderClient<tonic::transport::Channel> {
    CloudProviderClient::connect(format!("http://{addr}"))
        .await
        .expect("the provider's socket")
}

/// The leader's provider, as cluster-autoscaler reaches it.
async fn provider(serve: &mut Serve) -> CloudProviderClient<tonic::transport::Channel> {
    let addr = grpc_addr(serve).await;
    serve.log(&["became the leader"]).await;
    connect(&addr).await
}

/// `fleet serve --kubernetes` under fleet's identity, passes every 200 ms.
fn serve(name: &'static str, c: &Cluster, server: &RedisServer, config: &std::path::Path) -> Serve {
    let kubeconfig = c.fleet.display().to_string();
    Serve::start(
        name,
        server,
        config,
        &[
            "--kubernetes",
            "--kubeconfig",
            &kubeconfig,
            "--kube-namespace",
            NAMESPACE,
            "--interval",
            "200ms",
            "--lease",
            "2s",
            "--blind-grace",
            "0s",
            "--metrics-addr",
            "127.0.0.1:0",
        ],
    )
}

async fn target(p: &mut CloudProviderClient<tonic::transport::Channel>, group: &str) -> i32 {
    p.node_group_target_size(NodeGroupTargetSizeRequest { id: group.into() })
        .await
        .expect("TargetSize")
        .into_inner()
        .target_size
}

/// The Pod a user creates that only group `sim` can run.
const WORKLOAD: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: wants-sim\n  namespace: default\n\
spec:\n  nodeSelector: {fleet.dev/group: sim}\n  containers:\n  - name: work\n    image: registry.invalid/work:1\n    \
resources: {requests: {cpu: \"1\"}}\n";

fn pod_phase(c: &Cluster) -> Option<(String, String)> {
    let pod = c.get(&["pod", "wants-sim", "-n", "default"])?;
    Some((
        pod["status"]["phase"].as_str().unwrap_or("").to_owned(),
        pod["spec"]["nodeName"].as_str().unwrap_or("").to_owned(),
    ))
}

/// The scenario of a bare-metal cluster: a Pod that fits only a powered-off group; the claim the
/// scale-up makes boots a bench whose Node the real scheduler places the Pod on; a Job operation
/// run by the Job controller; the API server gone a while; the scale-down's cordon, shutdown and
/// stale Node deletion; every call fleet made granted by `deploy/base`, and every grant used.
#[tokio::test]
async fn fleet_serves_a_real_cluster_under_its_own_identity() {
    let c = Cluster::start();
    let server = fleet_testing::RedisServer::start().expect("redis-server");
    let dir = tempfile::tempdir().unwrap();
    let power_log = dir.path().join("power.log");
    let path = config(&c, &server, 0, &power_log).write(dir.path());
    let mut serve = serve("serve", &c, &server, &path);
    let mut ca = provider(&mut serve).await;

    // Scale from zero: the scheduler finds no Node for the Pod.
    let created = Instant::now();
    c.stack.apply(WORKLOAD);
    until("the Pod Unschedulable", CLUSTER_BOUND, || {
        let pod = c.get(&["pod", "wants-sim", "-n", "default"])?;
        let conditions = pod["status"]["conditions"].as_array()?;
        conditions
            .iter()
            .any(|k| k["type"] == "PodScheduled" && k["reason"] == "Unschedulable")
            .then_some(())
    })
    .await;
    ca.node_group_increase_size(NodeGroupIncreaseSizeRequest {
        delta: 1,
        id: "sim".into(),
    })
    .await
    .expect("IncreaseSize");
    let ready = serve
        .log_within(&["claim moved", "to=ready"], CLUSTER_BOUND)
        .await;
    let bench = if ready.contains("slot=bench-a") {
        "bench-a"
    } else {
        "bench-b"
    };
    let (phase, on) = until("the Pod Running", CLUSTER_BOUND, || {
        pod_phase(&c).filter(|(phase, _)| phase == "Running")
    })
    .await;
    let to_running = created.elapsed();
    assert_eq!((phase.as_str(), on.as_str()), ("Running", bench));
    eprintln!("Pod created to Running: {to_running:?}");
    let node = c.get(&["node", bench]).expect("the bench's Node");
    assert_eq!(
        node["spec"]["providerID"],
        Value::from(format!("fleet://{bench}"))
    );
    assert_eq!(target(&mut ca, "sim").await, 1);

    // A Job operation: created under fleet's identity, run by the Job controller on a worker.
    ca.node_group_increase_size(NodeGroupIncreaseSizeRequest {
        delta: 1,
        id: "jobbed".into(),
    })
    .await
    .expect("IncreaseSize");
    let ended = serve
        .log_within(
            &["operation ended", "slot=bench-j", "operation=\"startup\""],
            CLUSTER_BOUND,
        )
        .await;
    assert!(ended.contains("outcome=Completed"), "{ended}");
    let jobs = c
        .get(&["jobs", "-n", NAMESPACE, "-l", "fleet.dev/slot=bench-j"])
        .unwrap();
    let job = &jobs["items"][0];
    assert_eq!(job["status"]["succeeded"], Value::from(1), "{job}");

    // The API server goes away: fleet is blind, moves nothing, powers nothing off.
    c.stack.stop_apiserver();
    serve.log(&["cannot read the Kubernetes Nodes"]).await;
    let blind_at = serve.seen.len();
    c.stack.start_apiserver();
    // The watch lists again after its pause (doubling to 30 s while the server is away).
    serve
        .log_within(&["the Kubernetes Nodes are readable again"], CLUSTER_BOUND)
        .await;
    let while_blind: Vec<_> = serve.seen[blind_at..]
        .iter()
        .filter(|l| l.contains("claim moved") || l.contains("operation=\"shutdown\""))
        .collect();
    assert_eq!(
        while_blind,
        Vec::<&String>::new(),
        "nothing moved while blind"
    );
    assert_eq!(pod_phase(&c).unwrap().0, "Running");

    // Scale down: the Pod is gone and cluster-autoscaler deletes the unneeded Node.
    c.stack.kubectl_ok(&[
        "delete",
        "pod",
        "wants-sim",
        "-n",
        "default",
        "--wait=false",
    ]);
    ca.node_group_delete_nodes(NodeGroupDeleteNodesRequest {
        nodes: vec![ExternalGrpcNode {
            provider_id: format!("fleet://{bench}"),
            name: bench.into(),
            ..Default::default()
        }],
        id: "sim".into(),
    })
    .await
    .expect("DeleteNodes");
    until("fleet's cordon on the Node", CLUSTER_BOUND, || {
        let node = c.get(&["node", bench])?;
        taint_keys(&node)
            .contains(&"fleet.dev/draining".to_owned())
            .then_some(())
    })
    .await;
    serve
        .log_within(
            &["operation ended", bench, "operation=\"shutdown\""],
            CLUSTER_BOUND,
        )
        .await;
    // The node-lifecycle controller marks the silent kubelet's Node NotReady (its grace is 20 s
    // here); fleet, having seen the machine off for 2 s, deletes it.
    until("the stale Node deleted", Duration::from_secs(120), || {
        c.get(&["node", bench]).is_none().then_some(())
    })
    .await;
    assert_eq!(target(&mut ca, "sim").await, 0);
    let lines = serve.stop().await;
    let ops = |kind: &str| {
        lines
            .iter()
            .filter(|l| l.contains("operation ended") && l.contains(bench) && l.contains(kind))
            .count()
    };
    assert_eq!(
        (ops("operation=\"startup\""), ops("operation=\"shutdown\"")),
        (1, 1)
    );
    assert_eq!(
        power(&power_log),
        [format!("on {bench}"), format!("off {bench}")],
        "one power-on, one power-off, nothing after it"
    );

    // The claim's moves as Events, where kubectl shows them.
    let events = c.get(&["events.events.k8s.io", "-A"]).unwrap();
    let reasons: BTreeSet<String> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["regarding"]["name"] == bench)
        .map(|e| e["reason"].as_str().unwrap().to_owned())
        .collect();
    for reason in ["ClaimReady", "ClaimCompleted"] {
        assert!(
            reasons.contains(reason),
            "{reason} about the Node: {reasons:?}"
        );
    }

    // The RBAC of deploy/base, held to what fleet did: every grant used but the Events' patch,
    // which only a repeated Event (kube's series) makes, and nothing else asked. A restarted API
    // server answers 403 until its RBAC cache has loaded (seen here: a list of the Nodes refused
    // in its first second), so a refusal counts as a missing grant only for a call not granted.
    let requests = c.fleet_requests();
    let used: BTreeSet<(String, String)> = requests.into_iter().map(|(r, v, _)| (r, v)).collect();
    let granted: BTreeSet<(String, String)> = [
        ("/nodes", "list"),
        ("/nodes", "watch"),
        ("/nodes", "patch"),
        ("/nodes", "delete"),
        ("batch/jobs", "create"),
        ("batch/jobs", "get"),
        ("batch/jobs", "list"),
        ("/pods", "list"),
        ("events.k8s.io/events", "create"),
    ]
    .into_iter()
    .map(|(r, v)| (r.to_owned(), v.to_owned()))
    .collect();
    assert_eq!(used, granted, "the calls fleet made are exactly the grants");
}

/// fleet's leader killed while a scale-up's startup runs: the standby leads within its lease, the
/// startup (a process of its own, which outlives the leader) is not run again, the new leader takes
/// the claim to ready, the Pod runs, and the target reads the same from the new leader.
#[tokio::test]
async fn a_leader_killed_during_a_scale_up_starts_nothing_twice() {
    let c = Cluster::start();
    let server = fleet_testing::RedisServer::start().expect("redis-server");
    let dir = tempfile::tempdir().unwrap();
    // A startup slow enough to be in flight when the leader dies.
    let power_log = dir.path().join("power.log");
    let path = config(&c, &server, 2, &power_log).write(dir.path());
    let mut first = serve("fleet-a", &c, &server, &path);
    let mut ca = provider(&mut first).await;
    let mut second = serve("fleet-b", &c, &server, &path);
    let standby = grpc_addr(&mut second).await;

    c.stack.apply(WORKLOAD);
    ca.node_group_increase_size(NodeGroupIncreaseSizeRequest {
        delta: 1,
        id: "sim".into(),
    })
    .await
    .expect("IncreaseSize");
    // The leader dies once the machine is being powered on (the startup has begun: its first
    // line is written), not before it ran: then a retry would be the only power-on, and right.
    first.log(&["starting machine"]).await;
    until("the power-on begun", CLUSTER_BOUND, || {
        power(&power_log).first().cloned()
    })
    .await;
    first.signal("-KILL");
    second
        .log_within(&["became the leader"], Duration::from_secs(30))
        .await;
    let mut ca = connect(&standby).await;
    assert_eq!(
        target(&mut ca, "sim").await,
        1,
        "the target the old leader took"
    );
    let ready = second
        .log_within(&["claim moved", "to=ready"], CLUSTER_BOUND)
        .await;
    let (phase, _) = until("the Pod Running", CLUSTER_BOUND, || {
        pod_phase(&c).filter(|(phase, _)| phase == "Running")
    })
    .await;
    assert_eq!(phase, "Running", "{ready}");
    let lines = second.stop().await;
    let starts = first
        .drain()
        .iter()
        .chain(lines.iter())
        .filter(|l| l.contains("starting machine"))
        .count();
    assert_eq!(starts, 1, "one startup across both leaders");
    assert_eq!(power(&power_log), ["on bench-a"], "one power-on");
    let nodes = c.get(&["nodes", "-l", "fleet.dev/group=sim"]).unwrap();
    assert_eq!(
        nodes["items"].as_array().unwrap().len(),
        1,
        "one bench powered on"
    );
}
