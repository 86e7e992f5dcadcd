//! The operation wrapper's work (SPEC §4.2, §5.4, §4.10), run by `fleet operation` in a process
//! of its own per lifecycle operation: the operation's command (`command`), or the slot's driver
//! (`power::drive`) when the request carries one, and the outcome reported to the store (the
//! slot's operation record, so whichever controller leads next reads it). It lives in a process
//! group of its own, so a controller that stops or is killed does not take the power operation
//! down with it.
//!
//! A driver whose off goes through the bench's agent asks it through the same store it reports
//! to (`StoreAgent`): the power layer knows no Redis (SPEC §1), so the port is implemented here.

use std::time::{Duration, Instant};

use rand::Rng;

use crate::domain::claim::OperationKind;
use crate::domain::name::BenchName;
use crate::domain::operation::OpEnd;
use crate::power::drive::{self, AgentAnswer, AgentOff};
use crate::power::{Driver, OffBy};
use crate::power::{Intent, PowerError};
use crate::store::claims::ClaimStore;
use crate::store::keys::Keys;
use crate::store::power_off::{Answer, PowerOff};
use fleet_redis::connect::Endpoint;

use super::{Job, Report, ReportTo, command};

/// How long the wrapper keeps trying to report an outcome to a store it cannot reach. Within
/// `lifecycle::REPORT_SLACK`, so the controller's bound on the wrapper is never reached first.
const REPORT_FOR: Duration = Duration::from_secs(20);

/// Runs the job's operation: its command, or the slot's driver when the request names one.
pub async fn run(job: &Job) -> Report {
    match &job.request.driver {
        None => command::run(&job.request).await,
        Some(driver) => run_driver(job, driver).await,
    }
}

/// Runs the slot's driver for the operation's intent (SPEC §4.10), with the same timeout and
/// the same kind of report as a command: the audit record, or the error's words, as its tail.
async fn run_driver(job: &Job, driver: &Driver) -> Report {
    let request = &job.request;
    let intent = match request.kind {
        OperationKind::Startup => Intent::On,
        OperationKind::Shutdown => Intent::Off,
    };
    let agent = StoreAgent {
        to: job.report_to.as_ref(),
        slot: &request.slot,
    };
    let driven = drive::drive(driver, intent, request.timeout, &agent).await;
    tracing::info!(slot = %request.slot, driver = driver.type_name(), off_by_agent = driver.off == OffBy::Agent && intent == Intent::Off, outcome = ?driven.outcome, "driver operation ended");
    Report {
        outcome: driven.outcome,
        duration: driven.duration,
        tail: command::tail(driven.tail.as_bytes()),
    }
}

/// How often the wrapper reads the agent's answer: well inside a beat interval (the agent
/// answers on its next beat), and a `GET` is cheap.
const ANSWER_POLL: Duration = Duration::from_millis(250);

/// The agent's power-off over the store the wrapper reports to: the request with a fresh nonce
/// (one script), then the answer read until it names that nonce (one `GET` each).
struct StoreAgent<'a> {
    to: Option<&'a ReportTo>,
    slot: &'a BenchName,
}

impl StoreAgent<'_> {
    fn unreachable(&self, detail: String) -> PowerError {
        PowerError::Unreachable {
            bmc: self.name(),
            detail,
        }
    }
}

impl AgentOff for StoreAgent<'_> {
    fn name(&self) -> String {
        format!("agent of {}", self.slot)
    }

    async fn power_off(&self, timeout: Duration) -> Result<AgentAnswer, PowerError> {
        let start = Instant::now();
        let deadline = tokio::time::Instant::now() + timeout;
        let Some(to) = self.to else {
            return Err(self.unreachable(
                "the request reaches the agent through the store, and this operation has none: \
                 run it from fleet serve"
                    .to_owned(),
            ));
        };
        let keys = Keys::new(&to.prefix).map_err(|e| self.unreachable(e.to_string()))?;
        let mut endpoint = Endpoint::new(to.url.clone(), to.timeout);
        endpoint.ca_file.clone_from(&to.ca_file);
        endpoint.sentinel_auth.clone_from(&to.sentinel_auth);
        let nonce = format!("{:032x}", rand::rng().random::<u128>());
        let mut last_error = String::new();
        let mut store: Option<PowerOff<_>> = None;
        let mut asked = false;
        loop {
            // A store that cannot be reached now may be by the next poll: the deadline decides.
            if store.is_none() {
                match endpoint.open().await {
                    Ok(conn) => store = Some(PowerOff::new(conn, keys.clone())),
                    Err(e) => last_error = fleet_redis::connect::chain(&e),
                }
            }
            if let Some(s) = &store {
                let step = if asked {
                    s.answer(self.slot).await.map(Some)
                } else {
                    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                    s.ask(self.slot, &nonce, left).await.map(|_| None)
                };
                match step {
                    Ok(None) => asked = true,
                    Ok(Some(Some(Ok(ack)))) if ack.nonce == nonce => {
                        return Ok(AgentAnswer {
                            nonce,
                            refused: match ack.answer {
                                Answer::Accepted => None,
                                Answer::Refused => Some(
                                    ack.why
                                        .unwrap_or_else(|| "the agent gave no reason".to_owned()),
                                ),
                            },
                            waited: start.elapsed(),
                        });
                    }
                    // No answer yet, an answer to an older request, or a foreign write: the
                    // request stands until the agent answers it.
                    Ok(Some(_)) => {}
                    Err(e) => {
                        last_error = fleet_redis::connect::chain(&e);
                        store = None;
                    }
                }
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                let why = if asked {
                    "no answer"
                } else {
                    "the request could not be written"
                };
                return Err(PowerError::NotReached {
                    bmc: if last_error.is_empty() {
                        format!("{} ({why})", self.name())
                    } else {
                        format!("{} ({why}; last store error: {last_error})", self.name())
                    },
                    intent: Intent::Off,
                    waited: start.elapsed(),
                });
            }
            // The last read comes at the deadline itself: an answer just in time counts.
            tokio::time::sleep(ANSWER_POLL.min(deadline - now)).await;
        }
    }
}

/// Writes the outcome to the slot's operation record, retrying a store it cannot reach for a
/// bounded time. Failing that, the controller judges the operation by the observation.
pub async fn report_outcome(to: &ReportTo, job: &Job, report: &Report) {
    let request = &job.request;
    let Ok(keys) = Keys::new(&to.prefix) else {
        tracing::warn!(
            prefix = to.prefix,
            "the job's key prefix is invalid; the outcome is not reported"
        );
        return;
    };
    let mut endpoint = Endpoint::new(to.url.clone(), to.timeout);
    endpoint.ca_file.clone_from(&to.ca_file);
    endpoint.sentinel_auth.clone_from(&to.sentinel_auth);
    let end = OpEnd {
        outcome: report.outcome,
        finished_at: request.started_at,
        duration_ms: u64::try_from(report.duration.as_millis()).unwrap_or(u64::MAX),
        tail: report.tail.clone(),
    };
    let slot: &BenchName = &request.slot;
    let give_up = tokio::time::Instant::now() + REPORT_FOR;
    let mut wait = Duration::from_millis(200);
    loop {
        // Every attempt within what is left of the window, whatever the call timeout.
        let left = give_up.saturating_duration_since(tokio::time::Instant::now());
        let attempt = async {
            let conn = endpoint
                .open()
                .await
                .map_err(|e| fleet_redis::connect::chain(&e))?;
            ClaimStore::new(conn, keys.clone())
                .end_operation(&request.group, slot, request.started_at, &end)
                .await
                .map_err(|e| fleet_redis::connect::chain(&e))
        };
        let result = match tokio::time::timeout(left, attempt).await {
            Ok(result) => result,
            Err(_) => Err("no answer within the reporting window".to_owned()),
        };
        match result {
            Ok(_) => return,
            Err(error) if tokio::time::Instant::now() + wait < give_up => {
                tracing::warn!(slot = %slot, error, "reporting the operation's outcome failed; retrying");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(5));
            }
            Err(error) => {
                tracing::warn!(slot = %slot, error, "the operation's outcome could not be reported; the controller judges it by the observation");
                return;
            }
        }
    }
}
