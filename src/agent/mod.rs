//! The heartbeat agent a bench runs (`fleet agent`, SPEC §2.9).
//!
//! It beats every interval (with jitter, so a rack that boots together does not beat together),
//! reports the host's load and cores beside the key, carries an operator's hold request, and
//! keeps beating through Redis outages with a bounded backoff. On shutdown it writes a final beat,
//! by default with TTL 0, so the bench reads DOWN at once instead of a TTL later.
//!
//! It powers its own machine off when fleet asks (SPEC §4.10): each beat reads the bench's
//! power-off request in its one round trip; the agent answers the request's nonce first, then
//! runs its `--power-off-command` (through `sh -c`), once per nonce. An agent started without the
//! option refuses every request, saying why in the answer, and powers nothing off.

use std::time::Duration;

use rand::Rng;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::domain::name::{BenchName, Reason};
use crate::store::keys::Keys;
use crate::store::power_off::{Answer, OffAck, OffRequest, PowerOff};
use crate::store::presence::{Beat, Presence, Receipt};
use fleet_redis::conn::Conn;
use fleet_redis::connect::Endpoint;

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
    /// The shell command that powers the machine off when fleet asks (`systemctl poweroff`),
    /// run with `sh -c`; `None` refuses every request.
    pub power_off: Option<String>,
}

/// Why an agent without `--power-off-command` refuses: the words the operation's tail shows.
pub const REFUSAL: &str = "this bench's fleet agent was started without --power-off-command, so \
                           it powers nothing off; start it with --power-off-command \"systemctl \
                           poweroff\" (or the command that powers this machine off)";

/// What the agent did, for a caller that watches it (tests, `fleet up`).
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    Beat(Receipt),
    Failed {
        failures: u32,
        error: String,
    },
    Final(Result<Receipt, String>),
    /// A power-off request answered (SPEC §4.10): accepted (the command runs) or refused.
    OffAnswered {
        nonce: String,
        answer: Answer,
    },
    /// The power-off command of an accepted request ended: its exit, or why it could not run.
    OffRan {
        nonce: String,
        result: Result<(), String>,
    },
}

/// What the agent said once and says again only when it changes.
#[derive(Default)]
struct Said {
    /// The last refused hold request.
    refused: Option<String>,
    store_problem: Option<String>,
    off_problem: Option<String>,
    /// The hold carried.
    carried: Option<String>,
    /// The nonce whose power-off command ran: never run twice, even when its answer must be
    /// written again.
    obeyed: Option<String>,
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

    /// Beats until `shutdown`, then writes the final beat, bounded by the call timeout. Redis
    /// failures are logged and retried; they never end the loop. Says whether the final beat
    /// landed: a stop's exit code tells a supervisor (SPEC §2.9).
    pub async fn run(self, shutdown: CancellationToken) -> Stopped {
        let mut stores: Option<Stores> = None;
        let mut failures: u32 = 0;
        let name = self.config.name.clone();
        info!(bench = %name, interval = ?self.config.interval, ttl = ?self.config.ttl, redis = %self.endpoint.redacted(), "agent started");
        if self.config.power_off.is_none() {
            info!(bench = %name, "no --power-off-command: this agent never powers its machine off, and refuses a power-off fleet asks of it");
        }
        let mut said = Said::default();
        loop {
            let outcome = match &stores {
                Some(s) => s
                    .presence
                    .beat(&self.beat(self.config.ttl, None))
                    .await
                    .map_err(error_chain),
                None => match self.endpoint.open_lasting().await {
                    Ok(conn) => {
                        let s = Stores::new(conn, &self.keys);
                        let outcome = s
                            .presence
                            .beat(&self.beat(self.config.ttl, None))
                            .await
                            .map_err(error_chain);
                        stores = Some(s);
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
                    let off = receipt.off_request.clone();
                    self.heard(receipt, &mut said);
                    if let (Some(request), Some(s)) = (off, &stores) {
                        self.answer_off(&s.power_off, request, &mut said).await;
                    }
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
        self.final_beat(stores.map(|s| s.presence)).await
    }

    /// Logs what a beat's receipt says that changed since the last, and reports the beat.
    fn heard(&self, receipt: Receipt, said: &mut Said) {
        let name = &self.config.name;
        if let Some(why) = &receipt.refused_request
            && said.refused.as_ref() != Some(why)
        {
            warn!(bench = %name, error = why.as_str(), "the hold request was not carried; withdraw it with `fleet release` and ask again");
        }
        said.refused.clone_from(&receipt.refused_request);
        if let Some(problem) = &receipt.problem
            && said.store_problem.as_ref() != Some(problem)
        {
            warn!(bench = %name, "{problem}");
        }
        said.store_problem.clone_from(&receipt.problem);
        if let Some(problem) = &receipt.off_problem
            && said.off_problem.as_ref() != Some(problem)
        {
            warn!(bench = %name, "{problem}");
        }
        said.off_problem.clone_from(&receipt.off_problem);
        if receipt.hold != said.carried {
            match &receipt.hold {
                Some(hold) => info!(bench = %name, hold, "holding"),
                None => info!(bench = %name, "hold released"),
            }
            said.carried = receipt.hold.clone();
        }
        debug!(bench = %name, at = %receipt.at, "beat written");
        self.emit(Event::Beat(receipt));
    }

    /// Answers a power-off request (SPEC §4.10): the answer first, so fleet learns of it before
    /// the machine goes; then, accepted, the command, once per nonce, and only when the request
    /// still stood as the answer was written. An answer that could not be written is given again
    /// on the next beat, which still sees the request; the command is not run until one has.
    async fn answer_off(&self, store: &PowerOff<Conn>, request: OffRequest, said: &mut Said) {
        let name = &self.config.name;
        let nonce = request.nonce.clone();
        let ack = match &self.config.power_off {
            Some(_) => OffAck {
                nonce: nonce.clone(),
                answer: Answer::Accepted,
                why: None,
            },
            None => OffAck {
                nonce: nonce.clone(),
                answer: Answer::Refused,
                why: Some(REFUSAL.to_owned()),
            },
        };
        match store.acknowledge(name, &request, &ack).await {
            Ok(true) => {}
            // The request lapsed or was replaced since the beat read it: the answer written names
            // its nonce, which no wrapper waits for any more, and its command is not run (SPEC
            // §4.10).
            Ok(false) => {
                info!(bench = %name, nonce, "the power-off request no longer stands; its answer answers nothing, and it is not obeyed");
                return;
            }
            Err(e) => {
                warn!(bench = %name, nonce, error = error_chain(e), "the power-off request could not be answered; answering it on the next beat");
                return;
            }
        }
        self.emit(Event::OffAnswered {
            nonce: nonce.clone(),
            answer: ack.answer,
        });
        let Some(command) = &self.config.power_off else {
            warn!(bench = %name, nonce, "a power-off was asked and refused: this agent was started without --power-off-command");
            return;
        };
        if said.obeyed.as_deref() == Some(nonce.as_str()) {
            return;
        }
        said.obeyed = Some(nonce.clone());
        info!(bench = %name, nonce, command, "powering off, as fleet asked");
        let (name, command, events) = (name.clone(), command.clone(), self.events.clone());
        tokio::spawn(async move {
            let result = power_off(&command).await;
            match &result {
                Ok(()) => info!(bench = %name, nonce, "the power-off command ended"),
                Err(error) => {
                    error!(bench = %name, nonce, error, "the power-off command failed; the machine stays on, and fleet asks again when its shutdown is retried")
                }
            }
            if let Some(events) = events {
                let _ = events.send(Event::OffRan { nonce, result });
            }
        });
    }

    async fn final_beat(&self, presence: Option<Presence<Conn>>) -> Stopped {
        let name = &self.config.name;
        let beat = self.beat(self.config.final_ttl, self.config.final_hold.clone());
        let writing = async {
            match presence {
                Some(p) => p.beat(&beat).await.map_err(error_chain),
                None => match self.endpoint.open_lasting().await {
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

/// The agent's stores, over one connection.
struct Stores {
    presence: Presence<Conn>,
    power_off: PowerOff<Conn>,
}

impl Stores {
    fn new(conn: Conn, keys: &Keys) -> Self {
        Stores {
            presence: Presence::new(conn.clone(), keys.clone()),
            power_off: PowerOff::new(conn, keys.clone()),
        }
    }
}

/// Runs the power-off command through `sh -c`, as an operator would type it (`systemctl
/// poweroff`, `ssh ipmi-host ... && shutdown -h now`): its exit says whether it worked.
async fn power_off(command: &str) -> Result<(), String> {
    let status = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .stdin(std::process::Stdio::null())
        .status()
        .await
        .map_err(|e| format!("cannot start sh: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("the power-off command ended with {status}"))
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
    fleet_redis::connect::chain(e.into().as_ref())
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
