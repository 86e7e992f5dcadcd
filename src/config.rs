//! The configuration file of `fleet serve`: the groups fleet powers machines on and off for, and
//! the slots (one machine each) that belong to them.
//!
//! Reading is two steps. serde reads the YAML into raw structs that refuse unknown keys (a typo
//! must not silently become a default); then `validate` turns them into typed values and collects
//! every problem with its place, so an operator fixes the file in one go rather than one error per
//! restart. The file's field names are pinned: operators' files must stay valid, so a field may be
//! added (optional) but never renamed or removed.
//!
//! This module reads one file and decides nothing: it runs no operation, reads no environment, and
//! touches neither Redis nor Kubernetes. It never panics on any input.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::domain::claim::Timings;
use crate::domain::name::{BenchName, GroupName, InvalidName};
use crate::domain::node::Taint;
pub use crate::units::{InvalidQuantity, Quantity};

/// The readiness taint a group gets when it names none: the node is not usable until Cilium's
/// agent is up on it.
pub const DEFAULT_READINESS_TAINT: &str = "node.cilium.io/agent-not-ready:NoExecute";

/// The longest duration the file accepts. No timing of fleet is meant to be longer than a year;
/// the cap also keeps sums such as the attempt budget and the deadlines far from overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// The prefix of the environment variables fleet sets for an operation itself.
pub const RESERVED_ENV_PREFIX: &str = "FLEET_";

/// The variables fleet sets for every operation; the file may not set them, nor any other name
/// with the same prefix (a later fleet may set more).
pub const RESERVED_ENV: [&str; 7] = [
    "FLEET_SLOT",
    "FLEET_GROUP",
    "FLEET_CLAIM",
    "FLEET_ATTEMPT",
    "FLEET_PROVIDER_ID",
    "FLEET_OPERATION",
    "FLEET_CONTROLLER",
];

/// A validated configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub groups: BTreeMap<GroupName, Group>,
    pub slots: BTreeMap<BenchName, Slot>,
}

/// A group of slots that scale together (a cluster-autoscaler node group).
#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    pub name: GroupName,
    pub min_size: u32,
    /// At most the number of slots the group has.
    pub max_size: u32,
    /// cluster-autoscaler's own scale-up deadline for the group; floors the claim deadline.
    pub max_node_provision_time: Option<Duration>,
    /// A node carrying one of these is not usable yet (SPEC §3.1).
    pub readiness_taints: Vec<Taint>,
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

/// A command fleet runs to power a slot's machine on (startup) or off (shutdown).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation {
    /// The program and its arguments: never empty, the program never empty.
    pub command: Vec<String>,
    /// Extra environment; never a name starting with `FLEET_`.
    pub env: BTreeMap<String, String>,
    /// The working directory; fleet's own when unset.
    pub dir: Option<PathBuf>,
    /// The group's `job_timeout` when unset.
    pub timeout: Duration,
}

/// One machine's place in a group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slot {
    pub name: BenchName,
    pub group: GroupName,
    /// `fleet://<name>` when unset; unique across the file.
    pub provider_id: String,
    /// The Kubernetes Node the machine registers as, when it joins a cluster; an RFC 1123
    /// subdomain, unique across the file.
    pub kubernetes_node: Option<String>,
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
}

/// Which node label names the GPU type, and the types the group offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gpu {
    pub label: String,
    pub types: Vec<String>,
}

/// What a machine of the group draws and what its energy costs, for pricing.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PowerDraw {
    /// Finite, above zero.
    pub watts: f64,
    /// Finite, zero or more.
    pub price_per_kwh: f64,
}

/// Checks an environment variable name an operation may set: `[A-Za-z_][A-Za-z0-9_]*`, not
/// starting with `FLEET_`. The error says what is valid.
pub fn check_env_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let well_formed = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !well_formed {
        return Err(format!(
            "invalid environment variable name {name:?}: a name is a letter or '_' followed by \
             letters, digits and '_' (like BMC_HOST)"
        ));
    }
    if name.starts_with(RESERVED_ENV_PREFIX) {
        return Err(format!(
            "environment variable name {name:?} is reserved: fleet sets {} itself; choose a name \
             that does not start with {RESERVED_ENV_PREFIX}",
            RESERVED_ENV.join(", ")
        ));
    }
    Ok(())
}

/// The provider id of a slot that names none.
pub fn default_provider_id(slot: &BenchName) -> String {
    format!("fleet://{slot}")
}

/// One thing wrong with the file: where, and what is valid there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Like `groups[0] (pool-a).min_size` or `slots[2] (bench-07).group`.
    pub place: String,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.place, self.message)
    }
}

/// Why the configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The I/O error is said in the message, once (a field named `source` would repeat it).
    #[error(
        "cannot read the configuration file {}: {error}; give a readable YAML file with --config (FLEET_CONFIG)",
        path.display()
    )]
    Read { path: PathBuf, error: io::Error },
    #[error(
        "{}: the configuration is not YAML of the expected shape: {message}",
        path.display()
    )]
    Parse { path: PathBuf, message: String },
    #[error("{}", render_problems(path, problems))]
    Invalid {
        path: PathBuf,
        problems: Vec<Problem>,
    },
}

fn render_problems(path: &Path, problems: &[Problem]) -> String {
    let path = path.display();
    let count = match problems.len() {
        1 => "1 problem".to_owned(),
        n => format!("{n} problems"),
    };
    let mut out = format!("{path}: invalid configuration, {count}:");
    for problem in problems {
        out.push_str(&format!("\n{path}: {problem}"));
    }
    out
}

/// Reads and validates the configuration file at `path`.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let bytes = std::fs::read(path).map_err(|error| ConfigError::Read {
        path: path.to_owned(),
        error,
    })?;
    let text = String::from_utf8(bytes).map_err(|e| ConfigError::Parse {
        path: path.to_owned(),
        message: format!(
            "the file is not UTF-8 text (invalid byte at offset {}); a configuration file is \
             UTF-8 YAML",
            e.utf8_error().valid_up_to()
        ),
    })?;
    parse(&text, path)
}

/// Parses and validates configuration text; `path` is used only in messages.
pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
    let raw: RawConfig = serde_saphyr::from_str(text).map_err(|e| ConfigError::Parse {
        path: path.to_owned(),
        // The one-line form ("... at line 3, column 5"): the snippet form names `<input>`, not
        // the file, and spreads one error over several log lines.
        message: e.without_snippet().to_string(),
    })?;
    validate(raw).map_err(|problems| ConfigError::Invalid {
        path: path.to_owned(),
        problems,
    })
}

impl Config {
    pub fn group(&self, name: &GroupName) -> Option<&Group> {
        self.groups.get(name)
    }

    /// The slots of `group`, in name order.
    pub fn slots_of(&self, group: &GroupName) -> impl Iterator<Item = &Slot> {
        self.slots.values().filter(move |s| &s.group == group)
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

/// A valid configuration: two groups and their slots. Its text documents the format.
pub fn example() -> &'static str {
    EXAMPLE
}

const EXAMPLE: &str = r#"# The configuration of `fleet serve`: groups of slots, one machine per slot.
groups:
  - name: pool-a                      # an RFC 1123 label
    min_size: 0
    max_size: 3                       # cluster-autoscaler's bound; free slots bound it too
    max_node_provision_time: 20m
    # readiness_taints defaults to [node.cilium.io/agent-not-ready:NoExecute]
    startup:
      command: ["/usr/local/bin/power", "on"]
      env: { BMC: "10.0.0.9" }        # fleet sets FLEET_SLOT, FLEET_GROUP, ... itself
      timeout: 5m                     # defaults to timings.job_timeout
    shutdown:
      command: ["/usr/local/bin/power", "off"]
    timings:                          # every field optional; see SPEC §3.5
      readiness_gate_timeout: 4m
      max_attempts: 3
      failed_slot_cooldown: 30m
    template:
      labels: { "fleet.dev/pool": "a" }
      capacity: { cpu: "16", memory: "64Gi", pods: "110" }
  - name: pool-b
    min_size: 1
    max_size: 2
    readiness_taints: []
    startup:
      command: ["/usr/local/bin/ipmi-power", "on"]
      dir: /var/lib/fleet
    shutdown:
      command: ["/usr/local/bin/ipmi-power", "off"]
      timeout: 2m
    timings: { job_timeout: 10m, uncordon_timeout: 3m }
    template:
      labels: { "fleet.dev/pool": "b" }
      taints: ["fleet.dev/gpu=true:NoSchedule"]
      capacity: { cpu: "64", memory: "512Gi", "nvidia.com/gpu": "8" }
      gpu: { label: "fleet.dev/gpu-type", types: ["nvidia-a100"] }
      power: { watts: 3500, price_per_kwh: 0.25 }
    autoscaling_options: true
slots:
  - { name: bench-01, group: pool-a, kubernetes_node: bench-01 }
  - { name: bench-02, group: pool-a, kubernetes_node: bench-02 }
  - { name: bench-03, group: pool-a }
  - { name: gpu-01, group: pool-b, provider_id: "ipmi://10.0.1.11" }
  - { name: gpu-02, group: pool-b, provider_id: "ipmi://10.0.1.12" }
"#;

// ---------------------------------------------------------------------------------------------
// The raw file, as serde reads it.
//
// A value whose syntax is ours to check (a duration, a count) is read as text and checked by its
// deserializer into a `Checked`, whose error waits for `validate`: a bad value then becomes one
// problem among the others, with its place, instead of the end of the read.

type Checked<T> = Result<T, String>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    groups: Option<Vec<RawGroup>>,
    #[serde(default)]
    slots: Option<Vec<RawSlot>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGroup {
    name: String,
    #[serde(default, deserialize_with = "opt_count")]
    min_size: Option<Checked<u32>>,
    #[serde(deserialize_with = "count")]
    max_size: Checked<u32>,
    #[serde(default, deserialize_with = "opt_duration")]
    max_node_provision_time: Option<Checked<Duration>>,
    #[serde(default)]
    readiness_taints: Option<Vec<String>>,
    startup: RawOperation,
    shutdown: RawOperation,
    #[serde(default)]
    timings: Option<RawTimings>,
    #[serde(default)]
    template: Option<RawTemplate>,
    #[serde(default, deserialize_with = "raw_options")]
    autoscaling_options: Option<RawOptions>,
}

/// `autoscaling_options: true` (echo cluster-autoscaler's defaults), `false`, or the overrides.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawOptions {
    On(bool),
    Set(RawOptionValues),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOptionValues {
    #[serde(default)]
    scale_down_utilization_threshold: Option<f64>,
    #[serde(default)]
    scale_down_gpu_utilization_threshold: Option<f64>,
    #[serde(default, deserialize_with = "opt_duration")]
    scale_down_unneeded_time: Option<Checked<Duration>>,
    #[serde(default, deserialize_with = "opt_duration")]
    scale_down_unready_time: Option<Checked<Duration>>,
    #[serde(default, deserialize_with = "opt_duration")]
    max_node_startup_time: Option<Checked<Duration>>,
    #[serde(default)]
    zero_or_max_node_scaling: Option<bool>,
    #[serde(default)]
    ignore_daemonsets_utilization: Option<bool>,
}

/// The untagged enum's own error names no field; this one says what is accepted.
fn raw_options<'de, D: Deserializer<'de>>(d: D) -> Result<Option<RawOptions>, D::Error> {
    Option::<RawOptions>::deserialize(d).map_err(|_| {
        serde::de::Error::custom(
            "autoscaling_options is true, false, or a mapping of overrides among \
             scale_down_utilization_threshold, scale_down_gpu_utilization_threshold (0 to 1), \
             scale_down_unneeded_time, scale_down_unready_time, max_node_startup_time \
             (durations like 10m), zero_or_max_node_scaling and \
             ignore_daemonsets_utilization (true or false)",
        )
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOperation {
    command: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    dir: Option<String>,
    #[serde(default, deserialize_with = "opt_duration")]
    timeout: Option<Checked<Duration>>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTimings {
    #[serde(default, deserialize_with = "opt_duration")]
    job_timeout: Option<Checked<Duration>>,
    #[serde(default, deserialize_with = "opt_duration")]
    job_monitor_poll_interval: Option<Checked<Duration>>,
    #[serde(default, deserialize_with = "opt_duration")]
    uncordon_timeout: Option<Checked<Duration>>,
    #[serde(default, deserialize_with = "opt_duration")]
    readiness_gate_timeout: Option<Checked<Duration>>,
    #[serde(default, deserialize_with = "opt_duration")]
    max_uncordon_retry_interval: Option<Checked<Duration>>,
    #[serde(default, deserialize_with = "opt_duration")]
    budget_slack: Option<Checked<Duration>>,
    #[serde(default, deserialize_with = "opt_count")]
    max_attempts: Option<Checked<u32>>,
    #[serde(default, deserialize_with = "opt_duration")]
    machine_gone_grace: Option<Checked<Duration>>,
    #[serde(default, deserialize_with = "opt_duration")]
    shutdown_attempt_reset_grace: Option<Checked<Duration>>,
    #[serde(default, deserialize_with = "opt_duration")]
    ttl_after_finished: Option<Checked<Duration>>,
    #[serde(default, deserialize_with = "opt_duration")]
    lock_timeout: Option<Checked<Duration>>,
    #[serde(default, deserialize_with = "opt_duration")]
    stuck_threshold: Option<Checked<Duration>>,
    #[serde(default, deserialize_with = "opt_duration")]
    failed_slot_cooldown: Option<Checked<Duration>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTemplate {
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    taints: Vec<String>,
    #[serde(default)]
    capacity: BTreeMap<String, String>,
    #[serde(default)]
    gpu: Option<RawGpu>,
    #[serde(default)]
    power: Option<RawPower>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGpu {
    label: String,
    types: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPower {
    watts: f64,
    price_per_kwh: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSlot {
    name: String,
    group: String,
    #[serde(default)]
    provider_id: Option<String>,
    #[serde(default)]
    kubernetes_node: Option<String>,
}

/// A duration in the humantime form (`30s`, `12m10s`, `1h`), read from a string. A YAML plain
/// scalar such as `30` reads as the text "30" and is refused later with the form that is valid.
fn opt_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Checked<Duration>>, D::Error> {
    Ok(Option::<String>::deserialize(d)?.map(|text| crate::units::duration(&text)))
}

fn count<'de, D: Deserializer<'de>>(d: D) -> Result<Checked<u32>, D::Error> {
    Ok(parse_count(&String::deserialize(d)?))
}

fn opt_count<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Checked<u32>>, D::Error> {
    Ok(Option::<String>::deserialize(d)?.map(|text| parse_count(&text)))
}

/// A whole number from 0 to u32::MAX, read as text so that `-1` or `1e99` is a problem with a
/// message rather than a type error.
fn parse_count(text: &str) -> Checked<u32> {
    let trimmed = text.trim();
    if !trimmed.is_empty()
        && trimmed.chars().all(|c| c.is_ascii_digit())
        && let Ok(n) = trimmed.parse::<u32>()
    {
        return Ok(n);
    }
    Err(format!(
        "invalid number {text:?}: a whole number from 0 to {}",
        u32::MAX
    ))
}

// ---------------------------------------------------------------------------------------------
// Validation: raw structs to typed ones, every problem collected.

/// The problems found so far.
#[derive(Default)]
struct Problems(Vec<Problem>);

impl Problems {
    fn push(&mut self, place: impl Into<String>, message: impl Into<String>) {
        self.0.push(Problem {
            place: place.into(),
            message: message.into(),
        });
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

/// `groups[0] (pool-a)`: the index finds the entry, the name tells the reader which it is. The
/// name is shown only when valid, so a place never carries arbitrary text.
fn entry_place(list: &str, index: usize, name: Option<&str>) -> String {
    match name {
        Some(name) => format!("{list}[{index}] ({name})"),
        None => format!("{list}[{index}]"),
    }
}

fn validate(raw: RawConfig) -> Result<Config, Vec<Problem>> {
    let mut problems = Problems::default();
    let raw_groups = raw.groups.unwrap_or_default();
    let raw_slots = raw.slots.unwrap_or_default();
    if raw_groups.is_empty() {
        problems.push(
            "groups",
            "no groups: declare at least one group (name, min_size, max_size, startup, shutdown)",
        );
    }

    // Every validly named group counts as declared, even one with other problems, so that its
    // slots are not also reported as naming an undeclared group.
    let mut declared: BTreeMap<GroupName, usize> = BTreeMap::new();
    let mut groups = BTreeMap::new();
    for (index, raw) in raw_groups.iter().enumerate() {
        let before = problems.len();
        let name = match GroupName::parse(&raw.name) {
            Ok(name) => Some(name),
            Err(e) => {
                problems.push(
                    format!("{}.name", entry_place("groups", index, None)),
                    e.to_string(),
                );
                None
            }
        };
        let place = entry_place("groups", index, name.as_ref().map(GroupName::as_str));
        if let Some(name) = &name {
            if let Some(first) = declared.get(name) {
                problems.push(
                    format!("{place}.name"),
                    format!(
                        "group {name} is declared twice (first at groups[{first}]); group names \
                         are unique"
                    ),
                );
            } else {
                declared.insert(name.clone(), index);
            }
        }
        let group = group(raw, name, &place, &mut problems);
        if problems.len() == before
            && let Some(group) = group
        {
            groups.insert(group.name.clone(), group);
        }
    }

    let mut slots = BTreeMap::new();
    let mut names: BTreeMap<BenchName, usize> = BTreeMap::new();
    let mut provider_ids: BTreeMap<String, String> = BTreeMap::new();
    let mut nodes: BTreeMap<String, String> = BTreeMap::new();
    for (index, raw) in raw_slots.iter().enumerate() {
        let before = problems.len();
        let name = match BenchName::parse(&raw.name) {
            Ok(name) => Some(name),
            Err(e) => {
                problems.push(
                    format!("{}.name", entry_place("slots", index, None)),
                    e.to_string(),
                );
                None
            }
        };
        let place = entry_place("slots", index, name.as_ref().map(BenchName::as_str));
        let mut duplicate = false;
        if let Some(name) = &name {
            if let Some(first) = names.get(name) {
                duplicate = true;
                problems.push(
                    format!("{place}.name"),
                    format!(
                        "slot {name} is declared twice (first at slots[{first}]); slot names are \
                         unique"
                    ),
                );
            } else {
                names.insert(name.clone(), index);
            }
        }

        let group = match GroupName::parse(&raw.group) {
            Ok(group) if declared.contains_key(&group) => Some(group),
            Ok(group) => {
                let known: Vec<&str> = declared.keys().map(GroupName::as_str).collect();
                let hint = if known.is_empty() {
                    "declare it under groups".to_owned()
                } else {
                    format!(
                        "declare it under groups, or use one of: {}",
                        known.join(", ")
                    )
                };
                problems.push(
                    format!("{place}.group"),
                    format!("group {group} is not declared; {hint}"),
                );
                None
            }
            Err(e) => {
                problems.push(format!("{place}.group"), e.to_string());
                None
            }
        };

        let provider_id = match (&raw.provider_id, &name) {
            (Some(id), _) if id.trim().is_empty() => {
                problems.push(
                    format!("{place}.provider_id"),
                    "provider_id is empty: leave it out for the default fleet://<name>, or give \
                     a non-empty id",
                );
                None
            }
            (Some(id), _) => Some(id.clone()),
            (None, Some(name)) => Some(default_provider_id(name)),
            (None, None) => None,
        };
        // A repeated slot name already says what is wrong; its default provider id would only
        // repeat it.
        if let Some(id) = &provider_id
            && !(duplicate && raw.provider_id.is_none())
        {
            if let Some(first) = provider_ids.get(id) {
                problems.push(
                    format!("{place}.provider_id"),
                    format!(
                        "provider_id {id} is already used by {first}; every slot has its own \
                         provider_id"
                    ),
                );
            } else {
                provider_ids.insert(id.clone(), place.clone());
            }
        }

        if let Some(node) = &raw.kubernetes_node {
            match BenchName::parse(node) {
                Ok(_) => {
                    if let Some(first) = nodes.get(node) {
                        problems.push(
                            format!("{place}.kubernetes_node"),
                            format!(
                                "kubernetes_node {node} is already bound to {first}; a node \
                                 belongs to one slot"
                            ),
                        );
                    } else {
                        nodes.insert(node.clone(), place.clone());
                    }
                }
                Err(e) => problems.push(
                    format!("{place}.kubernetes_node"),
                    format!(
                        "invalid kubernetes_node {node:?}: {}; a node name is an RFC 1123 \
                         subdomain (lowercase letters, digits, '-' and '.', each label starting \
                         and ending with a letter or digit, at most 253 characters)",
                        why_name(&e)
                    ),
                ),
            }
        }

        if problems.len() == before
            && let (Some(name), Some(group), Some(provider_id)) = (name, group, provider_id)
        {
            let slot = Slot {
                name: name.clone(),
                group,
                provider_id,
                kubernetes_node: raw.kubernetes_node.clone(),
            };
            slots.insert(name, slot);
        }
    }

    if problems.0.is_empty() {
        Ok(Config { groups, slots })
    } else {
        Err(problems.0)
    }
}

/// The reason alone of a refused name, for a message that names the field itself.
fn why_name(e: &InvalidName) -> String {
    e.why()
}

/// One group; `None` when a part of it could not be built (its problems are in `problems`).
fn group(
    raw: &RawGroup,
    name: Option<GroupName>,
    place: &str,
    problems: &mut Problems,
) -> Option<Group> {
    let min_size = match &raw.min_size {
        None => Some(0),
        Some(n) => checked(n, &format!("{place}.min_size"), problems),
    };
    let max_size = checked(&raw.max_size, &format!("{place}.max_size"), problems);
    if let (Some(min), Some(max)) = (min_size, max_size)
        && min > max
    {
        problems.push(
            format!("{place}.min_size"),
            format!("min_size {min} is greater than max_size {max}; min_size is at most max_size"),
        );
    }
    let max_node_provision_time = match &raw.max_node_provision_time {
        None => Some(None),
        Some(d) => duration(d, &format!("{place}.max_node_provision_time"), problems).map(Some),
    };

    let readiness_taints = match &raw.readiness_taints {
        None => taint_or_problem(
            DEFAULT_READINESS_TAINT,
            &format!("{place}.readiness_taints"),
            problems,
        )
        .map(|t| vec![t]),
        Some(list) => taints(list, &format!("{place}.readiness_taints"), problems),
    };

    let timings = timings(raw.timings.as_ref(), &format!("{place}.timings"), problems);
    let startup = operation(
        &raw.startup,
        timings.job_timeout,
        &format!("{place}.startup"),
        problems,
    );
    let shutdown = operation(
        &raw.shutdown,
        timings.job_timeout,
        &format!("{place}.shutdown"),
        problems,
    );
    // An operation whose outcome was lost is abandoned at stuck_threshold (SPEC §5.4); one that
    // is still allowed to run, and to report, by then would be abandoned alive.
    for (op, name) in [(&startup, "startup"), (&shutdown, "shutdown")] {
        if let Some(op) = op
            && op.timeout + crate::domain::operation::REPORT_SLACK >= timings.stuck_threshold
        {
            problems.push(
                format!("{place}.{name}.timeout"),
                format!(
                    "the timeout {} plus the 30s the wrapper has to report it reaches \
                     timings.stuck_threshold ({}): an operation is abandoned as stuck only once \
                     it can no longer report; shorten the timeout or raise stuck_threshold",
                    humantime::format_duration(op.timeout),
                    humantime::format_duration(timings.stuck_threshold)
                ),
            );
        }
    }
    let options = autoscaling_options(
        raw.autoscaling_options.as_ref(),
        &format!("{place}.autoscaling_options"),
        problems,
    );
    let template = match &raw.template {
        None => Some(None),
        Some(t) => template(t, &format!("{place}.template"), problems).map(Some),
    };

    Some(Group {
        name: name?,
        min_size: min_size?,
        max_size: max_size?,
        max_node_provision_time: max_node_provision_time?,
        readiness_taints: readiness_taints?,
        startup: startup?,
        shutdown: shutdown?,
        timings,
        template: template?,
        autoscaling_options: options?,
    })
}

/// The group's opt-in and overrides; `Some(None)` when it does not opt in, `None` when a value
/// is a problem.
fn autoscaling_options(
    raw: Option<&RawOptions>,
    place: &str,
    problems: &mut Problems,
) -> Option<Option<AutoscalingOptions>> {
    let values = match raw {
        None | Some(RawOptions::On(false)) => return Some(None),
        Some(RawOptions::On(true)) => return Some(Some(AutoscalingOptions::default())),
        Some(RawOptions::Set(values)) => values,
    };
    let before = problems.len();
    let ratio = |value: Option<f64>, name: &str, problems: &mut Problems| {
        if let Some(v) = value
            && !(v.is_finite() && (0.0..=1.0).contains(&v))
        {
            problems.push(
                format!("{place}.{name}"),
                format!("invalid {name} {v}: a number from 0 to 1, like 0.5"),
            );
        }
        value
    };
    let options = AutoscalingOptions {
        scale_down_utilization_threshold: ratio(
            values.scale_down_utilization_threshold,
            "scale_down_utilization_threshold",
            problems,
        ),
        scale_down_gpu_utilization_threshold: ratio(
            values.scale_down_gpu_utilization_threshold,
            "scale_down_gpu_utilization_threshold",
            problems,
        ),
        scale_down_unneeded_time: values
            .scale_down_unneeded_time
            .as_ref()
            .and_then(|v| duration(v, &format!("{place}.scale_down_unneeded_time"), problems)),
        scale_down_unready_time: values
            .scale_down_unready_time
            .as_ref()
            .and_then(|v| duration(v, &format!("{place}.scale_down_unready_time"), problems)),
        max_node_startup_time: values
            .max_node_startup_time
            .as_ref()
            .and_then(|v| duration(v, &format!("{place}.max_node_startup_time"), problems)),
        zero_or_max_node_scaling: values.zero_or_max_node_scaling,
        ignore_daemonsets_utilization: values.ignore_daemonsets_utilization,
    };
    (problems.len() == before).then_some(Some(options))
}

fn checked<T: Copy>(value: &Checked<T>, place: &str, problems: &mut Problems) -> Option<T> {
    match value {
        Ok(v) => Some(*v),
        Err(message) => {
            problems.push(place, message.clone());
            None
        }
    }
}

/// A duration the file gives: longer than zero, at most `MAX_DURATION`.
fn duration(value: &Checked<Duration>, place: &str, problems: &mut Problems) -> Option<Duration> {
    let d = checked(value, place, problems)?;
    if d.is_zero() {
        problems.push(
            place,
            "the duration is zero: it must be longer than zero, like 30s, 5m or 1h",
        );
        return None;
    }
    if d > MAX_DURATION {
        problems.push(
            place,
            format!(
                "the duration {} is too long: at most 365 days (8760h)",
                humantime::format_duration(d)
            ),
        );
        return None;
    }
    Some(d)
}

fn taint_or_problem(text: &str, place: &str, problems: &mut Problems) -> Option<Taint> {
    match text.parse::<Taint>() {
        Ok(t) => Some(t),
        Err(e) => {
            problems.push(place, e.to_string());
            None
        }
    }
}

fn taints(list: &[String], place: &str, problems: &mut Problems) -> Option<Vec<Taint>> {
    let parsed: Vec<Option<Taint>> = list
        .iter()
        .enumerate()
        .map(|(i, t)| taint_or_problem(t, &format!("{place}[{i}]"), problems))
        .collect();
    parsed.into_iter().collect()
}

/// The effective timings. Always returns values (the defaults where
/// a field is bad) so that the operations can still be checked against a job timeout; the bad
/// fields are in `problems`, so the group is not built from them.
fn timings(raw: Option<&RawTimings>, place: &str, problems: &mut Problems) -> Timings {
    let defaults = RawTimings::default();
    let raw = raw.unwrap_or(&defaults);
    let mut t = Timings::default();
    let mut set = |field: &Option<Checked<Duration>>, name: &str, slot: &mut Duration| {
        if let Some(value) = field
            && let Some(d) = duration(value, &format!("{place}.{name}"), problems)
        {
            *slot = d;
        }
    };
    set(&raw.job_timeout, "job_timeout", &mut t.job_timeout);
    set(
        &raw.job_monitor_poll_interval,
        "job_monitor_poll_interval",
        &mut t.job_monitor_poll_interval,
    );
    set(
        &raw.uncordon_timeout,
        "uncordon_timeout",
        &mut t.uncordon_timeout,
    );
    set(
        &raw.readiness_gate_timeout,
        "readiness_gate_timeout",
        &mut t.readiness_gate_timeout,
    );
    set(
        &raw.max_uncordon_retry_interval,
        "max_uncordon_retry_interval",
        &mut t.max_uncordon_retry_interval,
    );
    set(&raw.budget_slack, "budget_slack", &mut t.budget_slack);
    set(
        &raw.shutdown_attempt_reset_grace,
        "shutdown_attempt_reset_grace",
        &mut t.shutdown_attempt_reset_grace,
    );
    set(
        &raw.ttl_after_finished,
        "ttl_after_finished",
        &mut t.ttl_after_finished,
    );
    set(
        &raw.stuck_threshold,
        "stuck_threshold",
        &mut t.stuck_threshold,
    );
    set(
        &raw.failed_slot_cooldown,
        "failed_slot_cooldown",
        &mut t.failed_slot_cooldown,
    );
    let gone = raw.lock_timeout.is_some();
    // One boot window of *these* timings, not of the defaults: a group with a longer job
    // timeout boots for longer, and a machine seen off within its boot window is not gone.
    // Every term is capped by MAX_DURATION, so the sum cannot overflow.
    t.machine_gone_grace = t.attempt_budget();
    set(
        &raw.machine_gone_grace,
        "machine_gone_grace",
        &mut t.machine_gone_grace,
    );
    if gone {
        problems.push(
            format!("{place}.lock_timeout"),
            "lock_timeout is gone: fleet takes no coordination lock (one live claim per slot is \
             made airtight by the store, SPEC §3.11 3); remove it",
        );
    }
    if let Some(value) = &raw.max_attempts {
        let place = format!("{place}.max_attempts");
        match checked(value, &place, problems) {
            Some(0) => problems.push(
                place,
                "max_attempts is 0: a slot needs at least one attempt; use a whole number from 1",
            ),
            Some(n) => t.max_attempts = n,
            None => {}
        }
    }
    t
}

fn operation(
    raw: &RawOperation,
    job_timeout: Duration,
    place: &str,
    problems: &mut Problems,
) -> Option<Operation> {
    let before = problems.len();
    match raw.command.first() {
        None => problems.push(
            format!("{place}.command"),
            "the command is empty: give the program and its arguments as a list, like \
             [\"/usr/local/bin/power\", \"on\"]",
        ),
        Some(program) if program.trim().is_empty() => problems.push(
            format!("{place}.command[0]"),
            "the program is empty: the first element of command is the program to run, like \
             /usr/local/bin/power",
        ),
        Some(_) => {}
    }
    // A NUL cannot cross exec: refuse it here rather than when the machine is needed.
    for (i, arg) in raw.command.iter().enumerate() {
        if arg.contains('\0') {
            problems.push(
                format!("{place}.command[{i}]"),
                "an argument contains a NUL character; arguments are text without NUL",
            );
        }
    }
    for (name, value) in &raw.env {
        if let Err(message) = check_env_name(name) {
            problems.push(format!("{place}.env.{name}"), message);
        } else if value.contains('\0') {
            problems.push(
                format!("{place}.env.{name}"),
                "the value contains a NUL character; values are text without NUL",
            );
        }
    }
    if let Some(dir) = &raw.dir
        && (dir.trim().is_empty() || dir.contains('\0'))
    {
        problems.push(
            format!("{place}.dir"),
            "dir is empty or contains a NUL character: give the working directory as a \
                 path, like /var/lib/fleet, or leave it out",
        );
    }
    let timeout = match &raw.timeout {
        None => Some(job_timeout),
        Some(d) => duration(d, &format!("{place}.timeout"), problems),
    };
    if problems.len() != before {
        return None;
    }
    Some(Operation {
        command: raw.command.clone(),
        env: raw.env.clone(),
        dir: raw.dir.as_ref().map(PathBuf::from),
        timeout: timeout?,
    })
}

fn template(raw: &RawTemplate, place: &str, problems: &mut Problems) -> Option<Template> {
    let before = problems.len();
    for key in raw.labels.keys() {
        if key.trim().is_empty() {
            problems.push(
                format!("{place}.labels"),
                "a label key is empty: a key is a Kubernetes label key, like fleet.dev/pool",
            );
        }
    }
    let taints = taints(&raw.taints, &format!("{place}.taints"), problems);
    let mut capacity = BTreeMap::new();
    for (resource, quantity) in &raw.capacity {
        if resource.trim().is_empty() {
            problems.push(
                format!("{place}.capacity"),
                "a resource name is empty: a name is a Kubernetes resource, like cpu, memory or \
                 nvidia.com/gpu",
            );
            continue;
        }
        match Quantity::parse(quantity) {
            Ok(q) => {
                capacity.insert(resource.clone(), q);
            }
            Err(e) => problems.push(format!("{place}.capacity.{resource}"), e.to_string()),
        }
    }
    // A template node without CPU or memory fits no pod: cluster-autoscaler would simulate a
    // useless machine and never say why.
    for needed in ["cpu", "memory"] {
        if !raw.capacity.contains_key(needed) {
            problems.push(
                format!("{place}.capacity"),
                format!(
                    "the template has no {needed}: a scale-from-zero node needs cpu and memory \
                     (like capacity: {{ cpu: \"16\", memory: 64Gi }})"
                ),
            );
        }
    }
    let gpu = raw.gpu.as_ref().map(|gpu| {
        if gpu.label.trim().is_empty() {
            problems.push(
                format!("{place}.gpu.label"),
                "the gpu label is empty: it is the node label that names the GPU type, like \
                 fleet.dev/gpu-type",
            );
        }
        if gpu.types.is_empty() {
            problems.push(
                format!("{place}.gpu.types"),
                "no gpu types: list at least one, like [nvidia-a100]",
            );
        }
        for (i, t) in gpu.types.iter().enumerate() {
            if t.trim().is_empty() {
                problems.push(
                    format!("{place}.gpu.types[{i}]"),
                    "a gpu type is empty: name it, like nvidia-a100",
                );
            }
        }
        Gpu {
            label: gpu.label.clone(),
            types: gpu.types.clone(),
        }
    });
    let power = raw.power.as_ref().map(|power| {
        if !(power.watts.is_finite() && power.watts > 0.0) {
            problems.push(
                format!("{place}.power.watts"),
                format!(
                    "invalid watts {}: a finite number above zero, like 350",
                    power.watts
                ),
            );
        }
        if !(power.price_per_kwh.is_finite() && power.price_per_kwh >= 0.0) {
            problems.push(
                format!("{place}.power.price_per_kwh"),
                format!(
                    "invalid price_per_kwh {}: a finite number, zero or more, like 0.25",
                    power.price_per_kwh
                ),
            );
        }
        PowerDraw {
            watts: power.watts,
            price_per_kwh: power.price_per_kwh,
        }
    });
    if problems.len() != before {
        return None;
    }
    Some(Template {
        labels: raw.labels.clone(),
        taints: taints?,
        capacity,
        gpu,
        power,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_names_are_shell_names_outside_the_fleet_prefix() {
        for good in ["BMC", "_x", "a1", "BMC_HOST", "fleet_lowercase", "FLEETX"] {
            assert_eq!(check_env_name(good), Ok(()), "{good}");
        }
        for bad in ["", "1A", "A-B", "A B", "A=B", "é", "A.B"] {
            let err = check_env_name(bad).expect_err(bad);
            assert!(err.contains("a letter or '_'"), "{bad:?}: {err}");
        }
        for reserved in ["FLEET_SLOT", "FLEET_OPERATION", "FLEET_ANYTHING", "FLEET_"] {
            let err = check_env_name(reserved).expect_err(reserved);
            assert!(err.contains("is reserved"), "{reserved}: {err}");
            assert!(err.contains("FLEET_PROVIDER_ID"), "{reserved}: {err}");
        }
    }

    #[test]
    fn counts_are_whole_numbers_read_from_text() {
        assert_eq!(parse_count("0"), Ok(0));
        assert_eq!(parse_count("4"), Ok(4));
        assert_eq!(parse_count("4294967295"), Ok(u32::MAX));
        for bad in ["-1", "4294967296", "1.5", "1e3", "+4", "", "four", "0x10"] {
            let err = parse_count(bad).expect_err(bad);
            assert!(err.contains("a whole number from 0"), "{bad:?}: {err}");
        }
    }

    #[test]
    fn a_group_without_slots_or_with_max_size_above_them_is_doubted_not_refused() {
        let yaml = |max: u32, slots: &str| {
            format!(
                "groups:\n  - {{ name: a, min_size: 0, max_size: {max}, startup: {{ command: [on] }}, shutdown: {{ command: [off] }} }}\n  - {{ name: b, min_size: 0, max_size: 1, startup: {{ command: [on] }}, shutdown: {{ command: [off] }} }}\nslots:\n{slots}"
            )
        };
        let both =
            "  - { name: s1, group: a }\n  - { name: s2, group: a }\n  - { name: t1, group: b }\n";
        let config = parse(&yaml(2, both), Path::new("f.yaml")).expect("valid");
        assert_eq!(config.doubts(), Vec::<String>::new());
        let config = parse(&yaml(3, both), Path::new("f.yaml")).expect("valid");
        assert_eq!(
            config.doubts(),
            ["group a: max_size 3 is above its 2 slot(s), so it can never be reached"]
        );
        let config = parse(
            &yaml(2, "  - { name: s1, group: a }\n"),
            Path::new("f.yaml"),
        )
        .expect("valid");
        let doubts = config.doubts();
        assert_eq!(doubts.len(), 2, "{doubts:?}");
        assert!(doubts[0].starts_with("group a: max_size 2 is above its 1 slot(s)"));
        assert!(
            doubts[1].starts_with("group b: it has no slots"),
            "{doubts:?}"
        );
    }

    #[test]
    fn the_example_is_valid() {
        let config = parse(example(), Path::new("example.yaml"));
        assert_eq!(config.map(|c| c.slots.len()).ok(), Some(5));
    }
}
