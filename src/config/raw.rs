//! The raw file, as serde reads it: the field names operators write, pinned (a field may be
//! added, optional, but never renamed or removed), and unknown keys refused so that a typo does
//! not silently become a default.
//!
//! A value whose syntax is ours to check (a duration, a count) is read as text and checked by its
//! deserializer into a `Checked`, whose error waits for validation: a bad value then becomes one
//! problem among the others, with its place, instead of the end of the read.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::power::fields::Written;

pub(super) type Checked<T> = Result<T, String>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    #[serde(default)]
    pub(super) power_on: Option<RawPowerOn>,
    #[serde(default)]
    pub(super) groups: Option<Vec<RawGroup>>,
    #[serde(default)]
    pub(super) slots: Option<Vec<RawSlot>>,
}

/// `power_on: { max_concurrent, per_minute }`, on a group or for the whole fleet.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPowerOn {
    #[serde(default, deserialize_with = "opt_count")]
    pub(super) max_concurrent: Option<Checked<u32>>,
    #[serde(default, deserialize_with = "opt_count")]
    pub(super) per_minute: Option<Checked<u32>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGroup {
    pub(super) name: String,
    #[serde(default, deserialize_with = "opt_count")]
    pub(super) min_size: Option<Checked<u32>>,
    #[serde(deserialize_with = "count")]
    pub(super) max_size: Checked<u32>,
    #[serde(default)]
    pub(super) power_on: Option<RawPowerOn>,
    #[serde(default, deserialize_with = "opt_duration")]
    pub(super) max_node_provision_time: Option<Checked<Duration>>,
    #[serde(default)]
    pub(super) readiness_taints: Option<Vec<String>>,
    #[serde(default)]
    pub(super) node_taints: Option<Vec<String>>,
    /// Optional since the drivers (SPEC §4.10): a slot whose driver powers it needs neither.
    #[serde(default)]
    pub(super) startup: Option<RawOperation>,
    #[serde(default)]
    pub(super) shutdown: Option<RawOperation>,
    /// The defaults of the group's slots' drivers, each field overridable by a slot; each
    /// driver's fields are its own (`power::fields`), read as text and checked by the driver.
    #[serde(default)]
    pub(super) driver: Option<Written>,
    #[serde(default)]
    pub(super) timings: Option<RawTimings>,
    #[serde(default)]
    pub(super) template: Option<RawTemplate>,
    #[serde(default, deserialize_with = "raw_options")]
    pub(super) autoscaling_options: Option<RawOptions>,
}

/// `autoscaling_options: true` (echo cluster-autoscaler's defaults), `false`, or the overrides.
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum RawOptions {
    On(bool),
    Set(RawOptionValues),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOptionValues {
    #[serde(default)]
    pub(super) scale_down_utilization_threshold: Option<f64>,
    #[serde(default)]
    pub(super) scale_down_gpu_utilization_threshold: Option<f64>,
    #[serde(default, deserialize_with = "opt_duration")]
    pub(super) scale_down_unneeded_time: Option<Checked<Duration>>,
    #[serde(default, deserialize_with = "opt_duration")]
    pub(super) scale_down_unready_time: Option<Checked<Duration>>,
    #[serde(default, deserialize_with = "opt_duration")]
    pub(super) max_node_startup_time: Option<Checked<Duration>>,
    #[serde(default)]
    pub(super) zero_or_max_node_scaling: Option<bool>,
    #[serde(default)]
    pub(super) ignore_daemonsets_utilization: Option<bool>,
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
pub(super) struct RawOperation {
    /// Exclusive with `job`; one of them is required, which validation says with its place.
    #[serde(default)]
    pub(super) command: Option<Vec<String>>,
    #[serde(default)]
    pub(super) job: Option<RawJob>,
    #[serde(default)]
    pub(super) env: BTreeMap<String, String>,
    #[serde(default)]
    pub(super) dir: Option<String>,
    #[serde(default, deserialize_with = "opt_duration")]
    pub(super) timeout: Option<Checked<Duration>>,
}

/// A Job operation's pod template, in the file's own spelling (snake_case, like its other
/// fields); its environment is the operation's `env`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawJob {
    pub(super) image: String,
    #[serde(default)]
    pub(super) command: Vec<String>,
    #[serde(default)]
    pub(super) args: Vec<String>,
    #[serde(default)]
    pub(super) service_account_name: Option<String>,
    #[serde(default)]
    pub(super) node_selector: BTreeMap<String, String>,
    #[serde(default)]
    pub(super) tolerations: Vec<RawToleration>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawToleration {
    #[serde(default)]
    pub(super) key: Option<String>,
    #[serde(default)]
    pub(super) operator: Option<String>,
    #[serde(default)]
    pub(super) value: Option<String>,
    #[serde(default)]
    pub(super) effect: Option<String>,
    #[serde(default)]
    pub(super) toleration_seconds: Option<i64>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTimings {
    #[serde(default, deserialize_with = "opt_duration")]
    pub(super) job_timeout: Option<Checked<Duration>>,
    #[serde(default, deserialize_with = "opt_duration")]
    pub(super) job_monitor_poll_interval: Option<Checked<Duration>>,
    #[serde(default, deserialize_with = "opt_duration")]
    pub(super) uncordon_timeout: Option<Checked<Duration>>,
    #[serde(default, deserialize_with = "opt_duration")]
    pub(super) readiness_gate_timeout: Option<Checked<Duration>>,
    #[serde(default, deserialize_with = "opt_duration")]
    pub(super) max_uncordon_retry_interval: Option<Checked<Duration>>,
    #[serde(default, deserialize_with = "opt_duration")]
    pub(super) budget_slack: Option<Checked<Duration>>,
    #[serde(default, deserialize_with = "opt_count")]
    pub(super) max_attempts: Option<Checked<u32>>,
    #[serde(default, deserialize_with = "opt_duration")]
    pub(super) machine_gone_grace: Option<Checked<Duration>>,
    #[serde(default, deserialize_with = "opt_duration")]
    pub(super) shutdown_attempt_reset_grace: Option<Checked<Duration>>,
    #[serde(default, deserialize_with = "opt_duration")]
    pub(super) ttl_after_finished: Option<Checked<Duration>>,
    #[serde(default, deserialize_with = "opt_duration")]
    pub(super) lock_timeout: Option<Checked<Duration>>,
    #[serde(default, deserialize_with = "opt_duration")]
    pub(super) stuck_threshold: Option<Checked<Duration>>,
    #[serde(default, deserialize_with = "opt_duration")]
    pub(super) failed_slot_cooldown: Option<Checked<Duration>>,
    #[serde(default, deserialize_with = "opt_duration")]
    pub(super) delete_stale_node_after: Option<Checked<Duration>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTemplate {
    #[serde(default)]
    pub(super) labels: BTreeMap<String, String>,
    #[serde(default)]
    pub(super) taints: Vec<String>,
    #[serde(default)]
    pub(super) capacity: BTreeMap<String, String>,
    #[serde(default)]
    pub(super) gpu: Option<RawGpu>,
    #[serde(default)]
    pub(super) power: Option<RawPower>,
    /// The DRA devices each machine has (SPEC §6.3), as ResourceSlices of the template.
    #[serde(default)]
    pub(super) devices: Vec<RawDevices>,
}

/// One kind of device a machine of the group has, `count` of them.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDevices {
    pub(super) driver: String,
    #[serde(default)]
    pub(super) name: Option<String>,
    pub(super) count: u32,
    #[serde(default)]
    pub(super) attributes: BTreeMap<String, RawAttribute>,
    #[serde(default)]
    pub(super) capacity: BTreeMap<String, String>,
}

/// A device attribute's value: a bool, an integer, a string, or `{version: "1.2.3"}`.
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum RawAttribute {
    Bool(bool),
    Int(i64),
    Version { version: String },
    String(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGpu {
    pub(super) label: String,
    pub(super) types: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPower {
    pub(super) watts: f64,
    pub(super) price_per_kwh: f64,
    /// The draw when off (SPEC §4.12); 0 when unset.
    #[serde(default)]
    pub(super) standby_watts: Option<f64>,
}

/// A slot's `power`: each field overrides its group's `template.power` (SPEC §4.12).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSlotPower {
    #[serde(default)]
    pub(super) watts: Option<f64>,
    #[serde(default)]
    pub(super) standby_watts: Option<f64>,
    #[serde(default)]
    pub(super) price_per_kwh: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSlot {
    pub(super) name: String,
    pub(super) group: String,
    #[serde(default)]
    pub(super) provider_id: Option<String>,
    #[serde(default)]
    pub(super) kubernetes_node: Option<String>,
    #[serde(default)]
    pub(super) driver: Option<Written>,
    #[serde(default)]
    pub(super) power: Option<RawSlotPower>,
}

/// A duration in the humantime form (`30s`, `12m10s`, `1h`), read from a string. A YAML plain
/// scalar such as `30` reads as the text "30" and is refused later with the form that is valid.
fn opt_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Checked<Duration>>, D::Error> {
    Ok(Option::<String>::deserialize(d)?.map(|text| crate::units::duration(&text)))
}

fn count<'de, D: Deserializer<'de>>(d: D) -> Result<Checked<u32>, D::Error> {
    Ok(crate::units::count(&String::deserialize(d)?))
}

fn opt_count<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Checked<u32>>, D::Error> {
    Ok(Option::<String>::deserialize(d)?.map(|text| crate::units::count(&text)))
}
