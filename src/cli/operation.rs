//! `fleet operation`: the operation wrapper (SPEC §4.2, §5.4). Not for people: `fleet serve`
//! starts it, one process per lifecycle operation, with the job on its stdin.
//!
//! It runs the operation's command (`lifecycle::command`), reports the outcome to the store (the
//! slot's operation record, so whichever controller leads next reads it) and prints it on stdout
//! for the controller that waits. It lives in a process group of its own, so a controller that
//! stops or is killed does not take the power operation down with it.

use std::io::{Read, Write};
use std::time::Duration;

use crate::domain::name::BenchName;
use crate::domain::operation::OpEnd;
use crate::lifecycle::{Job, command};
use crate::store::claims::ClaimStore;
use crate::store::connect::Endpoint;
use crate::store::keys::Keys;

use super::Error;

/// The largest job the wrapper reads: a command line, its environment and the store's address.
const MAX_JOB: u64 = 1 << 20;

/// How long the wrapper keeps trying to report an outcome to a store it cannot reach. Within
/// `lifecycle::REPORT_SLACK`, so the controller's bound on the wrapper is never reached first.
const REPORT_FOR: Duration = Duration::from_secs(20);

#[derive(Debug, clap::Args)]
pub struct Args {}

impl Args {
    pub async fn run(self, out: &mut (dyn Write + Send)) -> Result<(), Error> {
        let mut raw = Vec::new();
        std::io::stdin()
            .take(MAX_JOB)
            .read_to_end(&mut raw)
            .map_err(|e| Error::Runtime(anyhow::Error::new(e).context("reading the job")))?;
        let job: Job = serde_json::from_slice(&raw).map_err(|e| {
            Error::usage(format!(
                "`fleet operation` runs one lifecycle operation for `fleet serve`, which gives it \
                 the job on stdin; this is not a job ({e})"
            ))
        })?;
        let report = command::run(&job.request).await;
        // First to the controller that waits, which records it at once; it may be gone (nobody
        // to read it then, and that is fine). Then to the store, for a controller that is not.
        if let Ok(line) = serde_json::to_string(&report) {
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
        if let Some(to) = &job.report_to {
            report_outcome(to, &job, &report).await;
        }
        Ok(())
    }
}

/// Writes the outcome to the slot's operation record, retrying a store it cannot reach for a
/// bounded time. Failing that, the controller judges the operation by the observation.
async fn report_outcome(
    to: &crate::lifecycle::ReportTo,
    job: &Job,
    report: &crate::lifecycle::Report,
) {
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
                .connect()
                .await
                .map_err(|e| crate::store::connect::chain(&e))?;
            ClaimStore::new(conn, keys.clone())
                .end_operation(&request.group, slot, request.started_at, &end)
                .await
                .map_err(|e| crate::store::connect::chain(&e))
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
