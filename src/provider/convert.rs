//! The conversions between the wire and fleet's own types (SPEC §6.3), in one place: durations
//! in their legacy and their new form, a group as a NodeGroup, a claim as an instance, a node as
//! a fake one or not, the GPU labels, a group's autoscaling options over cluster-autoscaler's
//! defaults, and a machine's energy price. Pure: no I/O, no clock.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, SystemTime};

use crate::config::{AutoscalingOptions, Config, Group, PowerDraw};
use crate::domain::claim::{Claim, Reason};
use crate::domain::sizing::{Fake, Instance as Shown};

use super::wire::instance_status::InstanceState;
use super::wire::{
    ExternalGrpcNode, Instance, InstanceErrorInfo, InstanceStatus, LegacyDuration, NodeGroup,
    NodeGroupAutoscalingOptions,
};

/// The annotation cluster-autoscaler puts on the fake nodes it makes for instances that never
/// registered or failed to be created.
pub const FAKE_NODE_REASON: &str = "k8s.io/cluster-autoscaler/fake-node-reason";
/// The GPU label when no group's template names one.
pub const DEFAULT_GPU_LABEL: &str = "fleet.dev/gpu-type";
/// cluster-autoscaler's error classes (InstanceErrorInfo.instanceErrorClass).
pub const OUT_OF_RESOURCES: i32 = 1;
pub const OTHER_ERROR: i32 = 99;

/// cluster-autoscaler's own defaults (`--scale-down-unneeded-time`, `--scale-down-unready-time`,
/// `--max-node-provision-time`, `--max-node-startup-time`, the utilization thresholds), used
/// only when a request carries no defaults at all.
const UNNEEDED: Duration = Duration::from_secs(10 * 60);
const UNREADY: Duration = Duration::from_secs(20 * 60);
const PROVISION: Duration = Duration::from_secs(15 * 60);
const STARTUP: Duration = Duration::from_secs(15 * 60);
const UTILIZATION: f64 = 0.5;

/// The legacy form: nanoseconds in an int64, saturated.
impl From<Duration> for LegacyDuration {
    fn from(d: Duration) -> Self {
        LegacyDuration {
            duration: i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        }
    }
}

/// A legacy duration that is negative.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("a negative duration: {0} ns")]
pub struct NegativeDuration(pub i64);

impl TryFrom<LegacyDuration> for Duration {
    type Error = NegativeDuration;

    fn try_from(d: LegacyDuration) -> Result<Self, Self::Error> {
        u64::try_from(d.duration)
            .map(Duration::from_nanos)
            .map_err(|_| NegativeDuration(d.duration))
    }
}

/// The new form, through prost-types' own conversion; a duration past its range (more than
/// i64::MAX seconds) is its greatest value.
fn proto(d: Duration) -> prost_types::Duration {
    prost_types::Duration::try_from(d).unwrap_or(prost_types::Duration {
        seconds: i64::MAX,
        nanos: 999_999_999,
    })
}

/// A duration the request carries, read new-first (fields 8 to 10, then the nanoseconds of 3
/// to 5), or `fallback` when it carries neither or a negative one.
fn read(
    new: Option<&prost_types::Duration>,
    old: Option<&LegacyDuration>,
    fallback: Duration,
) -> Duration {
    new.and_then(|d| Duration::try_from(*d).ok())
        .or_else(|| old.and_then(|d| Duration::try_from(*d).ok()))
        .unwrap_or(fallback)
}

/// The answer to NodeGroupGetOptions: every default cluster-autoscaler sent, echoed, with only
/// what the group sets overridden; every duration in both its legacy and its new form (an old
/// cluster-autoscaler dereferences the legacy ones without a check).
pub fn options(
    defaults: Option<&NodeGroupAutoscalingOptions>,
    overrides: &AutoscalingOptions,
    max_node_provision_time: Option<Duration>,
) -> NodeGroupAutoscalingOptions {
    let unneeded = overrides.scale_down_unneeded_time.unwrap_or_else(|| {
        read(
            defaults.and_then(|d| d.scale_down_unneeded_duration.as_ref()),
            defaults.and_then(|d| d.scale_down_unneeded_time.as_ref()),
            UNNEEDED,
        )
    });
    let unready = overrides.scale_down_unready_time.unwrap_or_else(|| {
        read(
            defaults.and_then(|d| d.scale_down_unready_duration.as_ref()),
            defaults.and_then(|d| d.scale_down_unready_time.as_ref()),
            UNREADY,
        )
    });
    let provision = max_node_provision_time.unwrap_or_else(|| {
        read(
            defaults.and_then(|d| d.max_node_provision_duration.as_ref()),
            defaults.and_then(|d| d.max_node_provision_time.as_ref()),
            PROVISION,
        )
    });
    let startup = overrides.max_node_startup_time.unwrap_or_else(|| {
        read(
            defaults.and_then(|d| d.max_node_startup_duration.as_ref()),
            None,
            STARTUP,
        )
    });
    let (utilization, gpu_utilization) = match defaults {
        Some(d) => (
            d.scale_down_utilization_threshold,
            d.scale_down_gpu_utilization_threshold,
        ),
        None => (UTILIZATION, UTILIZATION),
    };
    NodeGroupAutoscalingOptions {
        scale_down_utilization_threshold: overrides
            .scale_down_utilization_threshold
            .unwrap_or(utilization),
        scale_down_gpu_utilization_threshold: overrides
            .scale_down_gpu_utilization_threshold
            .unwrap_or(gpu_utilization),
        scale_down_unneeded_time: Some(unneeded.into()),
        scale_down_unready_time: Some(unready.into()),
        max_node_provision_time: Some(provision.into()),
        zero_or_max_node_scaling: overrides
            .zero_or_max_node_scaling
            .unwrap_or(defaults.is_some_and(|d| d.zero_or_max_node_scaling)),
        ignore_daemon_sets_utilization: overrides
            .ignore_daemonsets_utilization
            .unwrap_or(defaults.is_some_and(|d| d.ignore_daemon_sets_utilization)),
        scale_down_unneeded_duration: Some(proto(unneeded)),
        scale_down_unready_duration: Some(proto(unready)),
        max_node_provision_duration: Some(proto(provision)),
        max_node_startup_duration: Some(proto(startup)),
        allow_non_atomic_scale_up_to_max: defaults
            .is_some_and(|d| d.allow_non_atomic_scale_up_to_max),
    }
}

/// Why a price cannot be computed from a request.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum PriceError {
    #[error("the request carries no start or no end time")]
    MissingTime,
    #[error("the end time is before the start time")]
    Backwards,
    #[error("a time of the request is out of range")]
    OutOfRange,
}

/// The energy cost of one machine of the group over `[start, end]`: its draw in kW times the
/// hours times the price per kWh.
pub fn energy_price(
    power: &PowerDraw,
    start: Option<&prost_types::Timestamp>,
    end: Option<&prost_types::Timestamp>,
) -> Result<f64, PriceError> {
    let (Some(start), Some(end)) = (start, end) else {
        return Err(PriceError::MissingTime);
    };
    let time =
        |t: &prost_types::Timestamp| SystemTime::try_from(*t).map_err(|_| PriceError::OutOfRange);
    let span = time(end)?
        .duration_since(time(start)?)
        .map_err(|_| PriceError::Backwards)?;
    Ok(power.watts / 1000.0 * (span.as_secs_f64() / 3600.0) * power.price_per_kwh)
}

/// A group as cluster-autoscaler sees it, with the max size it can reach now.
pub fn node_group(group: &Group, max_size: u32) -> NodeGroup {
    NodeGroup {
        id: group.name.to_string(),
        min_size: i32::try_from(group.min_size).unwrap_or(i32::MAX),
        max_size: i32::try_from(max_size).unwrap_or(i32::MAX),
        debug: format!(
            "fleet group {} (min {}, max {} configured, {max_size} reachable now)",
            group.name, group.min_size, group.max_size
        ),
    }
}

/// Whether a node DeleteNodes names is one cluster-autoscaler made up, by its annotation.
impl From<&ExternalGrpcNode> for Fake {
    fn from(node: &ExternalGrpcNode) -> Self {
        Fake::of(node.annotations.get(FAKE_NODE_REASON).map(String::as_str))
    }
}

/// The instance of slot `id` as its speaking claim `c` shows it. A failed claim is an instance
/// being created with the claim's error: OutOfResources when the group has no free usable slot
/// left (`exhausted`: cluster-autoscaler may then prefer another group), else Other.
pub fn instance(id: &str, c: &Claim, shown: Shown, max_attempts: u32, exhausted: bool) -> Instance {
    let state = match shown {
        Shown::Creating | Shown::Failed => InstanceState::InstanceCreating,
        Shown::Running => InstanceState::InstanceRunning,
        Shown::Deleting => InstanceState::InstanceDeleting,
    };
    let error_info = (shown == Shown::Failed).then(|| {
        let reason = c.reason.unwrap_or(Reason::DeadlineExceeded);
        InstanceErrorInfo {
            error_code: reason.as_str().to_owned(),
            error_message: format!(
                "claim {} on slot {} failed: {reason} (attempt {} of {max_attempts}){}",
                c.name,
                c.slot,
                c.attempt,
                if exhausted {
                    "; the group has no free usable slot left"
                } else {
                    ""
                }
            ),
            instance_error_class: if exhausted {
                OUT_OF_RESOURCES
            } else {
                OTHER_ERROR
            },
        }
    });
    Instance {
        id: id.to_owned(),
        status: Some(InstanceStatus {
            instance_state: state as i32,
            error_info,
        }),
    }
}

/// The GPU label: the first group template's that names one, else fleet's default.
pub fn gpu_label(config: &Config) -> String {
    config
        .groups
        .values()
        .filter_map(|g| g.template.as_ref().and_then(|t| t.gpu.as_ref()))
        .map(|gpu| gpu.label.clone())
        .next()
        .unwrap_or_else(|| DEFAULT_GPU_LABEL.to_owned())
}

/// Every GPU type a group's template names, once each.
pub fn gpu_types(config: &Config) -> HashMap<String, prost_types::Any> {
    let types: BTreeSet<String> = config
        .groups
        .values()
        .filter_map(|g| g.template.as_ref().and_then(|t| t.gpu.as_ref()))
        .flat_map(|gpu| gpu.types.iter().cloned())
        .collect();
    types
        .into_iter()
        .map(|t| (t, prost_types::Any::default()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mins(m: u64) -> Duration {
        Duration::from_secs(m * 60)
    }

    fn ca_defaults_new_form() -> NodeGroupAutoscalingOptions {
        NodeGroupAutoscalingOptions {
            scale_down_utilization_threshold: 0.5,
            scale_down_gpu_utilization_threshold: 0.6,
            scale_down_unneeded_duration: Some(proto(mins(10))),
            scale_down_unready_duration: Some(proto(mins(20))),
            max_node_provision_duration: Some(proto(mins(15))),
            ignore_daemon_sets_utilization: true,
            ..Default::default()
        }
    }

    #[test]
    fn every_default_is_echoed_in_both_forms_when_the_group_overrides_nothing() {
        let o = options(
            Some(&ca_defaults_new_form()),
            &AutoscalingOptions::default(),
            None,
        );
        assert_eq!(o.scale_down_utilization_threshold, 0.5);
        assert_eq!(o.scale_down_gpu_utilization_threshold, 0.6);
        assert!(o.ignore_daemon_sets_utilization);
        assert!(!o.zero_or_max_node_scaling);
        assert_eq!(
            o.scale_down_unneeded_time.unwrap().duration,
            600_000_000_000
        );
        assert_eq!(
            o.scale_down_unready_time.unwrap().duration,
            1_200_000_000_000
        );
        assert_eq!(o.max_node_provision_time.unwrap().duration, 900_000_000_000);
        assert_eq!(o.scale_down_unneeded_duration.unwrap().seconds, 600);
        assert_eq!(o.scale_down_unready_duration.unwrap().seconds, 1200);
        assert_eq!(o.max_node_provision_duration.unwrap().seconds, 900);
        assert_eq!(o.max_node_startup_duration.unwrap().seconds, 900);
    }

    #[test]
    fn legacy_defaults_in_nanoseconds_are_read_when_the_new_form_is_absent() {
        let old = NodeGroupAutoscalingOptions {
            scale_down_unneeded_time: Some(LegacyDuration {
                duration: 300_000_000_000,
            }),
            scale_down_unready_time: Some(LegacyDuration {
                duration: 1_500_000_000,
            }),
            max_node_provision_time: Some(LegacyDuration {
                duration: 1_800_000_000_000,
            }),
            ..Default::default()
        };
        let o = options(Some(&old), &AutoscalingOptions::default(), None);
        assert_eq!(o.scale_down_unneeded_duration.unwrap().seconds, 300);
        let unready = o.scale_down_unready_duration.unwrap();
        assert_eq!((unready.seconds, unready.nanos), (1, 500_000_000));
        assert_eq!(o.max_node_provision_duration.unwrap().seconds, 1800);
        // The new form wins when both are present.
        let mut both = old;
        both.scale_down_unneeded_duration = Some(proto(mins(7)));
        let o = options(Some(&both), &AutoscalingOptions::default(), None);
        assert_eq!(
            o.scale_down_unneeded_time.unwrap().duration,
            420_000_000_000
        );
    }

    #[test]
    fn only_what_the_group_sets_is_overridden() {
        let overrides = AutoscalingOptions {
            scale_down_unneeded_time: Some(mins(3)),
            scale_down_gpu_utilization_threshold: Some(0.25),
            zero_or_max_node_scaling: Some(true),
            max_node_startup_time: Some(mins(40)),
            ..AutoscalingOptions::default()
        };
        let o = options(Some(&ca_defaults_new_form()), &overrides, Some(mins(45)));
        assert_eq!(o.scale_down_unneeded_duration.unwrap().seconds, 180);
        assert_eq!(
            o.scale_down_unneeded_time.unwrap().duration,
            180_000_000_000
        );
        assert_eq!(o.scale_down_gpu_utilization_threshold, 0.25);
        assert!(o.zero_or_max_node_scaling);
        assert_eq!(o.max_node_provision_duration.unwrap().seconds, 2700);
        assert_eq!(
            o.max_node_provision_time.unwrap().duration,
            2_700_000_000_000
        );
        assert_eq!(o.max_node_startup_duration.unwrap().seconds, 2400);
        // Untouched: echoed.
        assert_eq!(o.scale_down_utilization_threshold, 0.5);
        assert_eq!(o.scale_down_unready_duration.unwrap().seconds, 1200);
        assert!(o.ignore_daemon_sets_utilization);
    }

    #[test]
    fn a_request_without_defaults_gets_cluster_autoscalers_own() {
        let o = options(None, &AutoscalingOptions::default(), None);
        assert_eq!(o.scale_down_utilization_threshold, 0.5);
        assert_eq!(o.scale_down_unneeded_duration.unwrap().seconds, 600);
        assert_eq!(
            o.scale_down_unready_time.unwrap().duration,
            1_200_000_000_000
        );
        assert_eq!(o.max_node_provision_duration.unwrap().seconds, 900);
        // A negative default is not a duration: the flag default stands in.
        let negative = NodeGroupAutoscalingOptions {
            scale_down_unneeded_time: Some(LegacyDuration { duration: -5 }),
            ..Default::default()
        };
        let o = options(Some(&negative), &AutoscalingOptions::default(), None);
        assert_eq!(o.scale_down_unneeded_duration.unwrap().seconds, 600);
    }

    #[test]
    fn the_price_is_the_energy_a_machine_draws_over_the_interval() {
        let power = PowerDraw {
            watts: 3500.0,
            standby_watts: 0.0,
            price_per_kwh: 0.25,
        };
        let at = |seconds| prost_types::Timestamp { seconds, nanos: 0 };
        // 3.5 kW for two hours at 0.25 per kWh.
        let p = energy_price(&power, Some(&at(1000)), Some(&at(1000 + 7200))).unwrap();
        assert!((p - 1.75).abs() < 1e-9, "{p}");
        assert_eq!(energy_price(&power, Some(&at(5)), Some(&at(5))), Ok(0.0));
        assert_eq!(
            energy_price(&power, Some(&at(10)), Some(&at(5))),
            Err(PriceError::Backwards)
        );
        assert_eq!(
            energy_price(&power, None, Some(&at(5))),
            Err(PriceError::MissingTime)
        );
    }

    #[test]
    fn durations_convert_to_both_forms_and_back() {
        let d = Duration::new(90, 500);
        assert_eq!(LegacyDuration::from(d).duration, 90_000_000_500);
        assert_eq!(
            proto(d),
            prost_types::Duration {
                seconds: 90,
                nanos: 500
            }
        );
        assert_eq!(Duration::try_from(LegacyDuration::from(d)), Ok(d));
        assert_eq!(Duration::try_from(proto(d)).unwrap(), d);
        // Saturated past their range: the legacy form at i64::MAX ns, the new at its greatest.
        assert_eq!(LegacyDuration::from(Duration::MAX).duration, i64::MAX);
        assert_eq!(
            proto(Duration::MAX),
            prost_types::Duration {
                seconds: i64::MAX,
                nanos: 999_999_999
            }
        );
        // A negative duration is none: the caller's fallback stands in.
        assert_eq!(
            Duration::try_from(LegacyDuration { duration: -1 }),
            Err(NegativeDuration(-1))
        );
        let negative = prost_types::Duration {
            seconds: -1,
            nanos: 0,
        };
        assert_eq!(
            read(Some(&negative), None, mins(4)),
            mins(4),
            "a negative new form falls back"
        );
    }

    #[test]
    fn a_time_out_of_range_has_no_price() {
        let power = PowerDraw {
            watts: 1000.0,
            standby_watts: 0.0,
            price_per_kwh: 1.0,
        };
        let at = |seconds| prost_types::Timestamp { seconds, nanos: 0 };
        assert_eq!(
            energy_price(&power, Some(&at(i64::MIN)), Some(&at(0))),
            Err(PriceError::OutOfRange)
        );
        // Nanoseconds count: half an hour at 1 kW and 1 per kWh.
        let half = prost_types::Timestamp {
            seconds: 1799,
            nanos: 1_000_000_000,
        };
        let p = energy_price(&power, Some(&at(0)), Some(&half)).unwrap();
        assert!((p - 0.5).abs() < 1e-9, "{p}");
    }

    #[test]
    fn a_node_is_fake_by_cluster_autoscalers_annotation() {
        let mut node = ExternalGrpcNode::default();
        assert_eq!(Fake::from(&node), Fake::No);
        node.annotations
            .insert(FAKE_NODE_REASON.into(), "create-error".into());
        assert_eq!(Fake::from(&node), Fake::CreateError);
        node.annotations
            .insert(FAKE_NODE_REASON.into(), "unregistered".into());
        assert_eq!(Fake::from(&node), Fake::Unregistered);
    }

    // Every instance a claim can show, with and without a group left with no room.
    #[test]
    fn every_instance_converts_to_its_state_and_a_failed_one_carries_its_error() {
        use crate::domain::claim::{Claim, Phase, Timings};
        use crate::domain::name::{BenchName, ClaimName, GroupName};
        let slot = BenchName::parse("bench-01").unwrap();
        let mut c = Claim::new(
            ClaimName::for_slot(&slot, "1"),
            slot.clone(),
            GroupName::parse("pool-a").unwrap(),
            None,
            chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap(),
            &Timings::default(),
            None,
        );
        c.phase = Phase::Failed;
        let rows = [
            (Shown::Creating, InstanceState::InstanceCreating),
            (Shown::Running, InstanceState::InstanceRunning),
            (Shown::Deleting, InstanceState::InstanceDeleting),
            (Shown::Failed, InstanceState::InstanceCreating),
        ];
        for (shown, state) in rows {
            for exhausted in [false, true] {
                let i = instance("fleet://bench-01", &c, shown, 3, exhausted);
                assert_eq!(i.id, "fleet://bench-01");
                let status = i.status.unwrap();
                assert_eq!(status.instance_state, state as i32, "{shown:?}");
                let Some(error) = status.error_info else {
                    assert_ne!(shown, Shown::Failed);
                    continue;
                };
                assert_eq!(shown, Shown::Failed);
                assert_eq!(error.error_code, "DeadlineExceeded");
                let suffix = if exhausted {
                    "; the group has no free usable slot left"
                } else {
                    ""
                };
                assert_eq!(
                    error.error_message,
                    format!(
                        "claim {} on slot bench-01 failed: DeadlineExceeded (attempt 1 of 3){suffix}",
                        c.name
                    )
                );
                let class = if exhausted {
                    OUT_OF_RESOURCES
                } else {
                    OTHER_ERROR
                };
                assert_eq!(error.instance_error_class, class);
            }
        }
    }
}
