//! `fleet reset-shutdown-attempts CLAIM`: the escape hatch when a fixed shutdown script should be
//! tried now rather than after the reset grace.

use std::io::Write;

use crate::domain::name::ClaimName;
use crate::requests;

use super::{Ctx, Error, request_error};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The claim whose shutdown attempts restart, as `fleet claims` lists it.
    #[arg(value_name = "CLAIM")]
    pub claim: ClaimName,
}

impl Args {
    pub async fn run(self, ctx: &Ctx, out: &mut (dyn Write + Send)) -> Result<(), Error> {
        let (store, _, c, now) = crate::views::find_claim(ctx, &self.claim).await?;
        requests::reset_shutdown_attempts(&store, &c, now)
            .await
            .map_err(request_error)?;
        writeln!(
            out,
            "{}: shutdown attempts reset (was {}); the controller fires the shutdown on its next pass",
            c.name, c.shutdown_attempts
        )?;
        Ok(())
    }
}
