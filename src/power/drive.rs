//! Running a slot's driver for one operation (SPEC §4.10): what the operation wrapper (`fleet
//! operation`) does instead of running a command when the request carries a driver.
//!
//! The configuration's driver becomes the protocol's target, with its password read now (from
//! the file or the variable the configuration names); then the action for the operation's
//! intent runs within the operation's timeout, and its end becomes an outcome and the tail the
//! claim's timeline shows (the audit record, or the error's words):
//!
//! | the action | outcome |
//! |---|---|
//! | Redfish or IPMI: the intent verified by a reading | Completed |
//! | Wake-on-LAN: every packet sent (its success is the heartbeat, which the readiness gate waits for) | Completed |
//! | the agent's off: the agent accepted the request's nonce | Completed |
//! | the intent sent, and not reached within the timeout; no answer from the agent | TimedOut |
//! | anything else (credentials refused, a BMC unreachable, a password missing, a refusal) | Failed |
//!
//! The agent's off goes through the store, which this layer does not reach (SPEC §1): it is a
//! port, [`AgentOff`], that the wrapper implements over Redis. No secret is ever in a tail, a
//! log or an error: a password is named by where it is, never by what it is.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::domain::claim::OperationOutcome;

use super::action::{Audit, Bmc, Intent, PowerError, PowerState, Secret, Sent};
use super::ipmi::config::IpmiDriver;
use super::ipmi::{Ipmi, IpmiOptions, IpmiTarget};
use super::redfish::config::RedfishDriver;
use super::redfish::{Redfish, RedfishTarget};
use super::{Driver, DriverKind, OffBy, SecretSource, wol};

/// How long past its timeout a driver's action may run before the wrapper stops waiting for it:
/// each driver bounds itself by the timeout, plus at most one bounded request in flight. Well
/// within the controller's report slack, which also covers the wrapper's report to the store.
pub const OVERRUN: Duration = Duration::from_secs(5);

/// Asks the bench's own agent to power its machine off (SPEC §4.10): a request with a fresh
/// nonce, and the agent's answer to that nonce. The wrapper implements it over the store.
pub trait AgentOff: Send + Sync {
    /// Who is asked, for the audit and errors (`agent of bench-01`).
    fn name(&self) -> String;

    /// Writes the request and waits for the agent's answer to it, at most `timeout`; past it,
    /// `PowerError::NotReached`.
    fn power_off(
        &self,
        timeout: Duration,
    ) -> impl Future<Output = Result<AgentAnswer, PowerError>> + Send;
}

/// The agent's answer to one power-off request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentAnswer {
    pub nonce: String,
    /// `None`: accepted, the agent runs its power-off command. `Some(why)`: refused.
    pub refused: Option<String>,
    /// From the request's write to the answer read.
    pub waited: Duration,
}

/// How a driver's action ended, for the operation's report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Driven {
    pub outcome: OperationOutcome,
    /// The audit record (`Audit::render`), or the error's words.
    pub tail: String,
    pub duration: Duration,
}

/// Runs `driver` for `intent` within `timeout`: the table of the module's documentation.
pub async fn drive(
    driver: &Driver,
    intent: Intent,
    timeout: Duration,
    agent: &impl AgentOff,
) -> Driven {
    let start = Instant::now();
    let by_agent = intent == Intent::Off && driver.off == OffBy::Agent;
    let result = tokio::time::timeout(timeout + OVERRUN, act(driver, intent, timeout, agent)).await;
    let (outcome, tail) = match result {
        Ok(Ok(audit)) => (OperationOutcome::Completed, audit.render()),
        // The agent was asked and said nothing: nothing is known of the machine (a lost
        // heartbeat is never "off" by itself), so the words say what to look at.
        Ok(Err(PowerError::NotReached { bmc, .. })) if by_agent => (
            OperationOutcome::TimedOut,
            format!(
                "{bmc}: the power-off request had no answer within {}; is the bench's fleet \
                 agent running, reaching Redis, with an ACL file written by this fleet's \
                 `fleet acl`?",
                humantime::format_duration(timeout)
            ),
        ),
        Ok(Err(error @ PowerError::NotReached { .. })) => {
            (OperationOutcome::TimedOut, error.to_string())
        }
        Ok(Err(error)) => (OperationOutcome::Failed, error.to_string()),
        Err(_) => (
            OperationOutcome::TimedOut,
            format!(
                "[{} driver: no outcome within {}]",
                driver.type_name(),
                humantime::format_duration(timeout)
            ),
        ),
    };
    Driven {
        outcome,
        tail: tail.trim_end().to_owned(),
        duration: start.elapsed(),
    }
}

/// The driver's action for the intent: the agent's off when the driver says so, else the
/// protocol's own.
async fn act(
    driver: &Driver,
    intent: Intent,
    timeout: Duration,
    agent: &impl AgentOff,
) -> Result<Audit, PowerError> {
    match (intent, driver.off, &driver.kind) {
        (Intent::Off, OffBy::Agent, _) => agent_off(agent, timeout).await,
        (Intent::On, _, DriverKind::Wol(w)) => wol::wake(&w.mac, w.broadcast).await,
        (Intent::Off, OffBy::Driver, DriverKind::Wol(w)) => Err(PowerError::Protocol {
            bmc: format!("wol {}", w.mac),
            detail: "Wake-on-LAN has no power-off: give the slot's driver off: agent".to_owned(),
        }),
        (_, _, DriverKind::Redfish(r)) => redfish(r)?.power(intent, timeout).await,
        (_, _, DriverKind::Ipmi(i)) => ipmi(i)?.power(intent, timeout).await,
    }
}

/// The agent's off, as an audit record: accepted is done (the heartbeat's end is what shows the
/// machine off; a lost heartbeat alone is never "off"), refused fails with the agent's reason.
async fn agent_off(agent: &impl AgentOff, timeout: Duration) -> Result<Audit, PowerError> {
    let answer = agent.power_off(timeout).await?;
    let at_ms = u64::try_from(answer.waited.as_millis()).unwrap_or(u64::MAX);
    if let Some(why) = answer.refused {
        return Err(PowerError::Protocol {
            bmc: agent.name(),
            detail: format!("refused power-off request {}: {why}", answer.nonce),
        });
    }
    Ok(Audit {
        driver: "agent".to_owned(),
        sent: vec![Sent {
            value: format!("power-off request {} to the {}", answer.nonce, agent.name()),
            answer: "accepted: it runs its power-off command; the heartbeat's end shows the \
                     machine off"
                .to_owned(),
            at_ms,
        }],
        verified: None,
        escalated: false,
        attempts: 1,
        duration: answer.waited,
    })
}

/// The Redfish driver of a slot, its password read now.
pub fn redfish(driver: &RedfishDriver) -> Result<Redfish, PowerError> {
    let refused = |detail: String| PowerError::Protocol {
        bmc: driver.endpoint.clone(),
        detail,
    };
    let password = secret(&driver.password).map_err(refused)?;
    Redfish::new(RedfishTarget {
        endpoint: driver.endpoint.clone(),
        system: driver.system.clone(),
        username: driver.username.clone(),
        password,
        ca_file: driver.ca_file.clone(),
        tls_fingerprint: driver.tls_fingerprint,
        insecure: driver.insecure,
    })
    .map_err(|e| refused(e.to_string()))
}

/// The IPMI driver of a slot, its password read now.
pub fn ipmi(driver: &IpmiDriver) -> Result<Ipmi, PowerError> {
    let target = ipmi_target(driver).map_err(|detail| PowerError::Protocol {
        bmc: format!("ipmi {}:{}", driver.host, driver.port),
        detail,
    })?;
    let name = target.name();
    Ipmi::new(target, IpmiOptions::default()).map_err(|e| PowerError::Protocol {
        bmc: name,
        detail: e.to_string(),
    })
}

fn ipmi_target(driver: &IpmiDriver) -> Result<IpmiTarget, String> {
    Ok(IpmiTarget {
        host: driver.host.clone(),
        port: driver.port,
        username: driver.username.clone(),
        password: secret(&driver.password)?,
        cipher_suite: driver.cipher_suite,
    })
}

/// The BMC a driver reads its power from, as one name for every slot it serves (a Redfish
/// endpoint, an IPMI host and port): the leader reads one BMC's slots one after the other.
/// `None` for a driver with no reading (Wake-on-LAN).
pub fn bmc_of(driver: &Driver) -> Option<String> {
    match &driver.kind {
        DriverKind::Wol(_) => None,
        DriverKind::Redfish(r) => Some(r.endpoint.clone()),
        DriverKind::Ipmi(i) => Some(format!("ipmi {}:{}", i.host, i.port)),
    }
}

/// The BMC's power reading of a slot's machine (Redfish, IPMI), for the controller's second
/// observation (`bmc: on|off|unknown` beside the heartbeat, SPEC §4.10, `reconcile::bmc`): `None`
/// for a driver with no reading (Wake-on-LAN). A BMC that cannot be read is the error, which its
/// reader shows as `Unknown` with the error's words, never off: it is not the machine being down.
/// Bounded by each driver's own request bound.
pub async fn read_state(driver: &Driver) -> Option<Result<PowerState, PowerError>> {
    let reading = match &driver.kind {
        DriverKind::Wol(_) => return None,
        DriverKind::Redfish(r) => match redfish(r) {
            Ok(bmc) => bmc.state().await,
            Err(e) => Err(e),
        },
        DriverKind::Ipmi(i) => match ipmi(i) {
            Ok(bmc) => bmc.state().await,
            Err(e) => Err(e),
        },
    };
    Some(reading)
}

/// A password from where the configuration says it is: a file's first line, or an environment
/// variable's value. The error names the place and what to do, never the content.
pub fn secret(source: &SecretSource) -> Result<Secret, String> {
    let text = match source {
        SecretSource::File(path) => {
            use fleet_redis::file::{self, ReadError};
            // Read to a bound (SPEC §7 S10), and refused past it: a password cut short at the
            // bound would be a wrong password, not an error that says why.
            let bytes = file::read(path, file::SECRET).map_err(|e| match e {
                ReadError::Io(e) => format!(
                    "{source}: cannot be read ({e}); give fleet serve a readable file whose \
                     first line is the password"
                ),
                too_large @ ReadError::TooLarge { .. } => format!("{source}: {too_large}"),
            })?;
            let text = String::from_utf8(bytes).map_err(|_| {
                format!("{source}: not UTF-8 text; write the BMC's password there as text")
            })?;
            text.lines().next().unwrap_or_default().to_owned()
        }
        SecretSource::Env(name) => super::secrets::get(name).map_err(|e| {
            let why = match e {
                std::env::VarError::NotPresent => "is not set",
                std::env::VarError::NotUnicode(_) => "is not UTF-8",
            };
            format!(
                "{source}: the variable {why} in fleet serve's environment; set it where fleet \
                 serve starts (a systemd EnvironmentFile, say)"
            )
        })?,
    };
    if text.is_empty() {
        return Err(format!(
            "{source}: the password is empty; put the BMC's password there"
        ));
    }
    Ok(Secret::new(text))
}

/// What a driver needs that the file cannot show (SPEC §4.10), asked at start and on every
/// reload for each slot's: its password is there (a readable file, a set variable, not empty),
/// and its target is one it takes (the driver's own checks, with the password, the CA file
/// read). The error names the BMC and says what to do; no content is shown.
pub fn check(driver: &Driver) -> Result<(), String> {
    match &driver.kind {
        DriverKind::Wol(_) => Ok(()),
        DriverKind::Redfish(r) => redfish(r).map(drop).map_err(|e| e.to_string()),
        DriverKind::Ipmi(i) => ipmi_target(i).and_then(|t| t.check().map_err(|e| e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::power::wol::config::{Mac, WolDriver};

    // SPEC §7 S10: a BMC's password file is read to the bound of a secret, and one past it is
    // refused naming it, never read whole nor cut short into a wrong password.
    #[test]
    fn a_password_file_past_its_bound_is_refused_naming_it() {
        let e = secret(&SecretSource::File("/dev/zero".into())).unwrap_err();
        assert_eq!(
            e,
            "password_file /dev/zero: /dev/zero holds more than 64 KiB, the most fleet reads of a \
             token or password file: give the file that holds the secret alone, on its first line"
        );
    }

    /// An agent port that answers as told, and counts the requests.
    struct Answering {
        refused: Option<String>,
        asked: Mutex<u32>,
        silent: bool,
    }

    impl AgentOff for Answering {
        fn name(&self) -> String {
            "agent of bench-01".to_owned()
        }

        async fn power_off(&self, timeout: Duration) -> Result<AgentAnswer, PowerError> {
            *self.asked.lock().unwrap() += 1;
            if self.silent {
                return Err(PowerError::NotReached {
                    bmc: self.name(),
                    intent: Intent::Off,
                    waited: timeout,
                });
            }
            Ok(AgentAnswer {
                nonce: "ab12".into(),
                refused: self.refused.clone(),
                waited: Duration::from_millis(1500),
            })
        }
    }

    fn agent(refused: Option<&str>, silent: bool) -> Answering {
        Answering {
            refused: refused.map(str::to_owned),
            asked: Mutex::new(0),
            silent,
        }
    }

    fn wol(off: OffBy, target: std::net::SocketAddr) -> Driver {
        Driver {
            kind: DriverKind::Wol(WolDriver {
                mac: "52:54:00:12:34:56".parse::<Mac>().unwrap(),
                broadcast: target,
            }),
            off,
        }
    }

    #[tokio::test]
    async fn an_off_by_the_agent_is_done_when_the_agent_accepts_and_failed_when_it_refuses() {
        let driver = wol(OffBy::Agent, "127.0.0.1:9".parse().unwrap());
        let yes = agent(None, false);
        let done = drive(&driver, Intent::Off, Duration::from_secs(5), &yes).await;
        assert_eq!(done.outcome, OperationOutcome::Completed);
        assert_eq!(
            done.tail,
            "agent +1500ms: power-off request ab12 to the agent of bench-01 -> accepted: it runs \
             its power-off command; the heartbeat's end shows the machine off\n\
             agent: 1 attempt(s) in 1500 ms, verified nothing, no escalation"
        );
        assert_eq!(*yes.asked.lock().unwrap(), 1);

        let no = agent(Some("started without --power-off-command"), false);
        let refused = drive(&driver, Intent::Off, Duration::from_secs(5), &no).await;
        assert_eq!(refused.outcome, OperationOutcome::Failed);
        assert_eq!(
            refused.tail,
            "agent of bench-01: refused power-off request ab12: started without \
             --power-off-command"
        );

        let silent = agent(None, true);
        let nothing = drive(&driver, Intent::Off, Duration::from_secs(5), &silent).await;
        assert_eq!(nothing.outcome, OperationOutcome::TimedOut);
        assert_eq!(
            nothing.tail,
            "agent of bench-01: the power-off request had no answer within 5s; is the bench's \
             fleet agent running, reaching Redis, with an ACL file written by this fleet's \
             `fleet acl`?"
        );
    }

    #[tokio::test]
    async fn wake_on_lan_powers_on_by_sending_and_never_asks_the_agent() {
        let listener = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let driver = wol(OffBy::Agent, listener.local_addr().unwrap());
        let port = agent(None, false);
        let on = drive(&driver, Intent::On, Duration::from_secs(5), &port).await;
        assert_eq!(on.outcome, OperationOutcome::Completed, "{}", on.tail);
        assert_eq!(
            on.tail.lines().count(),
            wol::PACKETS as usize + 1,
            "{}",
            on.tail
        );
        assert!(
            on.tail.ends_with("verified nothing, no escalation"),
            "{}",
            on.tail
        );
        assert_eq!(*port.asked.lock().unwrap(), 0);
        // Without off: agent (the configuration refuses it), an off fails saying what to do.
        let off = drive(
            &wol(OffBy::Driver, listener.local_addr().unwrap()),
            Intent::Off,
            Duration::from_secs(5),
            &port,
        )
        .await;
        assert_eq!(off.outcome, OperationOutcome::Failed);
        assert!(
            off.tail.contains("give the slot's driver off: agent"),
            "{}",
            off.tail
        );
    }

    #[test]
    fn the_check_at_start_refuses_a_missing_password_and_passes_the_rest() {
        let redfish = |variable: &str| Driver {
            kind: DriverKind::Redfish(RedfishDriver {
                endpoint: "https://127.0.0.1:1".into(),
                system: None,
                username: "u".into(),
                password: SecretSource::Env(variable.into()),
                ca_file: None,
                tls_fingerprint: None,
                insecure: true,
            }),
            off: OffBy::Driver,
        };
        let mini = wol(OffBy::Agent, "127.0.0.1:9".parse().unwrap());
        assert_eq!(check(&mini), Ok(()));
        assert_eq!(check(&redfish("PATH")), Ok(()));
        assert_eq!(
            check(&redfish("TEST_SURELY_UNSET_BMC_PASS")),
            Err(
                "https://127.0.0.1:1: password_env TEST_SURELY_UNSET_BMC_PASS: the variable is \
                 not set in fleet serve's environment; set it where fleet serve starts (a \
                 systemd EnvironmentFile, say)"
                    .to_owned()
            )
        );
    }

    #[test]
    fn a_password_is_a_files_first_line_or_a_variable_and_a_missing_one_says_where_never_what() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bmc-password");
        std::fs::write(&file, "hunter2\nignored\n").unwrap();
        let got = secret(&SecretSource::File(file.clone())).unwrap();
        assert_eq!(got.expose(), "hunter2");

        let missing = dir.path().join("nope");
        let err = secret(&SecretSource::File(missing.clone())).unwrap_err();
        assert_eq!(
            err,
            format!(
                "password_file {}: cannot be read (No such file or directory (os error 2)); give \
                 fleet serve a readable file whose first line is the password",
                missing.display()
            )
        );
        std::fs::write(&file, "\n").unwrap();
        let empty = secret(&SecretSource::File(file)).unwrap_err();
        assert!(empty.ends_with("the password is empty; put the BMC's password there"));

        let unset = secret(&SecretSource::Env("FLEET_TEST_SURELY_UNSET_VAR".into())).unwrap_err();
        assert!(
            unset.starts_with("password_env FLEET_TEST_SURELY_UNSET_VAR: the variable is not set")
        );
        // The variable every process has: read like any other.
        let path = secret(&SecretSource::Env("PATH".into())).unwrap();
        assert_eq!(path.expose(), std::env::var("PATH").unwrap());
    }
}
