//! DRA devices for cluster-autoscaler (SPEC §6.3): a group's template declares the devices each
//! machine has, and the template answer carries them as `resource.k8s.io/v1` ResourceSlices in
//! `resourceSliceBytes`. Decoded here over a real socket with upstream's message definitions
//! (tests/proto/k8s, compiled at run time by protox), field by field against the template, so a
//! pod whose ResourceClaim needs such a device can make cluster-autoscaler choose the group from
//! zero.

use crate::support;

use std::path::Path;
use std::sync::Arc;

use fleet::config;
use fleet::provider::wire::cloud_provider_client::CloudProviderClient;
use fleet::provider::wire::*;
use fleet_testing::Fixture;
use fleet_testing::fixture::{Devices, Group, Op, Template};
use prost_reflect::{DescriptorPool, DynamicMessage, MapKey, Value};
use support::*;
use tonic::transport::Channel;

fn group(name: &str, template: Template) -> Group {
    Group::new(name)
        .max(4)
        .startup(Op::command(["true"]))
        .shutdown(Op::command(["true"]))
        .template(template.capacity("cpu", "64").capacity("memory", "512Gi"))
}

fn yaml() -> String {
    Fixture::new()
        .group(group(
            "pool-g",
            Template::new()
                .devices(
                    Devices::new("gpu.example.com", 2)
                        .name("gpu")
                        .attribute("model", "\"a100\"")
                        .attribute("cores", "6912")
                        .attribute("mig", "true")
                        .attribute(
                            "gpu.example.com/driverVersion",
                            "{ version: \"535.104.5\" }",
                        )
                        .capacity("memory", "80Gi"),
                )
                .devices(Devices::new("nic.example.com", 1).attribute("speedGbps", "100")),
        ))
        .group(group("pool-c", Template::new()))
        .slots("pool-g", ["gpu-01"])
        .slots("pool-c", ["cpu-01"])
        .yaml()
}

fn upstream() -> DescriptorPool {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/proto/k8s");
    protox::Compiler::new([dir])
        .unwrap()
        .include_imports(true)
        .open_file("resource_v1.proto")
        .unwrap()
        .descriptor_pool()
}

async fn provider(server: &fleet_testing::RedisServer) -> CloudProviderClient<Channel> {
    let cfg = Arc::new(config::parse(&yaml(), Path::new("t.yaml")).unwrap());
    provider_client(server, cfg).await
}

fn field(m: &DynamicMessage, name: &str) -> Value {
    assert!(m.has_field_by_name(name), "{name} is set in {m:?}");
    m.get_field_by_name(name).unwrap().into_owned()
}

fn message(m: &DynamicMessage, name: &str) -> DynamicMessage {
    field(m, name).as_message().unwrap().clone()
}

fn string(m: &DynamicMessage, name: &str) -> String {
    field(m, name).as_str().unwrap().to_owned()
}

/// The one value a DeviceAttribute holds, as (its field, its value in words).
fn attribute(v: &Value) -> (String, String) {
    let a = v.as_message().unwrap();
    let set: Vec<(String, String)> = ["int", "bool", "string", "version"]
        .into_iter()
        .filter(|f| a.has_field_by_name(f))
        .map(|f| {
            let value = a.get_field_by_name(f).unwrap();
            let words = match &*value {
                Value::I64(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                Value::String(s) => s.clone(),
                other => format!("{other:?}"),
            };
            (f.to_owned(), words)
        })
        .collect();
    assert_eq!(
        set.len(),
        1,
        "exactly one field of a DeviceAttribute: {a:?}"
    );
    set.into_iter().next().unwrap()
}

async fn template(
    c: &mut CloudProviderClient<Channel>,
    group: &str,
) -> NodeGroupTemplateNodeInfoResponse {
    c.node_group_template_node_info(NodeGroupTemplateNodeInfoRequest { id: group.into() })
        .await
        .unwrap()
        .into_inner()
}

#[tokio::test]
async fn the_templates_devices_are_resource_slices_that_upstream_decodes_field_by_field() {
    let server = server();
    let mut c = provider(&server).await;
    let pool = upstream();
    let slice_desc = pool
        .get_message_by_name("k8s.io.api.resource.v1.ResourceSlice")
        .unwrap();
    let answer = template(&mut c, "pool-g").await;
    assert_eq!(answer.resource_slice_bytes.len(), 2, "one slice a driver");
    let slices: Vec<DynamicMessage> = answer
        .resource_slice_bytes
        .iter()
        .map(|b| DynamicMessage::decode(slice_desc.clone(), b.as_slice()).unwrap())
        .collect();

    let node = "template-pool-g";
    for (i, (slice, driver)) in slices
        .iter()
        .zip(["gpu.example.com", "nic.example.com"])
        .enumerate()
    {
        assert_eq!(
            string(&message(slice, "metadata"), "name"),
            format!("{node}-{i}")
        );
        let spec = message(slice, "spec");
        assert_eq!(string(&spec, "driver"), driver);
        assert_eq!(string(&spec, "nodeName"), node, "on the template node");
        let pool = message(&spec, "pool");
        assert_eq!(string(&pool, "name"), node);
        assert_eq!(field(&pool, "generation").as_i64(), Some(1));
        assert_eq!(field(&pool, "resourceSliceCount").as_i64(), Some(1));
        assert!(!spec.has_field_by_name("allNodes") && !spec.has_field_by_name("nodeSelector"));
    }

    let gpus = field(&message(&slices[0], "spec"), "devices");
    let gpus = gpus.as_list().unwrap();
    assert_eq!(gpus.len(), 2);
    for (i, gpu) in gpus.iter().enumerate() {
        let gpu = gpu.as_message().unwrap();
        assert_eq!(string(gpu, "name"), format!("gpu-{i}"));
        let attributes = field(gpu, "attributes");
        let attributes = attributes.as_map().unwrap();
        let got = |k: &str| attribute(&attributes[&MapKey::String(k.into())]);
        assert_eq!(attributes.len(), 4);
        assert_eq!(got("model"), ("string".into(), "a100".into()));
        assert_eq!(got("cores"), ("int".into(), "6912".into()));
        assert_eq!(got("mig"), ("bool".into(), "true".into()));
        assert_eq!(
            got("gpu.example.com/driverVersion"),
            ("version".into(), "535.104.5".into())
        );
        let capacity = field(gpu, "capacity");
        let memory = capacity.as_map().unwrap()[&MapKey::String("memory".into())]
            .as_message()
            .unwrap()
            .clone();
        assert_eq!(string(&message(&memory, "value"), "string"), "80Gi");
    }
    let nics = field(&message(&slices[1], "spec"), "devices");
    let nic = nics.as_list().unwrap()[0].as_message().unwrap().clone();
    assert_eq!(string(&nic, "name"), "device-0", "a set without a name");
    let attributes = field(&nic, "attributes");
    assert_eq!(
        attribute(&attributes.as_map().unwrap()[&MapKey::String("speedGbps".into())]),
        ("int".into(), "100".into())
    );

    // The slices name the node the template is: the node the same answer carries.
    let decoded =
        <fleet::provider::k8s::Node as prost::Message>::decode(answer.node_bytes.as_slice())
            .unwrap();
    assert_eq!(decoded.metadata.unwrap().name.as_deref(), Some(node));

    // A group that declares no devices sends none.
    assert!(
        template(&mut c, "pool-c")
            .await
            .resource_slice_bytes
            .is_empty()
    );
}
