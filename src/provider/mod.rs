//! The cluster-autoscaler provider: Kubernetes cluster-autoscaler's `externalgrpc` protocol
//! (SPEC §6).
//!
//! The wire types are generated from `proto/externalgrpc.proto`, and the Kubernetes messages
//! inside them (the template Node, the priced Pod) from `proto/k8s.proto`, at build time (protox
//! and tonic-prost-build; no system protoc), and never leave this folder: the rest of fleet speaks
//! domain types, and the conversions live here. The sizing rules are `domain::sizing`'s; this
//! folder reads, writes and converts.
//!
//! - [`service`]: the gRPC service: validate → call → convert → one mapping to a status.
//! - [`server`]: serving it, plaintext or (mutual) TLS, and closing connections on deposition;
//!   [`bounds`]: what its listener bounds of a peer (connections, time, requests in flight).
//! - [`convert`]: every conversion between the wire and fleet's types.
//! - [`pricing`]: the energy prices of a machine and of a pod (PricingNodePrice, PricingPodPrice).
//! - [`template`]: a group's template as a Kubernetes Node.
//! - [`client`]: `fleet autoscaler`, cluster-autoscaler's calls from the command line.
//! - `validate`, `groups` (the executor over the store and the command layer), `current` (the
//!   configuration and its catalog), `leader` (leader gating), `snapshot` (stale reads),
//!   `error` (the one mapping to `Status`) and `calls` (counting calls) are private.

pub mod bounds;
mod calls;
pub mod client;
pub mod convert;
mod current;
mod error;
pub use error::MESSAGE;
mod groups;
mod leader;
pub mod pricing;
pub mod server;
pub mod service;
mod snapshot;
pub mod template;
mod validate;

/// The generated wire types, client and server of `clusterautoscaler.cloudprovider.v1.externalgrpc`.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod wire {
    tonic::include_proto!("clusterautoscaler.cloudprovider.v1.externalgrpc");
}

/// The Kubernetes messages fleet encodes and decodes (a template Node, a priced Pod), trimmed from
/// upstream's to the fields fleet uses, with upstream's numbers and types (`proto/k8s.proto`).
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod k8s {
    tonic::include_proto!("fleet.k8s");
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::wire::*;

    fn hex(bytes: &[u8]) -> String {
        bytes
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    // Golden bytes: the field numbers and types are the wire contract (SPEC §6.1).
    #[test]
    fn an_increase_size_request_encodes_delta_as_field_1_and_id_as_field_2() {
        let m = NodeGroupIncreaseSizeRequest {
            delta: 2,
            id: "a".into(),
        };
        assert_eq!(hex(&m.encode_to_vec()), "08 02 12 01 61");
        let back =
            NodeGroupIncreaseSizeRequest::decode(&[0x08, 0x02, 0x12, 0x01, 0x61][..]).unwrap();
        assert_eq!(back, m);
    }

    #[test]
    fn an_instance_with_an_error_encodes_state_and_error_info() {
        let m = Instance {
            id: "fleet://b".into(),
            status: Some(InstanceStatus {
                instance_state: instance_status::InstanceState::InstanceCreating as i32,
                error_info: Some(InstanceErrorInfo {
                    error_code: "E".into(),
                    error_message: "m".into(),
                    instance_error_class: 1,
                }),
            }),
        };
        // id (1, "fleet://b"), status (2) { state (1) = 2, errorInfo (2) { code "E", message "m", class 1 } }
        assert_eq!(
            hex(&m.encode_to_vec()),
            "0a 09 66 6c 65 65 74 3a 2f 2f 62 12 0c 08 02 12 08 0a 01 45 12 01 6d 18 01"
        );
    }

    #[test]
    fn options_carry_both_duration_forms() {
        let m = NodeGroupAutoscalingOptions {
            max_node_provision_time: Some(LegacyDuration {
                duration: 1_000_000_000,
            }),
            max_node_provision_duration: Some(prost_types::Duration {
                seconds: 1,
                nanos: 0,
            }),
            ..Default::default()
        };
        // field 5 { field 1 = 1e9 ns }, field 10 { seconds = 1 }
        assert_eq!(
            hex(&m.encode_to_vec()),
            "2a 06 08 80 94 eb dc 03 52 02 08 01"
        );
    }

    #[test]
    fn the_template_is_the_same_bytes_in_the_legacy_and_the_new_field() {
        let node = vec![0x0a, 0x03, 0x0a, 0x01, 0x6e];
        let m = NodeGroupTemplateNodeInfoResponse {
            node_info: node.clone(),
            node_bytes: node,
            resource_slice_bytes: vec![],
        };
        assert_eq!(
            hex(&m.encode_to_vec()),
            "0a 05 0a 03 0a 01 6e 12 05 0a 03 0a 01 6e"
        );
    }

    // The Kubernetes messages carry every field fleet uses under upstream's number and type:
    // these are the bytes k8s-pb 0.9 (Kubernetes 1.35.0's generated.proto) wrote for the same
    // values, taken before fleet trimmed the messages into proto/k8s.proto.
    #[test]
    fn a_pod_encodes_each_field_fleet_uses_under_upstreams_number() {
        use super::k8s::*;
        let q = |s: &str| Quantity {
            string: Some(s.into()),
        };
        let pod = Pod {
            metadata: Some(ObjectMeta {
                name: Some("p".into()),
                namespace: Some("n".into()),
                labels: [("l".to_owned(), "v".to_owned())].into(),
                annotations: [("a".to_owned(), "b".to_owned())].into(),
            }),
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: Some("c".into()),
                    resources: Some(ResourceRequirements {
                        limits: [("cpu".to_owned(), q("5"))].into(),
                        requests: [("cpu".to_owned(), q("1"))].into(),
                    }),
                    restart_policy: Some("Always".into()),
                }],
                init_containers: vec![Container {
                    name: Some("i".into()),
                    ..Default::default()
                }],
                resources: Some(ResourceRequirements {
                    requests: [("memory".to_owned(), q("2"))].into(),
                    ..Default::default()
                }),
                overhead: [("cpu".to_owned(), q("3"))].into(),
            }),
            status: Some(PodStatus::default()),
        };
        // metadata (1) { name (1), namespace (3), labels (11), annotations (12) },
        // spec (2) { containers (2) { name (1), resources (8) { limits (1), requests (2) },
        // restartPolicy (24) }, initContainers (20), overhead (32), resources (40) }, status (3)
        let bytes = pod.encode_to_vec();
        assert_eq!(
            hex(&bytes),
            "0a 16 0a 01 70 1a 01 6e 5a 06 0a 01 6c 12 01 76 62 06 0a 01 61 12 01 62 \
             12 4d 12 26 0a 01 63 42 18 0a 0a 0a 03 63 70 75 12 03 0a 01 35 12 0a 0a 03 63 70 75 \
             12 03 0a 01 31 c2 01 06 41 6c 77 61 79 73 a2 01 03 0a 01 69 82 02 0a 0a 03 63 70 75 \
             12 03 0a 01 33 c2 02 0f 12 0d 0a 06 6d 65 6d 6f 72 79 12 03 0a 01 32 1a 00"
        );
        assert_eq!(Pod::decode(bytes.as_slice()).unwrap(), pod);
    }

    #[test]
    fn a_node_encodes_each_field_fleet_uses_under_upstreams_number() {
        use super::k8s::*;
        let q = |s: &str| Quantity {
            string: Some(s.into()),
        };
        let node = Node {
            metadata: Some(ObjectMeta {
                name: Some("n".into()),
                ..Default::default()
            }),
            spec: Some(NodeSpec {
                provider_id: Some("x".into()),
                unschedulable: Some(false),
                taints: vec![Taint {
                    key: Some("k".into()),
                    value: Some("v".into()),
                    effect: Some("e".into()),
                    time_added: Some(Time {
                        seconds: Some(1),
                        nanos: Some(2),
                    }),
                }],
            }),
            status: Some(NodeStatus {
                capacity: [("cpu".to_owned(), q("4"))].into(),
                allocatable: [("cpu".to_owned(), q("3"))].into(),
                phase: Some("Running".into()),
                conditions: vec![NodeCondition {
                    r#type: Some("Ready".into()),
                    status: Some("True".into()),
                    reason: Some("r".into()),
                    message: Some("m".into()),
                }],
                node_info: Some(NodeSystemInfo {
                    operating_system: Some("linux".into()),
                    architecture: Some("amd64".into()),
                }),
            }),
        };
        // metadata (1) { name (1) }, spec (2) { providerID (3), unschedulable (4) = false, taints
        // (5) { key (1), value (2), effect (3), timeAdded (4) { seconds (1), nanos (2) } } },
        // status (3) { capacity (1), allocatable (2), phase (3), conditions (4) { type (1),
        // status (2), reason (5), message (6) }, nodeInfo (7) { operatingSystem (9),
        // architecture (10) } }
        let bytes = node.encode_to_vec();
        assert_eq!(
            hex(&bytes),
            "0a 03 0a 01 6e 12 16 1a 01 78 20 00 2a 0f 0a 01 6b 12 01 76 1a 01 65 22 04 08 01 10 02 \
             1a 46 0a 0a 0a 03 63 70 75 12 03 0a 01 34 12 0a 0a 03 63 70 75 12 03 0a 01 33 1a 07 \
             52 75 6e 6e 69 6e 67 22 13 0a 05 52 65 61 64 79 12 04 54 72 75 65 2a 01 72 32 01 6d \
             3a 0e 4a 05 6c 69 6e 75 78 52 05 61 6d 64 36 34"
        );
        assert_eq!(Node::decode(bytes.as_slice()).unwrap(), node);
    }
}
