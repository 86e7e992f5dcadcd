//! `fleet operation`: the operation wrapper (SPEC §4.2, §5.4). Not for people: `fleet serve`
//! starts it, one process per lifecycle operation, with the job on its stdin. The verb reads the
//! job and prints the outcome; what the wrapper does is `lifecycle::wrapper`.

use std::io::{Read, Write};

use crate::lifecycle::{Job, wrapper};

use super::Error;

/// The largest job the wrapper reads: a command line, its environment and the store's address.
const MAX_JOB: u64 = 1 << 20;

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
        if let Some((name, value)) = &job.secret {
            crate::power::secrets::hold(name, crate::power::Secret::new(value.expose()));
        }
        let report = wrapper::run(&job).await;
        // First to the controller that waits, which records it at once; it may be gone (nobody
        // to read it then, and that is fine). Then to the store, for a controller that is not.
        if let Ok(line) = serde_json::to_string(&report) {
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
        if let Some(to) = &job.report_to {
            wrapper::report_outcome(to, &job, &report).await;
        }
        Ok(())
    }
}
