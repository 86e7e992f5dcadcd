//! What a driver is asked and what it answers, whatever its protocol (SPEC §4.10): the intent,
//! the machine's power as a BMC reads it, the audit record of what was sent, the error, and the
//! password it sends, which never shows. Each driver and the dispatch (`drive`) speak these.

use std::future::Future;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The share of an off's time given to the soft off before the hard one (escalate soft
/// to hard when the soft off has not landed), so the hard off still lands within the operation's
/// timeout.
pub const SOFT_SHARE: f64 = 2.0 / 3.0;

/// A baseboard management controller fleet drives (Redfish, IPMI): one request at a time, the
/// state read before acting and polled until it holds.
pub trait Bmc: Send + Sync {
    /// Brings the machine to `intent` within `timeout`: reads the state first (already there is
    /// done, with nothing sent), sends the request, polls with jittered backoff until a reading
    /// holds the intent. An off is soft first and hard after `SOFT_SHARE` of the timeout, recorded
    /// as escalated. Credentials refused are never retried.
    fn power(
        &self,
        intent: Intent,
        timeout: Duration,
    ) -> impl Future<Output = Result<Audit, PowerError>> + Send;

    /// The machine's power as the BMC reports it now (a second observation, never the record).
    fn state(&self) -> impl Future<Output = Result<PowerState, PowerError>> + Send;
}

/// What an operation asks of the machine's power.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Intent {
    On,
    Off,
}

/// The machine's power as a BMC reports it. Transitional and unknown readings never count as
/// either state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PowerState {
    On,
    Off,
    /// PoweringOn, PoweringOff, null, Unknown, or no answer.
    Unknown,
}

impl PowerState {
    pub fn as_str(self) -> &'static str {
        match self {
            PowerState::On => "on",
            PowerState::Off => "off",
            PowerState::Unknown => "unknown",
        }
    }

    /// Whether this reading shows the intent done.
    pub fn holds(self, intent: Intent) -> bool {
        matches!(
            (self, intent),
            (PowerState::On, Intent::On) | (PowerState::Off, Intent::Off)
        )
    }
}

/// A password or token: never shown by `Debug` or `Display`, never serialized.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The value, for the one call that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<secret>")
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<secret>")
    }
}

/// One request a driver sent and what came back, for the audit record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sent {
    /// What was sent, in the protocol's words (`ResetType=GracefulShutdown`, `chassis power
    /// soft`, `magic packet to 192.168.1.255:9`). Never a secret.
    pub value: String,
    /// The answer, in the protocol's words (`204`, `409 already on`, `Chassis Power Control:
    /// Up/On`).
    pub answer: String,
    pub at_ms: u64,
}

/// The audit record of one power action: what the driver sent, what it verified,
/// whether it escalated from soft to hard, and how long it took. It goes into the operation's
/// tail, so the claim's timeline shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Audit {
    pub driver: String,
    pub sent: Vec<Sent>,
    /// The state read back that confirmed the intent; `None` when none did (Wake-on-LAN has no
    /// reading: its success is the heartbeat arriving).
    pub verified: Option<PowerState>,
    /// The soft off did not land within its time and a hard off was sent.
    pub escalated: bool,
    pub attempts: u32,
    pub duration: Duration,
}

impl Audit {
    /// One line per request and one for the result, for the operation's tail.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for s in &self.sent {
            out.push_str(&format!(
                "{} +{}ms: {} -> {}\n",
                self.driver, s.at_ms, s.value, s.answer
            ));
        }
        out.push_str(&format!(
            "{}: {} attempt(s) in {} ms, verified {}, {}\n",
            self.driver,
            self.attempts,
            self.duration.as_millis(),
            self.verified.map_or("nothing", PowerState::as_str),
            if self.escalated {
                "escalated soft to hard"
            } else {
                "no escalation"
            }
        ));
        out
    }
}

/// Why a power action failed. Every message names the BMC and says what to do; none carries a
/// secret.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PowerError {
    /// Credentials refused (401/403, or IPMI's session refusal): never retried.
    #[error(
        "{bmc}: the credentials were refused ({detail}); check the username and the password file"
    )]
    Auth { bmc: String, detail: String },
    /// The BMC could not be reached or did not answer in time.
    #[error("{bmc}: unreachable ({detail}); check its address, port and network")]
    Unreachable { bmc: String, detail: String },
    /// The BMC answered, but not as the protocol says it should.
    #[error("{bmc}: {detail}")]
    Protocol { bmc: String, detail: String },
    /// The intent was sent, and the state never showed it within the operation's time.
    #[error("{bmc}: power {intent:?} was sent, and the machine did not reach it in {waited:?}")]
    NotReached {
        bmc: String,
        intent: Intent,
        waited: Duration,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_never_shows() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s:?} {s}"), "<secret> <secret>");
        assert_eq!(s.expose(), "hunter2");
    }

    #[test]
    fn only_a_settled_reading_holds_an_intent() {
        for (state, intent, holds) in [
            (PowerState::On, Intent::On, true),
            (PowerState::Off, Intent::Off, true),
            (PowerState::On, Intent::Off, false),
            (PowerState::Off, Intent::On, false),
            (PowerState::Unknown, Intent::On, false),
            (PowerState::Unknown, Intent::Off, false),
        ] {
            assert_eq!(state.holds(intent), holds, "{state:?} {intent:?}");
        }
    }
}
