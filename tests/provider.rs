//! The cluster-autoscaler provider's service over a real socket with the generated client
//! (SPEC §6.2), against a real redis-server. The provider is not yet served by `fleet serve`.

mod support;

use std::path::Path;
use std::sync::Arc;

use fleet::config;
use fleet::provider::service::{FAKE_NODE_REASON, Provider};
use fleet::provider::wire::cloud_provider_client::CloudProviderClient;
use fleet::provider::wire::cloud_provider_server::CloudProviderServer;
use fleet::provider::wire::instance_status::InstanceState;
use fleet::provider::wire::*;
use fleet::store::claims::ClaimStore;
use fleet::store::keys::Keys;
use fleet::testing::RedisServer;
use support::*;
use tonic::Code;
use tonic::transport::Channel;

const YAML: &str = r#"groups:
  - name: pool-a
    min_size: 1
    max_size: 2
    startup: { command: ["true"] }
    shutdown: { command: ["true"] }
slots:
  - { name: bench-01, group: pool-a }
  - { name: bench-02, group: pool-a }
  - { name: bench-03, group: pool-a, provider_id: "ipmi://10.0.0.3" }
"#;

async fn provider(server: &RedisServer) -> CloudProviderClient<Channel> {
    let cfg = Arc::new(config::parse(YAML, Path::new("t.yaml")).unwrap());
    let (tx, rx) = tokio::sync::watch::channel(cfg);
    std::mem::drop(tx);
    let service = Provider::new(rx, ClaimStore::new(conn(server).await, Keys::default()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(CloudProviderServer::new(service))
            .serve_with_incoming(incoming),
    );
    CloudProviderClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
}

fn node(provider_id: &str, name: &str, fake: bool) -> ExternalGrpcNode {
    let mut n = ExternalGrpcNode {
        provider_id: provider_id.into(),
        name: name.into(),
        ..Default::default()
    };
    if fake {
        n.annotations
            .insert(FAKE_NODE_REASON.into(), "create-error".into());
    }
    n
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
        [("pool-a", 1, 2)]
    );
    let by_id = c
        .node_group_for_node(NodeGroupForNodeRequest {
            node: Some(node("ipmi://10.0.0.3", "whatever", false)),
        })
        .await
        .unwrap();
    assert_eq!(by_id.into_inner().node_group.unwrap().id, "pool-a");
    let by_name = c
        .node_group_for_node(NodeGroupForNodeRequest {
            node: Some(node("", "bench-01", false)),
        })
        .await
        .unwrap();
    assert_eq!(by_name.into_inner().node_group.unwrap().max_size, 2);
    let foreign = c
        .node_group_for_node(NodeGroupForNodeRequest {
            node: Some(node("aws:///x", "control-plane", false)),
        })
        .await
        .unwrap();
    assert_eq!(
        foreign.into_inner().node_group.unwrap().id,
        "",
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
            Code::InvalidArgument
        ]
    );
    assert_eq!(target(&mut c).await, 0);
    let unimplemented = c
        .pricing_pod_price(PricingPodPriceRequest::default())
        .await
        .unwrap_err();
    assert_eq!(unimplemented.code(), Code::Unimplemented);
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
