//! Pure conversions between the wire and fleet's configuration (SPEC §6.3): a group's
//! autoscaling options over cluster-autoscaler's defaults, and a machine's energy price.

use std::time::Duration;

use crate::config::{AutoscalingOptions, PowerDraw};

use super::wire::{LegacyDuration, NodeGroupAutoscalingOptions};

/// cluster-autoscaler's own defaults (`--scale-down-unneeded-time`, `--scale-down-unready-time`,
/// `--max-node-provision-time`, `--max-node-startup-time`, the utilization thresholds), used
/// only when a request carries no defaults at all.
const UNNEEDED: Duration = Duration::from_secs(10 * 60);
const UNREADY: Duration = Duration::from_secs(20 * 60);
const PROVISION: Duration = Duration::from_secs(15 * 60);
const STARTUP: Duration = Duration::from_secs(15 * 60);
const UTILIZATION: f64 = 0.5;

fn legacy(d: Duration) -> LegacyDuration {
    LegacyDuration {
        duration: i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
    }
}

fn proto(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

fn from_proto(d: &prost_types::Duration) -> Option<Duration> {
    let seconds = u64::try_from(d.seconds).ok()?;
    let nanos = u32::try_from(d.nanos).ok()?;
    Some(Duration::new(seconds, nanos))
}

fn from_legacy(d: &LegacyDuration) -> Option<Duration> {
    u64::try_from(d.duration).ok().map(Duration::from_nanos)
}

/// A duration the request carries, read new-first (fields 8 to 10, then the nanoseconds of 3
/// to 5), or `fallback` when it carries neither or a negative one.
fn read(
    new: Option<&prost_types::Duration>,
    old: Option<&LegacyDuration>,
    fallback: Duration,
) -> Duration {
    new.and_then(from_proto)
        .or_else(|| old.and_then(from_legacy))
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
        scale_down_unneeded_time: Some(legacy(unneeded)),
        scale_down_unready_time: Some(legacy(unready)),
        max_node_provision_time: Some(legacy(provision)),
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
    let seconds = |t: &prost_types::Timestamp| t.seconds as f64 + f64::from(t.nanos) / 1e9;
    let span = seconds(end) - seconds(start);
    if span < 0.0 {
        return Err(PriceError::Backwards);
    }
    Ok(power.watts / 1000.0 * (span / 3600.0) * power.price_per_kwh)
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
}
