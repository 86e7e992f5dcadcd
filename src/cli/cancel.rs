//! `fleet cancel CLAIM`: a pending claim is deleted; a booting or ready one is reversed (cordon,
//! shutdown, completed), never interrupted.

use std::io::Write;

use crate::domain::claim::Reason;
use crate::domain::history::ScaleAction;
use crate::domain::name::ClaimName;
use crate::requests::{self, Cancelled};

use super::{Ctx, Error, request_error};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The claim to cancel, as `fleet claims` lists it.
    #[arg(value_name = "CLAIM")]
    pub claim: ClaimName,
}

impl Args {
    pub async fn run(self, ctx: &Ctx, out: &mut (dyn Write + Send)) -> Result<(), Error> {
        let (store, catalog, c, now) = crate::views::find_claim(ctx, &self.claim).await?;
        let ttl = catalog
            .group(&c.group)
            .map_or(std::time::Duration::from_secs(3600), |g| {
                g.timings.ttl_after_finished
            });
        let done = requests::cancel(&store, &c, Reason::DeletedByHand, now, ttl)
            .await
            .map_err(request_error)?;
        requests::scaled(&store, &c.group, now, ScaleAction::Delete, 1).await;
        match done {
            Cancelled::Deleted => writeln!(out, "{}: pending claim cancelled (deleted)", c.name)?,
            Cancelled::Marked => writeln!(
                out,
                "{}: {} claim marked for deletion; the controller shuts {} down and completes it",
                c.name, c.phase, c.slot
            )?,
        }
        Ok(())
    }
}
