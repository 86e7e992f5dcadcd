//! The IPMI driver (SPEC §4.10): chassis power over IPMI 2.0 LAN+ through `ipmitool`.
//!
//! Why ipmitool and not a Rust crate: the native IPMI crates are immature (one calls itself a
//! hobby project, another documents cipher suite 3 only, and none is used to drive fleets of
//! machines), while ipmitool is what MAAS and OpenStack Ironic drive every IPMI BMC with, so its
//! quirks with real BMCs are known and worked around. Shelling out costs a process per command,
//! which the pacing between commands dwarfs.
//!
//! What it holds to (from MAAS and Ironic): the state is read before acting (already
//! there is done, with nothing sent); a command is followed by readings with jittered backoff
//! until the state holds; an off is `soft` (ACPI) first and `off` (hard) after `SOFT_SHARE` of
//! the timeout, recorded as escalated; refused credentials are never retried; one command at a
//! time per BMC, at least `gap` apart; every call has a hard timeout; the password goes through
//! a file of mode 0600, never an argument or the environment; cipher suite 17 unless 3 is
//! configured, or 3 as a fallback that is logged and recorded in the audit.
//!
//! It must not decide anything about claims, nor read the heartbeat: its reading is a second
//! observation.
//!
//! - `config`: its fields in the file and their checks, and `IpmiDriver` (pure).
//! - `target`: the BMC as ipmitool is given it, and what ipmitool would misread (pure).
//! - `tool`: one ipmitool call, and the turn that orders the calls to one BMC.
//! - `words`: what ipmitool's output and errors say.

pub mod config;
mod target;
mod tool;
mod words;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;
use tracing::{debug, warn};

pub use self::target::{IpmiTarget, TargetError};
use self::tool::{Action, Ran, Tool, Turn};
use self::words::Refusal;
use crate::power::action::{Audit, Bmc, Intent, PowerError, PowerState, SOFT_SHARE, Sent};

/// The longest wait between two readings while a state is awaited (MAAS's pauses grow to 12 s;
/// a BMC is read at least this often so that a landed state is seen soon).
const POLL_MAX: Duration = Duration::from_secs(8);
/// Each wait between readings grows by half, from the gap, up to `POLL_MAX`.
const POLL_GROWTH: f64 = 1.5;
/// The share by which a wait is drawn above or below its value, so that BMCs powered together
/// are not read in step.
const JITTER: f64 = 0.1;

/// How the driver runs ipmitool. The defaults suit real BMCs; tests shorten the times.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpmiOptions {
    /// The ipmitool to run: a name looked up on PATH, or a path.
    pub ipmitool: PathBuf,
    /// The least time from the end of one command to a BMC to the start of the next: BMCs
    /// drop commands that come too close together.
    pub gap: Duration,
    /// The hard limit of one ipmitool call, past which its process group is killed and the BMC
    /// counts as unreachable for that call.
    pub call_timeout: Duration,
    /// ipmitool's `-R`: how often it retransmits an unanswered message. With 2 it gives up on a
    /// silent BMC in about 6 s, with 1 in about 2 s (ipmitool 1.8.19).
    pub retries: u8,
}

impl Default for IpmiOptions {
    fn default() -> Self {
        IpmiOptions {
            ipmitool: PathBuf::from("ipmitool"),
            gap: Duration::from_secs(2),
            call_timeout: Duration::from_secs(15),
            retries: 2,
        }
    }
}

/// A BMC driven through `ipmitool -I lanplus` (see the module's documentation for why ipmitool).
#[derive(Debug)]
pub struct Ipmi {
    target: IpmiTarget,
    options: IpmiOptions,
    name: String,
    turn: Arc<tokio::sync::Mutex<Turn>>,
}

impl Ipmi {
    /// A driver for `target`, refused when the target is not one ipmitool can use.
    pub fn new(target: IpmiTarget, options: IpmiOptions) -> Result<Ipmi, TargetError> {
        target.check()?;
        Ok(Ipmi {
            name: target.name(),
            turn: tool::turn_of(&target.host, target.port),
            target,
            options,
        })
    }

    pub fn target(&self) -> &IpmiTarget {
        &self.target
    }

    /// One ipmitool call in the BMC's turn, recorded in `log`: the output on success, or the
    /// failure as a `PowerError`. A refusal of suite 17 when no suite is configured is logged,
    /// recorded, and the call made again with suite 3, which the BMC's turn then remembers.
    async fn call(&self, action: Action, log: &mut Log) -> Result<String, PowerError> {
        let secret = self.target.password.expose();
        let mut turn = self.turn.lock().await;
        loop {
            let (suite, fallback) = match (self.target.cipher_suite, turn.fallback) {
                (Some(suite), _) => (suite, false),
                (None, Some(suite)) => (suite, true),
                (None, None) => (IpmiTarget::DEFAULT_CIPHER_SUITE, false),
            };
            if let Some(end) = turn.last_end {
                tokio::time::sleep_until(end + self.options.gap).await;
            }
            let tool = Tool {
                program: &self.options.ipmitool,
                retries: self.options.retries,
                timeout: self.options.call_timeout,
            };
            let at = log.started.elapsed();
            let ran = tool::run(tool, &self.target, suite, action).await;
            turn.last_end = Some(Instant::now());
            let value = format!(
                "chassis power {} (cipher suite {suite}{})",
                action.as_str(),
                if fallback { ", a fallback" } else { "" }
            );
            if action != Action::Status {
                log.audit.attempts += 1;
            }
            match self.judge(ran, action, suite) {
                Ok(stdout) => {
                    log.sent(at, value, words::detail(&stdout, secret));
                    return Ok(stdout);
                }
                Err(Judged::SuiteRefused(why))
                    if self.target.cipher_suite.is_none()
                        && suite == IpmiTarget::DEFAULT_CIPHER_SUITE =>
                {
                    let fallback = IpmiTarget::FALLBACK_CIPHER_SUITE;
                    warn!(bmc = %self.name, error = %why, fallback, "the BMC refused cipher suite 17: falling back");
                    log.sent(
                        at,
                        value,
                        format!("refused ({why}): falling back to cipher suite {fallback}"),
                    );
                    turn.fallback = Some(fallback);
                }
                Err(judged) => {
                    let error = judged.into_error(&self.name, suite);
                    log.sent(at, value, error.to_string());
                    return Err(error);
                }
            }
        }
    }

    /// What a call's end means: its stdout, or why it failed, in ipmitool's own words.
    fn judge(&self, ran: Ran, action: Action, suite: u8) -> Result<String, Judged> {
        let secret = self.target.password.expose();
        // The reason is read in all of ipmitool's output; the detail is its readable part.
        let error = |output: String| match words::refusal(&output) {
            Refusal::Credentials => Judged::Power(PowerError::Auth {
                bmc: self.name.clone(),
                detail: words::detail(&output, secret),
            }),
            Refusal::CipherSuite => Judged::SuiteRefused(words::detail(&output, secret)),
            Refusal::NoAnswer => Judged::Power(PowerError::Unreachable {
                bmc: self.name.clone(),
                detail: words::detail(&output, secret),
            }),
            Refusal::Other => Judged::Power(PowerError::Protocol {
                bmc: self.name.clone(),
                detail: format!(
                    "ipmitool chassis power {}: {}",
                    action.as_str(),
                    words::detail(&output, secret)
                ),
            }),
        };
        match ran {
            Ran::Exited {
                success: true,
                stdout,
                ..
            } => Ok(stdout),
            Ran::Exited { stdout, stderr, .. } => Err(error(format!("{stderr}\n{stdout}"))),
            Ran::TimedOut => Err(Judged::Power(PowerError::Unreachable {
                bmc: self.name.clone(),
                detail: format!(
                    "no answer to chassis power {} within {} with cipher suite {suite}; ipmitool \
                     was killed",
                    action.as_str(),
                    humantime::format_duration(self.options.call_timeout)
                ),
            })),
            Ran::NotInstalled => Err(Judged::Power(PowerError::Protocol {
                bmc: self.name.clone(),
                detail: format!(
                    "ipmitool is not installed ({} was not found): install it (Debian and \
                     Ubuntu: apt-get install ipmitool; Fedora and RHEL: dnf install ipmitool)",
                    self.options.ipmitool.display()
                ),
            })),
            Ran::Failed(detail) => Err(Judged::Power(PowerError::Protocol {
                bmc: self.name.clone(),
                detail,
            })),
        }
    }

    /// `chassis power status`, read.
    async fn read(&self, log: &mut Log) -> Result<PowerState, PowerError> {
        let stdout = self.call(Action::Status, log).await?;
        words::power_state(&stdout).ok_or_else(|| PowerError::Protocol {
            bmc: self.name.clone(),
            detail: format!(
                "chassis power status answered {:?}, which is neither on nor off",
                words::detail(&stdout, self.target.password.expose())
            ),
        })
    }

    /// The first reading of an action. A BMC that does not answer is asked again, with the
    /// waits of a poll, until `until`: unreachable for a while is no failure of the action before
    /// its timeout, and the last failure is returned after it.
    async fn first_read(&self, until: Instant, log: &mut Log) -> Result<PowerState, PowerError> {
        let mut wait = self.options.gap;
        loop {
            match self.read(log).await {
                Err(PowerError::Unreachable { .. }) if Instant::now() < until => {}
                reading => return reading,
            }
            tokio::time::sleep_until(self.next_reading(wait, until)).await;
            wait = wait.mul_f64(POLL_GROWTH).min(POLL_MAX);
        }
    }

    /// Reads the state until it holds `intent` or `until` has passed, waiting from the gap up to
    /// `POLL_MAX` between readings, jittered; at least one reading, and one at `until`. A BMC
    /// that does not answer is read again (it may be busy with the command); any other failure
    /// ends the wait.
    async fn poll(
        &self,
        intent: Intent,
        until: Instant,
        log: &mut Log,
    ) -> Result<Polled, PowerError> {
        let mut wait = self.options.gap;
        loop {
            tokio::time::sleep_until(self.next_reading(wait, until)).await;
            let last = match self.read(log).await {
                Ok(state) if state.holds(intent) => return Ok(Polled::Held(state)),
                Ok(_) => None,
                Err(e @ PowerError::Unreachable { .. }) => Some(e),
                Err(e) => return Err(e),
            };
            if Instant::now() >= until {
                return Ok(Polled::NotHeld(last));
            }
            wait = wait.mul_f64(POLL_GROWTH).min(POLL_MAX);
        }
    }

    /// When to read next: `wait` from now, jittered, never sooner than the gap nor later than
    /// `until`.
    fn next_reading(&self, wait: Duration, until: Instant) -> Instant {
        let jittered = wait.mul_f64(rand::rng().random_range((1.0 - JITTER)..=(1.0 + JITTER)));
        (Instant::now() + jittered.max(self.options.gap)).min(until)
    }

    /// An off: soft, and hard once `SOFT_SHARE` of the timeout has passed without the machine
    /// off. A BMC that refuses the soft off (some have no ACPI path) is sent the hard one at
    /// once; either way the audit records the escalation.
    async fn off(&self, timeout: Duration, log: &mut Log) -> Result<PowerState, PowerError> {
        let soft_until = log.started + timeout.mul_f64(SOFT_SHARE);
        let soft = match self.call(Action::Soft, log).await {
            Ok(_) => self.poll(Intent::Off, soft_until, log).await?,
            Err(PowerError::Protocol { detail, .. }) => {
                warn!(bmc = %self.name, error = %detail, "the BMC refused the soft off: sending the hard one now");
                Polled::NotHeld(None)
            }
            Err(e) => return Err(e),
        };
        if let Polled::Held(state) = soft {
            return Ok(state);
        }
        warn!(bmc = %self.name, waited = ?log.started.elapsed(), "the soft off did not land: sending the hard one");
        log.audit.escalated = true;
        self.call(Action::Off, log).await?;
        self.reached(Intent::Off, log.started + timeout, timeout, log)
            .await
    }

    /// Polls until `until`; the state that holds `intent`, or why none did.
    async fn reached(
        &self,
        intent: Intent,
        until: Instant,
        timeout: Duration,
        log: &mut Log,
    ) -> Result<PowerState, PowerError> {
        match self.poll(intent, until, log).await? {
            Polled::Held(state) => Ok(state),
            Polled::NotHeld(Some(unreachable)) => Err(unreachable),
            Polled::NotHeld(None) => Err(PowerError::NotReached {
                bmc: self.name.clone(),
                intent,
                waited: timeout,
            }),
        }
    }
}

impl Bmc for Ipmi {
    /// Reads first (a BMC that does not answer is asked again until the timeout), sends, polls
    /// until the state holds (the trait's contract). An action ends at most one call
    /// (`call_timeout` and the gap) after its own timeout: the last reading is made at the
    /// timeout and is allowed to finish. `state` asks once.
    async fn power(&self, intent: Intent, timeout: Duration) -> Result<Audit, PowerError> {
        let mut log = Log::new();
        let until = log.started + timeout;
        let state = match self.first_read(until, &mut log).await? {
            state if state.holds(intent) => state,
            _ => match intent {
                Intent::On => {
                    self.call(Action::On, &mut log).await?;
                    self.reached(intent, until, timeout, &mut log).await?
                }
                Intent::Off => self.off(timeout, &mut log).await?,
            },
        };
        log.audit.verified = Some(state);
        log.audit.duration = log.started.elapsed();
        debug!(bmc = %self.name, intent = ?intent, attempts = log.audit.attempts, escalated = log.audit.escalated, "ipmi power done");
        Ok(log.audit)
    }

    async fn state(&self) -> Result<PowerState, PowerError> {
        self.read(&mut Log::new()).await
    }
}

/// A call's failure, before it becomes a `PowerError`: a refused suite may still be retried.
#[derive(Debug)]
enum Judged {
    SuiteRefused(String),
    Power(PowerError),
}

impl Judged {
    fn into_error(self, bmc: &str, suite: u8) -> PowerError {
        match self {
            Judged::Power(e) => e,
            Judged::SuiteRefused(why) => PowerError::Protocol {
                bmc: bmc.to_owned(),
                detail: format!(
                    "the BMC refused cipher suite {suite} ({why}): {}",
                    if suite == IpmiTarget::DEFAULT_CIPHER_SUITE {
                        "an older BMC may offer suite 3 only; configure cipher_suite: 3 for it, \
                         or leave cipher_suite out to fall back to 3 with a warning"
                    } else {
                        "list the suites it offers with `ipmitool channel getciphers ipmi`"
                    }
                ),
            },
        }
    }
}

/// Where the readings of a wait ended.
#[derive(Debug)]
enum Polled {
    Held(PowerState),
    /// Not held at the end; the last reading's failure when the BMC did not answer it.
    NotHeld(Option<PowerError>),
}

/// The audit of one action as it is made, and the instant it started.
struct Log {
    audit: Audit,
    started: Instant,
}

impl Log {
    fn new() -> Log {
        Log {
            audit: Audit {
                driver: "ipmi".to_owned(),
                ..Audit::default()
            },
            started: Instant::now(),
        }
    }

    /// A call made `at` after the action started, and its answer.
    fn sent(&mut self, at: Duration, value: String, answer: String) {
        let at_ms = u64::try_from(at.as_millis()).unwrap_or(u64::MAX);
        self.audit.sent.push(Sent {
            value,
            answer,
            at_ms,
        });
    }
}
