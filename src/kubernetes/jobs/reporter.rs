//! The Job reporter (SPEC §4.2, §5.4): what the operation wrapper does for a command, done for
//! Jobs. A Job outlives the controller that created it; when that controller stops, restarts
//! or is replaced, nobody waits for the Job, so its outcome would never reach the store. The
//! leader therefore lists fleet's Jobs in its namespace every `every` and writes the outcome of
//! each finished one to its slot's operation record, exactly as the wrapper does
//! (`ClaimStore::end_operation`, matched by the operation's start time, written once), where
//! the pass reads it. The controller then never fires a second operation for the claim: one
//! recorded as running is settled by its report (SPEC §5.4).
//!
//! Idempotent: a write that meets an outcome already there (the runner's own, or an earlier
//! sweep's) changes nothing, and a Job written once is not written again by this process.

use std::collections::HashSet;
use std::time::Duration;

use kube::Client;
use redis::aio::ConnectionLike;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::api::{Jobs, JobsError, words};
use super::outcome::{self, JobState};
use super::spec::Identity;
use crate::domain::operation::OpEnd;
use crate::store::claims::ClaimStore;
use fleet_redis::connect::chain;

/// How often the leader lists its Jobs: an outcome a successor must learn this way reaches the
/// store within this, far inside the report slack an operation is given (30 s).
pub const EVERY: Duration = Duration::from_secs(10);

/// What one sweep found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Swept {
    /// fleet's Jobs not finished yet.
    pub running: usize,
    /// Finished Jobs whose outcome this sweep wrote to the store.
    pub recorded: usize,
    /// Finished Jobs whose slot record had an outcome already, or is another operation's.
    pub settled: usize,
    /// Jobs whose annotations do not say which operation they ran: nothing is written.
    pub unreadable: usize,
    /// Finished Jobs whose outcome could not be written: tried again next sweep.
    pub failed: usize,
}

/// Writes the outcomes of fleet's finished Jobs to the store.
pub struct Reporter<C> {
    jobs: Jobs,
    store: ClaimStore<C>,
    every: Duration,
    /// The Jobs (by uid, else name) this process wrote or found settled, so a finished Job kept
    /// for its `ttlSecondsAfterFinished` is written once. Only Jobs still listed are kept.
    done: HashSet<String>,
}

impl<C> Reporter<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// fleet's Jobs in `namespace`, their outcomes written to `store` (unfenced: an outcome is
    /// a fact of the operation, whoever leads, SPEC §4.3).
    pub fn new(client: Client, namespace: &str, store: ClaimStore<C>) -> Self {
        Reporter {
            jobs: Jobs::new(client, namespace),
            store,
            every: EVERY,
            done: HashSet::new(),
        }
    }

    /// Sweeps every `every` (at least 100 ms).
    pub fn every(mut self, every: Duration) -> Self {
        self.every = every.max(Duration::from_millis(100));
        self
    }

    /// Sweeps every `every` while `leadership` holds a token (the controller's leadership
    /// signal, `store::lease::Signal`), until `shutdown` or until the signal's sender is gone.
    /// Only the leader sweeps: a follower's writes would be harmless but its reads are load.
    pub async fn run(
        mut self,
        mut leadership: watch::Receiver<Option<String>>,
        shutdown: CancellationToken,
    ) {
        let mut tick = tokio::time::interval(self.every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let leading = leadership.borrow_and_update().is_some();
            tokio::select! {
                _ = shutdown.cancelled() => return,
                changed = leadership.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                _ = tick.tick(), if leading => {
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        swept = self.sweep() => match swept {
                            Ok(s) if s.recorded > 0 || s.failed > 0 || s.unreadable > 0 => info!(
                                recorded = s.recorded,
                                failed = s.failed,
                                unreadable = s.unreadable,
                                running = s.running,
                                "jobs swept"
                            ),
                            Ok(s) => debug!(running = s.running, settled = s.settled, "jobs swept"),
                            Err(e) => warn!(error = words(&e), "listing fleet's Jobs failed; the next sweep tries again"),
                        },
                    }
                }
            }
        }
    }

    /// Lists fleet's Jobs once and writes the outcome of every finished one not written yet.
    pub async fn sweep(&mut self) -> Result<Swept, JobsError> {
        let listed = self.jobs.list().await?;
        let mut swept = Swept::default();
        let mut seen = HashSet::new();
        for job in &listed {
            let name = job.metadata.name.clone().unwrap_or_default();
            let key = job.metadata.uid.clone().unwrap_or_else(|| name.clone());
            seen.insert(key.clone());
            if self.done.contains(&key) {
                swept.settled += 1;
                continue;
            }
            let JobState::Finished(finished) = outcome::job_state(job) else {
                swept.running += 1;
                continue;
            };
            let id = match Identity::read(job) {
                Ok(id) => id,
                Err(why) => {
                    warn!(
                        job = name,
                        why,
                        "a Job labelled as fleet's does not say which operation it ran; its outcome is not reported"
                    );
                    self.done.insert(key);
                    swept.unreadable += 1;
                    continue;
                }
            };
            let pods = match self.jobs.pods(&name).await {
                Ok(pods) => pods,
                Err(e) => {
                    warn!(
                        job = name,
                        error = words(&e),
                        "the Job's pods could not be read; its tail has the Job's word only"
                    );
                    Vec::new()
                }
            };
            let end = OpEnd {
                outcome: finished.outcome,
                // The script stamps the server's time, as for the wrapper's report.
                finished_at: id.started_at,
                duration_ms: u64::try_from(outcome::duration(job).as_millis()).unwrap_or(u64::MAX),
                tail: outcome::tail(&pods, &finished, &name),
            };
            match self
                .store
                .end_operation(&id.group, &id.slot, id.started_at, &end)
                .await
            {
                Ok(true) => {
                    info!(job = name, slot = %id.slot, outcome = ?end.outcome, "a Job's outcome recorded on its slot");
                    self.done.insert(key);
                    swept.recorded += 1;
                }
                Ok(false) => {
                    self.done.insert(key);
                    swept.settled += 1;
                }
                Err(e) => {
                    warn!(job = name, slot = %id.slot, error = chain(&e), "recording a Job's outcome failed; the next sweep tries again");
                    swept.failed += 1;
                }
            }
        }
        self.done.retain(|key| seen.contains(key));
        Ok(swept)
    }
}
