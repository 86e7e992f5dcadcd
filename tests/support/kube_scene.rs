//! The harness of the Kubernetes scenarios (`tests/process/kube_scenario.rs`): the group and Node the
//! scenes start from, a controller built as `fleet serve --kubernetes` builds it over the
//! scripted API server (`support/apiserver.rs`) and a real redis-server, the moves the test
//! makes as everyone else (a claim, a scale-down, a machine's power), bounded waits on what
//! can be observed, and the RBAC cross-check of the calls served.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use fleet::config::Config;
use fleet::domain::claim::{Claim, OperationKind, Phase, Reason};
use fleet::domain::name::{ClaimName, GroupName};
use fleet::kubernetes::events::Events;
use fleet::kubernetes::jobs::{JobRunner, Reporter as JobReporter};
use fleet::kubernetes::nodes::KubeNodes;
use fleet::lifecycle::Dispatch;
use fleet::reconcile::{Controller, Faults};
use fleet::store::claims::ClaimStore;
use fleet::store::keys::Keys;
use fleet::store::lease::{Lease, Signal};
use fleet::store::presence::Presence;
use fleet::telemetry::{Health, Metrics};
use fleet_testing::fixture::{Group, JobPod, Op, Slot};
use fleet_testing::{Fixture, RedisServer};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus, Taint};
use redis::aio::MultiplexedConnection;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::apiserver::{ApiServer, NAMESPACE, Served};
use crate::support::{self, beat, bounded, conn, request_claim_with};

pub const NODE: &str = "bench-01";
pub const PROVIDER_ID: &str = "fleet://bench-01";
pub const CILIUM: &str = "node.cilium.io/agent-not-ready";
pub const DRAINING: &str = "fleet.dev/draining";
pub const FOREIGN: &str = "example.com/owned-by-someone-else";
pub const LATE: &str = "example.com/tainted-meanwhile";
/// The paths the scenes count calls on, as the API server records them.
pub const JOBS: &str = "/apis/batch/v1/namespaces/{namespace}/jobs";
pub const A_NODE: &str = "/api/v1/nodes/{name}";
/// The controller's loops, short: a pass, a Job read and a Job sweep every 100 ms.
pub const INTERVAL: Duration = Duration::from_millis(100);
/// The blind grace (`--blind-grace`): short, so a first start and a mended watch see within
/// a fraction of a second.
pub const GRACE: Duration = Duration::from_millis(300);

/// One group whose startup and shutdown are Jobs, gated by Cilium's taint, and its one slot bound
/// to the Node `bench-01`; `timings` (like `"uncordon_timeout: 2s"`) adds to the group's timings.
pub fn config(timings: &str) -> Config {
    let power =
        |arg: &str| Op::job(JobPod::new("registry.example/power:1.4").args([arg])).timeout("10s");
    Fixture::new()
        .group(
            Group::new("pool-a")
                .min(0)
                .max(1)
                .readiness_taints([format!("{CILIUM}:NoExecute")])
                .startup(power("on"))
                .shutdown(power("off"))
                .timing("job_monitor_poll_interval", "100ms")
                .timings(timings),
        )
        .slot(Slot::new("bench-01", "pool-a").kubernetes_node("bench-01"))
        .config()
}

pub fn group() -> GroupName {
    GroupName::parse("pool-a").unwrap()
}

/// The Node kubelet registers: Ready, with `taints` and `provider_id`.
pub fn node(taints: Vec<Taint>, provider_id: Option<&str>) -> Node {
    Node {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(NODE.into()),
            uid: Some("uid-node-bench-01".into()),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            taints: Some(taints),
            provider_id: provider_id.map(str::to_owned),
            ..Default::default()
        }),
        status: Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

pub fn taint(key: &str, effect: &str) -> Taint {
    Taint {
        key: key.into(),
        effect: effect.into(),
        ..Default::default()
    }
}

pub fn cilium() -> Taint {
    taint(CILIUM, "NoExecute")
}

/// Someone else's taint, with the time the API server stamped on it: fleet must keep it whole.
pub fn foreign() -> Taint {
    let mut t = taint(FOREIGN, "NoExecute");
    t.time_added = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        "2024-05-01T10:00:00Z".parse().unwrap(),
    ));
    t
}

/// `foreign()` as the API server stores it.
pub fn foreign_json() -> Value {
    json!({ "key": FOREIGN, "effect": "NoExecute", "timeAdded": "2024-05-01T10:00:00Z" })
}

pub fn annotation<'a>(job: &'a Job, key: &str) -> &'a str {
    job.metadata.annotations.as_ref().unwrap()[key].as_str()
}

/// How many passes a controller has run (its `/metrics`).
pub fn passes(metrics: &Metrics) -> u64 {
    metric(metrics, "fleet_pass_seconds_count")
}

pub fn metric(metrics: &Metrics, name: &str) -> u64 {
    metrics
        .encode()
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0)
}

/// Polls `f` until it finds something, bounded: for state in Redis and in the controller's
/// metrics, which tell no one when they change.
pub async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    bounded(what, async {
        loop {
            if let Some(found) = f().await {
                return found;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

/// A controller as `fleet serve --kubernetes` builds it (`src/cli/serve.rs`), with its loops
/// short: a pass every 100 ms, a Job read every 100 ms, a sweep every 100 ms.
pub struct Fleet {
    pub holder: String,
    pub metrics: Arc<Metrics>,
    pub stop: CancellationToken,
    pub task: tokio::task::JoinHandle<()>,
}

impl Fleet {
    pub fn leads(&self) -> bool {
        self.metrics.leader.get() == 1
    }

    /// Waits until this controller has run `n` more passes.
    pub async fn passes(&self, n: u64) {
        let from = passes(&self.metrics);
        eventually("passes", || async {
            (passes(&self.metrics) >= from + n).then_some(())
        })
        .await;
    }

    /// A clean stop (SIGTERM): the lease is released, operations in flight are left running.
    pub async fn stop(self) {
        self.stop.cancel();
        bounded("the controller to stop", self.task).await.unwrap();
    }
}

/// One scenario's world: Redis, the API server and the configuration.
pub struct Scene {
    pub redis: RedisServer,
    pub api: ApiServer,
    pub config: Arc<Config>,
    pub store: ClaimStore<MultiplexedConnection>,
    pub presence: Presence<MultiplexedConnection>,
}

impl Scene {
    pub async fn new(timings: &str) -> Scene {
        Scene::of(config(timings)).await
    }

    /// A scene of another configuration.
    pub async fn of(config: Config) -> Scene {
        let redis = support::server();
        let store = ClaimStore::new(conn(&redis).await, Keys::default());
        let presence = Presence::new(conn(&redis).await, Keys::default());
        Scene {
            api: ApiServer::default(),
            config: Arc::new(config),
            store,
            presence,
            redis,
        }
    }

    pub async fn serve(&self, holder: &str) -> Fleet {
        let client = self.api.client();
        let manager = self.redis.endpoint().open_lasting().await.unwrap();
        let metrics = Arc::new(Metrics::default());
        let stop = CancellationToken::new();
        let (signal, leadership) = Signal::new();
        let reporter = JobReporter::new(
            client.clone(),
            NAMESPACE,
            ClaimStore::new(manager.clone(), Keys::default()),
        )
        .every(INTERVAL);
        tokio::spawn(reporter.run(leadership, stop.clone()));
        let events = Events::start(
            client.clone(),
            NAMESPACE.to_owned(),
            holder.to_owned(),
            metrics.kubernetes_events_dropped.clone(),
            stop.clone(),
        );
        let nodes = KubeNodes::start(client.clone(), stop.clone()).with_events(events);
        let runner = Dispatch {
            commands: support::exec(&self.redis),
            jobs: JobRunner::new(client, NAMESPACE).polling_every(INTERVAL),
        };
        // A fixed configuration: the controller reads the channel's value and never waits on it.
        let (_, rx) = tokio::sync::watch::channel(self.config.clone());
        let lease = Lease::new(
            manager.clone(),
            Keys::default(),
            holder.to_owned(),
            Duration::from_secs(1),
        );
        let controller = Controller::new(
            rx,
            Presence::new(manager.clone(), Keys::default()),
            ClaimStore::new(manager, Keys::default()),
            Arc::new(runner),
            metrics.clone(),
            Arc::new(Health::default()),
        )
        .with_nodes(nodes)
        .with_lease(lease)
        .announcing(signal)
        .with_faults(Faults {
            blind_grace: GRACE,
            ..Faults::default()
        });
        // No grace at a stop: operations in flight are left running, as `fleet serve` leaves
        // them by default.
        let task = tokio::spawn(controller.run_leading(INTERVAL, Duration::ZERO, stop.clone()));
        Fleet {
            holder: holder.to_owned(),
            metrics,
            stop,
            task,
        }
    }

    /// A claim on bench-01, as the provider or `fleet claim` makes one.
    pub async fn claim(&self) -> Claim {
        let timings = &self.config.groups[&group()].timings;
        request_claim_with(&self.redis, "pool-a", "bench-01", "bench-01-1", timings).await
    }

    pub async fn the_claim(&self) -> Claim {
        let name = ClaimName::parse("bench-01-1").unwrap();
        let groups = self.store.read_groups(&[group()]).await.unwrap();
        groups[0]
            .claims
            .iter()
            .find(|c| c.name == name)
            .cloned()
            .expect("the claim")
    }

    /// Waits until the claim satisfies `f`.
    pub async fn claim_until(&self, what: &str, f: impl Fn(&Claim) -> bool) -> Claim {
        eventually(what, || async {
            let c = self.the_claim().await;
            f(&c).then_some(c)
        })
        .await
    }

    /// The machine's power as its bench says it: beating for an hour, or dark at once.
    pub async fn power(&self, on: bool) {
        let ttl = if on {
            Duration::from_secs(3600)
        } else {
            Duration::ZERO
        };
        self.presence.beat(&beat("bench-01", ttl)).await.unwrap();
    }

    /// A scale-down marks the claim for deletion (cluster-autoscaler's DeleteNodes).
    pub async fn mark(&self) {
        let c = self.the_claim().await;
        let marked = c.mark_for_deletion(Reason::NodeDeleted).unwrap();
        assert!(self.store.write(&c, &marked, None).await.unwrap());
    }

    /// The server's clock, which every deadline of the claim is on.
    pub async fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.store.now().await.unwrap()
    }

    /// The Job of `kind` once it exists.
    pub async fn job(&self, kind: OperationKind) -> Job {
        self.api
            .until(&format!("the {} Job", kind.as_str()), |w| {
                w.jobs()
                    .into_iter()
                    .find(|j| annotation(j, "fleet.dev/operation") == kind.as_str())
            })
            .await
    }

    /// The startup from the claim to a Node that is usable: the Job runs (the machine beats),
    /// kubelet registers `registered`, Cilium lifts its taint. Returns the Node's
    /// resourceVersion then, which nothing changes until the claim is marked.
    pub async fn boot(&self, registered: Node) -> String {
        self.claim().await;
        let job = self.job(OperationKind::Startup).await;
        self.power(true).await;
        self.api
            .finish_job(job.metadata.name.as_deref().unwrap(), None, "powered on");
        self.api.put_node(&registered);
        let usable = self.api.edit_node(NODE, |n| {
            let taints = n.spec.as_mut().unwrap().taints.as_mut().unwrap();
            taints.retain(|t| t.key != CILIUM);
        });
        self.claim_until("ready", |c| c.phase == Phase::Ready).await;
        usable
    }
}

/// The Events the controllers published, by reason, with what they are about.
pub fn event<'a>(events: &'a [Value], reason: &str) -> Option<&'a Value> {
    events.iter().find(|e| e["reason"] == json!(reason))
}

/// Every call served is one `deploy/base/rbac.yaml` grants fleet's account: the ClusterRole's
/// rules anywhere, a Role's in its namespace.
pub fn assert_granted(served: &[Served]) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/base/rbac.yaml");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&std::fs::read_to_string(path).unwrap())
        .expect("rbac.yaml reads as YAML");
    let rules: Vec<(Option<String>, &Value)> = docs
        .iter()
        .filter(|d| d["kind"] == json!("ClusterRole") || d["kind"] == json!("Role"))
        .flat_map(|d| {
            let ns = d["metadata"]["namespace"].as_str().map(str::to_owned);
            let rules = d["rules"].as_array().unwrap();
            rules.iter().map(move |r| (ns.clone(), r))
        })
        .collect();
    let has = |list: &Value, want: &str| list.as_array().unwrap().iter().any(|v| v == want);
    for s in served {
        let kind = s
            .kind
            .unwrap_or_else(|| panic!("{} {}: not a path fleet may call", s.method, s.path));
        let (api_group, resource) = kind.rbac();
        let granted = rules.iter().any(|(ns, r)| {
            ns.as_ref()
                .is_none_or(|ns| s.namespace.as_ref() == Some(ns))
                && has(&r["apiGroups"], api_group)
                && has(&r["resources"], resource)
                && has(&r["verbs"], s.verb)
        });
        assert!(
            granted,
            "{} {} ({} {resource} in {:?}) is not granted by deploy/base/rbac.yaml",
            s.method, s.path, s.verb, s.namespace
        );
    }
}
