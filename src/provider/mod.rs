//! The cluster-autoscaler provider: Kubernetes cluster-autoscaler's `externalgrpc` protocol
//! (SPEC §6).
//!
//! The wire types are generated from `proto/externalgrpc.proto` at build time (protox and
//! tonic-prost-build; no system protoc) and never leave this folder: the rest of fleet speaks
//! domain types, and the conversions live here. The sizing rules are `domain::sizing`'s; this
//! folder reads, writes and converts.
//!
//! - [`service`]: the gRPC service: validate → call → convert → one mapping to a status.
//! - [`server`]: serving it, plaintext or (mutual) TLS, and closing connections on deposition.
//! - [`convert`]: every conversion between the wire and fleet's types.
//! - [`pricing`]: the energy prices of a machine and of a pod (PricingNodePrice, PricingPodPrice).
//! - [`template`]: a group's template as a Kubernetes Node.
//! - [`client`]: `fleet autoscaler`, cluster-autoscaler's calls from the command line.
//! - `validate`, `groups` (the executor over the store and the command layer), `current` (the
//!   configuration and its catalog), `leader` (leader gating), `snapshot` (stale reads),
//!   `error` (the one mapping to `Status`) and `calls` (counting calls) are private.

mod calls;
pub mod client;
pub mod convert;
mod current;
mod error;
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
}
