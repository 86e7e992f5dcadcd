//! The conversions between the wire and fleet's own types (SPEC §6.3), in one place: durations
//! in their legacy and their new form, a group as a NodeGroup, a claim as an instance, a node as
//! a fake one or not, the GPU labels, a group's autoscaling options over cluster-autoscaler's
//! defaults, and a PodPrice request as the pod and interval to price (`pricing`). Pure: no I/O,
//! no clock.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use prost::Message;

use crate::config::{AutoscalingOptions, Config, Group};
use crate::domain::claim::{Claim, Reason};
use crate::domain::sizing::{Fake, Instance as Shown};

use super::k8s::Pod;
use super::pricing::{PodAsk, PodPriceError, Requests, interval, pod_name};
use super::wire::instance_status::InstanceState;
use super::wire::{
    ExternalGrpcNode, Instance, InstanceErrorInfo, InstanceStatus, LegacyDuration, NodeGroup,
    NodeGroupAutoscalingOptions, PricingPodPriceRequest,
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

/// A PodPrice request, read: the pod (pod_bytes, else the legacy field 1, the same bytes), its
/// requests as Kubernetes sums them, and the interval (the new times, fields 5 and 6, else the
/// legacy 2 and 3).
impl TryFrom<&PricingPodPriceRequest> for PodAsk {
    type Error = PodPriceError;

    fn try_from(request: &PricingPodPriceRequest) -> Result<Self, Self::Error> {
        let bytes = if request.pod_bytes.is_empty() {
            &request.pod
        } else {
            &request.pod_bytes
        };
        // A Go pod's bytes are never empty (it has a name): empty is no pod.
        if bytes.is_empty() {
            return Err(PodPriceError::NoPod);
        }
        let pod = Pod::decode(bytes.as_slice()).map_err(PodPriceError::Undecodable)?;
        let requests = Requests::of(&pod)?;
        let start = request
            .start_timestamp
            .as_ref()
            .or(request.start_time.as_ref());
        let end = request.end_timestamp.as_ref().or(request.end_time.as_ref());
        let span = interval(start, end).map_err(PodPriceError::Time)?;
        Ok(PodAsk {
            pod: pod_name(&pod),
            requests,
            span,
        })
    }
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
    use crate::provider::k8s::Container;
    use crate::provider::pricing::tests::{container, list, pod, requests};
    use crate::provider::pricing::{PriceError, QuantityError};

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

    fn at(seconds: i64) -> Option<prost_types::Timestamp> {
        Some(prost_types::Timestamp { seconds, nanos: 0 })
    }

    fn ask_for(p: &Pod) -> PricingPodPriceRequest {
        PricingPodPriceRequest {
            pod_bytes: p.encode_to_vec(),
            start_timestamp: at(0),
            end_timestamp: at(3_600),
            ..Default::default()
        }
    }

    // Every malformed request is refused with its reason, never a panic.
    #[test]
    fn a_malformed_pod_price_request_is_refused_saying_why() {
        let p = pod(vec![container("a", &[("cpu", "2")], false)], Vec::new());
        let ok = PodAsk::try_from(&ask_for(&p)).unwrap();
        assert_eq!(ok.pod, "default/web-1");
        assert_eq!(ok.requests, requests(&[("cpu", 2.0)]));
        assert_eq!(ok.span, Duration::from_secs(3_600));
        // The legacy shape: the pod in field 1, the times in 2 and 3.
        let legacy = PricingPodPriceRequest {
            pod: p.encode_to_vec(),
            start_time: at(100),
            end_time: at(1_900),
            ..Default::default()
        };
        let read = PodAsk::try_from(&legacy).unwrap();
        assert_eq!(
            (read.requests, read.span),
            (ok.requests.clone(), Duration::from_secs(1_800))
        );

        let no_pod = PricingPodPriceRequest {
            start_timestamp: at(0),
            end_timestamp: at(1),
            ..Default::default()
        };
        assert_eq!(PodAsk::try_from(&no_pod), Err(PodPriceError::NoPod));
        let garbage = PricingPodPriceRequest {
            pod_bytes: vec![0xff, 0xff, 0xff],
            ..ask_for(&p)
        };
        assert!(matches!(
            PodAsk::try_from(&garbage),
            Err(PodPriceError::Undecodable(_))
        ));
        let times = |start, end| PricingPodPriceRequest {
            start_timestamp: start,
            end_timestamp: end,
            ..ask_for(&p)
        };
        assert_eq!(
            PodAsk::try_from(&times(None, at(1))),
            Err(PodPriceError::Time(PriceError::MissingTime))
        );
        assert_eq!(
            PodAsk::try_from(&times(at(1), None)),
            Err(PodPriceError::Time(PriceError::MissingTime))
        );
        assert_eq!(
            PodAsk::try_from(&times(at(10), at(5))),
            Err(PodPriceError::Time(PriceError::Backwards))
        );
        assert_eq!(
            PodAsk::try_from(&times(at(i64::MIN), at(5))),
            Err(PodPriceError::Time(PriceError::OutOfRange))
        );

        let absurd = |c: Container, init: bool| {
            let p = if init {
                pod(Vec::new(), vec![c])
            } else {
                pod(vec![c], Vec::new())
            };
            PodAsk::try_from(&ask_for(&p)).unwrap_err().to_string()
        };
        assert_eq!(
            absurd(container("app", &[("cpu", "-2")], false), false),
            "pod default/web-1: container \"app\" requests cpu \"-2\": a negative request"
        );
        assert_eq!(
            absurd(container("setup", &[("memory", "9Ei")], false), true),
            "pod default/web-1: init container \"setup\" requests memory \"9Ei\": past 2^63 - 1 \
             of its unit, more than Kubernetes' own int64 view of it holds"
        );
        let unreadable = absurd(
            container("app", &[("nvidia.com/gpu", "lots")], false),
            false,
        );
        assert!(
            unreadable.starts_with(
                "pod default/web-1: container \"app\" requests nvidia.com/gpu \"lots\": not a \
                 Kubernetes quantity"
            ),
            "{unreadable}"
        );
        let mut overhead = pod(Vec::new(), Vec::new());
        overhead.spec.as_mut().unwrap().overhead = list(&[("cpu", "1e400")]);
        assert_eq!(
            PodAsk::try_from(&ask_for(&overhead)),
            Err(PodPriceError::Quantity {
                pod: "default/web-1".into(),
                place: "the pod's overhead".into(),
                resource: "cpu".into(),
                value: "1e400".into(),
                why: QuantityError::TooLarge,
            })
        );
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
