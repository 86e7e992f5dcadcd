//! The energy prices of a machine and of a pod (SPEC §6.3, PricingNodePrice and
//! PricingPodPrice): a machine's draw priced over an interval, a pod's requests as Kubernetes
//! sums them, and the pod's share of the fleet's cheapest machine that can hold it. Pure: no
//! I/O, no clock; the wire request is read into a `PodAsk` in `convert`, and a quantity's value
//! by `units::quantity_value`, beside the check the configuration's quantities pass.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use super::k8s::{Container, Pod, Quantity};
use crate::config::{Config, PowerDraw};
use crate::domain::name::GroupName;
pub use crate::units::QuantityError;
use crate::units::quantity_value;

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

/// The interval a price is asked for: both times given, the end not before the start.
pub fn interval(
    start: Option<&prost_types::Timestamp>,
    end: Option<&prost_types::Timestamp>,
) -> Result<Duration, PriceError> {
    let (Some(start), Some(end)) = (start, end) else {
        return Err(PriceError::MissingTime);
    };
    let time =
        |t: &prost_types::Timestamp| SystemTime::try_from(*t).map_err(|_| PriceError::OutOfRange);
    time(end)?
        .duration_since(time(start)?)
        .map_err(|_| PriceError::Backwards)
}

/// What one machine drawing `power` costs over `span`: its draw in kW times the hours times the
/// price per kWh.
pub fn energy_cost(power: &PowerDraw, span: Duration) -> f64 {
    power.watts / 1000.0 * (span.as_secs_f64() / 3600.0) * power.price_per_kwh
}

/// The energy cost of one machine of the group over `[start, end]` (PricingNodePrice).
pub fn energy_price(
    power: &PowerDraw,
    start: Option<&prost_types::Timestamp>,
    end: Option<&prost_types::Timestamp>,
) -> Result<f64, PriceError> {
    Ok(energy_cost(power, interval(start, end)?))
}

/// What a pod asks of the machine that hosts it, each resource in its unit (cores, bytes,
/// devices): Kubernetes' `PodRequests`, which the scheduler and cluster-autoscaler use. The
/// app containers' requests add up; an init container runs before them, beside the sidecars
/// started before it (init containers with `restartPolicy: Always`, which also run beside the
/// app containers), so the pod needs the larger of the two; pod-level requests of cpu and
/// memory (`spec.resources`) replace the containers' sum; the overhead (`spec.overhead`) adds.
/// The resources the containers report in their status after a resize are not read: a pod
/// waiting for a machine has not been resized.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Requests(pub BTreeMap<String, f64>);

/// Resources a pod-level request may set (Kubernetes' supported pod-level resources, those
/// fleet prices).
const POD_LEVEL: [&str; 2] = ["cpu", "memory"];

impl Requests {
    fn add(&mut self, other: &Requests) {
        for (name, value) in &other.0 {
            *self.0.entry(name.clone()).or_insert(0.0) += value;
        }
    }

    fn raise_to(&mut self, other: &Requests) {
        for (name, value) in &other.0 {
            let mine = self.0.entry(name.clone()).or_insert(0.0);
            *mine = mine.max(*value);
        }
    }

    /// The pod's requests; a quantity that is not one names its place and resource.
    pub fn of(pod: &Pod) -> Result<Requests, PodPriceError> {
        let who = pod_name(pod);
        let Some(spec) = &pod.spec else {
            return Ok(Requests::default());
        };
        let container = |c: &Container, kind: &str| {
            let place = || format!("{kind} {:?}", c.name.as_deref().unwrap_or(""));
            read_list(c.resources.as_ref().map(|r| &r.requests), &who, place)
        };
        let mut sum = Requests::default();
        for c in &spec.containers {
            sum.add(&container(c, "container")?);
        }
        let mut sidecars = Requests::default();
        let mut init = Requests::default();
        for c in &spec.init_containers {
            let own = container(c, "init container")?;
            let beside = if c.restart_policy.as_deref() == Some("Always") {
                sum.add(&own);
                sidecars.add(&own);
                sidecars.clone()
            } else {
                let mut with = own;
                with.add(&sidecars);
                with
            };
            init.raise_to(&beside);
        }
        sum.raise_to(&init);
        let pod_level = read_list(spec.resources.as_ref().map(|r| &r.requests), &who, || {
            "the pod's own resources".to_owned()
        })?;
        for resource in POD_LEVEL {
            if let Some(value) = pod_level.0.get(resource) {
                sum.0.insert(resource.to_owned(), *value);
            }
        }
        sum.add(&read_list(Some(&spec.overhead), &who, || {
            "the pod's overhead".to_owned()
        })?);
        Ok(sum)
    }
}

/// One resource list of pod `who`, each quantity read; `place` says where it is for an error.
fn read_list(
    list: Option<&BTreeMap<String, Quantity>>,
    who: &str,
    place: impl Fn() -> String,
) -> Result<Requests, PodPriceError> {
    let mut requests = Requests::default();
    for (resource, q) in list.into_iter().flatten() {
        let text = q.string.as_deref().unwrap_or("");
        let value = quantity_value(text).map_err(|why| PodPriceError::Quantity {
            pod: who.to_owned(),
            place: place(),
            resource: resource.clone(),
            value: text.to_owned(),
            why,
        })?;
        requests.0.insert(resource.clone(), value);
    }
    Ok(requests)
}

/// `namespace/name`, as cluster-autoscaler's logs name a pod.
pub fn pod_name(pod: &Pod) -> String {
    let meta = pod.metadata.as_ref();
    let part = |p: Option<&String>| p.filter(|s| !s.is_empty()).cloned();
    match (
        part(meta.and_then(|m| m.namespace.as_ref())),
        part(meta.and_then(|m| m.name.as_ref())),
    ) {
        (Some(ns), Some(name)) => format!("{ns}/{name}"),
        (None, Some(name)) => name,
        (_, None) => "(unnamed)".to_owned(),
    }
}

/// Whether a resource is priced: cpu, memory, and every extended resource (a name with a
/// domain outside `kubernetes.io`, such as `nvidia.com/gpu` or `amd.com/gpu`: a scheduler
/// places a pod that asks for one only on a node that allocates it). The other native
/// resources (`ephemeral-storage`, `hugepages-*`, `pods`) are not what a machine's draw pays for.
fn priced(resource: &str) -> bool {
    // Kubernetes' IsExtendedResourceName: not native (a name without a domain, or one in
    // `kubernetes.io/`), and not a quota's `requests.` name.
    let extended = resource.contains('/')
        && !resource.contains("kubernetes.io/")
        && !resource.starts_with("requests.");
    resource == "cpu" || resource == "memory" || extended
}

/// Why a pod has no price.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum PodPriceError {
    #[error("the request carries no pod (pod_bytes, field 4, nor the legacy pod, field 1)")]
    NoPod,
    #[error("the pod does not decode as a Kubernetes v1 Pod: {0}")]
    Undecodable(prost::DecodeError),
    #[error("pod {pod}: {place} requests {resource} {value:?}: {why}")]
    Quantity {
        pod: String,
        place: String,
        resource: String,
        value: String,
        why: QuantityError,
    },
    #[error(transparent)]
    Time(PriceError),
    #[error(
        "no group declares a power draw (template.power), so fleet prices no pod; give a group \
         one to use cluster-autoscaler's price expander"
    )]
    NoPowerDraw,
    #[error("pod {pod} fits no group with a power draw: {}", said(.misfits))]
    Unhostable { pod: String, misfits: Vec<Misfit> },
}

/// A group a pod cannot be priced on: the first priced resource it asks more of than the
/// group's machine allocates (`None` when the template does not declare it).
#[derive(Clone, Debug, PartialEq)]
pub struct Misfit {
    pub group: GroupName,
    pub resource: String,
    pub requested: f64,
    pub allocatable: Option<f64>,
}

fn said(misfits: &[Misfit]) -> String {
    misfits
        .iter()
        .map(|m| match m.allocatable {
            Some(a) => format!("{}: {} {} of {a}", m.group, m.resource, m.requested),
            None => format!("{}: {} {} of none", m.group, m.resource, m.requested),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// A pod to price: its name (`namespace/name`), its requests, and the interval (`convert` reads
/// it from a PodPrice request).
#[derive(Debug, PartialEq)]
pub struct PodAsk {
    pub pod: String,
    pub requests: Requests,
    pub span: Duration,
}

/// A machine a pod can be priced on: a group with a power draw, what one of its machines costs
/// over the interval, and what its template allocates (each resource in its unit).
#[derive(Clone, Debug, PartialEq)]
pub struct Offer {
    pub group: GroupName,
    pub node_price: f64,
    pub allocatable: BTreeMap<String, f64>,
}

/// One offer per group whose template declares a power draw, in group order, each priced over
/// `span` as PricingNodePrice prices its machine.
pub fn offers(config: &Config, span: Duration) -> Vec<Offer> {
    config
        .groups
        .values()
        .filter_map(|g| {
            let template = g.template.as_ref()?;
            let power = template.power.as_ref()?;
            Some(Offer {
                group: g.name.clone(),
                node_price: energy_cost(power, span),
                // Checked as quantities when the configuration was read.
                allocatable: template
                    .capacity
                    .iter()
                    .filter_map(|(r, q)| Some((r.clone(), quantity_value(q.as_str()).ok()?)))
                    .collect(),
            })
        })
        .collect()
}

/// A pod's price and the machine it was priced on.
#[derive(Clone, Debug, PartialEq)]
pub struct PodPrice {
    pub price: f64,
    /// The group whose machine gave the least price.
    pub group: GroupName,
    /// The pod's share of that machine, from 0 to 1.
    pub share: f64,
}

/// The price of a pod (PricingPodPrice, SPEC §6.3): the least, over the groups with a power
/// draw whose machine can hold it, of the pod's share of that machine times what the machine
/// costs over the interval (its NodePrice). The share is the pod's dominant one: the largest,
/// over the priced resources it requests (cpu, memory, and extended resources such as
/// `nvidia.com/gpu`; see `priced`), of its request over what the group's template allocates.
/// A pod that requests none of them costs 0; the first group in order is then named.
///
/// Why this model (cluster-autoscaler's contract and its price expander):
/// - PricingPodPrice carries only the pod, never a node or a group, and cluster-autoscaler's
///   `PricingModel.PodPrice` is documented as "a theoretical minimum price of running a pod for
///   a given period of time on a perfectly matching machine". The least over fleet's own
///   machines is that minimum, in fleet's energy terms.
/// - The price expander (`expander/price/price.go`) scores an option as
///   `(count × NodePrice + s) / (Σ PodPrice + s)` (s: the price of its 0.5 cpu, 500 MiB
///   stabilization pod), times a node-shape unfitness, and takes the lowest. A pod price that
///   depended on the option's group would cancel its node price out of that ratio (a pod filling
///   a machine would score 1 on any group, whatever it draws), so the cheaper group could not
///   win. Priced against the fleet's cheapest machine, a pod's price is the same in every
///   option: the denominator is the value the option schedules, the ratio is how many times
///   that least cost the option spends, and the cheaper group wins.
/// - The dominant share, not a sum over resources: a machine's draw is not split by resource,
///   and a pod that takes half the cores takes half the machine from pods that need cores, even
///   if it asks for little memory; two such pods fill it, so each pays half.
/// - Only machines that can hold the pod: a small cheap machine does not price a pod it cannot
///   run. cluster-autoscaler prices the pods of an option that it placed on the option's group,
///   so a pod it asks about fits at least that group when the group has a power draw.
pub fn pod_price(ask: &PodAsk, offers: &[Offer]) -> Result<PodPrice, PodPriceError> {
    let mut best: Option<PodPrice> = None;
    let mut misfits = Vec::new();
    for offer in offers {
        match share(&ask.requests, offer) {
            Ok(share) => {
                let price = share * offer.node_price;
                if best.as_ref().is_none_or(|b| price < b.price) {
                    best = Some(PodPrice {
                        price,
                        group: offer.group.clone(),
                        share,
                    });
                }
            }
            Err(misfit) => misfits.push(misfit),
        }
    }
    match best {
        Some(best) => Ok(best),
        None if offers.is_empty() => Err(PodPriceError::NoPowerDraw),
        None => Err(PodPriceError::Unhostable {
            pod: ask.pod.clone(),
            misfits,
        }),
    }
}

/// The pod's dominant share of the offer's machine, or the first resource it does not fit.
fn share(requests: &Requests, offer: &Offer) -> Result<f64, Misfit> {
    let mut share: f64 = 0.0;
    for (resource, &requested) in &requests.0 {
        if !priced(resource) || requested <= 0.0 {
            continue;
        }
        let allocatable = offer.allocatable.get(resource).copied();
        match allocatable {
            Some(a) if requested <= a => share = share.max(requested / a),
            _ => {
                return Err(Misfit {
                    group: offer.group.clone(),
                    resource: resource.clone(),
                    requested,
                    allocatable,
                });
            }
        }
    }
    Ok(share)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

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

    pub(crate) fn list(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
        pairs
            .iter()
            .map(|(r, q)| {
                (
                    (*r).to_owned(),
                    Quantity {
                        string: Some((*q).to_owned()),
                    },
                )
            })
            .collect()
    }

    pub(crate) fn container(name: &str, requests: &[(&str, &str)], sidecar: bool) -> Container {
        Container {
            name: Some(name.to_owned()),
            resources: Some(crate::provider::k8s::ResourceRequirements {
                requests: list(requests),
                ..Default::default()
            }),
            restart_policy: sidecar.then(|| "Always".to_owned()),
        }
    }

    pub(crate) fn pod(containers: Vec<Container>, init: Vec<Container>) -> Pod {
        Pod {
            metadata: Some(crate::provider::k8s::ObjectMeta {
                namespace: Some("default".into()),
                name: Some("web-1".into()),
                ..Default::default()
            }),
            spec: Some(crate::provider::k8s::PodSpec {
                containers,
                init_containers: init,
                ..Default::default()
            }),
            status: None,
        }
    }

    pub(crate) fn requests(pairs: &[(&str, f64)]) -> Requests {
        Requests(pairs.iter().map(|(r, v)| ((*r).to_owned(), *v)).collect())
    }

    // Kubernetes' PodRequests: the sum of the app containers, raised to what an init container
    // needs beside the sidecars started before it, sidecars added, pod level, then overhead.
    #[test]
    fn a_pods_requests_are_what_the_scheduler_sums_for_it() {
        let app = vec![
            container("a", &[("cpu", "1"), ("memory", "1Gi")], false),
            container("b", &[("cpu", "500m"), ("ephemeral-storage", "1Gi")], false),
        ];
        let mut p = pod(app.clone(), Vec::new());
        assert_eq!(
            Requests::of(&p).unwrap(),
            requests(&[
                ("cpu", 1.5),
                ("memory", 1024f64.powi(3)),
                ("ephemeral-storage", 1024f64.powi(3))
            ])
        );
        // An init container that needs more than the app containers' sum raises the pod's
        // requests; one that needs less does not.
        p = pod(
            app.clone(),
            vec![
                container("big", &[("cpu", "4")], false),
                container("small", &[("memory", "1Mi")], false),
            ],
        );
        let r = Requests::of(&p).unwrap();
        assert_eq!(r.0["cpu"], 4.0);
        assert_eq!(r.0["memory"], 1024f64.powi(3));
        // A sidecar runs beside everything after it: it adds to the sum, and an init container
        // after it needs its own requests plus the sidecar's.
        p = pod(
            app.clone(),
            vec![
                container("proxy", &[("cpu", "250m")], true),
                container("migrate", &[("cpu", "1.6")], false),
            ],
        );
        let r = Requests::of(&p).unwrap();
        assert!((r.0["cpu"] - 1.85).abs() < 1e-12, "{r:?}");
        p = pod(
            app.clone(),
            vec![
                container("migrate", &[("cpu", "1.6")], false),
                container("proxy", &[("cpu", "250m")], true),
            ],
        );
        let r = Requests::of(&p).unwrap();
        assert!((r.0["cpu"] - 1.75).abs() < 1e-12, "started after it: {r:?}");
        // Pod-level requests replace the containers' cpu and memory; the overhead adds.
        let spec = p.spec.as_mut().unwrap();
        spec.resources = Some(crate::provider::k8s::ResourceRequirements {
            requests: list(&[("cpu", "3"), ("memory", "2Gi")]),
            ..Default::default()
        });
        spec.overhead = list(&[("cpu", "100m"), ("memory", "64Mi")]);
        let r = Requests::of(&p).unwrap();
        assert!((r.0["cpu"] - 3.1).abs() < 1e-12, "{r:?}");
        assert_eq!(r.0["memory"], (2048.0 + 64.0) * 1024.0 * 1024.0);
        // A pod without a spec, or without requests, asks nothing.
        let bare = Pod::default();
        assert_eq!(Requests::of(&bare).unwrap(), Requests::default());
        let none = pod(vec![container("a", &[], false)], Vec::new());
        assert_eq!(Requests::of(&none).unwrap(), Requests::default());
    }

    fn offer(group: &str, node_price: f64, allocatable: &[(&str, f64)]) -> Offer {
        Offer {
            group: GroupName::parse(group).unwrap(),
            node_price,
            allocatable: allocatable
                .iter()
                .map(|(r, v)| ((*r).to_owned(), *v))
                .collect(),
        }
    }

    fn asking(pairs: &[(&str, f64)]) -> PodAsk {
        PodAsk {
            pod: "default/web-1".into(),
            requests: requests(pairs),
            span: Duration::from_secs(3_600),
        }
    }

    const GI: f64 = 1024.0 * 1024.0 * 1024.0;

    // The model, edge by edge (SPEC §6.3 PricingPodPrice).
    #[test]
    fn a_pod_costs_its_dominant_share_of_the_cheapest_machine_that_holds_it() {
        let small = offer("small", 0.02, &[("cpu", 4.0), ("memory", 8.0 * GI)]);
        let big = offer("big", 0.10, &[("cpu", 32.0), ("memory", 128.0 * GI)]);
        let gpu = offer(
            "gpu",
            1.0,
            &[
                ("cpu", 64.0),
                ("memory", 512.0 * GI),
                ("nvidia.com/gpu", 8.0),
            ],
        );
        let all = [small.clone(), big.clone(), gpu.clone()];
        let price = |pairs: &[(&str, f64)], offers: &[Offer]| pod_price(&asking(pairs), offers);

        // The dominant share: memory 4/8 beats cpu 1/4 on small (0.5 × 0.02 = 0.01); on big
        // it is 4/128 vs 1/32 (0.03125 × 0.10 = 0.003125): big is cheaper for this pod.
        let p = price(&[("cpu", 1.0), ("memory", 4.0 * GI)], &all).unwrap();
        assert_eq!(p.group.as_str(), "big");
        assert!((p.share - 1.0 / 32.0).abs() < 1e-12, "{p:?}");
        assert!((p.price - 0.003125).abs() < 1e-12, "{p:?}");
        let on_small = price(
            &[("cpu", 1.0), ("memory", 4.0 * GI)],
            std::slice::from_ref(&small),
        )
        .unwrap();
        assert!((on_small.price - 0.01).abs() < 1e-12, "{on_small:?}");
        // The same pod costs the same whatever the order of the groups.
        let reversed = [gpu.clone(), big.clone(), small.clone()];
        assert_eq!(
            price(&[("cpu", 1.0), ("memory", 4.0 * GI)], &reversed).unwrap(),
            p
        );
        // A machine it would fill exactly holds it (share 1).
        let full = price(
            &[("cpu", 4.0), ("memory", 8.0 * GI)],
            std::slice::from_ref(&small),
        )
        .unwrap();
        assert_eq!((full.share, full.price), (1.0, 0.02));
        // A small cheap machine does not price a pod it cannot hold: cpu 8 > 4.
        let p = price(&[("cpu", 8.0)], &all).unwrap();
        assert_eq!((p.group.as_str(), p.share), ("big", 0.25));
        // An extended resource (a GPU) is priced, and only a machine that allocates it holds it.
        let p = price(&[("cpu", 1.0), ("nvidia.com/gpu", 2.0)], &all).unwrap();
        assert_eq!((p.group.as_str(), p.share, p.price), ("gpu", 0.25, 0.25));
        // Native resources other than cpu and memory are not what the draw pays for.
        let p = price(
            &[
                ("cpu", 2.0),
                ("ephemeral-storage", 1e15),
                ("hugepages-2Mi", 1e12),
                ("pods", 500.0),
                ("requests.nvidia.com/gpu", 9.0),
            ],
            &all,
        )
        .unwrap();
        assert_eq!((p.group.as_str(), p.share), ("big", 1.0 / 16.0));
        // A pod that asks nothing priced costs nothing (cluster-autoscaler expects 0 then).
        for nothing in [&[][..], &[("cpu", 0.0), ("memory", 0.0)][..]] {
            let p = price(nothing, &all).unwrap();
            assert_eq!((p.price, p.share, p.group.as_str()), (0.0, 0.0, "small"));
        }
        // Free energy is free: a group at 0 per kWh prices every pod it holds at 0.
        let free = offer("free", 0.0, &[("cpu", 2.0), ("memory", GI)]);
        let p = price(&[("cpu", 1.0)], &[big.clone(), free]).unwrap();
        assert_eq!((p.price, p.group.as_str()), (0.0, "free"));

        // No group with a power draw: no price at all (UNIMPLEMENTED, as NodePrice).
        assert_eq!(price(&[("cpu", 1.0)], &[]), Err(PodPriceError::NoPowerDraw));
        assert_eq!(price(&[], &[]), Err(PodPriceError::NoPowerDraw));
        // A pod no priced machine holds: each group's first shortfall, named.
        let e = price(&[("cpu", 48.0), ("nvidia.com/gpu", 1.0)], &[small, big]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "pod default/web-1 fits no group with a power draw: small: cpu 48 of 4; big: cpu 48 \
             of 32"
        );
        let e = price(&[("cpu", 1.0), ("amd.com/gpu", 1.0)], &all).unwrap_err();
        assert_eq!(
            e.to_string(),
            "pod default/web-1 fits no group with a power draw: small: amd.com/gpu 1 of none; \
             big: amd.com/gpu 1 of none; gpu: amd.com/gpu 1 of none"
        );
    }

    // The offers are the groups with a power draw, priced as NodePrice prices their machines.
    #[test]
    fn the_offers_are_the_groups_with_a_power_draw_priced_as_their_machines() {
        let yaml = r#"groups:
  - name: plain
    min_size: 0
    max_size: 1
    startup: { command: ["true"] }
    shutdown: { command: ["true"] }
  - name: unpriced
    min_size: 0
    max_size: 1
    startup: { command: ["true"] }
    shutdown: { command: ["true"] }
    template: { capacity: { cpu: "8", memory: 32Gi } }
  - name: rack
    min_size: 0
    max_size: 1
    startup: { command: ["true"] }
    shutdown: { command: ["true"] }
    template:
      capacity: { cpu: "16", memory: 64Gi, "nvidia.com/gpu": "2", pods: "110" }
      power: { watts: 400, price_per_kwh: 0.5 }
slots:
  - { name: p-01, group: plain }
  - { name: u-01, group: unpriced }
  - { name: r-01, group: rack }
"#;
        let config = crate::config::parse(yaml, std::path::Path::new("t.yaml")).unwrap();
        let offers = offers(&config, Duration::from_secs(2 * 3_600));
        assert_eq!(offers.len(), 1, "{offers:?}");
        let rack = &offers[0];
        assert_eq!(rack.group.as_str(), "rack");
        // 0.4 kW for 2 h at 0.5 per kWh, what NodePrice answers for the same interval.
        assert!((rack.node_price - 0.4).abs() < 1e-12, "{rack:?}");
        let power = config.groups[&rack.group].template.as_ref().unwrap().power;
        let at = |seconds| prost_types::Timestamp { seconds, nanos: 0 };
        let node = energy_price(&power.unwrap(), Some(&at(0)), Some(&at(7_200))).unwrap();
        assert_eq!(rack.node_price, node);
        assert_eq!(rack.allocatable["cpu"], 16.0);
        assert_eq!(rack.allocatable["memory"], 64.0 * GI);
        assert_eq!(rack.allocatable["nvidia.com/gpu"], 2.0);
        assert_eq!(rack.allocatable["pods"], 110.0);
    }
}
