//! The Job runner (SPEC §4.2, Jobs as operations): runs one operation as a Kubernetes Job and
//! waits for its outcome, behind the same `Runner` trait as the operation wrapper.
//!
//! Create or adopt: the Job's name is the operation's (`spec::name`), so a create that meets
//! 409 AlreadyExists reads the Job that is there and waits for it, never creating a second one.
//! A create whose answer is lost may have been applied: the Job is read back before anything is
//! decided. Then the Job is read every `poll` until a condition ends it, for at most the
//! operation's timeout plus the report slack, like the wrapper; past that, the outcome is
//! JobTimeout (the Job's own deadline has killed its pod by then). Every call is bounded by
//! `CALL_TIMEOUT`; a call that fails is tried again at the next poll.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use kube::Client;
use tokio::time::Instant;
use tracing::{debug, warn};

use super::api::{Created, Jobs, JobsError, words};
use super::outcome::{self, Finished, JobState};
use super::spec::{self, Identity};
use crate::domain::claim::{OperationKind, OperationOutcome};
use crate::lifecycle::{REPORT_SLACK, Report, Request, Runner};

/// How often a running Job is read: a few seconds, well inside the pass's patience for an
/// outcome, and a handful of reads a minute per operation for the API server.
pub const POLL: Duration = Duration::from_secs(5);

/// Runs operations that carry a Job template as Kubernetes Jobs in one namespace.
#[derive(Clone)]
pub struct JobRunner {
    jobs: Jobs,
    poll: Duration,
}

impl JobRunner {
    /// Jobs in `namespace` (fleet's own: `kubernetes::client::Connected::namespace`).
    pub fn new(client: Client, namespace: &str) -> Self {
        JobRunner {
            jobs: Jobs::new(client, namespace),
            poll: POLL,
        }
    }

    /// Reads a running Job every `poll` (at least 100 ms).
    pub fn polling_every(mut self, poll: Duration) -> Self {
        self.poll = poll.max(Duration::from_millis(100));
        self
    }
}

fn failed(tail: String, duration: Duration) -> Report {
    Report {
        outcome: OperationOutcome::Failed,
        duration,
        tail: crate::lifecycle::command::tail(tail.as_bytes()),
    }
}

impl Runner for JobRunner {
    async fn run(&self, request: Request) -> Report {
        let start = Instant::now();
        let Some(template) = &request.job else {
            return failed(
                "the Job runner was given an operation without a Job".to_owned(),
                start.elapsed(),
            );
        };
        let job = spec::job(&request, template);
        let name = spec::name(&request);
        let first = match self.create_or_adopt(&job, &request).await {
            Ok(first) => first,
            Err(why) => return failed(why, start.elapsed()),
        };
        self.wait(first, &name, &request, start).await
    }
}

impl JobRunner {
    /// The Job this operation runs as, once it exists: made now, or found (adopted).
    async fn create_or_adopt(&self, job: &Job, request: &Request) -> Result<Job, String> {
        let name = job.metadata.name.clone().unwrap_or_default();
        match self.jobs.create(job).await {
            Ok(Created::New(created)) => {
                debug!(job = name, slot = %request.slot, "job created");
                Ok(*created)
            }
            Ok(Created::Exists) => {
                let found = self.jobs.get(&name).await.map_err(|e| {
                    format!(
                        "the Job {name} exists, and reading it failed: {}",
                        words(&e)
                    )
                })?;
                let found = found.ok_or_else(|| {
                    format!("the Job {name} existed at its create and was gone when read")
                })?;
                adoptable(&found, request)?;
                warn!(job = name, slot = %request.slot, "the operation's Job exists already; adopted, not created again");
                Ok(found)
            }
            Err(JobsError::Create { source, .. }) if !source.answered() => {
                // The create may have been applied before its answer was lost.
                match self.jobs.get(&name).await {
                    Ok(Some(found)) => {
                        adoptable(&found, request)?;
                        Ok(found)
                    }
                    Ok(None) => Err(format!(
                        "creating the Job {name} failed: {}; no Job of that name exists",
                        words(&source)
                    )),
                    Err(e) => Err(format!(
                        "creating the Job {name} failed: {}; reading it back failed too: {}",
                        words(&source),
                        words(&e)
                    )),
                }
            }
            Err(JobsError::Create { source, .. }) => Err(format!(
                "creating the Job {name} failed: {}",
                words(&source)
            )),
            Err(e) => Err(words(&e)),
        }
    }

    /// Waits for the Job's outcome, from what the create or the adoption returned.
    async fn wait(&self, first: Job, name: &str, request: &Request, start: Instant) -> Report {
        let give_up = start + request.timeout + REPORT_SLACK;
        let mut seen = Some(first);
        let mut failing = false;
        loop {
            if let Some(job) = seen.take()
                && let JobState::Finished(finished) = outcome::job_state(&job)
            {
                return self.report(&job, name, finished, start).await;
            }
            if Instant::now() + self.poll >= give_up {
                return Report {
                    outcome: OperationOutcome::TimedOut,
                    duration: start.elapsed(),
                    tail: format!(
                        "[job {name}: no outcome within {} (the timeout and the report slack)]",
                        humantime::format_duration(request.timeout + REPORT_SLACK)
                    ),
                };
            }
            tokio::time::sleep(self.poll).await;
            match self.jobs.get(name).await {
                Ok(Some(job)) => {
                    failing = false;
                    seen = Some(job);
                }
                Ok(None) => {
                    return failed(
                        format!("[job {name}: deleted before it finished]"),
                        start.elapsed(),
                    );
                }
                Err(e) => {
                    // Said once per outage: the next poll tries again.
                    if !failing {
                        warn!(
                            job = name,
                            error = words(&e),
                            "reading the operation's Job failed; retrying"
                        );
                    }
                    failing = true;
                }
            }
        }
    }

    /// The report of a finished Job, its tail from its pod.
    async fn report(&self, job: &Job, name: &str, finished: Finished, start: Instant) -> Report {
        let pods = match self.jobs.pods(name).await {
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
        let duration = match outcome::duration(job) {
            Duration::ZERO => start.elapsed(),
            d => d,
        };
        Report {
            outcome: finished.outcome,
            duration,
            tail: outcome::tail(&pods, &finished, name),
        }
    }
}

/// A Job found under the operation's name runs this operation, unless its annotations say
/// another (a digest collision, or a Job someone else named so): then nothing is adopted.
fn adoptable(found: &Job, request: &Request) -> Result<(), String> {
    let name = found.metadata.name.as_deref().unwrap_or_default();
    let theirs = Identity::read(found)
        .map_err(|why| format!("a Job named {name} exists and is not fleet's ({why})"))?;
    let ours = Identity::of(request);
    // A startup's name leaves out its start time (one per claim and attempt), a shutdown's has
    // it: the same fields decide here.
    let same = theirs.group == ours.group
        && theirs.slot == ours.slot
        && theirs.claim == ours.claim
        && theirs.kind == ours.kind
        && theirs.attempt == ours.attempt
        && (theirs.started_at == ours.started_at
            || (ours.kind == OperationKind::Startup && ours.claim.is_some()));
    if same {
        Ok(())
    } else {
        Err(format!(
            "a Job named {name} exists for another operation ({} of {} started {}); nothing was \
             created",
            theirs.kind.as_str(),
            theirs.slot,
            spec::stamp(theirs.started_at)
        ))
    }
}
