//! The configuration as the rest of fleet sees it: the groups, their operations, timings and
//! templates, and the slots (SPEC §4.1). Every value here has been validated; what the file may
//! say and how it is checked are in `raw` and `validate`.
//!
//! Pure data and the questions fleet asks of it: no I/O. A Job template is serialized, since it
//! travels in an operation's request.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::domain::budget::PowerOnBudget;
use crate::domain::claim::Timings;
use crate::domain::name::{BenchName, GroupName};
use crate::domain::node::Taint;
use crate::units::Quantity;

use crate::power::{Driver, SecretSource};

/// The readiness taint a group gets when it names none: the node is not usable until Cilium's
/// agent is up on it.
pub const DEFAULT_READINESS_TAINT: &str = "node.cilium.io/agent-not-ready:NoExecute";

/// The longest duration the file accepts. No timing of fleet is meant to be longer than a year;
/// the cap also keeps sums such as the attempt budget and the deadlines far from overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// A validated configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub groups: BTreeMap<GroupName, Group>,
    pub slots: BTreeMap<BenchName, Slot>,
    /// The whole fleet's power-on budget (SPEC §4.11); unbounded when unset.
    pub power_on: PowerOnBudget,
}

/// A group of slots that scale together (a cluster-autoscaler node group).
#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    pub name: GroupName,
    /// The group's power-on budget (SPEC §4.11); unbounded when unset.
    pub power_on: PowerOnBudget,
    pub min_size: u32,
    /// At most the number of slots the group has.
    pub max_size: u32,
    /// cluster-autoscaler's own scale-up deadline for the group; floors the claim deadline.
    pub max_node_provision_time: Option<Duration>,
    /// A node carrying one of these is not usable yet (SPEC §3.1).
    pub readiness_taints: Vec<Taint>,
    /// With Kubernetes: the taints fleet stamps on a Node when its readiness gate is satisfied
    /// (SPEC §3.12); the template's taints when unset.
    pub node_taints: Vec<Taint>,
    pub startup: Operation,
    pub shutdown: Operation,
    /// Every unset field takes `Timings::default()`, except `machine_gone_grace`, which takes the
    /// attempt budget of these timings (one boot window).
    pub timings: Timings,
    /// What a node of this group looks like before one exists (for scale-up from zero).
    pub template: Option<Template>,
    /// Opt-in for the group's autoscaling options over gRPC (NodeGroupGetOptions): `None`
    /// answers UNIMPLEMENTED so cluster-autoscaler's flags rule.
    pub autoscaling_options: Option<AutoscalingOptions>,
}

/// The options a group overrides when cluster-autoscaler asks for them; every unset one echoes
/// cluster-autoscaler's own default. The group's `max_node_provision_time` is the provision
/// time it sets.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AutoscalingOptions {
    /// From 0 to 1.
    pub scale_down_utilization_threshold: Option<f64>,
    /// From 0 to 1.
    pub scale_down_gpu_utilization_threshold: Option<f64>,
    pub scale_down_unneeded_time: Option<Duration>,
    pub scale_down_unready_time: Option<Duration>,
    /// Only cluster-autoscaler versions that read field 11 use it (SPEC §6.3).
    pub max_node_startup_time: Option<Duration>,
    pub zero_or_max_node_scaling: Option<bool>,
    pub ignore_daemonsets_utilization: Option<bool>,
}

/// What powers a slot's machine on (startup) or off (shutdown): a command fleet runs, or a
/// Kubernetes Job it creates (SPEC §4.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation {
    pub run: Run,
    /// Extra environment (the command's, or the Job container's); never a name starting with
    /// `FLEET_`.
    pub env: BTreeMap<String, String>,
    /// The working directory (the Job container's `workingDir`); the default when unset.
    pub dir: Option<PathBuf>,
    /// The group's `job_timeout` when unset.
    pub timeout: Duration,
}

/// What an operation runs: the file's `command` or its `job`, exactly one of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Run {
    /// The program and its arguments, run through the operation wrapper: never empty, the
    /// program never empty.
    Command(Vec<String>),
    /// A pod template run as a Kubernetes Job in fleet's namespace.
    Job(JobTemplate),
    /// The group names no operation of this kind: every slot of it has a driver that runs it
    /// (SPEC §4.10; validated, a slot without one is a problem). Its timeout is the group's
    /// `job_timeout`.
    Driver,
}

/// The pod a Job operation runs (SPEC §4.2, Jobs as operations). It travels inside the
/// operation's request, so it is serialized; every field but the image may be missing from an
/// older request and takes its default.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobTemplate {
    /// A container image reference, like `registry.example/power:1.4`.
    pub image: String,
    /// The container's entrypoint; the image's own when empty.
    #[serde(default)]
    pub command: Vec<String>,
    /// The entrypoint's arguments; the image's own when empty and `command` is empty too.
    #[serde(default)]
    pub args: Vec<String>,
    /// An RFC 1123 subdomain; the namespace's default account when unset.
    #[serde(default)]
    pub service_account_name: Option<String>,
    /// Label key to value: the nodes the pod may run on.
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    #[serde(default)]
    pub tolerations: Vec<Toleration>,
    /// How long the finished Job is kept (the group's `timings.ttl_after_finished`), so its
    /// outcome can still be read by a controller that was away when it ended.
    #[serde(default = "default_ttl_after_finished")]
    pub ttl_after_finished: Duration,
}

fn default_ttl_after_finished() -> Duration {
    Timings::default().ttl_after_finished
}

/// A toleration of the Job's pod, as Kubernetes spells it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Toleration {
    /// Empty with `Exists`: every taint.
    #[serde(default)]
    pub key: Option<String>,
    /// `Equal` or `Exists`; `Equal` when unset.
    #[serde(default)]
    pub operator: Option<String>,
    #[serde(default)]
    pub value: Option<String>,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`; every effect when unset.
    #[serde(default)]
    pub effect: Option<String>,
    /// With `NoExecute` only: how long the pod stays once the taint appears.
    #[serde(default)]
    pub toleration_seconds: Option<i64>,
}

/// One machine's place in a group.
#[derive(Clone, Debug, PartialEq)]
pub struct Slot {
    pub name: BenchName,
    pub group: GroupName,
    /// `fleet://<name>` when unset; unique across the file.
    pub provider_id: String,
    /// The Kubernetes Node the machine registers as, when it joins a cluster; an RFC 1123
    /// subdomain, unique across the file.
    pub kubernetes_node: Option<String>,
    /// fleet's own power driver for the machine (SPEC §4.10): its group's `driver` with the
    /// slot's fields over it. With one, it runs both operations instead of the group's.
    pub driver: Option<Box<Driver>>,
    /// What the machine draws and costs (SPEC §4.12): its group's `template.power` with the
    /// slot's `power` fields over it; `None` when neither gives one.
    pub power: Option<PowerDraw>,
}

/// The node a group's machines become, described before any exists.
#[derive(Clone, Debug, PartialEq)]
pub struct Template {
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    /// Resource name (`cpu`, `memory`, `nvidia.com/gpu`) to quantity.
    pub capacity: BTreeMap<String, Quantity>,
    pub gpu: Option<Gpu>,
    pub power: Option<PowerDraw>,
    /// The DRA devices of each machine, told to cluster-autoscaler as ResourceSlices (SPEC §6.3).
    pub devices: Vec<Devices>,
}

/// One kind of DRA device a machine has: `count` devices of `driver`, named `<name>-0` to
/// `<name>-<count - 1>`, each with the same attributes and capacity.
#[derive(Clone, Debug, PartialEq)]
pub struct Devices {
    /// The DRA driver, a DNS subdomain like `gpu.example.com`.
    pub driver: String,
    /// The devices' name before their index, a DNS label.
    pub name: String,
    pub count: u32,
    /// Qualified names (`model`, `gpu.example.com/family`) to values.
    pub attributes: BTreeMap<String, DeviceAttribute>,
    /// Qualified names to quantities, like `memory: 80Gi`.
    pub capacity: BTreeMap<String, Quantity>,
}

/// A device attribute's value, as `resource.k8s.io/v1` types it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceAttribute {
    Bool(bool),
    Int(i64),
    String(String),
    /// A semantic version (semver.org 2.0.0).
    Version(String),
}

/// Which node label names the GPU type, and the types the group offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gpu {
    pub label: String,
    pub types: Vec<String>,
}

/// What a machine draws and what its energy costs, for pricing and the energy ledger: the
/// ledger's own type, so the two never drift apart.
pub use crate::domain::energy::Draw as PowerDraw;

/// The provider id of a slot that names none.
pub fn default_provider_id(slot: &BenchName) -> String {
    format!("fleet://{slot}")
}

impl Config {
    pub fn group(&self, name: &GroupName) -> Option<&Group> {
        self.groups.get(name)
    }

    /// The slots of `group`, in name order.
    pub fn slots_of(&self, group: &GroupName) -> impl Iterator<Item = &Slot> {
        self.slots.values().filter(move |s| &s.group == group)
    }

    /// The settings that only Kubernetes can carry out, each with its place: with none of them,
    /// `fleet serve` needs no cluster; with any, it needs `--kubernetes` (SPEC §3.12).
    pub fn kubernetes_settings(&self) -> Vec<String> {
        let mut found = Vec::new();
        for group in self.groups.values() {
            for (name, op) in [("startup", &group.startup), ("shutdown", &group.shutdown)] {
                if matches!(op.run, Run::Job(_)) {
                    found.push(format!("group {}: {name}.job", group.name));
                }
            }
            if group.timings.delete_stale_node_after.is_some() {
                found.push(format!(
                    "group {}: timings.delete_stale_node_after",
                    group.name
                ));
            }
        }
        for slot in self.slots.values() {
            if slot.kubernetes_node.is_some() {
                found.push(format!("slot {}: kubernetes_node", slot.name));
            }
        }
        found
    }

    /// The environment variables fleet reads a secret from: every slot driver's `password_env`
    /// (SPEC §4.2). An operation's command never gets them, and an operation's wrapper only the
    /// one its own driver reads. Sorted, each once.
    pub fn secret_env(&self) -> Vec<String> {
        let names: std::collections::BTreeSet<&str> = (self.slots.values())
            .filter_map(|slot| match slot.driver.as_ref()?.password()? {
                SecretSource::Env(name) => Some(name.as_str()),
                SecretSource::File(_) => None,
            })
            .collect();
        names.into_iter().map(str::to_owned).collect()
    }

    /// What in this valid configuration is likely a mistake, one sentence each, said at start
    /// and on every reload (SPEC §4.1): a group with no slots can never have a machine, and a
    /// `max_size` above a group's slots can never be reached.
    pub fn doubts(&self) -> Vec<String> {
        let mut doubts = Vec::new();
        for group in self.groups.values() {
            let slots = self.slots_of(&group.name).count();
            if slots == 0 {
                doubts.push(format!(
                    "group {}: it has no slots, so it can never have a machine; add slots with `group: {}`",
                    group.name, group.name
                ));
            } else if group.max_size as usize > slots {
                doubts.push(format!(
                    "group {}: max_size {} is above its {slots} slot(s), so it can never be reached",
                    group.name, group.max_size
                ));
            }
        }
        doubts
    }

    pub fn slot_by_provider_id(&self, id: &str) -> Option<&Slot> {
        self.slots.values().find(|s| s.provider_id == id)
    }

    /// The slot a Kubernetes node is (cluster-autoscaler's rule): by provider ID, and by name
    /// (the slot's Kubernetes node name, or the slot's own) only when the provider ID is empty.
    pub fn slot_for_node(&self, provider_id: &str, name: &str) -> Option<&Slot> {
        if !provider_id.is_empty() {
            return self.slot_by_provider_id(provider_id);
        }
        if name.is_empty() {
            return None;
        }
        self.slots
            .values()
            .find(|s| s.kubernetes_node.as_deref() == Some(name))
            .or_else(|| BenchName::parse(name).ok().and_then(|n| self.slots.get(&n)))
    }
}
