//! `fleet release NAME`: withdraw a hold request (SPEC §2.4).

use std::io::Write;

use crate::domain::name::BenchName;

use super::{Ctx, Error};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The bench whose hold request is withdrawn.
    #[arg(value_name = "NAME")]
    pub name: BenchName,
}

impl Args {
    pub async fn run(self, ctx: &Ctx, out: &mut (dyn Write + Send)) -> Result<(), Error> {
        let presence = ctx.presence().await?;
        if presence.release(&self.name).await? {
            writeln!(
                out,
                "{}: hold request withdrawn; the bench drops it on its next beat",
                self.name
            )?;
        } else {
            writeln!(out, "{}: no hold was requested", self.name)?;
        }
        Ok(())
    }
}
