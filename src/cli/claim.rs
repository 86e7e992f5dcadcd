//! `fleet claim SLOT [--wait]`: a hand-made claim. The controller boots the slot's machine for
//! it; with `--wait` the verb follows the claim to ready or failed.

use std::io::Write;
use std::time::Duration;

use crate::domain::claim::{Claim, Phase};
use crate::domain::name::BenchName;
use crate::requests::{self, RequestError};
use crate::store::claims::ClaimStore;

use super::output::{human_ms, relative};
use super::{Ctx, Error};

/// How often `--wait` looks at the claim.
const FOLLOW_EVERY: Duration = Duration::from_millis(500);

/// How long past its deadline `--wait` keeps following a claim nobody moves (no `fleet serve`).
const PAST_DEADLINE: Duration = Duration::from_secs(60);

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The slot to ask a machine of (`fleet slots` lists them).
    #[arg(value_name = "SLOT")]
    pub slot: BenchName,
    /// Follow the claim until it is ready (exit 0) or failed (exit 1), with a line for each
    /// step: its phase, how long it took, its deadline.
    #[arg(long)]
    pub wait: bool,
}

/// Maps a request's failure: a refusal the user can act on is exit 2, the store failing exit 1.
/// A slot that spent its attempts is exit 1: the world failed there, not the request.
pub fn request_error(e: RequestError) -> Error {
    match e {
        RequestError::Store(_) | RequestError::Spent { .. } => Error::Runtime(e.into()),
        RequestError::SlotTaken { .. }
        | RequestError::NoSuchClaim(_)
        | RequestError::Ended { .. }
        | RequestError::Raced(_)
        | RequestError::NotMarkable(..)
        | RequestError::PoweringOff { .. } => Error::Usage(e.into()),
    }
}

impl Args {
    pub async fn run(self, ctx: &Ctx, out: &mut (dyn Write + Send)) -> Result<(), Error> {
        let request = super::views::slot_request(ctx, &self.slot).await?;
        let c = requests::claim_free_slot(&request.store, &request.group, &self.slot)
            .await
            .map_err(request_error)?;
        writeln!(
            out,
            "{}: claim {} created (attempt {}, deadline {}); watch it with `fleet describe {}`",
            self.slot,
            c.name,
            c.attempt,
            super::output::time(c.deadline_at),
            self.slot
        )?;
        if let Some(text) =
            super::views::controller_notice(request.controller.as_ref(), request.now)
        {
            writeln!(out, "note: {text}")?;
        }
        if self.wait {
            out.flush()?;
            return follow(ctx, &request.store, &c, out).await;
        }
        Ok(())
    }
}

/// Follows a claim to ready or failed, a line for each step (SPEC §4.6).
async fn follow(
    ctx: &Ctx,
    store: &ClaimStore<redis::aio::MultiplexedConnection>,
    made: &Claim,
    out: &mut (dyn Write + Send),
) -> Result<(), Error> {
    let mut shown: Option<(Phase, u64)> = None;
    loop {
        let now = store.now().await.map_err(|e| Error::Runtime(e.into()))?;
        let Some(c) = store
            .read_claim(&made.group, &made.name)
            .await
            .map_err(|e| Error::Runtime(e.into()))?
        else {
            return Err(Error::Runtime(anyhow::anyhow!(
                "claim {} is gone (cancelled?); see `fleet describe {}`",
                made.name,
                made.slot
            )));
        };
        let elapsed = (now - c.requested_at)
            .num_milliseconds()
            .max(0)
            .unsigned_abs();
        let deadline = c
            .deadline_at
            .map(|d| format!(", deadline {}", relative(d, now)))
            .unwrap_or_default();
        let progress = (c.phase, c.version);
        if shown != Some(progress) {
            writeln!(
                out,
                "{}: {} after {}{}",
                c.name,
                c.phase,
                human_ms(elapsed),
                if c.phase.is_live() {
                    deadline
                } else {
                    String::new()
                }
            )?;
            out.flush()?;
            shown = Some(progress);
        }
        match c.phase {
            Phase::Ready => return Ok(()),
            Phase::Failed | Phase::Completed => {
                let tail = store
                    .timeline(&c.group, &c.name)
                    .await
                    .ok()
                    .and_then(|t| {
                        t.into_iter()
                            .rev()
                            .find(|e| e.operation.is_some() && e.detail.is_some())
                    })
                    .and_then(|e| e.detail)
                    .unwrap_or_default();
                if !tail.is_empty() {
                    writeln!(out, "output of its last operation:")?;
                    for line in tail.lines() {
                        writeln!(out, "  {line}")?;
                    }
                }
                return Err(Error::Runtime(anyhow::anyhow!(
                    "claim {} {}: {}",
                    c.name,
                    c.phase,
                    c.reason.map_or("no reason recorded", |r| r.as_str())
                )));
            }
            Phase::Pending | Phase::Booting => {}
        }
        if c.deadline_at
            .is_some_and(|d| now > crate::domain::claim::add(d, PAST_DEADLINE))
        {
            return Err(Error::Runtime(anyhow::anyhow!(
                "claim {} is still {} a minute past its deadline: is `fleet serve` running?",
                c.name,
                c.phase
            )));
        }
        tokio::select! {
            // Interrupted before it was ready: not a success a script may build on. The claim
            // lives on; only the wait ended.
            _ = ctx.shutdown.cancelled() => return Err(Error::Runtime(anyhow::anyhow!(
                "stopped waiting: claim {} is still {} (it goes on; follow it with `fleet claims --slot {}`)",
                c.name,
                c.phase,
                c.slot
            ))),
            _ = tokio::time::sleep(FOLLOW_EVERY) => {}
        }
    }
}
