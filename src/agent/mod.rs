//! The heartbeat agent a bench runs (`fleet agent`, SPEC §2.9).
//!
//! It beats every interval (with jitter, so a rack that boots together does not beat together),
//! reports the host's load and cores beside the key, carries an operator's hold request, and
//! keeps beating through Redis outages with a bounded backoff. On shutdown it writes a final beat,
//! by default with TTL 0, so the bench reads DOWN at once instead of a TTL later.

use std::time::Duration;

use rand::Rng;
use redis::aio::ConnectionManager;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::domain::name::{BenchName, Reason};
use crate::store::connect::Endpoint;
use crate::store::keys::Keys;
use crate::store::presence::{Beat, Presence, Receipt};

/// The first retry after a failed beat; it doubles per failure up to the interval.
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
/// The share of the interval by which each wait is jittered, either way.
const JITTER: f64 = 0.1;

#[derive(Clone, Debug)]
pub struct Config {
    pub name: BenchName,
    pub interval: Duration,
    pub ttl: Duration,
    /// The TTL of the beat written on shutdown; zero deletes the key (DOWN at once).
    pub final_ttl: Duration,
    pub final_hold: Option<Reason>,
}

/// What the agent did, for a caller that watches it (tests, `fleet up`).
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    Beat(Receipt),
    Failed { failures: u32, error: String },
    Final(Result<Receipt, String>),
}

pub struct Agent {
    config: Config,
    endpoint: Endpoint,
    keys: Keys,
    events: Option<mpsc::UnboundedSender<Event>>,
}

impl Agent {
    pub fn new(config: Config, endpoint: Endpoint, keys: Keys) -> Self {
        Self {
            config,
            endpoint,
            keys,
            events: None,
        }
    }

    /// Sends every beat's outcome to `events` as well as to the log.
    pub fn with_events(mut self, events: mpsc::UnboundedSender<Event>) -> Self {
        self.events = Some(events);
        self
    }

    /// Beats until `shutdown`, then writes the final beat. Redis failures are logged and retried;
    /// they never end the loop.
    /// Beats until `shutdown`, then writes the final beat, bounded by the call timeout. Says
    /// whether the final beat landed: a stop's exit code tells a supervisor (SPEC §2.9).
    pub async fn run(self, shutdown: CancellationToken) -> Stopped {
        let mut presence: Option<Presence<ConnectionManager>> = None;
        let mut failures: u32 = 0;
        let name = self.config.name.clone();
        info!(bench = %name, interval = ?self.config.interval, ttl = ?self.config.ttl, redis = %self.endpoint.redacted(), "agent started");
        let mut carried: Option<String> = None;
        // The last refused hold request: said once, not on every beat.
        let mut refused: Option<String> = None;
        let mut store_problem: Option<String> = None;
        loop {
            let outcome = match &presence {
                Some(p) => p
                    .beat(&self.beat(self.config.ttl, None))
                    .await
                    .map_err(error_chain),
                None => match self.endpoint.manager().await {
                    Ok(conn) => {
                        let p = Presence::new(conn, self.keys.clone());
                        let outcome = p
                            .beat(&self.beat(self.config.ttl, None))
                            .await
                            .map_err(error_chain);
                        presence = Some(p);
                        outcome
                    }
                    Err(e) => Err(error_chain(e)),
                },
            };
            let wait = match outcome {
                Ok(receipt) => {
                    if failures > 0 {
                        info!(bench = %name, failures, "beat restored");
                    }
                    failures = 0;
                    if let Some(why) = &receipt.refused_request
                        && refused.as_ref() != Some(why)
                    {
                        warn!(bench = %name, error = why.as_str(), "the hold request was not carried; withdraw it with `fleet release` and ask again");
                    }
                    refused.clone_from(&receipt.refused_request);
                    if let Some(problem) = &receipt.problem
                        && store_problem.as_ref() != Some(problem)
                    {
                        warn!(bench = %name, "{problem}");
                    }
                    store_problem.clone_from(&receipt.problem);
                    if receipt.hold != carried {
                        match &receipt.hold {
                            Some(hold) => info!(bench = %name, hold, "holding"),
                            None => info!(bench = %name, "hold released"),
                        }
                        carried = receipt.hold.clone();
                    }
                    debug!(bench = %name, at = %receipt.at, "beat written");
                    self.emit(Event::Beat(receipt));
                    jittered(self.config.interval)
                }
                Err(error) => {
                    failures = failures.saturating_add(1);
                    warn!(bench = %name, failures, error, "beat failed; retrying");
                    self.emit(Event::Failed { failures, error });
                    backoff(failures, self.config.interval)
                }
            };
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(wait) => {}
            }
        }
        self.final_beat(presence).await
    }

    async fn final_beat(&self, presence: Option<Presence<ConnectionManager>>) -> Stopped {
        let name = &self.config.name;
        let beat = self.beat(self.config.final_ttl, self.config.final_hold.clone());
        let writing = async {
            match presence {
                Some(p) => p.beat(&beat).await.map_err(error_chain),
                None => match self.endpoint.manager().await {
                    Ok(conn) => Presence::new(conn, self.keys.clone())
                        .beat(&beat)
                        .await
                        .map_err(error_chain),
                    Err(e) => Err(error_chain(e)),
                },
            }
        };
        // The stop is bounded by one call timeout, whatever Redis does.
        let result = match tokio::time::timeout(self.endpoint.timeout, writing).await {
            Ok(result) => result,
            Err(_) => Err(format!(
                "no answer within {}",
                humantime::format_duration(self.endpoint.timeout)
            )),
        };
        match &result {
            Ok(_) => info!(bench = %name, ttl = ?beat.ttl, "final beat written; agent stopped"),
            Err(error) => warn!(
                bench = %name,
                error,
                "final beat failed; the key expires on its own within its TTL"
            ),
        }
        let stopped = match &result {
            Ok(_) => Stopped::FinalBeatWritten,
            Err(error) => Stopped::FinalBeatFailed(error.clone()),
        };
        self.emit(Event::Final(result));
        stopped
    }

    fn beat(&self, ttl: Duration, hold: Option<Reason>) -> Beat {
        Beat {
            name: self.config.name.clone(),
            ttl,
            hold,
            load: host_load(),
            cores: host_cores(),
        }
    }

    fn emit(&self, event: Event) {
        if let Some(events) = &self.events {
            let _ = events.send(event);
        }
    }
}

/// How an agent stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stopped {
    FinalBeatWritten,
    /// The final beat did not land (why): the key expires on its own within its TTL.
    FinalBeatFailed(String),
}

fn error_chain(e: impl Into<anyhow::Error>) -> String {
    crate::store::connect::chain(e.into().as_ref())
}

/// The interval, moved by up to `JITTER` of itself either way.
fn jittered(interval: Duration) -> Duration {
    let factor = rand::rng().random_range((1.0 - JITTER)..=(1.0 + JITTER));
    interval.mul_f64(factor)
}

/// The wait after the `failures`-th consecutive failure: doubling from `FIRST_BACKOFF`, never
/// longer than the interval, so an outage shorter than the TTL costs the bench nothing.
pub fn backoff(failures: u32, interval: Duration) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    FIRST_BACKOFF.saturating_mul(1 << doublings).min(interval)
}

/// The host's one-minute load average (Linux `/proc/loadavg`); `None` elsewhere.
pub fn host_load() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// The host's core count as this process may use it.
pub fn host_cores() -> Option<u32> {
    std::thread::available_parallelism()
        .ok()
        .and_then(|n| u32::try_from(n.get()).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_is_bounded_by_the_interval() {
        let interval = Duration::from_secs(10);
        let waits: Vec<u64> = (1..=9)
            .map(|f| backoff(f, interval).as_millis() as u64)
            .collect();
        assert_eq!(
            waits,
            [200, 400, 800, 1600, 3200, 6400, 10_000, 10_000, 10_000]
        );
        assert_eq!(backoff(u32::MAX, interval), interval);
    }

    #[test]
    fn jitter_stays_within_a_tenth() {
        let interval = Duration::from_secs(10);
        for _ in 0..1000 {
            let w = jittered(interval);
            assert!(
                w >= Duration::from_secs(9) && w <= Duration::from_secs(11),
                "{w:?}"
            );
        }
    }

    #[test]
    fn host_facts_are_read_on_linux() {
        assert!(host_cores().unwrap() >= 1);
        assert!(host_load().unwrap() >= 0.0);
    }
}
