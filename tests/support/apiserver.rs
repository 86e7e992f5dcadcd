//! A scripted Kubernetes API server for scenario tests: an in-process `tower::Service` under
//! `kube::Client::new`, holding a few Nodes, Jobs, Pods and Events (as the API server stores
//! them, JSON) and answering the calls fleet's `KubeNodes`, `JobRunner`, Job `Reporter` and
//! Event `Recorder` make, with the API server's own rules where fleet depends on them:
//!
//! - every write bumps one cluster-wide resourceVersion; list answers carry it, and a watch
//!   started at a version is first sent every change after it (JSON lines on a streaming body);
//! - a merge patch (`application/merge-patch+json` only) carrying a stale
//!   `metadata.resourceVersion` is refused with 409 Conflict, as is a delete whose uid or
//!   resourceVersion precondition does not hold; a create of a name that exists is 409
//!   AlreadyExists; a missing object is 404 NotFound;
//! - every call is recorded as served (method, path pattern, RBAC verb, group, resource,
//!   namespace, status, body), so a test can assert the exact calls and cross-check the RBAC.
//!
//! The test plays everyone else through the script's methods: kubelet and Cilium (`put_node`,
//! `edit_node`), the Job controller (`finish_job`, which also leaves the Job's pod), and faults
//! (`cut_nodes`: open Node watches break and Node calls are refused; `hold_job_creates`).
//!
//! What it cannot prove: the real API server's validation, defaulting and admission, RBAC
//! enforcement, 410 Gone and watch-cache behaviour, bookmarks, paging, server-side apply, and the
//! timing of the real Job controller and kubelet.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Request;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Node;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

// The file's own folder: this module is included by `#[path]`, which resolves from here.
#[path = "apiserver/protocol.rs"]
mod protocol;

/// fleet's namespace in these scenarios: its Jobs, and the Events about them.
pub const NAMESPACE: &str = "fleet";

/// The longest a test waits for the API server to see something.
const BOUND: Duration = Duration::from_secs(20);

/// The kinds fleet touches, with where the API serves them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Node,
    Job,
    Pod,
    Event,
}

impl Kind {
    fn api_version(self) -> &'static str {
        match self {
            Kind::Node | Kind::Pod => "v1",
            Kind::Job => "batch/v1",
            Kind::Event => "events.k8s.io/v1",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Node => "Node",
            Kind::Job => "Job",
            Kind::Pod => "Pod",
            Kind::Event => "Event",
        }
    }

    /// The RBAC API group and resource.
    pub fn rbac(self) -> (&'static str, &'static str) {
        match self {
            Kind::Node => ("", "nodes"),
            Kind::Job => ("batch", "jobs"),
            Kind::Pod => ("", "pods"),
            Kind::Event => ("events.k8s.io", "events"),
        }
    }
}

/// One call as the server saw it.
#[derive(Clone, Debug)]
pub struct Served {
    pub method: String,
    /// The path with `{namespace}` and `{name}` for the concrete ones.
    pub pattern: String,
    pub path: String,
    pub query: String,
    /// The RBAC verb: get, list, watch, create, patch, delete (`unknown` for a path not served).
    pub verb: &'static str,
    pub kind: Option<Kind>,
    pub namespace: Option<String>,
    pub content_type: String,
    /// The JSON body, `Null` when none.
    pub body: Value,
    /// The answer's status; 0 when the call was refused without one (a connection refused).
    pub status: u16,
    /// When it was answered.
    pub at: tokio::time::Instant,
}

impl Served {
    /// The (method, pattern) pair, for asserting call lists.
    pub fn call(&self) -> (String, String) {
        (self.method.clone(), self.pattern.clone())
    }
}

type Key = (Kind, String, String);
/// Someone else's change to a Node.
type NodeEdit = Box<dyn FnOnce(&mut Node) + Send>;
type Line = Result<Vec<u8>, std::io::Error>;

struct Watcher {
    kind: Kind,
    namespace: Option<String>,
    lines: mpsc::UnboundedSender<Line>,
}

/// What the server holds. Tests read it through `ApiServer::until` and the accessors.
#[derive(Default)]
pub struct World {
    version: u64,
    objects: BTreeMap<Key, Value>,
    /// Every change, for a watch that starts at an older version.
    history: Vec<(u64, Kind, String, &'static str, Value)>,
    watchers: Vec<Watcher>,
    served: Vec<Served>,
    nodes_cut: bool,
    holding_creates: bool,
    held: usize,
    /// Someone else's change that lands just before the next Node patch is judged.
    racing: Option<NodeEdit>,
}

impl World {
    pub fn served(&self) -> &[Served] {
        &self.served
    }

    /// The calls served with `method` on `pattern`.
    pub fn calls(&self, method: &str, pattern: &str) -> Vec<&Served> {
        self.served
            .iter()
            .filter(|s| s.method == method && s.pattern == pattern)
            .collect()
    }

    pub fn node(&self, name: &str) -> Option<Node> {
        let key = (Kind::Node, String::new(), name.to_owned());
        self.objects.get(&key).map(|v| typed(v.clone()))
    }

    pub fn jobs(&self) -> Vec<Job> {
        self.of(Kind::Job).into_iter().map(typed).collect()
    }

    /// Every resourceVersion the Node named `name` had, in order (its deletion's last).
    pub fn node_versions(&self, name: &str) -> Vec<String> {
        self.history
            .iter()
            .filter(|(_, kind, _, _, o)| {
                *kind == Kind::Node && o["metadata"]["name"] == json!(name)
            })
            .map(|(version, ..)| version.to_string())
            .collect()
    }

    /// The Events, as stored (their series patches applied).
    pub fn events(&self) -> Vec<Value> {
        self.of(Kind::Event)
    }

    /// Job creates waiting behind `hold_job_creates`.
    pub fn held_creates(&self) -> usize {
        self.held
    }

    fn of(&self, kind: Kind) -> Vec<Value> {
        self.objects
            .iter()
            .filter(|((k, ..), _)| *k == kind)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Stores `object` (or removes it, for DELETED) at a new version and tells the watches.
    fn change(&mut self, key: Key, kind_of_change: &'static str, mut object: Value) -> Value {
        self.version += 1;
        object["metadata"]["resourceVersion"] = json!(self.version.to_string());
        object["apiVersion"] = json!(key.0.api_version());
        object["kind"] = json!(key.0.name());
        if kind_of_change == "DELETED" {
            self.objects.remove(&key);
        } else {
            self.objects.insert(key.clone(), object.clone());
        }
        self.history.push((
            self.version,
            key.0,
            key.1.clone(),
            kind_of_change,
            object.clone(),
        ));
        let line = watch_line(kind_of_change, &object);
        self.watchers.retain(|w| {
            let theirs = w.kind == key.0 && w.namespace.as_ref().is_none_or(|ns| *ns == key.1);
            !theirs || w.lines.send(Ok(line.clone())).is_ok()
        });
        object
    }
}

fn typed<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("a stored object of its kind")
}

fn resource_version(object: &Value) -> String {
    object["metadata"]["resourceVersion"]
        .as_str()
        .expect("a stored object has a resourceVersion")
        .to_owned()
}

fn watch_line(kind_of_change: &str, object: &Value) -> Vec<u8> {
    let mut line = serde_json::to_vec(&json!({ "type": kind_of_change, "object": object }))
        .expect("a JSON line");
    line.push(b'\n');
    line
}

/// The API server; clones share it.
#[derive(Clone)]
pub struct ApiServer {
    world: Arc<Mutex<World>>,
    changed: Arc<watch::Sender<u64>>,
}

impl Default for ApiServer {
    fn default() -> Self {
        ApiServer {
            world: Arc::default(),
            changed: Arc::new(watch::channel(0).0),
        }
    }
}

impl ApiServer {
    /// A client of this server in fleet's namespace; each is its own connection pool, as two
    /// `fleet serve` processes would have.
    pub fn client(&self) -> kube::Client {
        let server = self.clone();
        let service = tower::service_fn(move |request: Request<kube::client::Body>| {
            let server = server.clone();
            async move { server.serve(request).await }
        });
        kube::Client::new(service, NAMESPACE)
    }

    /// Runs `f` over the world and tells every waiter.
    fn with<T>(&self, f: impl FnOnce(&mut World) -> T) -> T {
        let out = f(&mut self.world.lock().expect("the world's lock"));
        self.changed.send_modify(|v| *v += 1);
        out
    }

    /// Reads the world.
    pub fn read<T>(&self, f: impl FnOnce(&World) -> T) -> T {
        f(&self.world.lock().expect("the world's lock"))
    }

    /// Waits, bounded, until `f` finds what it looks for in the world.
    pub async fn until<T>(&self, what: &str, mut f: impl FnMut(&World) -> Option<T>) -> T {
        let mut changed = self.changed.subscribe();
        let wait = async {
            loop {
                if let Some(found) = self.read(&mut f) {
                    return found;
                }
                changed
                    .changed()
                    .await
                    .expect("the server lives as long as its handle");
            }
        };
        tokio::time::timeout(BOUND, wait)
            .await
            .unwrap_or_else(|_| panic!("timed out waiting for the API server: {what}"))
    }

    /// kubelet registers a Node, or replaces it whole. Returns its new resourceVersion.
    pub fn put_node(&self, node: &Node) -> String {
        let name = node.metadata.name.clone().expect("a named Node");
        let value = serde_json::to_value(node).expect("a Node as JSON");
        self.with(|w| {
            let key = (Kind::Node, String::new(), name);
            let kind_of_change = if w.objects.contains_key(&key) {
                "MODIFIED"
            } else {
                "ADDED"
            };
            resource_version(&w.change(key, kind_of_change, value))
        })
    }

    /// Someone else (kubelet, Cilium) changes a Node: a new resourceVersion, a MODIFIED event.
    /// Returns the new resourceVersion.
    pub fn edit_node(&self, name: &str, f: impl FnOnce(&mut Node)) -> String {
        self.with(|w| {
            let key = (Kind::Node, String::new(), name.to_owned());
            let mut node: Node = typed(w.objects.get(&key).expect("the Node exists").clone());
            f(&mut node);
            let value = serde_json::to_value(&node).expect("a Node as JSON");
            resource_version(&w.change(key, "MODIFIED", value))
        })
    }

    /// The Job controller ends a Job: Complete, or Failed with `reason`, its pod terminated
    /// with `message` (the container's termination message).
    pub fn finish_job(&self, name: &str, failed: Option<&str>, message: &str) {
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        self.with(|w| {
            let key = (Kind::Job, NAMESPACE.to_owned(), name.to_owned());
            let mut job = w.objects.get(&key).expect("the Job exists").clone();
            let started = job["metadata"]["creationTimestamp"].clone();
            let (condition, exit) = match failed {
                None => (json!({ "type": "Complete", "status": "True", "lastTransitionTime": now }), 0),
                Some(reason) => (
                    json!({ "type": "Failed", "status": "True", "reason": reason, "lastTransitionTime": now }),
                    1,
                ),
            };
            job["status"] = json!({
                "startTime": started,
                "completionTime": if failed.is_none() { json!(now) } else { Value::Null },
                "succeeded": i32::from(failed.is_none()),
                "failed": i32::from(failed.is_some()),
                "conditions": [condition],
            });
            w.change(key, "MODIFIED", job);
            let pod = json!({
                "metadata": {
                    "name": format!("{name}-pod"),
                    "namespace": NAMESPACE,
                    "labels": { "batch.kubernetes.io/job-name": name },
                },
                "status": { "containerStatuses": [{
                    "name": "operation", "image": "", "imageID": "", "ready": false, "restartCount": 0,
                    "state": { "terminated": { "exitCode": exit, "message": message, "finishedAt": now } },
                }]},
            });
            let pod_key = (Kind::Pod, NAMESPACE.to_owned(), format!("{name}-pod"));
            w.change(pod_key, "ADDED", pod);
        });
    }

    /// The Nodes go out of sight: every open Node watch breaks (its connection reset) and every
    /// Node call is refused, until `mend_nodes`.
    pub fn cut_nodes(&self) {
        self.with(|w| {
            w.nodes_cut = true;
            w.watchers.retain(|watcher| {
                if watcher.kind == Kind::Node {
                    let reset = std::io::Error::new(
                        std::io::ErrorKind::ConnectionReset,
                        "connection reset by peer",
                    );
                    let _ = watcher.lines.send(Err(reset));
                    false
                } else {
                    true
                }
            });
        });
    }

    pub fn mend_nodes(&self) {
        self.with(|w| w.nodes_cut = false);
    }

    /// Someone else (kubelet, say) changes the Node between fleet's read and its next patch:
    /// `f` lands first, so the patch carries a stale resourceVersion.
    pub fn race_next_node_patch(&self, f: impl FnOnce(&mut Node) + Send + 'static) {
        self.with(|w| w.racing = Some(Box::new(f)));
    }

    /// While on, a Job create waits (unanswered, not applied) until it is turned off.
    pub fn hold_job_creates(&self, on: bool) {
        self.with(|w| w.holding_creates = on);
    }
}
