//! Telemetry: the metrics fleet serves as Prometheus text, the health the endpoints answer
//! from, and the HTTP listeners that serve them on `--metrics-addr` with the live page (SPEC
//! §4.8, §4.13).
//!
//! Every label is bounded and typed ([`labels`]): groups come from the configuration; phases,
//! reasons, outcomes, methods and codes are closed enums. This module decides nothing: the
//! controller and the provider record here what they did.
//!
//! - [`labels`]: the label sets and their values.
//! - [`health`]: `/healthz` and `/readyz`, and the routes of the metrics and both.
//! - [`listener`]: the hardened HTTP server of every listener: the Host check, the caps derived
//!   from the descriptor limit, the timeouts.
//! - [`scrape`]: one `/metrics` answer, in pieces made as the connection takes them.

pub mod health;
pub mod labels;
#[cfg(feature = "serve")]
pub mod listener;
pub mod scrape;

use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Metric;
use prometheus_client::registry::Registry;

use crate::domain::name::{BenchName, GroupName};

pub use health::Health;
#[cfg(feature = "serve")]
pub use health::routes;
pub use labels::*;
pub use scrape::Scrape;

/// The prefix of every metric's name.
const PREFIX: &str = "fleet";

/// Every metric the controller keeps.
pub struct Metrics {
    registry: Registry,
    pub claims: Family<ClaimLabels, Gauge>,
    pub slots: Family<SlotLabels, Gauge>,
    pub moves: Family<MoveLabels, Counter>,
    pub operations: Family<OperationLabels, Counter>,
    pub operation_seconds: Family<KindLabel, Histogram>,
    pub presence_read_seconds: Histogram,
    pub pass_seconds: Histogram,
    pub blind: Gauge,
    /// 1 while the Kubernetes Nodes cannot be seen: bound slots are blind.
    pub kubernetes_blind: Gauge,
    /// Writes to Nodes, by action and result.
    pub node_writes: Family<NodeWriteLabels, Counter>,
    /// Bound Nodes whose provider ID is not their slot's (fleet leaves them alone).
    pub node_provider_id_mismatches: Gauge,
    /// Kubernetes Events dropped because their queue was full.
    pub kubernetes_events_dropped: Counter,
    pub leader: Gauge,
    pub provider_calls: Family<CallLabels, Counter>,
    pub provider_call_seconds: Family<CallLabels, Histogram>,
    pub provider_stale_answers: Counter,
    /// Warnings recorded on claims, by reason (ShutdownJobTimeout, ShutdownAttemptLimitReached).
    pub warnings: Family<ReasonLabel, Counter>,
    /// Configuration reloads, by result (`applied`, `refused`).
    pub reloads: Family<ResultLabel, Counter>,
    pub energy: std::sync::Arc<EnergyMetrics>,
    /// Power actions held back because the replicas did not acknowledge the writes before them
    /// in time (SPEC §5.6).
    pub replica_waits_short: Counter,
    /// HTTP connections open on the listeners, and of them the live page's streams (SPEC
    /// §4.13): each holds a place under its cap until it closes.
    pub http_connections: Gauge,
    pub page_streams: Gauge,
    /// The provider's connections open, under its own cap, and the bytes of its requests in
    /// flight, under its budget (SPEC §6.4).
    pub provider_connections: Gauge,
    pub provider_request_bytes: Gauge,
}

/// A counter of a fractional amount (seconds, kWh, money).
pub type Amount = Counter<f64, AtomicU64>;

/// The energy ledger's counters (SPEC §4.12), by slot: what this process accounted while it
/// led. The ledger in Redis is the record; these are its rate for dashboards, and restart at
/// zero with the process as counters do.
///
/// One map by group and slot, encoded as the six `fleet_energy_*` families at each scrape: six
/// `Family`s held a copy of both names for each series, 22 MB at 100 000 slots. A
/// slot's series appear once something was counted for it; the three of energy and money once
/// it was counted with a draw.
#[derive(Debug, Default)]
pub struct EnergyMetrics {
    slots: std::sync::RwLock<std::collections::BTreeMap<GroupName, SlotTallies>>,
}

/// Ordered, so that a scrape can take a piece and go on after its last slot (`scrape`).
type SlotTallies = std::collections::BTreeMap<BenchName, Tally>;

/// One slot's counters.
#[derive(Clone, Copy, Debug, Default)]
struct Tally {
    on_seconds: f64,
    off_seconds: f64,
    activations: u64,
    /// kWh, kWh saved and money saved, once counted with a draw.
    drawn: Option<[f64; 3]>,
}

/// What one step adds to a slot's counters.
#[derive(Clone, Copy, Debug, Default)]
pub struct EnergyStep {
    pub on_seconds: f64,
    pub off_seconds: f64,
    pub activations: u64,
    /// kWh, kWh saved and money saved, when the slot has a draw.
    pub drawn: Option<[f64; 3]>,
}

impl EnergyMetrics {
    /// Adds a step to the slot's counters.
    pub fn count(&self, group: &GroupName, slot: &BenchName, step: EnergyStep) {
        let mut slots = self.slots.write().unwrap_or_else(|p| p.into_inner());
        let tallies = match slots.get_mut(group) {
            Some(t) => t,
            None => slots.entry(group.clone()).or_default(),
        };
        let tally = match tallies.get_mut(slot) {
            Some(t) => t,
            None => tallies.entry(slot.clone()).or_default(),
        };
        tally.on_seconds += step.on_seconds;
        tally.off_seconds += step.off_seconds;
        tally.activations += step.activations;
        if let Some(add) = step.drawn {
            let sum = tally.drawn.get_or_insert([0.0; 3]);
            for (total, x) in sum.iter_mut().zip(add) {
                *total += x;
            }
        }
    }
}

/// The six families, in the order they were registered before: the name, its help, and how a
/// tally gives its value (`None`: the slot has no such series).
const ENERGY_FAMILIES: [(&str, &str, EnergyValue); 6] = [
    (
        "energy_on_seconds",
        "Time a slot's machine was observed on",
        |t| Some(Value::Amount(t.on_seconds)),
    ),
    (
        "energy_off_seconds",
        "Time a slot's machine was observed off",
        |t| Some(Value::Amount(t.off_seconds)),
    ),
    (
        "energy_kwh",
        "Energy a slot's machine drew (watts when on, standby_watts when off)",
        |t| t.drawn.map(|d| Value::Amount(d[0])),
    ),
    (
        "energy_kwh_saved",
        "Energy saved against an always-on baseline by the machine being off",
        |t| t.drawn.map(|d| Value::Amount(d[1])),
    ),
    (
        "energy_cost_saved",
        "kwh_saved times the slot's price_per_kwh",
        |t| t.drawn.map(|d| Value::Amount(d[2])),
    ),
    (
        "energy_activations",
        "A slot's machine observed going from off to on",
        |t| Some(Value::Count(t.activations)),
    ),
];

type EnergyValue = fn(&Tally) -> Option<Value>;

enum Value {
    Amount(f64),
    Count(u64),
}

fn seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

/// `metric`, registered in `registry` under `name` with its `help`.
fn registered<M: Metric + Clone>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M {
    registry.register(name, help, metric.clone());
    metric
}

impl Default for Metrics {
    // Long: not complex, one registration per metric, in the order /metrics lists them (the
    // energy families, which a scrape writes itself, come last).
    fn default() -> Self {
        let mut r = Registry::with_prefix(PREFIX);
        let warnings = registered(
            &mut r,
            "claim_warnings",
            "Warnings recorded on claims, by reason",
            Family::default(),
        );
        let reloads = registered(
            &mut r,
            "config_reloads",
            "Configuration reloads, applied or refused",
            Family::default(),
        );
        let provider_calls = registered(
            &mut r,
            "provider_calls",
            "cluster-autoscaler calls by method and gRPC status code",
            Family::default(),
        );
        let provider_call_seconds = registered(
            &mut r,
            "provider_call_seconds",
            "Time to answer one cluster-autoscaler call",
            Family::new_with_constructor(seconds as fn() -> Histogram),
        );
        let provider_stale_answers = registered(
            &mut r,
            "provider_stale_answers",
            "Reads answered from the last snapshot because Redis could not be read",
            Counter::default(),
        );
        let claims = registered(
            &mut r,
            "claims",
            "Claims by group and phase",
            Family::default(),
        );
        let slots = registered(
            &mut r,
            "slots",
            "Slots by group and reported phase",
            Family::default(),
        );
        let moves = registered(
            &mut r,
            "claim_moves",
            "Claim moves by the phase moved to and the reason",
            Family::default(),
        );
        let operations = registered(
            &mut r,
            "operations",
            "Lifecycle operations by kind and outcome",
            Family::default(),
        );
        let operation_seconds = registered(
            &mut r,
            "operation_duration_seconds",
            "Lifecycle operation run time",
            Family::new_with_constructor(operation_seconds as fn() -> Histogram),
        );
        let presence_read_seconds = registered(
            &mut r,
            "presence_read_seconds",
            "Time of one fleet presence read",
            seconds(),
        );
        let pass_seconds = registered(
            &mut r,
            "pass_seconds",
            "Time of one controller pass over every slot",
            seconds(),
        );
        let kubernetes_blind = registered(
            &mut r,
            "kubernetes_blind",
            "1 while the Kubernetes Nodes cannot be seen: the slots bound to one are blind",
            Gauge::default(),
        );
        let node_writes = registered(
            &mut r,
            "kubernetes_node_writes",
            "Writes to Kubernetes Nodes by action (taints, provider_id, delete) and result",
            Family::default(),
        );
        let node_provider_id_mismatches = registered(
            &mut r,
            "kubernetes_node_provider_id_mismatches",
            "Bound Nodes whose spec.providerID is not their slot's provider ID",
            Gauge::default(),
        );
        let kubernetes_events_dropped = registered(
            &mut r,
            "kubernetes_events_dropped",
            "Kubernetes Events dropped because their queue was full",
            Counter::default(),
        );
        // Not in the registry: a scrape writes the energy families itself, in pieces (`scrape`).
        let energy = std::sync::Arc::new(EnergyMetrics::default());
        let replica_waits_short = registered(
            &mut r,
            "replica_waits_short",
            "Power actions held back: the replicas did not acknowledge the writes before them in time",
            Counter::default(),
        );
        let http_connections = registered(
            &mut r,
            "http_connections",
            "HTTP connections open on the metrics and page listeners",
            Gauge::default(),
        );
        let page_streams = registered(
            &mut r,
            "page_streams",
            "The live page's event streams open",
            Gauge::default(),
        );
        let provider_connections = registered(
            &mut r,
            "provider_connections",
            "Connections open on the cluster-autoscaler provider's listener",
            Gauge::default(),
        );
        let provider_request_bytes = registered(
            &mut r,
            "provider_request_bytes",
            "Bytes of the provider's requests in flight, received and not yet answered",
            Gauge::default(),
        );
        let blind = registered(
            &mut r,
            "blind",
            "1 while the controller cannot see the machines",
            Gauge::default(),
        );
        let leader = registered(
            &mut r,
            "leader",
            "1 while this process is the acting controller",
            Gauge::default(),
        );
        Metrics {
            registry: r,
            claims,
            slots,
            moves,
            operations,
            operation_seconds,
            presence_read_seconds,
            pass_seconds,
            blind,
            kubernetes_blind,
            node_writes,
            node_provider_id_mismatches,
            kubernetes_events_dropped,
            leader,
            provider_calls,
            provider_call_seconds,
            provider_stale_answers,
            warnings,
            reloads,
            energy,
            replica_waits_short,
            http_connections,
            page_streams,
            provider_connections,
            provider_request_bytes,
        }
    }
}

fn operation_seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.05, 2.0, 14))
}

impl Metrics {
    /// The Prometheus text exposition of every metric, whole: [`Scrape`]'s pieces joined.
    pub fn encode(&self) -> String {
        Scrape::new(self).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::claim::{self, OperationKind, OperationOutcome, Phase};
    use crate::domain::law::Report;
    use crate::domain::name::GroupName;

    #[test]
    fn metrics_encode_with_their_labels() {
        let m = Metrics::default();
        m.claims
            .get_or_create(&ClaimLabels {
                group: GroupName::parse("pool-a").unwrap(),
                phase: Phase::Ready,
            })
            .set(2);
        m.moves
            .get_or_create(&MoveLabels {
                to: Phase::Failed,
                reason: Some(claim::Reason::MachineGone),
            })
            .inc();
        m.blind.set(1);
        let text = m.encode();
        assert!(
            text.contains(r#"fleet_claims{group="pool-a",phase="ready"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"fleet_claim_moves_total{to="failed",reason="MachineGone"} 1"#),
            "{text}"
        );
        assert!(text.contains("fleet_blind 1"), "{text}");
    }

    /// The energy counters are one map encoded as the six families: a slot's series sum its
    /// steps, and the three of energy and money appear only for a slot counted with a draw.
    #[test]
    fn energy_counters_encode_as_six_families_by_slot() {
        let m = Metrics::default();
        let g = GroupName::parse("rack").unwrap();
        let (n1, n2) = (
            BenchName::parse("n1").unwrap(),
            BenchName::parse("n2").unwrap(),
        );
        let step = |drawn| EnergyStep {
            on_seconds: 1.5,
            off_seconds: 2.0,
            activations: 1,
            drawn,
        };
        m.energy.count(&g, &n1, step(Some([0.25, 0.5, 0.125])));
        m.energy.count(&g, &n1, step(Some([0.25, 0.5, 0.125])));
        m.energy.count(&g, &n2, step(None));
        let text = m.encode();
        let series: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("fleet_energy_"))
            .collect();
        for line in [
            r#"fleet_energy_on_seconds_total{group="rack",slot="n1"} 3.0"#,
            r#"fleet_energy_off_seconds_total{group="rack",slot="n1"} 4.0"#,
            r#"fleet_energy_kwh_total{group="rack",slot="n1"} 0.5"#,
            r#"fleet_energy_kwh_saved_total{group="rack",slot="n1"} 1.0"#,
            r#"fleet_energy_cost_saved_total{group="rack",slot="n1"} 0.25"#,
            r#"fleet_energy_activations_total{group="rack",slot="n1"} 2"#,
            r#"fleet_energy_on_seconds_total{group="rack",slot="n2"} 1.5"#,
            r#"fleet_energy_off_seconds_total{group="rack",slot="n2"} 2.0"#,
            r#"fleet_energy_activations_total{group="rack",slot="n2"} 1"#,
        ] {
            assert!(series.contains(&line), "{line} in {series:#?}");
        }
        assert_eq!(series.len(), 9, "{series:#?}");
        assert!(text.contains("# TYPE fleet_energy_kwh counter"), "{text}");
        assert!(text.trim_end().ends_with("# EOF"), "{text}");
    }

    /// The label text `labels` encode to, as in `name{...}`.
    fn encoded<L>(labels: L) -> String
    where
        L: prometheus_client::encoding::EncodeLabelSet
            + Clone
            + std::hash::Hash
            + Eq
            + std::fmt::Debug
            + Send
            + Sync
            + 'static,
    {
        let mut registry = Registry::default();
        let family = Family::<L, Counter>::default();
        family.get_or_create(&labels).inc();
        registry.register("m", "m", family);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let start = text.find("m_total{").expect("a labelled sample") + "m_total".len();
        let end = start + text[start..].find('}').expect("the end of the labels") + 1;
        text[start..end].to_owned()
    }

    // Every value of every domain enum a label is made from: the text is the domain's own name
    // for it, byte for byte as /metrics has always shown it.
    #[test]
    fn every_label_value_is_the_domains_name_for_it() {
        for phase in Phase::ALL {
            assert_eq!(
                encoded(MoveLabels {
                    to: phase,
                    reason: None
                }),
                format!(r#"{{to="{}",reason=""}}"#, phase.as_str())
            );
        }
        for report in Report::ALL {
            assert_eq!(
                encoded(SlotLabels {
                    group: GroupName::parse("g").unwrap(),
                    phase: report
                }),
                format!(r#"{{group="g",phase="{}"}}"#, report.as_str())
            );
        }
        for reason in claim::Reason::ALL {
            assert_eq!(
                encoded(ReasonLabel { reason }),
                format!(r#"{{reason="{}"}}"#, reason.as_str())
            );
        }
        for kind in [OperationKind::Startup, OperationKind::Shutdown] {
            assert_eq!(
                encoded(KindLabel { operation: kind }),
                format!(r#"{{operation="{}"}}"#, kind.as_str())
            );
        }
        let outcomes = [
            (OperationOutcome::Completed, "completed"),
            (OperationOutcome::Failed, "failed"),
            (OperationOutcome::TimedOut, "timedout"),
            (OperationOutcome::Abandoned, "abandoned"),
        ];
        for (outcome, text) in outcomes {
            assert_eq!(
                encoded(OperationLabels {
                    operation: OperationKind::Startup,
                    outcome
                }),
                format!(r#"{{operation="startup",outcome="{text}"}}"#)
            );
        }
        for (result, text) in [(Reload::applied, "applied"), (Reload::refused, "refused")] {
            assert_eq!(
                encoded(ResultLabel { result }),
                format!(r#"{{result="{text}"}}"#)
            );
        }
        assert_eq!(
            encoded(CallLabels {
                method: Method::GetAvailableGPUTypes,
                code: Code::FailedPrecondition
            }),
            r#"{method="GetAvailableGPUTypes",code="FailedPrecondition"}"#
        );
    }
}
