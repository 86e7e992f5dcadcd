//! The Redfish driver: `ComputerSystem.Reset` to power a machine on and off, and its
//! `PowerState` as the BMC's reading.
//!
//! An action reads before it acts and believes only a reading: a machine already in the target
//! state gets nothing sent; a 2xx means accepted, and the state is polled with jittered backoff
//! until `On` or `Off` holds (`PoweringOn`, `PoweringOff`, null and `Unknown` never count). A 400
//! or 409 is "already there" when a fresh read confirms it; a 409 on `On` (BMCs refuse On for up
//! to a minute after an off) is sent again for at most [`ON_CONFLICT_WINDOW`]. An off is
//! `GracefulShutdown` (or `PushPowerButton`) until `SOFT_SHARE` of the timeout, then `ForceOff`,
//! recorded as escalated; a soft value the BMC refuses outright escalates at once. The
//! `ResetType` is one the system lists in `ResetType@Redfish.AllowableValues`, never another.
//!
//! Authentication is HTTP basic on every request: fleet opens no Redfish session, so none can be
//! left behind on the BMC, whatever the exit path. 401 and 403 are never retried. An unreachable
//! BMC is retried within the action's time; `state` asks once. Every request is bounded by
//! [`REQUEST_BOUND`] and the action's deadline, and every one is in the audit; no password is
//! in any audit, error or log line.
//!
//! - `config`: its fields in the file and their checks, and `RedfishDriver` (pure).
//! - `target`: the configured BMC and its validation (pure).
//! - `wire`: what is read and sent, the `ResetType` choice, the backoff (pure).
//! - `http`: one exchange at a time over a fresh connection, TLS by rustls.
//! - `trust`: how the BMC's certificate is trusted: the CA file and its pins, the fingerprint,
//!   the system's roots, or any (`insecure`).

pub mod config;
mod http;
mod target;
mod trust;
mod wire;

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use hyper::Method;
use tokio::time::Instant;

use crate::power::action::{Audit, Bmc, Intent, PowerError, PowerState, SOFT_SHARE, Secret, Sent};
use crate::power::redfish::http::{Failure, Reply, Transport};
use crate::power::redfish::wire::{Answer, Move, System};

pub use crate::power::redfish::target::{RedfishTarget, TargetError};

/// The longest one request may take: BMCs answer in tens of seconds when busy.
pub const REQUEST_BOUND: Duration = Duration::from_secs(20);

/// The time kept for a read before an action's deadline, so the reading that would confirm the
/// state is not cut short by the deadline itself.
pub const READ_RESERVE: Duration = Duration::from_secs(1);

/// How long a 409 to `On` is sent again: some BMCs refuse On for up to a minute after an off.
pub const ON_CONFLICT_WINDOW: Duration = Duration::from_secs(60);

/// A Redfish BMC, driven one request at a time.
pub struct Redfish {
    /// The endpoint, naming the BMC in errors and logs.
    name: String,
    transport: Transport,
    /// The configured system, or the one discovered on first use.
    system: Mutex<Option<String>>,
    password: Secret,
}

impl std::fmt::Debug for Redfish {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redfish")
            .field("endpoint", &self.name)
            .finish()
    }
}

impl Redfish {
    /// The driver for a target: checks it and reads its CA file. `insecure` is said at WARN once
    /// per endpoint and process.
    pub fn new(target: RedfishTarget) -> Result<Redfish, TargetError> {
        let (endpoint, system) = target.parse()?;
        let name = endpoint.name.clone();
        let transport = Transport::new(&target, endpoint)?;
        if target.insecure {
            warn_insecure_once(&name);
        }
        Ok(Redfish {
            name,
            transport,
            system: Mutex::new(system),
            password: target.password,
        })
    }

    /// The endpoint, as errors and the audit name the BMC.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn known_system(&self) -> Option<String> {
        self.system.lock().map_or(None, |s| s.clone())
    }

    fn remember_system(&self, path: &str) {
        if let Ok(mut system) = self.system.lock() {
            *system = Some(path.to_string());
        }
    }

    /// Text from the BMC, fit for an error or the audit: one short line, and the password cut
    /// out should a BMC echo it.
    fn scrub(&self, text: &str) -> String {
        self.redact(wire::one_line(text, 200))
    }

    fn redact(&self, text: String) -> String {
        let secret = self.password.expose();
        if secret.is_empty() {
            text
        } else {
            text.replace(secret, "<secret>")
        }
    }

    fn protocol(&self, detail: String) -> PowerError {
        PowerError::Protocol {
            bmc: self.name.clone(),
            detail: self.redact(detail),
        }
    }

    fn auth(&self, what: &str, status: u16) -> PowerError {
        PowerError::Auth {
            bmc: self.name.clone(),
            detail: format!("{what} answered {status}"),
        }
    }
}

impl Bmc for Redfish {
    async fn power(&self, intent: Intent, timeout: Duration) -> Result<Audit, PowerError> {
        let mut run = Run::new(self, timeout);
        let result = run.act(intent).await;
        run.audit.duration = run.start.elapsed();
        match result {
            Ok(()) => Ok(run.audit),
            Err(error) => {
                // The caller reports the error; what was sent before it is only here.
                tracing::info!(
                    bmc = %self.name,
                    audit = %run.audit.render(),
                    error = %error,
                    "redfish power action failed"
                );
                Err(error)
            }
        }
    }

    async fn state(&self) -> Result<PowerState, PowerError> {
        let mut run = Run::new(self, REQUEST_BOUND);
        match run.read().await? {
            Some(system) => Ok(system.state),
            None => Err(run.no_reading()),
        }
    }
}

/// Whether a move landed.
enum Outcome {
    Landed,
    /// Its time ran out with the state not there.
    NotLanded,
    /// The BMC will not do it.
    Refused(PowerError),
}

/// One action or reading: its deadline, its audit and what it has seen.
struct Run<'a> {
    bmc: &'a Redfish,
    start: Instant,
    deadline: Instant,
    audit: Audit,
    /// The latest reading of the system.
    last: Option<System>,
    /// Why the latest request got no usable answer, for the error when no reading came at all.
    miss: Option<Failure>,
}

impl<'a> Run<'a> {
    fn new(bmc: &'a Redfish, timeout: Duration) -> Run<'a> {
        let start = Instant::now();
        Run {
            bmc,
            start,
            deadline: start + timeout,
            audit: Audit {
                driver: "redfish".to_string(),
                ..Audit::default()
            },
            last: None,
            miss: None,
        }
    }

    /// Reads first, then the move or moves of the intent (SPEC §4.10).
    async fn act(&mut self, intent: Intent) -> Result<(), PowerError> {
        let mut poll = 0;
        let first = loop {
            if let Some(system) = self.read().await? {
                break system;
            }
            if !self.pause(poll, self.deadline).await {
                return Err(self.no_reading());
            }
            poll += 1;
        };
        if first.state.holds(intent) {
            self.audit.verified = Some(first.state);
            return Ok(());
        }
        let outcome = match intent {
            Intent::On => self.step(Move::On, intent, self.deadline).await?,
            Intent::Off => {
                let soft_until = self.start + (self.deadline - self.start).mul_f64(SOFT_SHARE);
                match self.step(Move::SoftOff, intent, soft_until).await? {
                    Outcome::Landed => Outcome::Landed,
                    Outcome::NotLanded => {
                        self.audit.escalated = true;
                        self.step(Move::HardOff, intent, self.deadline).await?
                    }
                    Outcome::Refused(soft) => {
                        self.audit.escalated = true;
                        match self.step(Move::HardOff, intent, self.deadline).await? {
                            Outcome::Refused(hard) => {
                                Outcome::Refused(self.protocol_after(hard, &soft))
                            }
                            landed_or_not => landed_or_not,
                        }
                    }
                }
            }
        };
        match outcome {
            Outcome::Landed => Ok(()),
            Outcome::Refused(error) => Err(error),
            Outcome::NotLanded if self.audit.attempts == 0 => Err(self.no_reading()),
            Outcome::NotLanded => Err(PowerError::NotReached {
                bmc: self.bmc.name.clone(),
                intent,
                waited: self.start.elapsed(),
            }),
        }
    }

    /// One move until `until`: sends its `ResetType` once a reading allows it (again after an
    /// unreachable send, or a 409 to `On` within its window), then reads with backoff until the
    /// intent holds. The latest reading is in `self.last`.
    async fn step(
        &mut self,
        mv: Move,
        intent: Intent,
        until: Instant,
    ) -> Result<Outcome, PowerError> {
        let Some(last) = self.last.clone() else {
            return Ok(Outcome::NotLanded);
        };
        let Some(reset) = wire::choose_reset(mv, last.allowable.as_deref()) else {
            return Ok(Outcome::Refused(self.bmc.protocol(format!(
                "the system lists no ResetType for a {} (it lists {}); fleet sends none it \
                 does not list",
                mv.as_str(),
                last.allowable.unwrap_or_default().join(", ")
            ))));
        };
        let target = last.target.clone().unwrap_or_else(|| {
            format!(
                "{}/Actions/ComputerSystem.Reset",
                self.bmc.known_system().unwrap_or_default()
            )
        });
        let mut accepted = false;
        let mut first_conflict: Option<Instant> = None;
        let mut poll = 0;
        loop {
            let state = self.last.as_ref().map_or(PowerState::Unknown, |s| s.state);
            if state.holds(intent) {
                self.audit.verified = Some(state);
                return Ok(Outcome::Landed);
            }
            if !accepted && wire::safe_from(reset, state) && Instant::now() < until {
                match self.reset(&target, reset).await? {
                    None => {}
                    Some((status, message)) => match wire::answer(status) {
                        Answer::Accepted => accepted = true,
                        Answer::Auth => {
                            return Err(self.bmc.auth(&format!("ResetType={reset}"), status));
                        }
                        Answer::Conflict => {
                            // "Already in that state" counts only once a fresh read shows it.
                            if let Some(system) = self.read().await?
                                && system.state.holds(intent)
                            {
                                continue;
                            }
                            let since = *first_conflict.get_or_insert_with(Instant::now);
                            let retry = mv == Move::On && status == 409;
                            if !(retry && since.elapsed() < ON_CONFLICT_WINDOW) {
                                return Ok(Outcome::Refused(self.refused(reset, status, &message)));
                            }
                        }
                        Answer::Refused => {
                            return Ok(Outcome::Refused(self.refused(reset, status, &message)));
                        }
                    },
                }
            }
            if !self.pause(poll, until).await {
                return Ok(Outcome::NotLanded);
            }
            poll += 1;
            self.read().await?;
        }
    }

    /// Sleeps the backoff of `poll`, cut short at `until`; false when no read should follow.
    /// One pause ends [`READ_RESERVE`] before the deadline, so a read still has the time to be
    /// answered there; the pauses after it (an unreachable BMC) go on to the deadline itself, so
    /// an action does not give up before its time.
    async fn pause(&self, poll: u32, until: Instant) -> bool {
        let now = Instant::now();
        let until = until.min(self.deadline);
        let reserve = self
            .deadline
            .checked_sub(READ_RESERVE)
            .unwrap_or(self.start);
        let end = if now < reserve.min(until) {
            reserve.min(until)
        } else {
            until
        };
        if now >= end {
            return false;
        }
        let pause = wire::backoff(poll, rand::random::<f64>()).min(end - now);
        tokio::time::sleep(pause).await;
        // A read begun at the deadline could not be answered: the time is up.
        Instant::now() < self.deadline
    }

    /// Reads the system once (discovering it first when none is configured). `None` when the
    /// BMC did not answer or answered 5xx (retried by the caller within its time); an error when
    /// it refused the credentials or answered what fleet cannot use.
    async fn read(&mut self) -> Result<Option<System>, PowerError> {
        let path = match self.bmc.known_system() {
            Some(path) => path,
            None => match self.discover().await? {
                Some(path) => path,
                None => return Ok(None),
            },
        };
        let Some(reply) = self.get(&path).await? else {
            return Ok(None);
        };
        match wire::system(&reply.body) {
            Ok(system) => {
                self.note_answer(format!("200 PowerState={}", system.shown));
                self.last = Some(system.clone());
                Ok(Some(system))
            }
            Err(why) => {
                self.note_answer("200 unreadable".to_string());
                Err(self.bmc.protocol(format!("GET {path}: {why}")))
            }
        }
    }

    /// The single member of the Systems collection, remembered for the next calls.
    async fn discover(&mut self) -> Result<Option<String>, PowerError> {
        let Some(reply) = self.get(wire::SYSTEMS).await? else {
            return Ok(None);
        };
        match wire::single_member(&reply.body) {
            Ok(path) => {
                self.note_answer(format!("200 {path}"));
                self.bmc.remember_system(&path);
                Ok(Some(path))
            }
            Err(why) => {
                self.note_answer("200 unusable".to_string());
                Err(self.bmc.protocol(why))
            }
        }
    }

    /// A GET that answered 200; `None` for a miss worth retrying (no answer, or 5xx). The
    /// caller notes the 200's answer in the audit.
    async fn get(&mut self, path: &str) -> Result<Option<Reply>, PowerError> {
        self.note(format!("GET {path}"));
        let reply = match self.exchange(Method::GET, path, None).await? {
            Some(reply) => reply,
            None => return Ok(None),
        };
        let status = reply.status;
        match status {
            200 => Ok(Some(reply)),
            401 | 403 => {
                self.note_answer(status.to_string());
                Err(self.bmc.auth(&format!("GET {path}"), status))
            }
            500..=599 => {
                let detail = self.answer_text(&reply);
                self.note_answer(detail.clone());
                self.miss = Some(Failure::Protocol(format!("GET {path} answered {detail}")));
                Ok(None)
            }
            _ => {
                let detail = self.answer_text(&reply);
                self.note_answer(detail.clone());
                let hint = match reply.location {
                    Some(location) if (300..400).contains(&status) => {
                        format!("; set system to {}", wire::one_line(&location, 200))
                    }
                    _ if status == 404 => "; check system".to_string(),
                    _ => String::new(),
                };
                Err(self
                    .bmc
                    .protocol(format!("GET {path} answered {detail}{hint}")))
            }
        }
    }

    /// Sends a `ResetType`: `None` when it got no answer (it may or may not have arrived: the
    /// next reading decides), else its status and the BMC's message.
    async fn reset(
        &mut self,
        target: &str,
        reset: &str,
    ) -> Result<Option<(u16, String)>, PowerError> {
        self.audit.attempts += 1;
        self.note(format!("ResetType={reset}"));
        let body = serde_json::json!({ "ResetType": reset }).to_string();
        let Some(reply) = self.exchange(Method::POST, target, Some(body)).await? else {
            return Ok(None);
        };
        let text = self.answer_text(&reply);
        self.note_answer(text.clone());
        Ok(Some((reply.status, text)))
    }

    /// One exchange bounded by [`REQUEST_BOUND`] and the deadline; `None` when unreachable
    /// (noted), an error when the answer cannot be used.
    async fn exchange(
        &mut self,
        method: Method,
        path: &str,
        json: Option<String>,
    ) -> Result<Option<Reply>, PowerError> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        let bound = REQUEST_BOUND.min(left.max(Duration::from_millis(1)));
        match self.bmc.transport.exchange(method, path, json, bound).await {
            Ok(reply) => Ok(Some(reply)),
            Err(Failure::Unreachable(why)) => {
                let why = self.bmc.scrub(&why);
                self.note_answer(format!("unreachable ({why})"));
                self.miss = Some(Failure::Unreachable(why));
                Ok(None)
            }
            Err(Failure::Protocol(why)) => {
                self.note_answer(format!("unusable ({why})"));
                Err(self.bmc.protocol(why))
            }
        }
    }

    /// `409 Conflict: <the BMC's message>`, for the audit and errors.
    fn answer_text(&self, reply: &Reply) -> String {
        let reason = hyper::StatusCode::from_u16(reply.status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("");
        match wire::message(&reply.body) {
            Some(message) => format!("{} {reason}: {}", reply.status, self.bmc.scrub(&message)),
            None if reason.is_empty() => reply.status.to_string(),
            None => format!("{} {reason}", reply.status),
        }
    }

    fn refused(&self, reset: &str, status: u16, answer: &str) -> PowerError {
        let hint = match status {
            400 | 409 => "; the state read after it did not show it done",
            _ => "",
        };
        self.bmc
            .protocol(format!("ResetType={reset} was refused: {answer}{hint}"))
    }

    /// The hard off's refusal, saying the soft one was refused before it.
    fn protocol_after(&self, hard: PowerError, soft: &PowerError) -> PowerError {
        match (hard, soft) {
            (PowerError::Protocol { bmc, detail }, PowerError::Protocol { detail: soft, .. }) => {
                PowerError::Protocol {
                    bmc,
                    detail: format!("{detail} (after the soft off: {soft})"),
                }
            }
            (hard, _) => hard,
        }
    }

    /// The error when no reading came within the time: unreachable, or the BMC's 5xx.
    fn no_reading(&self) -> PowerError {
        let waited = format!("{:.1}s", self.start.elapsed().as_secs_f64());
        match &self.miss {
            Some(Failure::Protocol(why)) => self.bmc.protocol(format!("{why}, for {waited}")),
            Some(Failure::Unreachable(why)) => PowerError::Unreachable {
                bmc: self.bmc.name.clone(),
                detail: format!("{why}, for {waited}"),
            },
            None => PowerError::Unreachable {
                bmc: self.bmc.name.clone(),
                detail: format!("no request could be made in {waited}"),
            },
        }
    }

    fn note(&mut self, value: String) {
        let at_ms = self.start.elapsed().as_millis() as u64;
        self.audit.sent.push(Sent {
            value,
            answer: String::new(),
            at_ms,
        });
    }

    fn note_answer(&mut self, answer: String) {
        if let Some(last) = self.audit.sent.last_mut() {
            last.answer = answer;
        }
    }
}

/// `insecure: true` is said at WARN once per endpoint and process: it is a choice, not news.
fn warn_insecure_once(name: &str) {
    static WARNED: OnceLock<Mutex<std::collections::HashSet<String>>> = OnceLock::new();
    let warned = WARNED.get_or_init(Default::default);
    let first = warned
        .lock()
        .map(|mut w| w.insert(name.to_string()))
        .unwrap_or(true);
    if first {
        tracing::warn!(
            bmc = %name,
            "redfish insecure: the BMC's certificate is not verified (or the endpoint is plain http)"
        );
    }
}
