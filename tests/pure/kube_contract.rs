//! Contract tests of fleet's Node and Event calls against a mocked API server (tower-test's mock
//! pair under `kube::Client::new`, as kube's own tests do): the exact method, path, query and
//! body of the Node watch, fleet's cordon, its release (uncordon, cluster-autoscaler's leftovers,
//! the group's taints), the provider-ID patch, the Node delete with preconditions, and Event
//! creation and series patch; and sight from the watch (an error is blindness until a full list).
//!
//! What this cannot prove (SPEC §3.12): that a real API server accepts these bodies (validation,
//! admission), answers 409 as kube-apiserver does, or that RBAC grants them: the RBAC in
//! `deploy/base/rbac.yaml` is checked against the calls recorded here instead.

#[path = "../support/kube.rs"]
#[allow(dead_code)]
mod kube_mock;

use std::time::Duration;

use fleet::domain::claim::{OperationKind, Phase, Reason};
use fleet::domain::name::{BenchName, ClaimName, GroupName};
use fleet::domain::node::{self, TaintEdit};
use fleet::domain::slot::{NodeAction, NodeWrite};
use fleet::kubernetes::events::{self, Events};
use fleet::kubernetes::nodes::KubeNodes;
use fleet::reconcile::{ClaimMove, NodeWarning, NodeWriteError, Nodes};
use kube_mock::{ApiServer, Call, mock_client, status};
use prometheus_client::metrics::counter::Counter;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// Every call fleet's Node and Event code makes, as (method, path template, RBAC verb, API
/// group, resource, namespace the RBAC rule must cover: `*` for cluster scope).
pub const NODE_CALLS: [(&str, &str, &str, &str, &str, &str); 6] = [
    ("GET", "/api/v1/nodes", "list", "", "nodes", "*"),
    ("GET", "/api/v1/nodes?watch", "watch", "", "nodes", "*"),
    ("PATCH", "/api/v1/nodes/{name}", "patch", "", "nodes", "*"),
    ("DELETE", "/api/v1/nodes/{name}", "delete", "", "nodes", "*"),
    (
        "POST",
        "/apis/events.k8s.io/v1/namespaces/{namespace}/events",
        "create",
        "events.k8s.io",
        "events",
        "default,fleet",
    ),
    (
        "PATCH",
        "/apis/events.k8s.io/v1/namespaces/{namespace}/events/{name}",
        "patch",
        "events.k8s.io",
        "events",
        "default,fleet",
    ),
];

/// The entry of `NODE_CALLS` a call is; a call that is none fails the test.
fn node_call(call: &Call) -> &'static str {
    let watch = call.query.split('&').any(|q| q == "watch=true");
    let parts: Vec<&str> = call.path.trim_start_matches('/').split('/').collect();
    NODE_CALLS
        .iter()
        .find_map(|(method, template, ..)| {
            let (path, wants_watch) = match template.split_once('?') {
                Some((p, _)) => (p, true),
                None => (*template, false),
            };
            let want: Vec<&str> = path.trim_start_matches('/').split('/').collect();
            let fits = *method == call.method
                && wants_watch == watch
                && want.len() == parts.len()
                && want
                    .iter()
                    .zip(&parts)
                    .all(|(w, p)| (w.starts_with('{') && !p.is_empty()) || w == p);
            fits.then_some(*template)
        })
        .unwrap_or_else(|| {
            panic!(
                "{} {}?{} is not in NODE_CALLS",
                call.method, call.path, call.query
            )
        })
}

fn node_json(rv: &str, taints: Value, provider_id: Option<&str>, ready: &str) -> Value {
    let mut spec = json!({ "taints": taints });
    if let Some(p) = provider_id {
        spec["providerID"] = json!(p);
    }
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": { "name": "node-01", "uid": "uid-1", "resourceVersion": rv },
        "spec": spec,
        "status": { "conditions": [ { "type": "Ready", "status": ready } ] },
    })
}

fn node_list(rv: &str, items: Vec<Value>) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "NodeList",
        "metadata": { "resourceVersion": rv },
        "items": items,
    })
}

/// Someone else's taint, with the `timeAdded` kubelet or a CNI wrote: kept byte for byte.
fn others_taint() -> Value {
    json!({ "key": "example.com/maintenance", "effect": "NoExecute", "value": "x", "timeAdded": "2026-11-30T10:00:00Z" })
}

/// Starts the watch and answers its first list with `node`; the watch request that follows is
/// left unanswered (a quiet watch). Returns once the Nodes read.
async fn listed(node: Value) -> (KubeNodes, ApiServer, CancellationToken) {
    let (client, mut api) = mock_client("fleet");
    let stop = CancellationToken::new();
    let nodes = KubeNodes::start(client, stop.clone());
    assert!(nodes.read().await.is_err(), "unseen until the first list");
    let list = api.answer(200, node_list("10", vec![node])).await;
    assert_eq!(node_call(&list), "/api/v1/nodes");
    assert!(!list.query.contains("watch"), "a full list: {}", list.query);
    // The watch follows the list, from its resourceVersion, with a short server timeout.
    let (watch, _quiet) = api.next().await.unwrap();
    assert_eq!(node_call(&watch), "/api/v1/nodes?watch");
    assert!(
        watch.query.contains("resourceVersion=10"),
        "{}",
        watch.query
    );
    assert!(watch.query.contains("timeoutSeconds=50"), "{}", watch.query);
    std::mem::forget(_quiet);
    wait_until(|| async { nodes.read().await.is_ok() }).await;
    (nodes, api, stop)
}

async fn wait_until<F, Fut>(ok: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = bool>,
{
    tokio::time::timeout(Duration::from_secs(10), async {
        while !ok().await {
            // A poll of state another task changes; a timer, not a bare yield, so a paused
            // clock can advance and a loaded machine is not spun on.
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("the condition within 10s");
}

fn write(action: NodeAction) -> NodeWrite {
    NodeWrite {
        node: "node-01".into(),
        uid: "uid-1".into(),
        resource_version: "10".into(),
        action,
        must_land: false,
    }
}

/// Runs `w` against the mock, answering its one request with `answer`; returns the call and
/// the write's result.
async fn written(
    nodes: &KubeNodes,
    api: &mut ApiServer,
    w: NodeWrite,
    answer: (u16, Value),
) -> (Call, Result<(), NodeWriteError>) {
    let nodes = nodes.clone();
    let task = tokio::spawn(async move { nodes.write(&w).await });
    let call = api.answer(answer.0, answer.1).await;
    (call, task.await.unwrap())
}

// The Node becomes a view: identity, provider ID, Ready exactly True, taints; a taint with an
// effect Kubernetes does not define is left out of the view (and kept by writes).
#[tokio::test]
async fn the_watch_lists_the_nodes_into_views() {
    let taints = json!([others_taint(), { "key": "odd", "effect": "Sometimes" }]);
    let (nodes, _api, stop) =
        listed(node_json("10", taints, Some("fleet://bench-01"), "True")).await;
    let views = nodes.read().await.unwrap();
    assert_eq!(views.len(), 1);
    let v = &views[0];
    assert_eq!(
        (v.name.as_str(), v.uid.as_str(), v.resource_version.as_str()),
        ("node-01", "uid-1", "10")
    );
    assert_eq!(v.provider_id.as_deref(), Some("fleet://bench-01"));
    assert!(v.ready);
    assert_eq!(
        v.taints,
        vec!["example.com/maintenance=x:NoExecute".parse().unwrap()]
    );
    stop.cancel();
}

// SPEC §3.12 2: an error on the watch is blindness until a complete list lands again; the next
// request after the error is a full list, not a resumed watch.
#[tokio::test(start_paused = true)]
async fn a_broken_watch_is_blindness_until_the_next_full_list() {
    let (client, mut api) = mock_client("fleet");
    let stop = CancellationToken::new();
    let nodes = KubeNodes::start(client, stop.clone());
    api.answer(
        200,
        node_list("10", vec![node_json("10", json!([]), None, "True")]),
    )
    .await;
    let watch = api
        .answer(500, status(500, "InternalError", "etcd is gone"))
        .await;
    assert_eq!(node_call(&watch), "/api/v1/nodes?watch");
    wait_until(|| async { nodes.read().await.is_err() }).await;
    // The list fails too: still blind.
    let relist = api.drop_connection().await;
    assert_eq!(node_call(&relist), "/api/v1/nodes", "a full list again");
    assert!(nodes.read().await.is_err());
    let relist = api
        .answer(
            200,
            node_list("12", vec![node_json("12", json!([]), None, "False")]),
        )
        .await;
    assert_eq!(node_call(&relist), "/api/v1/nodes");
    wait_until(|| async { nodes.read().await.is_ok() }).await;
    assert!(
        !nodes.read().await.unwrap()[0].ready,
        "the fresh list, not the stale store"
    );
    stop.cancel();
}

// SPEC §3.12 3: fleet's cordon is a merge patch of the whole taint list (an atomic list), built
// from the Node's own, carrying the resourceVersion it was judged at; everyone else's taints
// are kept exactly (timeAdded included); never spec.unschedulable.
#[tokio::test]
async fn the_cordon_is_a_merge_patch_of_the_whole_list_with_the_resource_version() {
    let (nodes, mut api, stop) =
        listed(node_json("10", json!([others_taint()]), None, "True")).await;
    let edit = TaintEdit {
        remove: vec![],
        add: vec![node::fleet_cordon()],
    };
    let (call, result) = written(
        &nodes,
        &mut api,
        write(NodeAction::Taints(edit)),
        (200, node_json("11", json!([]), None, "True")),
    )
    .await;
    assert_eq!(result, Ok(()));
    assert_eq!(node_call(&call), "/api/v1/nodes/{name}");
    assert_eq!(call.path, "/api/v1/nodes/node-01");
    assert_eq!(call.query, "");
    assert_eq!(
        call.body,
        json!({
            "metadata": { "resourceVersion": "10" },
            "spec": { "taints": [
                others_taint(),
                { "key": "fleet.dev/draining", "effect": "NoSchedule" },
            ] },
        })
    );
    // A Node changed since (409): a conflict, retried by a later pass.
    let edit = TaintEdit {
        remove: vec![],
        add: vec![node::fleet_cordon()],
    };
    let (_, result) = written(
        &nodes,
        &mut api,
        write(NodeAction::Taints(edit)),
        (409, status(409, "Conflict", "the object has been modified")),
    )
    .await;
    assert!(
        matches!(result, Err(NodeWriteError::Conflict(_))),
        "{result:?}"
    );
    stop.cancel();
}

// SPEC §3.12 4: the gate's release removes fleet's cordon and cluster-autoscaler's leftovers and
// stamps the group's taints, in one patch.
#[tokio::test]
async fn the_release_removes_fleet_and_autoscaler_taints_and_stamps_the_groups() {
    let taints = json!([
        others_taint(),
        { "key": "fleet.dev/draining", "effect": "NoSchedule" },
        { "key": "ToBeDeletedByClusterAutoscaler", "value": "1700000000", "effect": "NoSchedule" },
        { "key": "DeletionCandidateOfClusterAutoscaler", "value": "1700000000", "effect": "PreferNoSchedule" },
    ]);
    let (nodes, mut api, stop) = listed(node_json("10", taints, None, "True")).await;
    let view = nodes.read().await.unwrap().remove(0);
    let edit = node::release_edit(&view, &["gpu=a:NoSchedule".parse().unwrap()]).unwrap();
    let (call, result) = written(
        &nodes,
        &mut api,
        write(NodeAction::Taints(edit)),
        (200, node_json("11", json!([]), None, "True")),
    )
    .await;
    assert_eq!(result, Ok(()));
    assert_eq!(
        call.body,
        json!({
            "metadata": { "resourceVersion": "10" },
            "spec": { "taints": [
                others_taint(),
                { "key": "gpu", "value": "a", "effect": "NoSchedule" },
            ] },
        })
    );
    stop.cancel();
}

// A write judged on an older version than the store now holds is a conflict at once: the list
// it would send is not the one judged.
#[tokio::test]
async fn a_taint_write_on_a_stale_judgment_sends_nothing() {
    let (nodes, _api, stop) = listed(node_json("10", json!([]), None, "True")).await;
    let mut w = write(NodeAction::Taints(TaintEdit {
        remove: vec![],
        add: vec![node::fleet_cordon()],
    }));
    w.resource_version = "9".into();
    assert!(matches!(
        nodes.write(&w).await,
        Err(NodeWriteError::Conflict(_))
    ));
    stop.cancel();
}

// SPEC §3.12 5: an empty providerID is filled with a merge patch carrying the resourceVersion.
#[tokio::test]
async fn the_provider_id_patch_fills_the_field_under_the_resource_version() {
    let (nodes, mut api, stop) = listed(node_json("10", json!([]), None, "True")).await;
    let (call, result) = written(
        &nodes,
        &mut api,
        write(NodeAction::ProviderId("fleet://bench-01".into())),
        (
            200,
            node_json("11", json!([]), Some("fleet://bench-01"), "True"),
        ),
    )
    .await;
    assert_eq!(result, Ok(()));
    assert_eq!(
        (call.method.as_str(), call.path.as_str()),
        ("PATCH", "/api/v1/nodes/node-01")
    );
    assert_eq!(
        call.body,
        json!({
            "metadata": { "resourceVersion": "10" },
            "spec": { "providerID": "fleet://bench-01" },
        })
    );
    stop.cancel();
}

// SPEC §3.12 6: a stale Node's delete carries uid and resourceVersion preconditions; a Node
// replaced or changed since (409) or gone (404) is a conflict, never a retry of the delete.
#[tokio::test]
async fn the_stale_node_delete_carries_uid_and_resource_version_preconditions() {
    let (nodes, mut api, stop) = listed(node_json("10", json!([]), None, "False")).await;
    let (call, result) = written(
        &nodes,
        &mut api,
        write(NodeAction::Delete),
        (200, status(200, "", "")),
    )
    .await;
    assert_eq!(result, Ok(()));
    assert_eq!(node_call(&call), "/api/v1/nodes/{name}");
    assert_eq!(
        (call.method.as_str(), call.path.as_str()),
        ("DELETE", "/api/v1/nodes/node-01")
    );
    assert_eq!(
        call.body["preconditions"],
        json!({ "uid": "uid-1", "resourceVersion": "10" })
    );
    for code in [404, 409] {
        let (_, result) = written(
            &nodes,
            &mut api,
            write(NodeAction::Delete),
            (code, status(code, "Conflict", "precondition failed")),
        )
        .await;
        assert!(
            matches!(result, Err(NodeWriteError::Conflict(_))),
            "{code}: {result:?}"
        );
    }
    let (_, result) = written(
        &nodes,
        &mut api,
        write(NodeAction::Delete),
        (403, status(403, "Forbidden", "nodes is forbidden")),
    )
    .await;
    assert!(
        matches!(result, Err(NodeWriteError::Failed(_))),
        "{result:?}"
    );
    stop.cancel();
}

fn claim_move(to: Phase, node: bool) -> ClaimMove {
    ClaimMove {
        group: GroupName::parse("pool-a").unwrap(),
        slot: BenchName::parse("bench-01").unwrap(),
        claim: ClaimName::parse("bench-01-1").unwrap(),
        attempt: 1,
        to,
        reason: (to == Phase::Failed).then_some(Reason::ReadinessGateTimeout),
        operation: Some((
            OperationKind::Startup,
            chrono::DateTime::from_timestamp_millis(1_800_000_000_000).unwrap(),
        )),
        node: node.then(|| ("node-01".to_owned(), "uid-1".to_owned())),
        job: true,
        from: Some(Phase::Booting),
        deleted: false,
        at: chrono::DateTime::from_timestamp_millis(1_800_000_130_000).unwrap(),
        requested_at: chrono::DateTime::from_timestamp_millis(1_800_000_000_000).unwrap(),
        deadline_at: (to == Phase::Booting)
            .then(|| chrono::DateTime::from_timestamp_millis(1_800_000_600_000).unwrap()),
        operation_took: Some(std::time::Duration::from_secs(41)),
    }
}

// SPEC §3.12 8: a claim move is one Event: about the Node (in `default`) when bound, else about
// the Job (in fleet's namespace); a repeat becomes a series patch; a failure is a Warning.
#[tokio::test]
async fn claim_moves_are_events_about_the_node_else_the_job_and_repeats_a_series() {
    let (client, mut api) = mock_client("fleet");
    let stop = CancellationToken::new();
    let dropped = Counter::default();
    let events = Events::start(
        client,
        "fleet".into(),
        "fleet-0".into(),
        dropped.clone(),
        stop.clone(),
    );

    events.tell(claim_move(Phase::Ready, true));
    let created = api.answer(201, json!({})).await;
    assert_eq!(
        node_call(&created),
        "/apis/events.k8s.io/v1/namespaces/{namespace}/events"
    );
    assert_eq!(
        created.path,
        "/apis/events.k8s.io/v1/namespaces/default/events"
    );
    let b = &created.body;
    assert_eq!(b["reason"], "ClaimReady");
    assert_eq!(b["type"], "Normal");
    assert_eq!(b["action"], "ClaimMove");
    assert_eq!(b["reportingController"], "fleet");
    assert_eq!(b["reportingInstance"], "fleet-0");
    assert_eq!(
        b["regarding"],
        json!({ "apiVersion": "v1", "kind": "Node", "name": "node-01", "uid": "uid-1" })
    );
    assert!(
        b["note"].as_str().unwrap().contains("claim bench-01-1"),
        "{b}"
    );

    events.tell(claim_move(Phase::Ready, true));
    let series = api.answer(200, json!({})).await;
    assert_eq!(series.method, "PATCH", "a repeat is a series patch");
    assert_eq!(
        node_call(&series),
        "/apis/events.k8s.io/v1/namespaces/{namespace}/events/{name}"
    );
    assert_eq!(series.body["series"]["count"], 2);

    events.tell(claim_move(Phase::Failed, false));
    let job = api.answer(201, json!({})).await;
    assert_eq!(job.path, "/apis/events.k8s.io/v1/namespaces/fleet/events");
    assert_eq!(job.body["type"], "Warning");
    assert_eq!(job.body["reason"], "ClaimFailed");
    assert_eq!(job.body["regarding"]["kind"], "Job");
    assert_eq!(job.body["regarding"]["namespace"], "fleet");
    assert!(
        job.body["regarding"]["name"]
            .as_str()
            .unwrap()
            .starts_with("fleet-startup-bench-01-"),
        "{}",
        job.body["regarding"]
    );
    assert_eq!(dropped.get(), 0);
    stop.cancel();
}

// SPEC §3.12 5: a Node whose provider ID is not its slot's is a Warning Event about the Node.
#[tokio::test]
async fn a_node_warning_is_a_warning_event_about_the_node() {
    let (client, mut api) = mock_client("fleet");
    let stop = CancellationToken::new();
    let events = Events::start(
        client,
        "fleet".into(),
        "fleet-0".into(),
        Counter::default(),
        stop.clone(),
    );
    events.warn(NodeWarning {
        node: "node-01".into(),
        uid: "uid-1".into(),
        reason: "ProviderIDMismatch",
        note: "spec.providerID is \"aws:///x\"".into(),
    });
    let call = api.answer(201, json!({})).await;
    assert_eq!(
        call.path,
        "/apis/events.k8s.io/v1/namespaces/default/events"
    );
    assert_eq!(call.body["type"], "Warning");
    assert_eq!(call.body["reason"], "ProviderIDMismatch");
    assert_eq!(call.body["regarding"]["kind"], "Node");
    assert_eq!(call.body["regarding"]["uid"], "uid-1");
    stop.cancel();
}

// The pass never waits for the API server: a full queue drops the move and counts it.
#[tokio::test]
async fn a_full_event_queue_drops_and_counts() {
    let (client, _api) = mock_client("fleet");
    let stop = CancellationToken::new();
    let dropped = Counter::default();
    let events = Events::start(
        client,
        "fleet".into(),
        "fleet-0".into(),
        dropped.clone(),
        stop.clone(),
    );
    // On this one-thread runtime the publisher cannot run between these calls: the queue holds
    // QUEUE moves and the rest are dropped.
    for _ in 0..events::QUEUE + 2 {
        events.tell(claim_move(Phase::Ready, true));
    }
    assert_eq!(dropped.get(), 2);
    stop.cancel();
}

// SPEC §3.12 8: a move about neither a Node nor a Job is about the claim itself, a NodeClaim of
// fleet.dev/v1 in fleet's namespace.
#[test]
fn a_move_about_no_node_or_job_is_about_the_claim_as_a_nodeclaim() {
    let mut m = claim_move(Phase::Ready, false);
    m.job = false;
    let about = events::regarding(&m, "fleet");
    assert_eq!(
        serde_json::to_value(&about).unwrap(),
        json!({"apiVersion": "fleet.dev/v1", "kind": "NodeClaim", "name": "bench-01-1", "namespace": "fleet"})
    );
    assert_eq!(
        events::event(&claim_move(Phase::Completed, true)).reason,
        "ClaimCompleted"
    );
}

// SPEC §3.12 8: every accepted move has its Event's reason, and the note carries the attempt, the
// operation or its Job, the deadline and how long the move took.
#[test]
fn every_kind_of_move_has_its_reason_and_a_note_that_says_it_whole() {
    let moved = |from: Option<Phase>, to: Phase, reason: Option<Reason>, deleted: bool| {
        let mut m = claim_move(to, false);
        (m.from, m.reason, m.deleted) = (from, reason, deleted);
        events::event(&m)
    };
    let cases = [
        (None, Phase::Pending, None, false, "ClaimCreated", "Normal"),
        (
            None,
            Phase::Ready,
            Some(Reason::Adopted),
            false,
            "ClaimCreated",
            "Normal",
        ),
        (
            Some(Phase::Pending),
            Phase::Booting,
            None,
            false,
            "ClaimBooting",
            "Normal",
        ),
        (
            Some(Phase::Booting),
            Phase::Ready,
            None,
            false,
            "ClaimReady",
            "Normal",
        ),
        (
            Some(Phase::Booting),
            Phase::Failed,
            Some(Reason::DeadlineExceeded),
            false,
            "ClaimFailed",
            "Warning",
        ),
        (
            Some(Phase::Pending),
            Phase::Failed,
            Some(Reason::Superseded),
            false,
            "ClaimSuperseded",
            "Normal",
        ),
        (
            Some(Phase::Ready),
            Phase::Completed,
            Some(Reason::Superseded),
            false,
            "ClaimSuperseded",
            "Normal",
        ),
        (
            Some(Phase::Ready),
            Phase::Completed,
            Some(Reason::DeletedByHand),
            false,
            "ClaimCancelled",
            "Normal",
        ),
        (
            Some(Phase::Ready),
            Phase::Completed,
            Some(Reason::CancelledByDecreaseTargetSize),
            false,
            "ClaimCancelled",
            "Normal",
        ),
        (
            Some(Phase::Pending),
            Phase::Pending,
            None,
            true,
            "ClaimCancelled",
            "Normal",
        ),
        (
            Some(Phase::Ready),
            Phase::Completed,
            Some(Reason::NodeDeleted),
            false,
            "ClaimCompleted",
            "Normal",
        ),
    ];
    for (from, to, reason, deleted, want, type_) in cases {
        let e = moved(from, to, reason, deleted);
        assert_eq!(
            e.reason, want,
            "{from:?} -> {to:?} ({reason:?}, deleted {deleted})"
        );
        assert_eq!(format!("{:?}", e.type_), type_, "{want}");
    }
    let mut booting = claim_move(Phase::Booting, false);
    booting.from = Some(Phase::Pending);
    booting.operation_took = None;
    let note = events::event(&booting).note.unwrap();
    assert!(note.starts_with("claim bench-01-1 of slot bench-01 (group pool-a, attempt 1) moved pending -> booting; 2m10s since requested; startup (Job fleet-startup-bench-01-"), "{note}");
    assert!(
        note.ends_with(") running; deadline 2027-01-15T08:10:00Z"),
        "{note}"
    );
    let ready = events::event(&claim_move(Phase::Ready, true)).note.unwrap();
    assert!(
        ready.contains("moved booting -> ready") && ready.contains("took 41s"),
        "{ready}"
    );
    let cancelled = moved(Some(Phase::Pending), Phase::Pending, None, true)
        .note
        .unwrap();
    assert!(
        cancelled.contains("was cancelled while pending (deleted)"),
        "{cancelled}"
    );
}

/// The (API group, resource, verb, namespace) every call of fleet needs: the Node and Event calls
/// above and the Job calls of `tests/redis/jobs_contract.rs` (in fleet's namespace, `fleet` in
/// `deploy/`).
fn needed() -> std::collections::BTreeSet<(String, String, String, String)> {
    let mut needed = std::collections::BTreeSet::new();
    for (_, _, verb, group, resource, namespaces) in NODE_CALLS {
        for ns in namespaces.split(',') {
            needed.insert((group.into(), resource.into(), verb.into(), ns.into()));
        }
    }
    for (_, _, verb, group, resource) in kube_mock::JOB_CALLS {
        needed.insert((group.into(), resource.into(), verb.into(), "fleet".into()));
    }
    needed
}

/// What `deploy/base/rbac.yaml` grants fleet's ServiceAccount, in the same shape (`*` for a
/// ClusterRole's rules).
fn granted() -> std::collections::BTreeSet<(String, String, String, String)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/base/rbac.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    let mut granted = std::collections::BTreeSet::new();
    for doc in docs {
        let scope = match doc["kind"].as_str() {
            Some("ClusterRole") => "*".to_owned(),
            Some("Role") => doc["metadata"]["namespace"].as_str().unwrap().to_owned(),
            _ => continue,
        };
        for rule in doc["rules"].as_array().unwrap() {
            let strings = |v: &Value| -> Vec<String> {
                v.as_array()
                    .unwrap()
                    .iter()
                    .map(|s| s.as_str().unwrap().to_owned())
                    .collect()
            };
            for group in strings(&rule["apiGroups"]) {
                for resource in strings(&rule["resources"]) {
                    for verb in strings(&rule["verbs"]) {
                        granted.insert((group.clone(), resource.clone(), verb, scope.clone()));
                    }
                }
            }
        }
    }
    granted
}

// The RBAC in deploy/ grants every call the contract tests recorded, and
// nothing more (least privilege is checked, not claimed).
#[test]
fn the_rbac_grants_exactly_the_calls_fleet_makes() {
    let (needed, granted) = (needed(), granted());
    let missing: Vec<_> = needed.difference(&granted).collect();
    let extra: Vec<_> = granted.difference(&needed).collect();
    assert!(
        missing.is_empty(),
        "calls the RBAC does not grant: {missing:?}"
    );
    assert!(extra.is_empty(), "grants no call needs: {extra:?}");
}
