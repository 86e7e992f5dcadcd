//! The node a group's machines become, before one exists (SPEC §6.3): what cluster-autoscaler
//! simulates when it scales a group up from zero. A Kubernetes v1 Node built from the trimmed
//! messages of `proto/k8s.proto` and encoded as plain protobuf, exactly what Go's
//! `v1.Node.Unmarshal` reads.

use std::collections::BTreeMap;

use prost::Message;

use super::k8s::{
    Device, DeviceAttribute as K8sAttribute, DeviceCapacity, Node, NodeCondition, NodeSpec,
    NodeStatus, NodeSystemInfo, ObjectMeta, Quantity, ResourcePool, ResourceSlice,
    ResourceSliceSpec, Taint,
};
use crate::config::{DeviceAttribute, Group, Template};

/// The label fleet puts on every template with the group's name.
pub const GROUP_LABEL: &str = "fleet.dev/group";
/// The operating system and architecture of a template that names none in its labels.
const OS: &str = "linux";
const ARCH: &str = "amd64";
/// What a kubelet reports when the template sets no pod limit.
const DEFAULT_PODS: &str = "110";

/// The group's template Node, or `None` when the group declares no template.
pub fn node(group: &Group) -> Option<Node> {
    let template = group.template.as_ref()?;
    let name = format!("template-{}", group.name);
    let labels = labels(group, template, &name);
    let os = labels["kubernetes.io/os"].clone();
    let arch = labels["kubernetes.io/arch"].clone();
    Some(Node {
        metadata: Some(ObjectMeta {
            name: Some(name),
            labels,
            ..ObjectMeta::default()
        }),
        spec: Some(NodeSpec {
            taints: template
                .taints
                .iter()
                .map(|t| Taint {
                    key: Some(t.key.clone()),
                    value: t.value.clone(),
                    effect: Some(t.effect.as_str().to_owned()),
                    time_added: None,
                })
                .collect(),
            unschedulable: Some(false),
            ..NodeSpec::default()
        }),
        status: Some(status(group, template, os, arch)),
    })
}

/// The template's labels: the well-known ones first; the group's own labels override them.
fn labels(group: &Group, template: &Template, name: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([
        ("kubernetes.io/os".to_owned(), OS.to_owned()),
        ("kubernetes.io/arch".to_owned(), ARCH.to_owned()),
        ("beta.kubernetes.io/os".to_owned(), OS.to_owned()),
        ("beta.kubernetes.io/arch".to_owned(), ARCH.to_owned()),
        ("kubernetes.io/hostname".to_owned(), name.to_owned()),
        // The group is the machine type: one kind of machine per group.
        (
            "node.kubernetes.io/instance-type".to_owned(),
            group.name.to_string(),
        ),
        (GROUP_LABEL.to_owned(), group.name.to_string()),
    ]);
    if let Some(gpu) = &template.gpu
        && let Some(first) = gpu.types.first()
    {
        labels.insert(gpu.label.clone(), first.clone());
    }
    labels.extend(template.labels.clone());
    labels
}

/// The template's status: its capacity (allocatable alike, with a kubelet's pod limit unless it
/// sets one) and healthy conditions.
fn status(group: &Group, template: &Template, os: String, arch: String) -> NodeStatus {
    let mut resources: BTreeMap<String, Quantity> = template
        .capacity
        .iter()
        .map(|(name, q)| {
            (
                name.clone(),
                Quantity {
                    string: Some(q.as_str().to_owned()),
                },
            )
        })
        .collect();
    resources
        .entry("pods".to_owned())
        .or_insert_with(|| Quantity {
            string: Some(DEFAULT_PODS.to_owned()),
        });
    let condition = |kind: &str, status: &str, reason: &str| NodeCondition {
        r#type: Some(kind.to_owned()),
        status: Some(status.to_owned()),
        reason: Some(reason.to_owned()),
        message: Some(format!("template of fleet group {}", group.name)),
    };
    NodeStatus {
        capacity: resources.clone(),
        allocatable: resources,
        // Healthy values, as in-tree providers set them: a template is a node at its best.
        conditions: vec![
            condition("Ready", "True", "KubeletReady"),
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID"),
            condition("NetworkUnavailable", "False", "RouteCreated"),
        ],
        node_info: Some(NodeSystemInfo {
            operating_system: Some(os),
            architecture: Some(arch),
        }),
        phase: Some("Running".to_owned()),
    }
}

/// The template encoded as plain protobuf (no `k8s\0` envelope), or `None` without a template.
pub fn node_bytes(group: &Group) -> Option<Vec<u8>> {
    node(group).map(|n| n.encode_to_vec())
}

/// The template's DRA devices as `resource.k8s.io/v1` ResourceSlices (SPEC §6.3): one a driver,
/// on the template node (`nodeName`), in a pool of the node's name at generation 1 that this one
/// slice makes whole. cluster-autoscaler simulates them with the template node, so a pod whose
/// ResourceClaim needs such a device makes it choose the group from zero. Empty without devices.
pub fn resource_slices(group: &Group) -> Vec<ResourceSlice> {
    let Some(template) = group.template.as_ref() else {
        return Vec::new();
    };
    let node = format!("template-{}", group.name);
    let mut drivers: BTreeMap<&str, Vec<Device>> = BTreeMap::new();
    for set in &template.devices {
        let devices = drivers.entry(set.driver.as_str()).or_default();
        for i in 0..set.count {
            devices.push(Device {
                name: Some(format!("{}-{i}", set.name)),
                attributes: set
                    .attributes
                    .iter()
                    .map(|(k, v)| (k.clone(), attribute(v)))
                    .collect(),
                capacity: set
                    .capacity
                    .iter()
                    .map(|(k, q)| {
                        let value = Quantity {
                            string: Some(q.as_str().to_owned()),
                        };
                        (k.clone(), DeviceCapacity { value: Some(value) })
                    })
                    .collect(),
            });
        }
    }
    drivers
        .into_iter()
        .enumerate()
        .map(|(i, (driver, devices))| ResourceSlice {
            metadata: Some(ObjectMeta {
                name: Some(format!("{node}-{i}")),
                ..ObjectMeta::default()
            }),
            spec: Some(ResourceSliceSpec {
                driver: Some(driver.to_owned()),
                pool: Some(ResourcePool {
                    name: Some(node.clone()),
                    generation: Some(1),
                    resource_slice_count: Some(1),
                }),
                node_name: Some(node.clone()),
                devices,
            }),
        })
        .collect()
}

/// The slices encoded, each as plain protobuf: `resourceSliceBytes`.
pub fn resource_slice_bytes(group: &Group) -> Vec<Vec<u8>> {
    resource_slices(group)
        .iter()
        .map(Message::encode_to_vec)
        .collect()
}

fn attribute(value: &DeviceAttribute) -> K8sAttribute {
    let mut a = K8sAttribute::default();
    match value {
        DeviceAttribute::Bool(b) => a.bool = Some(*b),
        DeviceAttribute::Int(n) => a.int = Some(*n),
        DeviceAttribute::String(s) => a.string = Some(s.clone()),
        DeviceAttribute::Version(v) => a.version = Some(v.clone()),
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config;

    fn group(template: &str) -> Group {
        let text = format!(
            "groups:\n  - name: pool-b\n    max_size: 1\n    startup: {{ command: [on] }}\n    shutdown: {{ command: [off] }}\n{template}slots:\n  - {{ name: gpu-01, group: pool-b }}\n"
        );
        let c = config::parse(&text, std::path::Path::new("t.yaml")).unwrap();
        c.groups.values().next().unwrap().clone()
    }

    #[test]
    fn a_group_without_a_template_has_no_node() {
        assert_eq!(node(&group("")), None);
        assert_eq!(node_bytes(&group("")), None);
    }

    #[test]
    fn the_template_carries_labels_taints_quantities_and_healthy_conditions() {
        let g = group(
            "    template:\n      labels: { \"fleet.dev/pool\": b, \"kubernetes.io/arch\": arm64 }\n      taints: [\"fleet.dev/gpu=true:NoSchedule\"]\n      capacity: { cpu: \"64\", memory: 512Gi, \"nvidia.com/gpu\": \"8\" }\n      gpu: { label: fleet.dev/gpu-type, types: [nvidia-a100, nvidia-h100] }\n",
        );
        let bytes = node_bytes(&g).unwrap();
        let n = Node::decode(bytes.as_slice()).unwrap();
        let meta = n.metadata.unwrap();
        assert_eq!(meta.name.as_deref(), Some("template-pool-b"));
        let label = |k: &str| meta.labels.get(k).map(String::as_str);
        assert_eq!(label("kubernetes.io/os"), Some("linux"));
        assert_eq!(
            label("kubernetes.io/arch"),
            Some("arm64"),
            "the group's own label wins"
        );
        assert_eq!(label("fleet.dev/group"), Some("pool-b"));
        assert_eq!(label("node.kubernetes.io/instance-type"), Some("pool-b"));
        assert_eq!(label("fleet.dev/pool"), Some("b"));
        assert_eq!(label("fleet.dev/gpu-type"), Some("nvidia-a100"));
        let spec = n.spec.unwrap();
        assert_eq!(spec.taints.len(), 1);
        assert_eq!(spec.taints[0].key.as_deref(), Some("fleet.dev/gpu"));
        assert_eq!(spec.taints[0].value.as_deref(), Some("true"));
        assert_eq!(spec.taints[0].effect.as_deref(), Some("NoSchedule"));
        let status = n.status.unwrap();
        let q = |k: &str| status.capacity.get(k).and_then(|q| q.string.clone());
        assert_eq!(q("cpu").as_deref(), Some("64"));
        assert_eq!(q("memory").as_deref(), Some("512Gi"));
        assert_eq!(q("nvidia.com/gpu").as_deref(), Some("8"));
        assert_eq!(
            q("pods").as_deref(),
            Some("110"),
            "a kubelet's default pod limit"
        );
        assert_eq!(status.allocatable, status.capacity);
        let conditions: Vec<(String, String)> = status
            .conditions
            .iter()
            .map(|c| (c.r#type.clone().unwrap(), c.status.clone().unwrap()))
            .collect();
        assert_eq!(
            conditions,
            [
                ("Ready", "True"),
                ("MemoryPressure", "False"),
                ("DiskPressure", "False"),
                ("PIDPressure", "False"),
                ("NetworkUnavailable", "False")
            ]
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
        );
        assert_eq!(
            status.node_info.unwrap().architecture.as_deref(),
            Some("arm64")
        );
    }

    #[test]
    fn the_node_bytes_are_plain_protobuf_starting_with_the_metadata_field() {
        let bytes = node_bytes(&group(
            "    template: { capacity: { cpu: \"4\", memory: 8Gi } }\n",
        ))
        .unwrap();
        // Field 1 (metadata), wire type 2: no `k8s\0` envelope in front.
        assert_eq!(bytes[0], 0x0a);
        assert_ne!(&bytes[..4], b"k8s\0");
    }
}
