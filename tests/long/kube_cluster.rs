//! Tests that need a real Kubernetes cluster, which cannot run on the machines fleet is built
//! on (no API server, kubelet or container runtime installs here). Each is `#[ignore]`d with its
//! reason; run them against a disposable cluster with
//!
//! ```text
//! FLEET_TEST_NODE=<a node you may taint> cargo test --test long kube_cluster:: -- --ignored
//! ```
//!
//! (KUBECONFIG or ~/.kube/config selects the cluster; the Node must exist and is left as it was.)
//! They prove what the mocked tests cannot: that the API server accepts fleet's merge patches of
//! the taint list under a resourceVersion and refuses a stale one with 409, that a delete's
//! preconditions are honoured, and that the watch lists real Nodes (SPEC §3.12).

use fleet::domain::node;
use fleet::domain::slot::{NodeAction, NodeWrite};
use fleet::kubernetes::client::{self, Settings};
use fleet::kubernetes::nodes::KubeNodes;
use fleet::reconcile::{NodeWriteError, Nodes};
use tokio_util::sync::CancellationToken;

fn test_node() -> String {
    std::env::var("FLEET_TEST_NODE").expect("FLEET_TEST_NODE names a Node the test may taint")
}

async fn nodes() -> (KubeNodes, CancellationToken) {
    let connected = client::connect(&Settings::default())
        .await
        .expect("a kubeconfig for a disposable cluster");
    let stop = CancellationToken::new();
    let nodes = KubeNodes::start(connected.client, stop.clone());
    for _ in 0..100 {
        if nodes.read().await.is_ok() {
            return (nodes, stop);
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("the Nodes were not listed within 10 s");
}

async fn view(nodes: &KubeNodes, name: &str) -> fleet::domain::node::NodeView {
    nodes
        .read()
        .await
        .unwrap()
        .into_iter()
        .find(|n| n.name == name)
        .expect("the test Node")
}

#[tokio::test]
#[ignore = "needs a real cluster: the API server's acceptance of the taint merge patch and its 409 on a stale resourceVersion cannot be mocked faithfully"]
async fn the_cordon_taint_round_trips_and_a_stale_version_is_refused() {
    let (nodes, stop) = nodes().await;
    let name = test_node();
    let before = view(&nodes, &name).await;
    let cordon = NodeWrite {
        node: name.clone(),
        uid: before.uid.clone(),
        resource_version: before.resource_version.clone(),
        action: NodeAction::Taints(node::cordon_edit(&before).expect("the Node is not cordoned")),
        must_land: false,
    };
    nodes.write(&cordon).await.unwrap();
    // The same judgment again is stale now: refused, never applied twice.
    assert!(matches!(
        nodes.write(&cordon).await,
        Err(NodeWriteError::Conflict(_))
    ));
    let mut after = view(&nodes, &name).await;
    for _ in 0..50 {
        if after.cordoned_by_fleet() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        after = view(&nodes, &name).await;
    }
    assert!(after.cordoned_by_fleet());
    let undo = NodeWrite {
        node: name.clone(),
        uid: after.uid.clone(),
        resource_version: after.resource_version.clone(),
        action: NodeAction::Taints(node::uncordon_edit(&after).unwrap_or_default()),
        must_land: false,
    };
    nodes.write(&undo).await.unwrap();
    stop.cancel();
}

#[tokio::test]
#[ignore = "needs a real cluster: delete preconditions are enforced by the API server"]
async fn a_delete_with_a_stale_resource_version_is_refused() {
    let (nodes, stop) = nodes().await;
    let name = test_node();
    let n = view(&nodes, &name).await;
    let delete = NodeWrite {
        node: name,
        uid: n.uid,
        resource_version: "1".into(),
        action: NodeAction::Delete,
        must_land: false,
    };
    assert!(matches!(
        nodes.write(&delete).await,
        Err(NodeWriteError::Conflict(_))
    ));
    stop.cancel();
}
