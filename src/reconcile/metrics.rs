//! The controller's metrics (Prometheus text) and health, served on `--metrics-addr`
//! (SPEC §4.8). Every label is bounded: groups and slots come from the configuration, phases,
//! reasons and outcomes from closed enums.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GroupPhase {
    pub group: String,
    pub phase: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MoveLabels {
    pub to: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    pub operation: String,
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub operation: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    pub method: String,
    pub code: String,
}

/// Every metric the controller keeps.
pub struct Metrics {
    registry: Registry,
    pub claims: Family<GroupPhase, Gauge>,
    pub slots: Family<GroupPhase, Gauge>,
    pub moves: Family<MoveLabels, Counter>,
    pub operations: Family<OperationLabels, Counter>,
    pub operation_seconds: Family<KindLabel, Histogram>,
    pub presence_read_seconds: Histogram,
    pub pass_seconds: Histogram,
    pub blind: Gauge,
    pub leader: Gauge,
    pub provider_calls: Family<CallLabels, Counter>,
    pub provider_call_seconds: Family<CallLabels, Histogram>,
    pub provider_stale_answers: Counter,
    /// Warnings recorded on claims, by reason (ShutdownJobTimeout, ShutdownAttemptLimitReached).
    pub warnings: Family<ReasonLabel, Counter>,
    /// Configuration reloads, by result (`applied`, `refused`).
    pub reloads: Family<ResultLabel, Counter>,
}

fn seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("fleet");
        let claims = Family::<GroupPhase, Gauge>::default();
        let slots = Family::<GroupPhase, Gauge>::default();
        let moves = Family::<MoveLabels, Counter>::default();
        let operations = Family::<OperationLabels, Counter>::default();
        let operation_seconds = Family::<KindLabel, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.05, 2.0, 14))
        });
        let presence_read_seconds = seconds();
        let pass_seconds = seconds();
        let blind = Gauge::default();
        let leader = Gauge::default();
        let provider_calls = Family::<CallLabels, Counter>::default();
        let provider_call_seconds = Family::<CallLabels, Histogram>::new_with_constructor(seconds);
        let provider_stale_answers = Counter::default();
        let warnings = Family::<ReasonLabel, Counter>::default();
        let reloads = Family::<ResultLabel, Counter>::default();
        registry.register(
            "claim_warnings",
            "Warnings recorded on claims, by reason",
            warnings.clone(),
        );
        registry.register(
            "config_reloads",
            "Configuration reloads, applied or refused",
            reloads.clone(),
        );
        registry.register(
            "provider_calls",
            "cluster-autoscaler calls by method and gRPC status code",
            provider_calls.clone(),
        );
        registry.register(
            "provider_call_seconds",
            "Time to answer one cluster-autoscaler call",
            provider_call_seconds.clone(),
        );
        registry.register(
            "provider_stale_answers",
            "Reads answered from the last snapshot because Redis could not be read",
            provider_stale_answers.clone(),
        );
        registry.register("claims", "Claims by group and phase", claims.clone());
        registry.register("slots", "Slots by group and reported phase", slots.clone());
        registry.register(
            "claim_moves",
            "Claim moves by the phase moved to and the reason",
            moves.clone(),
        );
        registry.register(
            "operations",
            "Lifecycle operations by kind and outcome",
            operations.clone(),
        );
        registry.register(
            "operation_duration_seconds",
            "Lifecycle operation run time",
            operation_seconds.clone(),
        );
        registry.register(
            "presence_read_seconds",
            "Time of one fleet presence read",
            presence_read_seconds.clone(),
        );
        registry.register(
            "pass_seconds",
            "Time of one controller pass over every slot",
            pass_seconds.clone(),
        );
        registry.register(
            "blind",
            "1 while the controller cannot see the machines",
            blind.clone(),
        );
        registry.register(
            "leader",
            "1 while this process is the acting controller",
            leader.clone(),
        );
        Metrics {
            registry,
            claims,
            slots,
            moves,
            operations,
            operation_seconds,
            presence_read_seconds,
            pass_seconds,
            blind,
            leader,
            provider_calls,
            provider_call_seconds,
            provider_stale_answers,
            warnings,
            reloads,
        }
    }
}

impl Metrics {
    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Encoding into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// What `/healthz` and `/readyz` answer from, and the leadership the provider acts under.
pub struct Health {
    last_pass: Mutex<Option<Instant>>,
    blind: AtomicBool,
    follower: AtomicBool,
    /// The fencing token while this process leads, for the provider's changes.
    leadership: tokio::sync::watch::Sender<Option<String>>,
    /// Why the last configuration reload was refused, while the running one is kept.
    refused_reload: Mutex<Option<String>>,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            last_pass: Mutex::new(None),
            blind: AtomicBool::new(false),
            follower: AtomicBool::new(false),
            leadership: tokio::sync::watch::Sender::new(None),
            refused_reload: Mutex::new(None),
        }
    }
}

impl Health {
    /// Records the leadership this process acts under: its fencing token, or `None`.
    pub fn lead(&self, token: Option<&str>) {
        self.leadership.send_replace(token.map(ToOwned::to_owned));
    }

    /// The leadership, as the provider follows it.
    pub fn leadership(&self) -> tokio::sync::watch::Receiver<Option<String>> {
        self.leadership.subscribe()
    }

    pub fn passed(&self, blind: bool) {
        *self.last_pass.lock().expect("health lock") = Some(Instant::now());
        self.blind.store(blind, Ordering::Relaxed);
    }

    /// Records a refused configuration reload (`Some(why)`), or one applied since (`None`).
    pub fn reload(&self, refused: Option<String>) {
        *self
            .refused_reload
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = refused;
    }

    /// Why the last reload was refused, while the running configuration is kept.
    pub fn refused_reload(&self) -> Option<String> {
        self.refused_reload
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Records whether this process follows (another leads).
    pub fn following(&self, follower: bool) {
        self.follower.store(follower, Ordering::Relaxed);
    }

    /// Ready: this process leads, a pass finished within `within`, and the controller can see.
    /// Why not, otherwise.
    pub fn ready(&self, within: Duration) -> Result<(), String> {
        if self.follower.load(Ordering::Relaxed) {
            return Err("follower: another fleet serve holds the leader lease".to_owned());
        }
        match *self.last_pass.lock().expect("health lock") {
            None => Err("no controller pass has finished yet".to_owned()),
            Some(at) if at.elapsed() > within => Err(format!(
                "the last controller pass finished {:?} ago",
                at.elapsed()
            )),
            Some(_) if self.blind.load(Ordering::Relaxed) => {
                Err("blind: the controller cannot read the machines' presence".to_owned())
            }
            Some(_) => Ok(()),
        }
    }
}

/// Serves `/metrics`, `/healthz` and `/readyz` until `shutdown`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: std::sync::Arc<Metrics>,
    health: std::sync::Arc<Health>,
    ready_within: Duration,
    shutdown: tokio_util::sync::CancellationToken,
) -> std::io::Result<()> {
    use axum::http::{StatusCode, header};
    use axum::routing::get;
    let app = axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                let body = metrics.encode();
                async move { ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body) }
            }),
        )
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(move || {
                let answer = health.ready(ready_within);
                // A refused reload does not stop a controller (it runs the configuration it
                // has), but an operator looking here is told.
                let note = health
                    .refused_reload()
                    .map(|why| format!("warning: the last configuration reload was refused; the running one is kept: {why}\n"))
                    .unwrap_or_default();
                async move {
                    match answer {
                        Ok(()) => (StatusCode::OK, format!("ready\n{note}")),
                        Err(why) => (
                            StatusCode::SERVICE_UNAVAILABLE,
                            format!("not ready: {why}\n{note}"),
                        ),
                    }
                }
            }),
        );
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_encode_with_their_labels() {
        let m = Metrics::default();
        m.claims
            .get_or_create(&GroupPhase {
                group: "pool-a".into(),
                phase: "ready".into(),
            })
            .set(2);
        m.moves
            .get_or_create(&MoveLabels {
                to: "failed".into(),
                reason: "MachineGone".into(),
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

    #[test]
    fn readiness_needs_a_recent_pass_that_could_see() {
        let h = Health::default();
        assert!(
            h.ready(Duration::from_secs(5))
                .unwrap_err()
                .contains("no controller pass")
        );
        h.passed(true);
        assert!(
            h.ready(Duration::from_secs(5))
                .unwrap_err()
                .contains("blind")
        );
        h.passed(false);
        assert_eq!(h.ready(Duration::from_secs(5)), Ok(()));
        assert!(h.ready(Duration::ZERO).is_err());
        h.following(true);
        assert!(
            h.ready(Duration::from_secs(5))
                .unwrap_err()
                .contains("follower")
        );
    }
}
