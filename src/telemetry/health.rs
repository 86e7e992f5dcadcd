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
        )
}

#[cfg(test)]
mod tests {
    use super::*;

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
