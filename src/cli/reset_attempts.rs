//! `fleet reset-attempts SLOT`: the operator's way back for a slot that spent its attempts
//! (SPEC §3.5). The slot is offered to requests again, and its next claim is attempt 1.

use std::io::Write;

use crate::domain::name::BenchName;
use crate::requests::{self, StreakReset};

use super::{Ctx, Error, request_error};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The slot whose failure streak is reset (`fleet slots` lists them).
    #[arg(value_name = "SLOT")]
    pub slot: BenchName,
}

impl Args {
    pub async fn run(self, ctx: &Ctx, out: &mut (dyn Write + Send)) -> Result<(), Error> {
        let crate::views::SlotRequest {
            store, group, now, ..
        } = crate::views::slot_request(ctx, &self.slot).await?;
        match requests::reset_failure_streak(&store, &group, &self.slot, now)
            .await
            .map_err(request_error)?
        {
            StreakReset::Reset { was, spent } => writeln!(
                out,
                "{}: failure streak reset (was {was} of {}{}); its next claim is attempt 1",
                self.slot,
                group.timings.max_attempts,
                if spent { ", spent" } else { "" }
            )?,
            StreakReset::NoStreak => writeln!(
                out,
                "{}: no failure streak to reset; its next claim is attempt 1 already",
                self.slot
            )?,
        }
        Ok(())
    }
}
