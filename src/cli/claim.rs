//! `fleet claim SLOT [--wait]`: a hand-made claim. The controller boots the slot's machine for
//! it; with `--wait` the verb follows the claim to ready or failed.

use std::io::Write;
use std::time::Duration;

use crate::domain::claim::{Claim, Phase};
use crate::domain::name::BenchName;
use crate::requests;
use crate::store::claims::ClaimStore;

use super::output::{human_ms, relative};
use super::{Ctx, Error, request_error};

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

impl Args {
    pub async fn run(self, ctx: &Ctx, out: &mut (dyn Write + Send)) -> Result<(), Error> {
        let request = crate::views::slot_request(ctx, &self.slot).await?;
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
            crate::views::controller_notice(request.controller.as_ref(), request.now)
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
    store: &ClaimStore<fleet_redis::conn::Conn>,
    made: &Claim,
    out: &mut (dyn Write + Send),
) -> Result<(), Error> {
    let mut shown: Option<(Phase, u64)> = None;
    loop {
        let (now, c) = read_followed(store, made).await?;
        let progress = (c.phase, c.version);
        if shown != Some(progress) {
            write_progress(out, &c, now)?;
            out.flush()?;
            shown = Some(progress);
        }
        match c.phase {
            Phase::Ready => return Ok(()),
            Phase::Failed | Phase::Completed => {
                write_last_output(store, &c, out).await?;
                return Err(ended(&c));
            }
            Phase::Pending | Phase::Booting => {}
        }
        wait(ctx, &c, now).await?;
    }
}

/// The store's clock and the claim as it is now; a claim that is gone ends the wait.
async fn read_followed(
    store: &ClaimStore<fleet_redis::conn::Conn>,
    made: &Claim,
) -> Result<(chrono::DateTime<chrono::Utc>, Claim), Error> {
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
    Ok((now, c))
}

/// A step's line: the phase, how long since the claim was asked, and, while it is live, its
/// deadline.
fn write_progress(
    out: &mut dyn Write,
    c: &Claim,
    now: chrono::DateTime<chrono::Utc>,
) -> std::io::Result<()> {
    let elapsed = (now - c.requested_at)
        .num_milliseconds()
        .max(0)
        .unsigned_abs();
    let deadline = c
        .deadline_at
        .map(|d| format!(", deadline {}", relative(d, now)))
        .unwrap_or_default();
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
    )
}

/// The output of the ended claim's last operation that said anything: why it failed, without
/// another command. A timeline that cannot be read shows nothing; the failure is said anyway.
async fn write_last_output(
    store: &ClaimStore<fleet_redis::conn::Conn>,
    c: &Claim,
    out: &mut (dyn Write + Send),
) -> Result<(), Error> {
    let tail = crate::views::last_output(store, &c.group, &c.name).await;
    if !tail.is_empty() {
        writeln!(out, "output of its last operation:")?;
        // An operation's output is the script's, not fleet's: shown as text, never as what a
        // terminal would make of an escape or a bidi control in it (SPEC §7 S7).
        for line in crate::domain::text::escaped_lines(&tail) {
            writeln!(out, "  {line}")?;
        }
    }
    Ok(())
}

/// A claim that ended without being ready: exit 1, with its reason.
fn ended(c: &Claim) -> Error {
    Error::Runtime(anyhow::anyhow!(
        "claim {} {}: {}",
        c.name,
        c.phase,
        c.reason.map_or("no reason recorded", |r| r.as_str())
    ))
}

/// Waits for the next look, unless the claim is long past its deadline (nobody moves it) or the
/// wait is interrupted.
async fn wait(ctx: &Ctx, c: &Claim, now: chrono::DateTime<chrono::Utc>) -> Result<(), Error> {
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
        _ = ctx.shutdown.cancelled() => Err(Error::Runtime(anyhow::anyhow!(
            "stopped waiting: claim {} is still {} (it goes on; follow it with `fleet claims --slot {}`)",
            c.name,
            c.phase,
            c.slot
        ))),
        _ = tokio::time::sleep(FOLLOW_EVERY) => Ok(()),
    }
}
