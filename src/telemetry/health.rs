//! Health: what `/healthz` and `/readyz` answer from, and the routes of the metrics and both
//! endpoints (SPEC §4.8); `listener` serves them.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

#[cfg(feature = "serve")]
use super::Metrics;

/// What `/healthz` and `/readyz` answer from.
pub struct Health {
    last_pass: Mutex<Option<Instant>>,
    blind: AtomicBool,
    follower: AtomicBool,
    /// Why the last configuration reload was refused, while the running one is kept.
    refused_reload: Mutex<Option<String>>,
    /// Told at the end of each pass this process makes (one permit held at most): the live page
    /// reads then, so it shows a change as soon as the pass made it.
    pass_done: tokio::sync::Notify,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            last_pass: Mutex::new(None),
            blind: AtomicBool::new(false),
            follower: AtomicBool::new(false),
            refused_reload: Mutex::new(None),
            pass_done: tokio::sync::Notify::new(),
        }
    }
}

impl Health {
    pub fn passed(&self, blind: bool) {
        *self.last_pass.lock().expect("health lock") = Some(Instant::now());
        self.blind.store(blind, Ordering::Relaxed);
        self.pass_done.notify_one();
    }

    /// Returns at the end of the next pass of this process, or at once when one ended since the
    /// last call.
    pub async fn pass_done(&self) {
        self.pass_done.notified().await;
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

    /// Whether this process leads: it holds the lease and has passed since. The live page's
    /// actions run only then; a process that has not passed yet may be about to follow.
    pub fn is_leading(&self) -> bool {
        !self.follower.load(Ordering::Relaxed)
            && self
                .last_pass
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .is_some()
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

/// The routes of `/metrics`, `/healthz` and `/readyz` (`listener::Server` serves them).
#[cfg(feature = "serve")]
pub fn routes(
    (metrics, health): (std::sync::Arc<Metrics>, std::sync::Arc<Health>),
    ready_within: Duration,
) -> axum::Router {
    use axum::http::{StatusCode, header};
    use axum::routing::get;
    axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                // In pieces, each made when the connection asks for it (`super::scrape`).
                let pieces = super::Scrape::new(metrics.clone())
                    .map(Ok::<_, std::convert::Infallible>);
                let body = axum::body::Body::from_stream(futures::stream::iter(pieces));
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
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/metrics` answers in pieces, each made when the connection asks for the next: a slot
    /// counted after the answer began shows in the families not yet sent, which an answer
    /// built whole before its first byte could not show.
    #[cfg(feature = "serve")]
    #[tokio::test]
    async fn metrics_are_answered_in_pieces_made_as_they_are_read() {
        use crate::domain::name::{BenchName, GroupName};
        use crate::telemetry::EnergyStep;
        use http_body_util::BodyExt;
        use tower::ServiceExt;
        let metrics = std::sync::Arc::new(Metrics::default());
        let group = GroupName::parse("rack").unwrap();
        let slot = |i: usize| BenchName::parse(&format!("n{i:05}")).unwrap();
        let step = EnergyStep {
            on_seconds: 1.0,
            ..EnergyStep::default()
        };
        // Five pieces' worth; the slot counted mid-answer makes a sixth.
        let n = 5 * crate::telemetry::scrape::ENERGY_PIECE;
        for i in 0..n {
            metrics.energy.count(&group, &slot(i), step);
        }
        let app = routes((metrics.clone(), std::sync::Arc::default()), Duration::ZERO);
        let request = axum::http::Request::get("/metrics")
            .body(axum::body::Body::empty())
            .unwrap();
        let answer = app.oneshot(request).await.unwrap();
        assert_eq!(answer.status(), axum::http::StatusCode::OK);
        assert_eq!(
            answer.headers()[axum::http::header::CONTENT_TYPE],
            "text/plain; version=0.0.4"
        );
        let mut body = answer.into_body();
        let mut pieces = Vec::new();
        while let Some(frame) = body.frame().await {
            let data = frame.unwrap().into_data().unwrap();
            if pieces.len() == 2 {
                metrics.energy.count(&group, &slot(n), step);
            }
            pieces.push(String::from_utf8(data.to_vec()).unwrap());
        }
        // The registry; six pieces for each of the three families every slot has; the header
        // alone for each of the three of a draw, which none has; the end.
        assert_eq!(pieces.len(), 1 + 3 * 6 + 3 + 1);
        let text = pieces.concat();
        let new = |family: &str| {
            format!("fleet_energy_{family}_total{{group=\"rack\",slot=\"n{n:05}\"}} ")
        };
        assert_eq!(
            text.matches(&new("on_seconds")).count(),
            1,
            "counted before its piece"
        );
        assert_eq!(text.matches(&new("activations")).count(), 1);
        assert!(text.ends_with("# EOF\n"));
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
